"""The tacoma wire protocol, as a sans-IO state machine.

Nothing here does I/O or imports asyncio (a test checks): bytes go in through
`Connection.receive_data`, events come out of `Connection.next_event`, and `Connection.send`
turns an event into the bytes to write. The asyncio drivers (`tacoma.transport`) and the
blocking agent-side channel (`agent._channel`) are thin loops around it, so the protocol is
tested whole with an in-memory pair (`tacoma.testing`).

Framing: a 4-byte big-endian length, then the event as one msgpack array `[tag, field, ...]`
(the events, their checks and their one codec are in `_events`; never pickle). Length
prefixes let a receiver refuse an oversized frame from its header, before buffering it.
Both directions come in two halves for a driver that codes a large briefcase on a thread:
`next_frame` and `take` (what `next_event` does), `check`, `body_of` (or `pieces_of`) and
`commit` (what `send` does); `heavy` says, cheaply, which events are worth it.

One connection carries many concurrent meets: every Meet has a request id (rid) chosen by its
sender, and exactly one reply ends it: Result or Failed for a sync meet, Accepted or Failed
for an async one; two more modes serve messages and moving agents (see `MODES`). The
connection tracks which rids each side owes, so a stray or duplicate reply is a protocol
error rather than a confused caller.

Roles: a *client* meets a *place*; on the channel between a place and an agent's worker
process the place is the *host* and the agent is the *worker*. A worker can also send Meets
to its host: that is how an agent meets other agents (the primitive for moving and
messaging); a worker its place keeps warm for another meet hears Keep, and says Ready
when it is clean again. A place meets its client for one thing only: the chunks of a lazy folder the
client sent (see _lazy). What each role may send is data, in `MAY_SEND`; the per-direction
states and their transitions are data, in `TRANSITIONS`.
"""

from __future__ import annotations

import enum

from ._briefcase import Briefcase
from ._errors import LimitExceeded, LocalProtocolError, RemoteProtocolError, TacomaError, kind_of
from ._events import MODES as MODES
from ._events import PIECE_ELEMENTS, decode, encode, encode_in_pieces
from ._events import Accepted as Accepted
from ._events import Bye as Bye
from ._events import Cancel as Cancel
from ._events import Event as Event
from ._events import Failed as Failed
from ._events import Hello as Hello
from ._events import Keep as Keep
from ._events import Log as Log
from ._events import Meet as Meet
from ._events import Ready as Ready
from ._events import Result as Result
from ._events import Role as Role

# typing costs a worker ~9 ms to import; annotations are strings (PEP 563) anyway.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, NoReturn

    from ._events import MeetMode

__all__ = [
    "DEFAULT_MAX_FRAME",
    "HANDSHAKE_TIMEOUT",
    "HELLO_TIMEOUT",
    "IDLE_SECONDS",
    "MIN_IDLE_SECONDS",
    "NEED_DATA",
    "PROTOCOL_VERSION",
    "Accepted",
    "Bye",
    "Cancel",
    "Connection",
    "Event",
    "Failed",
    "Hello",
    "Keep",
    "Log",
    "Meet",
    "Ready",
    "Result",
    "Role",
    "body_of",
    "decoded",
    "heavy",
    "pieces_of",
    "unsendable",
]

#: Bumped on any incompatible change to framing or events; peers must agree exactly.
PROTOCOL_VERSION: Final = 6

#: Largest frame accepted unless configured otherwise. A briefcase is held whole in memory on
#: both sides (and once more in the worker), so this bounds what one meet can cost a place;
#: 64 MiB fits photos and data sets of the size agents carry, while a few concurrent meets
#: still fit in a small machine's memory.
DEFAULT_MAX_FRAME: Final = 64 * 1024 * 1024
#: A place closes a connection with no meet in flight that has been silent this long
#: (`--idle-seconds`, at least MIN_IDLE_SECONDS); clients stop reusing one that has been idle
#: for most of the minimum, so that a meet never crosses the place's close (see
#: client._client.ClientCache).
IDLE_SECONDS: Final = 300.0
MIN_IDLE_SECONDS: Final = 60.0
#: Seconds a peer has to finish its TLS handshake before a place drops it, and then to say
#: Hello (a client says it at once): a place's `--handshake-timeout` and `--hello-timeout`.
HANDSHAKE_TIMEOUT: Final = 5.0
HELLO_TIMEOUT: Final = 10.0

#: Frames at the start of a connection, before both sides said Hello, are tiny; a peer that
#: sends a large one first is not speaking tacoma (an HTTP client, say).
MAX_HELLO_FRAME: Final = 4096

_HEADER = 4

