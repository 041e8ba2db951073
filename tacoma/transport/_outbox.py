"""The sending side of a Channel: what waits to be written to one connection, in order.

A small frame is written at once when nothing waits before it. Anything else waits its turn
in the outbox, in the order it was sent: a frame behind others, a large frame (written
WRITE_PIECE bytes at a time, as the transport has room: TLS encrypts what it is given at
once, on the event loop, and 60 MB took it 0.1 s), and an event with a large briefcase
that a thread is encoding (`Outbox.encode`), which holds back the frames sent after it
until its own frame takes its place. One large briefcase thus holds up neither the event
loop nor, out of order, its own connection.

The outbox is also where a peer that reads nothing shows: past two of its largest frames
unsent (ours and the transport's), the connection is aborted rather than buffered without
bound; and what is still unsent (ours, the transport's and the kernel's: `unsent`,
`progressed`) tells the Channel whether the peer is taking anything, for quiet_for and for
a bounded close.

It is its own object so that the Channel keeps to reading, the handshake and the close. It
writes through its owner, the Channel, which it holds only while the connection lives
(`attach` to `detach`): the two refer to each other, and a connection's objects are freed
as it ends, not when the garbage collector next looks for cycles.

A thread coding a large frame, one to send or one received (the Channel decodes those),
does so inside `coding()`: Python's switch interval is lowered while it runs, so that the
event loop's thread gets the GIL back between pieces (see _Coders).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import struct
import sys
import termios
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Protocol

from ..wire._errors import (
    ConnectionLost,
    LimitExceeded,
    LocalProtocolError,
    ProtocolError,
    TacomaError,
)
from ..wire._protocol import Connection, Event, pieces_of
from ._trim import trim

__all__ = ["SWITCH_SECONDS", "WRITE_PIECE", "Outbox", "Owner", "Refused", "coding"]

log = logging.getLogger("tacoma.client")

#: A large frame is written this many bytes at a time, as the transport has room.
WRITE_PIECE = 1 << 18

#: While a thread codes a large frame, the event loop's thread gets the GIL back this soon
#: (Python's own switch interval is 5 ms; see coding).
SWITCH_SECONDS = 0.001

#: Told what `Channel.send` would have raised for an event (LimitExceeded, a
#: ProtocolError), when it was sent to be encoded on a thread.
Refused = Callable[[TacomaError], None]


class Owner(Protocol):
    """What an Outbox needs of its Channel: the transport to write to, the reason the
    connection is ending (said by ConnectionLost, set when the peer reads nothing), and the
    close that waited for what was sent."""

    transport: asyncio.Transport | None
    close_reason: str

    def close(self, reason: str = "") -> None: ...


class _Frame:
    """A large frame in the outbox: its pieces (its header, then its body in one piece or
    in those a thread encoded), written as the transport has room."""

    __slots__ = ("pieces", "started")

    def __init__(self, pieces: list[bytes | memoryview]) -> None:
        self.pieces = deque(memoryview(piece) for piece in pieces)
        self.started = False  # some of it is written: nothing else may come before the rest

    def next_piece(self) -> memoryview:
        """At most WRITE_PIECE bytes of it, taken off the front."""
        self.started = True
        piece = self.pieces[0]
        if len(piece) <= WRITE_PIECE:
            return self.pieces.popleft()
        self.pieces[0] = piece[WRITE_PIECE:]
        return piece[:WRITE_PIECE]


class _Encoding:
    """An event waiting its turn in the outbox while a thread encodes its body (in pieces);
    who to tell if it cannot be sent, and the future `encode` returned."""

    __slots__ = ("body", "event", "refused", "sent")

    def __init__(self, event: Event, body: asyncio.Future[list[bytes | memoryview]],
                 refused: Refused, sent: asyncio.Future[None]) -> None:
        self.event = event
        self.body = body
        self.refused = refused
        self.sent = sent

    @property
    def waiting(self) -> bool:
        """Still being encoded (and not withdrawn): the frames behind it wait."""
        return not self.body.done() and not self.sent.cancelled()


class Outbox:
    """The frames of one connection waiting to be written, in order (see the module)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conn: Connection) -> None:
        self._loop = loop
        self._conn = conn
        self._owner: Owner | None = None
        #: What waits its turn, in order: frames, large ones in pieces, events a thread is
        #: encoding.
        self._queue: deque[bytes | _Frame | _Encoding] = deque()
        self._bytes = 0  # of the frames in the queue
        self._paused = False  # the transport's buffer is full (pause_writing)
        self._close_after: str | None = None  # close, saying Bye with it, once they are out
        #: A close waits for what was sent (`close_when_sent`): an attribute, not a property,
        #: as every send asks it.
        self.closing = False
        self._unsent = 0  # what waited unsent when `progressed` last looked

    def attach(self, owner: Owner) -> None:
        """The connection is made: write to `owner`'s transport."""
        self._owner = owner

    def detach(self) -> None:
        """The connection is over: drop what waits, and let go of the owner."""
        self.drop()
        self._owner = None

    # -- what waits
    @property
    def pending(self) -> bool:
        """Something waits its turn to be written."""
        return bool(self._queue)


    @property
    def encoding(self) -> bool:
        """A thread is encoding an event of ours."""
        return any(isinstance(out, _Encoding) and out.waiting for out in self._queue)

    def unsent(self) -> int:
        """Bytes written and not yet taken by the peer: ours, and the kernel's."""
        transport = self._transport()
        if transport is None:
            return 0
        return self._bytes + transport.get_write_buffer_size() + _kernel_unsent(transport)

    def progressed(self) -> bool:
        """Whether the peer took some of what was written since this was last asked (less
        waits unsent), or this end is busy encoding a large event for it: what quiet_for
        asks of the sending side."""
        unsent = self.unsent()
        moved = unsent < self._unsent or self.encoding
        self._unsent = unsent
        return moved

    # -- writing
    def write(self, data: bytes, transport: asyncio.Transport | None = None) -> None:
        """Write an encoded event behind what waits; a large one a piece at a time.
        ConnectionLost if the connection is closed or closing (`transport`: the owner's,
        which it checked is open)."""
        if transport is None:
            transport = self._writable()
        if not self._queue and len(data) <= WRITE_PIECE:  # the meet path: nothing waits
            transport.write(data)
            unsent, conn = transport.get_write_buffer_size(), self._conn
            if unsent > 2 * conn.peer_max_frame or unsent > 2 * conn.max_frame:
                self._check_reading(transport)  # (what it checks, without a call per frame)
            return
        self._queue.append(data if len(data) <= WRITE_PIECE else _Frame([data]))
        self._bytes += len(data)
        if len(self._queue) == 1:  # first in line (else what is ahead of it is waiting)
            self._flush()
        else:
            self._check_reading(transport)

    def encode(self, event: Event, refused: Refused) -> asyncio.Future[None]:
        """Have `event` (which Connection.check let through) encoded on a thread, and
        written in its turn (see Channel.send for the future returned and for `refused`)."""
        body = self._loop.run_in_executor(None, pieces_elsewhere, event,
                                          self._conn.peer_max_frame)
        sent: asyncio.Future[None] = self._loop.create_future()
        self._queue.append(_Encoding(event, body, refused, sent))
        body.add_done_callback(self._flush)
        return sent

    def close_when_sent(self, reason: str) -> None:
        """Have the owner closed, saying Bye with `reason`, once what waits is written."""
        self._close_after = reason
        self.closing = True

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        if self._queue:
            self._flush()

    def drop(self) -> bool:
        """Send nothing more of what waits (the connection is over, or failed); True if
        that cut a frame short (the peer could not read what comes after)."""
        queue = self._queue
        cut = bool(queue) and isinstance(queue[0], _Frame) and queue[0].started
        for out in queue:
            if isinstance(out, _Encoding):
                out.sent.cancel()
        queue.clear()
        self._bytes = 0
        self._close_after = None
        self.closing = False
        return cut

    def _flush(self, _: object = None) -> None:
        """Write what waits, in order, while the transport has room, up to an event still
        being encoded; then close, if a close waited for them."""
        queue = self._queue
        try:
            while queue:
                out = queue[0]
                if isinstance(out, _Encoding):
                    if out.waiting:
                        return
                    queue.popleft()
                    self._encoded(out)
                    continue
                if self._paused:
                    return  # resume goes on
                if isinstance(out, bytes):
                    queue.popleft()
                    data: bytes | memoryview = out
                else:
                    data = out.next_piece()
                    if not out.pieces:  # all of it is out, and its memory free
                        queue.popleft()
                        trim.after_large(self._loop)
                self._bytes -= len(data)
                self._put(data)
        except ConnectionLost:  # dropped on the way (the peer is not reading)
            self.drop()
            return
        if self._close_after is not None and self._owner is not None:
            reason, self._close_after = self._close_after, None
            self.closing = False
            self._owner.close(reason)

    def _encoded(self, out: _Encoding) -> None:
        """An event's body is encoded: book the event as sent, and its frame goes first."""
        if out.sent.cancelled():  # withdrawn
            return
        try:
            pieces = out.body.result()
            size = sum(map(len, pieces))
            header = self._conn.commit(out.event, size)
        except (LimitExceeded, ProtocolError) as exc:
            out.sent.cancel()
            _tell(out.refused, exc)
            return
        except Exception as exc:  # noqa: BLE001 - the encoder failed otherwise (memory): it
            # is refused like any event that cannot be sent, not left waiting for ever.
            out.sent.cancel()
            _tell(out.refused, LocalProtocolError(
                f"cannot encode {type(out.event).__name__}: {type(exc).__name__}: {exc}"))
            return
        self._queue.appendleft(_Frame([header, *pieces]))
        self._bytes += len(header) + size
        out.sent.set_result(None)

    def _put(self, data: bytes | memoryview) -> None:
        transport = self._writable()
        transport.write(data)
        self._check_reading(transport)

    def _check_reading(self, transport: asyncio.Transport) -> None:
        """A peer that does not read what it is sent would make us buffer without bound;
        past two of its largest frames unsent, it is disconnected instead."""
        unsent = transport.get_write_buffer_size() + self._bytes
        # The peer's own max_frame is its word, so it is capped by ours.
        if unsent > 2 * min(self._conn.peer_max_frame, self._conn.max_frame):
            if self._owner is not None:
                self._owner.close_reason = f"peer is not reading: {unsent:,} bytes unsent"
            transport.abort()

    def _transport(self) -> asyncio.Transport | None:
        return None if self._owner is None else self._owner.transport

    def _writable(self) -> asyncio.Transport:
        """The transport, if it may still be written to; else ConnectionLost, saying why."""
        transport = self._transport()
        if transport is None or transport.is_closing():
            reason = self._owner.close_reason if self._owner is not None else ""
            raise ConnectionLost(reason or "connection is closed")
        return transport


