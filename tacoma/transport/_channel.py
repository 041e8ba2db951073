"""The asyncio driver around the sans-IO protocol: one Channel per connection.

A Channel is an asyncio.Protocol (callbacks rather than streams: no task per connection and
no extra copy through a StreamReader on the meet path). It says Hello as soon as it is
connected, feeds received bytes to the `Connection`, and hands every event after the peer's
Hello to an `EventHandler`. A protocol error from the peer is answered with a Bye naming the
fault and the connection is closed; nothing else on the place is touched.

One large briefcase must not hold up everyone else on the event loop: a large frame is
decoded on a thread, and a large event sent with `send(event, refused)` is encoded on one,
its frame and those sent after it kept in order in the Channel's `Outbox` (_outbox.py: the
sending side, written in pieces as the transport has room). What a place holds for a
peer is let go of when the connection ends, the memory freed is given back to the system
(_trim.py), and a close that the peer does not complete is cut short (CLOSE_SECONDS).

The same Channel serves TCP connections (client <-> place) and the socketpair between a place
and an agent's worker process (host <-> worker).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from collections.abc import Callable
from typing import Protocol, cast

from ..trust._tls import Peer, peer_of
from ..wire._address import parse_address
from ..wire._errors import (
    ConnectError,
    ConnectionLost,
    LimitExceeded,
    NotAuthorized,
    ProtocolError,
    RemoteProtocolError,
    TacomaError,
    map_transport_errors,
)
from ..wire._protocol import (
    HANDSHAKE_TIMEOUT,
    HELLO_TIMEOUT,
    NEED_DATA,
    Bye,
    Connection,
    Event,
    Failed,
    Result,
    Role,
    decoded,
    heavy,
    unsendable,
)
from ._outbox import Outbox, Refused, coding
from ._trim import trim

__all__ = ["Channel", "EventHandler", "ReceiveBudget", "Refused", "connect"]

log = logging.getLogger("tacoma.client")



class EventHandler(Protocol):
    def event_received(self, channel: Channel, event: Event) -> None: ...

    def channel_closed(self, channel: Channel, exc: BaseException | None) -> None: ...


#: Decides, once a connection is made (for TLS: once the peer's certificate is verified),
#: whether to serve it: "" to serve, else the reason the peer is told in a Bye.
Admission = Callable[["Channel"], str]


#: A peer that stops sending in the middle of a frame is dropped after this long.
STALL_SECONDS = 30.0
#: Frames of this many bytes or more are decoded on a thread (see Channel._process).
DECODE_ELSEWHERE = 1 << 20
#: A connection being closed whose peer takes none of what is still to be sent, nor
#: completes the close (TLS waits for the peer's close_notify), for this long is dropped:
#: its meets fail now rather than at TLS's own limit of 30 s.
CLOSE_SECONDS = 2.0


def _decoded_elsewhere(body: bytes | bytearray) -> Event | ValueError:
    """`decoded`, on a thread (see _outbox.coding)."""
    with coding():
        return decoded(body)


class ReceiveBudget:
    """The bytes of incomplete frames a place holds for all its connections together, and
    for any one peer's identity (`share` of them, one whole frame at least).

    A frame is buffered whole before it is decoded, so peers that each send all but the
    end of a large frame would hold max_frame bytes each; the budget bounds the total, and
    the share keeps one identity (or, unauthenticated, one host) from taking all of it. A
    connection whose frame would pass either is closed with a Bye saying so (its peer may
    send again later); what it held is given back.
    """

    def __init__(self, limit: int, share: int | None = None) -> None:
        self.limit = limit
        self.share = limit if share is None else share
        self.total = 0
        self._held: dict[Channel, tuple[str, int]] = {}
        self._by_peer: dict[str, int] = {}

    def hold(self, channel: Channel, held: int) -> bool:
        """Record that `channel` now holds `held` bytes; False if that is over budget."""
        if not held and channel not in self._held:  # the usual: a whole frame, let go
            return True
        peer = channel.identity.name if channel.identity is not None \
            else channel.peer.rpartition(":")[0]
        key, before = self._held.get(channel, (peer, 0))
        mine = self._by_peer.get(key, 0)
        if held > before and (self.total - before + held > self.limit
                              or mine - before + held > self.share):
            return False
        self.total += held - before
        mine += held - before
        if mine > 0:
            self._by_peer[key] = mine
        else:
            self._by_peer.pop(key, None)
        if held:
            self._held[channel] = (key, held)
        else:
            self._held.pop(channel, None)
        return True


class _Gone:
    """The handler of a channel whose connection is over: it hears nothing more."""

    def event_received(self, channel: Channel, event: Event) -> None:
        pass

    def channel_closed(self, channel: Channel, exc: BaseException | None) -> None:
        pass


_GONE = _Gone()


class Channel(asyncio.Protocol):
    def __init__(self, role: Role, handler: EventHandler, max_frame: int,
                 software: str = "", refuse: str = "",
                 admit: Admission | None = None,
                 budget: ReceiveBudget | None = None,
                 hello_timeout: float = HELLO_TIMEOUT) -> None:
        self.conn = Connection(role, max_frame, software)
        self._hello_timeout = hello_timeout  # a place's: for its peer's Hello
        self.handler = handler
        self.transport: asyncio.Transport | None = None
        self._loop = loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.close_reason = ""
        self.peer = ""
        #: Who the peer is, from its certificate (None on a plaintext connection).
        self.identity: Peer | None = None
        self._error: TacomaError | None = None
        self._refuse = refuse  # say Bye with this reason instead of Hello
        self._admit = admit
        self._hello_timer: asyncio.TimerHandle | None = None
        self._budget = budget
        self._stall_timer: asyncio.TimerHandle | None = None
        self._decoding: asyncio.Future[Event | ValueError] | None = None  # a large frame
        #: loop.time() when the peer last showed it is there (see quiet_for).
        self.heard = loop.time()
        #: What waits its turn to be written, in order (see send and write).
        self._outbox = Outbox(loop, self.conn)
        self._close_timer: asyncio.TimerHandle | None = None
        self._unsent_at_close = 0

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self._outbox.attach(self)  # until connection_lost: the two refer to each other
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "local"
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Meets are small request/reply exchanges: never wait to coalesce segments.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.identity = peer_of(transport)
        if not self._refuse and self._admit is not None:
            self._refuse = self._admit(self)
        if self._refuse:
            self.transport.write(self.conn.send(Bye(self._refuse)))
            self._end()
            return
        self.transport.write(self.conn.send(self.conn.hello()))
        if self.conn.role == Role.PLACE:
            # A connection that never says Hello would hold a descriptor forever.
            self._hello_timer = asyncio.get_running_loop().call_later(
                self._hello_timeout, self._no_hello)

    def _no_hello(self) -> None:
        if not self.ready.done():
            self.close_reason = f"no Hello within {self._hello_timeout:g} s"
            self.abort()

    def data_received(self, data: bytes) -> None:
        self.heard = self._loop.time()
        transport = self.transport  # is_closing, inline: the meet path
        if transport is None or transport.is_closing() or self._outbox.closing:
            return  # over (refused, broken, closed): what comes now is not read
        self.conn.receive_data(data)
        if self._decoding is None:
            self._process()

    def _process(self) -> None:
        """Take the complete frames received so far, in order. A frame of DECODE_ELSEWHERE
        bytes or more is decoded on a thread, reading paused, so that one large briefcase
        does not hold up the event loop (and every other connection) while it is checked."""
        try:
            while True:
                body = self.conn.next_frame()
                if body is NEED_DATA:
                    self._holding()
                    return
                assert isinstance(body, bytes | bytearray)
                if len(body) >= DECODE_ELSEWHERE:
                    self._decode_elsewhere(body)
                    return
                if not self._deliver(self.conn.take(decoded(body))):
                    return
        except ProtocolError as exc:
            self._protocol_error(exc)

    def _decode_elsewhere(self, body: bytes | bytearray) -> None:
        assert self.transport is not None
        if not self._holding(len(body)):  # the frame still counts against the budget
            return
        self.transport.pause_reading()
        future = self._loop.run_in_executor(None, _decoded_elsewhere, body)
        self._decoding = future
        future.add_done_callback(self._decoded)

    def _decoded(self, future: asyncio.Future[Event | ValueError]) -> None:
        self._decoding = None
        trim.after_large(self._loop)  # the frame's bytes are gone (and, later, the event)
        if self.transport is None or self.transport.is_closing() or future.cancelled():
            return
        try:
            if not self._deliver(self.conn.take(future.result())):
                return
        except ProtocolError as exc:
            self._protocol_error(exc)
            return
        self.transport.resume_reading()
        self._process()

    def _deliver(self, event: Event) -> bool:
        """Act on one event from the peer; False once the connection is over."""
        if isinstance(event, Bye):
            self.close_reason = event.reason
            if not self.ready.done():  # refused before the handshake ended
                self._error = (
                    NotAuthorized(event.reason.removeprefix(NotAuthorized.BYE_PREFIX))
                    if event.reason.startswith(NotAuthorized.BYE_PREFIX)
                    else ConnectError(f"refused: {event.reason}"))
            self._outbox.drop()  # the peer has gone: nothing more is sent to it
            self.close()
            return False
        if not self.ready.done():
            self.ready.set_result(None)  # that was the peer's Hello
            if self._hello_timer is not None:
                self._hello_timer.cancel()
            return True
        self.handler.event_received(self, event)
        return True

    def _protocol_error(self, exc: ProtocolError) -> None:
        self.close_reason = str(exc)
        self._error = exc
        self._fail(str(exc))

    def _fail(self, why: str) -> None:
        """End the connection after a fault: what waits to be sent is dropped, a Bye says
        `why` (unless a frame was cut short: the peer could not read it), and it closes."""
        cut = self._outbox.drop()
        if self.transport is not None and not self.transport.is_closing():
            if not cut:
                self.transport.write(self.conn.fail_bytes(why))
            self._end()

    def _holding(self, decoding: int = 0) -> bool:
        """Account for the incomplete frame now buffered (and one being decoded): within
        the budget, and arriving. False if over the budget: the connection is closed, and
        what it held let go of at once, for the others."""
        if self._budget is None:
            return True
        held = self.conn.buffered + decoding
        if not self._budget.hold(self, held):
            self.close_reason = (f"over the place's budget for incoming briefcases "
                                 f"({self._budget.limit:,} bytes being received at once, "
                                 f"{self._budget.share:,} from any one identity)")
            self._budget.hold(self, 0)
            self._let_go()
            self._fail(f"{self.close_reason}; send again later")
            return False
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        if held:
            self._stall_timer = self._loop.call_later(STALL_SECONDS, self._stalled)
        return True

    def _let_go(self) -> None:
        """Drop what was received and not taken (the connection is over), and have the
        memory given back if that was a large frame."""
        if self.conn.buffered >= DECODE_ELSEWHERE:
            trim.after_large(self._loop)
        self.conn.discard_received()

    def _stalled(self) -> None:
        if self.conn.buffered:
            self.close_reason = f"no byte of a started frame for {STALL_SECONDS:g} s"
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._budget is not None:
            self._budget.hold(self, 0)
        if self._stall_timer is not None:
            self._stall_timer.cancel()
        if self._close_timer is not None:
            self._close_timer.cancel()
        self._let_go()
        self._outbox.drop()
        trim.after_close(self._loop)
        reason = self.close_reason or (str(exc) if exc else "connection closed by peer")
        lost = ConnectionLost(reason)
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        if not self.ready.done():
            self.ready.set_exception(self._error or lost)
            self.ready.exception()  # mark retrieved: nobody may be waiting any more
        if not self.closed.done():
            self.closed.set_result(None)
        handler, self.handler = self.handler, _GONE
        handler.channel_closed(self, exc if exc is not None else lost)
        # Let go of the transport (for TLS, its session and buffers: a quarter megabyte), of
        # the handler and of the admission, which hold this channel in turn: freed now, not
        # when the garbage collector next looks for cycles (an idle place may not for long).
        self.transport = None
        self._admit = None
        self._outbox.detach()

    # -- ours
    @property
    def is_closing(self) -> bool:
        return (self.transport is None or self.transport.is_closing()
                or self._outbox.closing)

    def quiet_for(self) -> float:
        """Seconds since the peer last showed it is there: it sent a byte, or took some of
        what this end wrote (less waits unsent than when this was last asked); none while
        this end is itself busy with a large frame (decoding one, or encoding one)."""
        now = self._loop.time()
        if self._outbox.progressed() or self._decoding is not None:
            self.heard = now
        return now - self.heard

    def pause_writing(self) -> None:
        self._outbox.pause()

    def resume_writing(self) -> None:
        self._outbox.resume()

    def send(self, event: Event, refused: Refused | None = None) -> asyncio.Future[None] | None:
        """Encode and write an event.

        Without `refused`, at once: LocalProtocolError or LimitExceeded is raised if it
        cannot be sent. With `refused`, an event with a large briefcase (see
        wire._protocol.heavy) is encoded on a thread, so that the event loop serves others
        meanwhile, and what would have been raised, now or once it is encoded, goes to
        `refused` instead; the future returned then is done once its frame is on its way
        (booked as sent, and being written), or cancelled if it never is (cancelling it
        before withdraws the event: it is not sent). Either way, frames go out in the order
        they were sent, and a large one a piece at a time (_outbox.WRITE_PIECE).

        A peer that does not read what it is sent would make us buffer without bound; past
        two of its largest frames unsent, it is disconnected instead.
        """
        if refused is None:
            self._send_now(event)
            return None
        try:
            if heavy(event):
                return self._send_heavy(event, refused)
            self._send_now(event)
        except (LimitExceeded, ProtocolError) as exc:
            refused(exc)
        return None

    def _send_now(self, event: Event) -> None:
        transport = self.transport  # the meet path: its checks once, inline
        if transport is None or transport.is_closing() or self._outbox.closing:
            raise ConnectionLost(self.close_reason or "connection is closed")
        self._outbox.write(self.conn.send(event), transport)

    def _send_heavy(self, event: Event, refused: Refused) -> asyncio.Future[None]:
        if self.is_closing:
            raise ConnectionLost(self.close_reason or "connection is closed")
        self.conn.check(event)
        return self._outbox.encode(event, refused)

    def answer(self, event: Event, kind: str | None = None) -> None:
        """Send `event`, an answer to the peer's meet, if the peer is still there to get it:
        a large one encoded on a thread (see send). A Result or a Failed that cannot be sent
        (larger than the peer's frames, or not encodable) is answered with a Failed saying
        why instead, of `kind` (default: that of the error), so that the meet still ends.
        The one way the place, its workers' host and a client answer meets."""
        if self.is_closing:
            return

        def refused(exc: TacomaError) -> None:  # LimitExceeded or a ProtocolError
            if self.is_closing:
                return
            if not isinstance(event, Result | Failed):
                log.error("cannot send %s: %s", type(event).__name__, exc)
                return
            try:
                self.send(unsendable(event, exc, kind))
            except (LimitExceeded, ProtocolError) as again:
                log.error("cannot send Failed: %s", again)

        self.send(event, refused)

    def write(self, data: bytes) -> None:
        """Write an encoded event (`conn.send`'s bytes): `send` in two steps, for tracing.
        It waits its turn behind frames sent before it (see send); a large one is written
        a piece at a time (_outbox.WRITE_PIECE)."""
        if self.transport is None or self.transport.is_closing():
            raise ConnectionLost(self.close_reason or "connection is closed")
        self._outbox.write(data)

    def close(self, reason: str = "") -> None:
        """Close the connection, saying Bye with `reason` if one is given, once the frames
        already sent are written (see send)."""
        if self.transport is None or self.is_closing:
            return
        if self._outbox.pending:
            self._outbox.close_when_sent(reason)
            self._bound_close()
            return
        if reason and self.conn.our_state == "OPEN":
            self.transport.write(self.conn.send(Bye(reason)))
        self._end()

    def abort(self) -> None:
        """Drop the connection now, without flushing what the peer has not read."""
        if self.transport is not None:
            self._outbox.drop()
            self.transport.abort()

    def _end(self) -> None:
        """Close the transport: what was written is flushed, and the close completed (for
        TLS, the peer's close_notify awaited), but not for ever: once CLOSE_SECONDS pass in
        which the peer took nothing of what is still unsent, it is dropped."""
        assert self.transport is not None
        self.transport.close()
        if self._close_timer is not None:  # it waited for the outbox: from now, the close
            self._close_timer.cancel()
            self._close_timer = None
        self._bound_close()

    def _bound_close(self) -> None:
        if self._close_timer is None:
            self._unsent_at_close = self._outbox.unsent()
            self._close_timer = self._loop.call_later(CLOSE_SECONDS, self._close_overdue)

    def _close_overdue(self) -> None:
        self._close_timer = None
        if self.transport is None or self.closed.done():
            return
        unsent = self._outbox.unsent()
        if 0 < unsent < self._unsent_at_close or self._outbox.encoding:  # not stuck yet
            self._unsent_at_close = unsent
            self._close_timer = self._loop.call_later(CLOSE_SECONDS, self._close_overdue)
            return
        self.close_reason = self.close_reason or (
            f"the peer did not complete the close within {CLOSE_SECONDS:g} s")
        self.abort()


async def connect(address: str, role: Role, handler: EventHandler, max_frame: int,
                  timeout: float | None = 10.0, software: str = "",
                  context: ssl.SSLContext | None = None) -> Channel:
    """Open a Channel to a place and wait for its Hello: over TLS with `context` (the
    place's certificate must name the host dialled and say it is a place), or plaintext.

    The TCP connection is made first, on its own, so that what comes after can be told
    apart: a peer that accepts the connection and then answers with bytes that are not TLS
    or not a tacoma frame (a web server), or with nothing at all within the timeout, is not
    a tacoma place (RemoteProtocolError); only a connection that cannot be made is a
    ConnectError.
    """
    try:
        host, port = parse_address(address)
    except ValueError as exc:
        raise ConnectError(str(exc)) from exc
    loop = asyncio.get_running_loop()
    where = f"cannot connect to place {address}"
    tls = context is not None
    connected = False
    try:
        with map_transport_errors(where):
            async with asyncio.timeout(timeout):
                sock = await _tcp_connect(loop, host, port)
                connected = True
                channel = await _handshake(loop, sock, address, where, role, handler,
                                           max_frame, software, context)
    except ConnectionLost as exc:  # reset as it was made (the peer accepted, then reset)
        reset = ConnectError(f"{where}: the connection was reset before the place answered "
                             f"({exc.__cause__ or exc}); it may be overloaded")
        reset.transient = True
        raise reset from None
    except ConnectError as exc:
        if not connected:
            exc.transient = isinstance(exc.__cause__, TimeoutError)
            raise
        if not isinstance(exc.__cause__, TimeoutError | ConnectionAbortedError):
            raise
        kind = "TLS handshake" if tls else "Hello"
        waited = min(timeout or HANDSHAKE_TIMEOUT, HANDSHAKE_TIMEOUT) if tls else timeout
        silent = RemoteProtocolError(
            f"{address} accepted the connection but did not answer as a tacoma place (no "
            f"{kind} within {waited:g} s): "
            "another kind of server on that port, a stalled place, or a path losing most "
            "packets?")
        silent.transient = True
        raise silent from None
    if context is not None and (channel.identity is None or not channel.identity.is_place):
        channel.abort()
        name = channel.identity.name if channel.identity else "?"
        raise ConnectError(f"{where}: its certificate ({name}) is not a place's")
    return channel


async def _tcp_connect(loop: asyncio.AbstractEventLoop, host: str, port: int
                       ) -> socket.socket:
    """A connected, non-blocking TCP socket to host:port (each address it resolves to, in
    turn, as asyncio's own create_connection does)."""
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    last: OSError | None = None
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            # asyncio words it "Connect call failed (addr)": the OS's own words say more
            last = OSError(exc.errno, os.strerror(exc.errno)) if exc.errno else exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise last if last is not None else OSError(f"{host} has no address")


async def _handshake(loop: asyncio.AbstractEventLoop, sock: socket.socket, address: str,
                     where: str, role: Role, handler: EventHandler, max_frame: int,
                     software: str, context: ssl.SSLContext | None) -> Channel:
    """TLS (with `context`) and the Hellos on a connected socket: the Channel, ready."""
    host, _ = parse_address(address)
    tls = context is not None
    try:
        try:
            _, channel = await loop.create_connection(
                lambda: Channel(role, handler, max_frame, software), sock=sock,
                ssl=context, server_hostname=host if tls else None,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT if tls else None)
        except ssl.SSLCertVerificationError as exc:
            raise ConnectError(f"{where}: its certificate is not trusted here "
                               f"({exc.verify_message}): is it a place of this "
                               "cluster, serving this address?") from None
        except ssl.SSLError as exc:
            raise RemoteProtocolError(
                f"{address} did not answer as a tacoma place with TLS 1.3 "
                f"({exc.reason or exc}): is it one? (A place started with --insecure is "
                "met with --insecure.)") from None
        except OSError as exc:
            if isinstance(exc, TimeoutError):
                raise  # the handshake's own timeout: said by connect
            # Reset before the handshake ended (or so soon that uvloop, which took the
            # socket over, had already closed it: EBADF): the TCP connection was made.
            reset = ConnectError(f"{where}: the connection was reset before the place "
                                 f"answered ({exc}); it may be overloaded")
            reset.transient = True
            raise reset from None
    except BaseException:
        # The event loop took the descriptor over: it closes it (uvloop's libuv, at once or
        # when a TLS shutdown ends; asyncio's transport) or has closed it already. Closing
        # it here too, or leaving it to this object's finalizer, could close a descriptor
        # the next connection has since been given the same number (CI saw that: EBADF
        # on the retry). So the object lets go of it without closing.
        sock.detach()
        raise
    try:
        await channel.ready
    except RemoteProtocolError as exc:
        channel.abort()
        raise RemoteProtocolError(f"{address} did not answer as a tacoma place "
                                  f"(is it one?): {exc}") from None
    except NotAuthorized:
        channel.abort()
        raise
    except ConnectError as exc:
        channel.abort()
        raise ConnectError(f"{where}: {exc}") from None
    except ConnectionLost as exc:
        channel.abort()
        hint = ("it did not accept this client's identity (signed by another CA, "
                "expired, or revoked?), or it stopped" if tls else
                "a place that requires TLS closes plaintext connections: meet it "
                "without --insecure")
        closed = ConnectError(f"{where}: closed before its Hello ({exc}): {hint}")
        closed.transient = True
        raise closed from None
    except BaseException:  # the timeout, or the caller gave up: leave nothing open
        channel.abort()
        raise
    return channel