#: Who talks to whom: the role a peer must declare in its Hello.
COUNTERPART: Final = {
    Role.CLIENT: Role.PLACE,
    Role.PLACE: Role.CLIENT,
    Role.HOST: Role.WORKER,
    Role.WORKER: Role.HOST,
}


class _Need(enum.Enum):
    NEED_DATA = "NEED_DATA"


#: Returned by next_event() when more bytes are needed before the next event.
NEED_DATA: Final = _Need.NEED_DATA


# ----------------------------------------------------------------------- state, as data
#: Each direction of a connection moves IDLE -> OPEN (Hello) -> CLOSED (Bye).
IDLE, OPEN, CLOSED, ERROR = "IDLE", "OPEN", "CLOSED", "ERROR"

TRANSITIONS: Final[dict[tuple[str, type[Event]], str]] = {
    (IDLE, Hello): OPEN,
    (IDLE, Bye): CLOSED,  # refusing a connection before saying hello
    **{(OPEN, cls): OPEN for cls in (Meet, Accepted, Result, Failed, Log, Cancel, Ready,
                                     Keep)},
    (OPEN, Bye): CLOSED,
}

#: A place meets its client too, for one thing only: the chunks of a lazy folder the client
#: sent, which an agent reads (ag_lazy, see place.stores._lazy and client._lazy).
MAY_SEND: Final[dict[Role, frozenset[type[Event]]]] = {
    Role.CLIENT: frozenset({Hello, Meet, Result, Failed, Cancel, Bye}),
    Role.PLACE: frozenset({Hello, Meet, Accepted, Result, Failed, Bye}),
    Role.HOST: frozenset({Hello, Meet, Accepted, Result, Failed, Keep, Bye}),
    Role.WORKER: frozenset({Hello, Meet, Result, Failed, Log, Ready, Bye}),
}

#: Which replies end a meet of each mode.
ENDS: Final[dict[str, frozenset[type[Event]]]] = {
    "sync": frozenset({Result, Failed}),
    "async": frozenset({Accepted, Failed}),
    "ack": frozenset({Result, Failed}),
    "go": frozenset({Accepted, Failed}),
}


#: An event whose briefcase holds this many bytes or more, or PIECE_ELEMENTS elements or
#: more, is `heavy`: coding it takes a millisecond or more.
HEAVY_BYTES: Final = 1 << 20


def decoded(body: bytes | bytearray) -> Event | ValueError:
    """The event a frame's body carries, or the ValueError saying what is wrong with it
    (returned, not raised, so that it can be decoded on another thread and handed to
    `Connection.take`)."""
    try:
        return decode(body)
    except ValueError as exc:
        return exc


def heavy(event: Event) -> bool:
    """Whether `event` carries a briefcase large enough (HEAVY_BYTES, or PIECE_ELEMENTS
    elements) that encoding it would hold up an event loop: worth doing on a thread.

    Cheap whatever the size: the elements are counted per folder, and their bytes summed
    only below PIECE_ELEMENTS of them; a lazy folder is not fetched to be counted."""
    briefcase = getattr(event, "briefcase", None)
    return isinstance(briefcase, Briefcase) and briefcase.at_least(PIECE_ELEMENTS, HEAVY_BYTES)


def body_of(event: Event, limit: int) -> bytes:
    """The encoded body of `event` (a frame without its header), at most `limit` bytes (the
    peer's max_frame): LimitExceeded if larger, naming the largest folder; LocalProtocolError
    if it cannot be encoded."""
    try:
        body = encode(event)
    except (TypeError, ValueError) as exc:
        raise LocalProtocolError(f"cannot encode {type(event).__name__}: {exc}") from exc
    _within(event, len(body), limit)
    return body


def pieces_of(event: Event, limit: int) -> list[bytes | memoryview]:
    """`body_of`, in pieces (see _events.encode_in_pieces): for a driver to run on a thread
    and then `Connection.commit` the event with the pieces' length."""
    try:
        pieces = encode_in_pieces(event)
    except (TypeError, ValueError) as exc:
        raise LocalProtocolError(f"cannot encode {type(event).__name__}: {exc}") from exc
    _within(event, sum(map(len, pieces)), limit)
    return pieces


def unsendable(event: Result | Failed, exc: TacomaError, kind: str | None = None) -> Failed:
    """The Failed that answers a meet in place of `event`, which cannot be sent (`exc`:
    larger than the peer's frames, or not encodable), of `kind` (default: that of the
    error), so that the meet still ends. Every side that answers meets (the place, its
    workers' host, a client, an agent's worker) answers so."""
    what = "the result briefcase" if isinstance(event, Result) else "the failure"
    why = "is too large to send" if isinstance(exc, LimitExceeded) else "cannot be sent"
    return Failed(event.rid, kind or kind_of(exc), f"{what} {why}: {exc}"[:4096])