class _Coders:
    """The threads coding a large frame now: while there is one, Python's switch interval
    is at most SWITCH_SECONDS.

    Why: a thread coding a large frame holds the GIL between pieces, and the event loop's
    thread asks for it back at every step (each read, each write; a new client's connection
    and meet take a dozen). CPython hands it over only once the interval has passed: at its
    5 ms, beside an echo of 20,000,000 elements, 1.9% of new clients waited over 50 ms,
    the 99th percentile 51-77 ms and the longest 121-168 ms; at 1 ms, 0.2%, 19-22 ms and
    82-101 ms, the echo itself no slower (benchmarks/test_memory.py). Safe in any process
    that imports this (a place, a client program, a notebook kernel; an agent's worker
    does not): the interval only decides how often threads take turns; a program's own
    interval at or below SWITCH_SECONDS is not touched; the first coder lowers it and the
    last puts it back, on every path (the thread's work raising included), unless the
    program set another meanwhile, which then stays.

    The garbage collector is left alone. A folder of millions of elements decoded on a
    thread is walked whole by the next young collection (75-85 ms for 20,000,000, holding
    the GIL); gc.freeze then unfreeze would move it to the oldest generation first, but
    with it every young object of the process, the program's cyclic garbage included, to
    wait for a full collection; and it could undo a freeze the program makes on another
    thread meanwhile (before it forks). Not in a client's or a notebook's process.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._before: float | None = None  # the interval the first coder lowered
        self._ours = 0.0  # and what it lowered it to, as Python rounded it

    @contextlib.contextmanager
    def coding(self) -> Iterator[None]:
        with self._lock:
            if not self._count:
                before = sys.getswitchinterval()
                self._before = before if before > SWITCH_SECONDS else None
                if self._before is not None:
                    sys.setswitchinterval(SWITCH_SECONDS)
                    self._ours = sys.getswitchinterval()
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1
                if (not self._count and self._before is not None
                        and sys.getswitchinterval() == self._ours):
                    sys.setswitchinterval(self._before)


#: Wraps a thread's coding of a large frame (see _Coders).
coding = _Coders().coding


def pieces_elsewhere(event: Event, limit: int) -> list[bytes | memoryview]:
    """`pieces_of`, on a thread (see coding)."""
    with coding():
        return pieces_of(event, limit)


def _tell(refused: Refused, exc: TacomaError) -> None:
    try:
        refused(exc)
    except Exception:  # the sender's callback: its fault is logged, the loop goes on
        log.exception("telling that an event could not be sent (%s) failed", exc)


def _kernel_unsent(transport: asyncio.BaseTransport) -> int:
    """Bytes written to the socket that its peer has not acknowledged yet (Linux's
    TIOCOUTQ); 0 where that cannot be asked."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        answer = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (OSError, ValueError, AttributeError):
        return 0
    unsent: int = struct.unpack("i", answer)[0]
    return unsent