def _within(event: Event, size: int, limit: int) -> None:
    if size > limit:
        what = type(event).__name__
        briefcase = getattr(event, "briefcase", None)
        if isinstance(briefcase, Briefcase) and briefcase:
            name = max(briefcase, key=briefcase.folder_size)
            folder = briefcase.folder_size(name)
            what = f"the briefcase (largest folder {name}: {folder:,} bytes)"
        raise LimitExceeded(
            f"{what} is {size:,} bytes encoded; the peer accepts frames of "
            f"at most {limit:,} bytes")


class Connection:
    """One end of a tacoma connection: frames, handshake and meet bookkeeping.

    `max_frame` is the largest frame this end accepts; the peer's limit, learned from its
    Hello, bounds what `send` lets out.
    """

    def __init__(self, role: Role, max_frame: int = DEFAULT_MAX_FRAME, software: str = "") -> None:
        self.role = role
        self.max_frame = max_frame
        self.software = software
        # Each direction moves through TRANSITIONS on its own.
        self.our_state = self.their_state = IDLE
        self.peer_hello: Hello | None = None
        # rid -> mode, for meets we sent and await a reply to / received and owe a reply to.
        self.awaiting: dict[int, str] = {}
        self.owed: dict[int, str] = {}
        self._buffer = bytearray()
        self._next_rid = 0

    # -- state
    @property
    def peer_max_frame(self) -> int:
        return self.peer_hello.max_frame if self.peer_hello else MAX_HELLO_FRAME

    @property
    def is_open(self) -> bool:
        return self.our_state == OPEN and self.their_state == OPEN

    def new_rid(self) -> int:
        """A request id not yet used by this end."""
        self._next_rid += 1
        return self._next_rid

    def hello(self) -> Hello:
        return Hello(PROTOCOL_VERSION, self.role, self.max_frame, self.software)

    # -- outgoing
    def send(self, event: Event) -> bytes:
        """The bytes that carry `event`; raises LocalProtocolError if it may not be sent now,
        LimitExceeded if it is larger than the peer accepts."""
        # The meet path: body_of and _book written out (each null meet sends two events).
        self._may_send(event)  # the books are checked as the event is booked, below
        try:
            body = encode(event)
        except (TypeError, ValueError) as exc:
            raise LocalProtocolError(f"cannot encode {type(event).__name__}: {exc}") from exc
        size = len(body)
        if size > self.peer_max_frame:
            _within(event, size, self.peer_max_frame)
        self._track(event, self.awaiting, self.owed, LocalProtocolError, commit=True)
        self.our_state = TRANSITIONS[self.our_state, type(event)]
        return size.to_bytes(_HEADER, "big") + body

    def check(self, event: Event) -> None:
        """Raise LocalProtocolError if `event` may not be sent now (what `send` checks before
        it encodes)."""
        self._may_send(event)
        self._track(event, self.awaiting, self.owed, LocalProtocolError, commit=False)

    def _may_send(self, event: Event) -> None:
        """LocalProtocolError unless this end may send an event of its kind now."""
        kind = type(event)
        if kind not in MAY_SEND[self.role]:
            raise LocalProtocolError(f"a {self.role.value} may not send {kind.__name__}")
        if (self.our_state, kind) not in TRANSITIONS:
            raise LocalProtocolError(f"cannot send {kind.__name__} in state {self.our_state}")
        if isinstance(event, Cancel) and event.rid not in self.awaiting:
            raise LocalProtocolError(f"Cancel for request id {event.rid}, which has no meet "
                                     "outstanding")

    def commit(self, event: Event, size: int) -> bytes:
        """Book `event`, whose body of `size` bytes `body_of` or `pieces_of` made (with this
        end's peer_max_frame), as sent: the frame's 4-byte header, to write just before the
        body. Checked again first (LocalProtocolError): between a check and a body made
        elsewhere, other events may have been sent."""
        self.check(event)
        return self._book(event, size)

    def _book(self, event: Event, size: int) -> bytes:
        """Book `event`, checked, as sent: its frame's header."""
        self._track(event, self.awaiting, self.owed, LocalProtocolError, commit=True)
        self.our_state = TRANSITIONS[self.our_state, type(event)]
        return size.to_bytes(_HEADER, "big")

    def start_meet(self, agent: str, briefcase: Briefcase, mode: MeetMode = "sync",
                   timeout: float | None = None, principal: str = "") -> tuple[int, bytes]:
        """Convenience: a Meet with a fresh rid, and its bytes."""
        rid = self.new_rid()
        return rid, self.send(Meet(rid, agent, briefcase, mode, timeout, principal))

    # -- incoming
    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the peer. (End of stream is the driver's business.)"""
        self._buffer += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet taken as events (an incomplete frame, once
        next_event said NEED_DATA)."""
        return len(self._buffer)

    def discard_received(self) -> None:
        """Let go of the bytes received and not taken (the connection is over): a frame that
        never ended can be tens of megabytes."""
        self._buffer = bytearray()

    def next_event(self) -> Event | _Need:
        """The next complete event from the peer, or NEED_DATA."""
        body = self.next_frame()
        if body is NEED_DATA:
            return NEED_DATA
        assert not isinstance(body, _Need)
        return self.take(decoded(body))

    def next_frame(self) -> bytes | bytearray | _Need:
        """The body of the next complete frame, not yet decoded, or NEED_DATA.

        With `take`, the two halves of next_event, for a driver that decodes a large
        body elsewhere (`decoded` is a pure function) and then hands what it returned to
        `take`; frames must be taken in order. A frame that is all that was received is
        handed over as it lies (no copy of a large frame), and the buffer starts anew.
        """
        if self.their_state == ERROR:
            raise RemoteProtocolError("connection already failed")
        buf = self._buffer
        if len(buf) < _HEADER:
            return NEED_DATA
        size = int.from_bytes(buf[:_HEADER], "big")
        limit = self.max_frame if self.their_state == OPEN else MAX_HELLO_FRAME
        if size > limit:
            self._fail(f"frame of {size:,} bytes exceeds the limit of {limit:,} bytes")
        if len(buf) < _HEADER + size:
            return NEED_DATA
        if len(buf) == _HEADER + size:
            self._buffer = bytearray()
            del buf[:_HEADER]  # from the front of a bytearray: no copy
            return buf
        with memoryview(buf) as view:
            body = bytes(view[_HEADER:_HEADER + size])
        del buf[:_HEADER + size]
        return body

    def take(self, event: Event | ValueError) -> Event:
        """Check a decoded frame (or its decoding error) against the protocol: the event,
        or RemoteProtocolError."""
        if self.their_state == ERROR:
            raise RemoteProtocolError("connection already failed")
        if isinstance(event, ValueError):
            self._fail(str(event))
        kind = type(event)
        if kind not in MAY_SEND[COUNTERPART[self.role]]:
            self._fail(f"a {COUNTERPART[self.role].value} may not send {kind.__name__}")
        new_state = TRANSITIONS.get((self.their_state, kind))
        if new_state is None:
            self._fail(f"unexpected {kind.__name__} in state {self.their_state}")
        if isinstance(event, Hello):
            self._check_hello(event)
        try:
            self._track(event, self.owed, self.awaiting, RemoteProtocolError)
        except RemoteProtocolError as exc:
            self._fail(str(exc))
        self.their_state = new_state
        return event

    def _check_hello(self, hello: Hello) -> None:
        if hello.version != PROTOCOL_VERSION:
            self._fail(f"peer speaks tacoma protocol version {hello.version}, "
                       f"this end speaks version {PROTOCOL_VERSION}; upgrade the older side")
        if hello.role != COUNTERPART[self.role]:
            self._fail(f"peer says it is a {hello.role.value}, expected a "
                       f"{COUNTERPART[self.role].value}")
        self.peer_hello = hello

    @staticmethod
    def _track(event: Event, requests: dict[int, str], replies: dict[int, str],
               error: type[Exception], commit: bool = True) -> None:
        """Book a Meet into `requests`, or a reply against the meets recorded in `replies`.

        With commit=False only check, so that an event that then fails to encode leaves
        the books as they were (the sender can still answer that rid another way).
        """
        if isinstance(event, Meet):
            if event.rid in requests:
                raise error(f"request id {event.rid} is already in use")
            if commit:
                requests[event.rid] = event.mode
        elif isinstance(event, Cancel):
            # A Cancel may cross its meet's reply in flight, so one for a rid already
            # answered is no fault; the meet stays booked until its reply arrives.
            pass
        elif isinstance(event, Accepted | Result | Failed):
            mode = replies.get(event.rid)
            if mode is None:
                raise error(f"{type(event).__name__} for request id {event.rid}, "
                            "which has no meet outstanding")
            if type(event) not in ENDS[mode]:
                raise error(f"{type(event).__name__} cannot answer a {mode} meet")
            if commit:
                del replies[event.rid]

    def _fail(self, why: str) -> NoReturn:
        self.their_state = ERROR
        raise RemoteProtocolError(why)

    def fail_bytes(self, why: str) -> bytes:
        """A best-effort Bye to send before closing after a protocol error."""
        body = encode(Bye(why[:1000]))
        self.our_state = CLOSED
        return len(body).to_bytes(_HEADER, "big") + body
