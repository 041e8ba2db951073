"""The tacoma wire protocol, as a sans-IO state machine.

Nothing here does I/O or imports asyncio (a test checks): bytes go in through
`Connection.receive_data`, events come out of `Connection.next_event`, and `Connection.send`
turns an event into the bytes to write. The asyncio drivers (`_transport`) and the blocking
agent-side channel (`agent._channel`) are thin loops around it, so the protocol is tested whole
with an in-memory pair.

Framing: a 4-byte big-endian length, then one msgpack array `[tag, field, ...]`. Length
prefixes let a receiver refuse an oversized frame from its header, before buffering it.
msgpack is decoded with every extension type refused, so only nil, bool, int, float, str,
bytes, arrays and maps can arrive (the one extension msgpack decodes itself, Timestamp, is
not a type any event field accepts); each event then checks its own fields and their
number. Never pickle.

One connection carries many concurrent meets: every Meet has a request id (rid) chosen by its
sender, and exactly one reply ends it: Result or Failed for a sync meet, Accepted or Failed
for an async one; two more modes serve messages and moving agents (see `MODES`). The
connection tracks which rids each side owes, so a stray or duplicate reply is a protocol
error rather than a confused caller.

Roles: a *client* meets a *place*; on the channel between a place and an agent's worker
process the place is the *host* and the agent is the *worker*. A worker can also send Meets
to its host: that is how an agent meets other agents (the primitive for moving and
messaging). What each role may send is data, in `MAY_SEND`; the per-direction states and
their transitions are data, in `TRANSITIONS`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass

import msgpack

from ._briefcase import Briefcase
from ._errors import LimitExceeded, LocalProtocolError, RemoteProtocolError

# typing costs a worker ~9 ms to import; annotations are strings (PEP 563) anyway.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final, Literal, NoReturn

    MeetMode = Literal["sync", "async", "ack", "go"]

__all__ = [
    "DEFAULT_MAX_FRAME",
    "NEED_DATA",
    "PROTOCOL_VERSION",
    "Accepted",
    "Bye",
    "Cancel",
    "Connection",
    "Event",
    "Failed",
    "Hello",
    "Log",
    "Meet",
    "Result",
    "Role",
]

#: Bumped on any incompatible change to framing or events; peers must agree exactly.
PROTOCOL_VERSION: Final = 2

#: Largest frame accepted unless configured otherwise. A briefcase is held whole in memory on
#: both sides (and once more in the worker), so this bounds what one meet can cost a place;
#: 64 MiB fits photos and data sets of the size agents carry, while a few concurrent meets
#: still fit in a small machine's memory.
DEFAULT_MAX_FRAME: Final = 64 * 1024 * 1024

#: Frames at the start of a connection, before both sides said Hello, are tiny; a peer that
#: sends a large one first is not speaking tacoma (an HTTP client, say).
MAX_HELLO_FRAME: Final = 4096

_HEADER = 4
_MAX_RID = 2**63 - 1

#: Meet modes, and what each asks of the peer:
#:   sync   run the agent (or, for a resident agent, deliver a request) and answer with the
#:          result (the resident's reply) when it ends;
#:   async  start the agent (or deliver a one-way message) and answer Accepted at once;
#:   ack    deliver a message to a resident agent and answer Result when it has taken it;
#:   go     a moving agent arrives: take it (answer Accepted) and run it as a hop of its trip
#:          (see _place: the trip's home gets the final briefcase).
MODES: Final = ("sync", "async", "ack", "go")

class Role(enum.StrEnum):
    CLIENT = "client"
    PLACE = "place"
    HOST = "host"
    WORKER = "worker"


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


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise TypeError(what)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --------------------------------------------------------------------------------- events
@dataclass(frozen=True, slots=True)
class Event:
    tag = 0

    def fields(self) -> list[Any]:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Hello(Event):
    """First frame in each direction: protocol version, role, largest frame accepted."""

    tag = 1
    version: int
    role: Role
    max_frame: int
    software: str = ""

    def __post_init__(self) -> None:
        _check(_is_int(self.version) and self.version >= 0, "Hello.version must be an int >= 0")
        _check(isinstance(self.role, Role), "Hello.role must be a Role")
        _check(_is_int(self.max_frame) and self.max_frame >= 1024,
               "Hello.max_frame must be an int >= 1024")
        _check(isinstance(self.software, str) and len(self.software) <= 200,
               "Hello.software must be a short str")

    def fields(self) -> list[Any]:
        return [self.version, self.role.value, self.max_frame, self.software]

    @classmethod
    def build(cls, v: list[Any]) -> Hello:
        version, role, max_frame, software = v
        _check(isinstance(role, str) and role in Role._value2member_map_,
               f"unknown role {role!r}")
        return cls(version, Role(role), max_frame, software)


@dataclass(frozen=True, slots=True)
class Meet(Event):
    """Ask the peer to run `agent` with `briefcase`; `timeout` in seconds bounds the meet."""

    tag = 2
    rid: int
    agent: str
    briefcase: Briefcase
    mode: MeetMode = "sync"
    timeout: float | None = None

    def __post_init__(self) -> None:
        _check(_is_int(self.rid) and 0 <= self.rid <= _MAX_RID, "Meet.rid must be an int >= 0")
        _check(isinstance(self.agent, str) and 0 < len(self.agent) <= 1024,
               "Meet.agent must be a non-empty str of at most 1024 characters")
        _check(isinstance(self.briefcase, Briefcase), "Meet.briefcase must be a Briefcase")
        _check(self.mode in MODES, "Meet.mode must be one of " + ", ".join(MODES))
        _check(self.timeout is None
               or (isinstance(self.timeout, int | float) and not isinstance(self.timeout, bool)
                   and self.timeout > 0 and math.isfinite(self.timeout)),
               "Meet.timeout must be None or a positive finite number")

    def fields(self) -> list[Any]:
        return [self.rid, self.agent, self.briefcase.to_wire(), self.mode, self.timeout]

    @classmethod
    def build(cls, v: list[Any]) -> Meet:
        rid, agent, bc, mode, timeout = v
        return cls(rid, agent, Briefcase.from_wire(bc), mode, timeout)


@dataclass(frozen=True, slots=True)
class Accepted(Event):
    """Reply to an async Meet: the place took it and runs it as `meet_id`."""

    tag = 3
    rid: int
    meet_id: str

    def __post_init__(self) -> None:
        _check(_is_int(self.rid), "Accepted.rid must be an int")
        _check(isinstance(self.meet_id, str) and len(self.meet_id) <= 200,
               "Accepted.meet_id must be a short str")

    def fields(self) -> list[Any]:
        return [self.rid, self.meet_id]

    @classmethod
    def build(cls, v: list[Any]) -> Accepted:
        return cls(*v)


@dataclass(frozen=True, slots=True)
class Result(Event):
    """Reply to a sync Meet: the agent ended and this is its briefcase."""

    tag = 4
    rid: int
    briefcase: Briefcase

    def __post_init__(self) -> None:
        _check(_is_int(self.rid), "Result.rid must be an int")
        _check(isinstance(self.briefcase, Briefcase), "Result.briefcase must be a Briefcase")

    def fields(self) -> list[Any]:
        return [self.rid, self.briefcase.to_wire()]

    @classmethod
    def build(cls, v: list[Any]) -> Result:
        rid, bc = v
        return cls(rid, Briefcase.from_wire(bc))


@dataclass(frozen=True, slots=True)
class Failed(Event):
    """Reply to a Meet that failed: an error kind (see _errors.KINDS), message and detail."""

    tag = 5
    rid: int
    kind: str
    message: str
    detail: str = ""

    def __post_init__(self) -> None:
        _check(_is_int(self.rid), "Failed.rid must be an int")
        for name in ("kind", "message", "detail"):
            _check(isinstance(getattr(self, name), str), f"Failed.{name} must be a str")

    def fields(self) -> list[Any]:
        return [self.rid, self.kind, self.message, self.detail]

    @classmethod
    def build(cls, v: list[Any]) -> Failed:
        return cls(*v)


@dataclass(frozen=True, slots=True)
class Log(Event):
    """A line for the place's log, from an agent."""

    tag = 6
    level: str
    message: str

    def __post_init__(self) -> None:
        _check(self.level in ("debug", "info", "warning", "error"),
               "Log.level must be debug, info, warning or error")
        _check(isinstance(self.message, str), "Log.message must be a str")

    def fields(self) -> list[Any]:
        return [self.level, self.message]

    @classmethod
    def build(cls, v: list[Any]) -> Log:
        return cls(*v)


@dataclass(frozen=True, slots=True)
class Cancel(Event):
    """The sender no longer wants meet `rid`: the peer stops it and answers it Failed."""

    tag = 8
    rid: int

    def __post_init__(self) -> None:
        _check(_is_int(self.rid), "Cancel.rid must be an int")

    def fields(self) -> list[Any]:
        return [self.rid]

    @classmethod
    def build(cls, v: list[Any]) -> Cancel:
        return cls(*v)


@dataclass(frozen=True, slots=True)
class Bye(Event):
    """Last frame: the sender closes the connection, saying why."""

    tag = 7
    reason: str = ""

    def __post_init__(self) -> None:
        _check(isinstance(self.reason, str), "Bye.reason must be a str")

    def fields(self) -> list[Any]:
        return [self.reason]

    @classmethod
    def build(cls, v: list[Any]) -> Bye:
        return cls(*v)


_EVENTS: Final[dict[int, Any]] = {
    cls.tag: cls for cls in (Hello, Meet, Accepted, Result, Failed, Log, Cancel, Bye)
}

# ----------------------------------------------------------------------- state, as data
#: Each direction of a connection moves IDLE -> OPEN (Hello) -> CLOSED (Bye).
IDLE, OPEN, CLOSED, ERROR = "IDLE", "OPEN", "CLOSED", "ERROR"

TRANSITIONS: Final[dict[tuple[str, type[Event]], str]] = {
    (IDLE, Hello): OPEN,
    (IDLE, Bye): CLOSED,  # refusing a connection before saying hello
    **{(OPEN, cls): OPEN for cls in (Meet, Accepted, Result, Failed, Log, Cancel)},
    (OPEN, Bye): CLOSED,
}

MAY_SEND: Final[dict[Role, frozenset[type[Event]]]] = {
    Role.CLIENT: frozenset({Hello, Meet, Cancel, Bye}),
    Role.PLACE: frozenset({Hello, Accepted, Result, Failed, Bye}),
    Role.HOST: frozenset({Hello, Meet, Accepted, Result, Failed, Bye}),
    Role.WORKER: frozenset({Hello, Meet, Result, Failed, Log, Bye}),
}

#: Which replies end a meet of each mode.
ENDS: Final[dict[str, frozenset[type[Event]]]] = {
    "sync": frozenset({Result, Failed}),
    "async": frozenset({Accepted, Failed}),
    "ack": frozenset({Result, Failed}),
    "go": frozenset({Accepted, Failed}),
}


def _reject_ext(code: int, data: bytes) -> object:
    raise ValueError(f"msgpack extension type {code} is not allowed")


class Connection:
    """One end of a tacoma connection: frames, handshake and meet bookkeeping.

    `max_frame` is the largest frame this end accepts; the peer's limit, learned from its
    Hello, bounds what `send` lets out.
    """

    def __init__(self, role: Role, max_frame: int = DEFAULT_MAX_FRAME, software: str = "") -> None:
        self.role = role
        self.max_frame = max_frame
        self.software = software
        self.our_state = IDLE
        self.their_state = IDLE
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
        """The bytes that carry `event`; raises LocalProtocolError if it may not be sent now."""
        kind = type(event)
        if kind not in MAY_SEND[self.role]:
            raise LocalProtocolError(f"a {self.role.value} may not send {kind.__name__}")
        new_state = TRANSITIONS.get((self.our_state, kind))
        if new_state is None:
            raise LocalProtocolError(f"cannot send {kind.__name__} in state {self.our_state}")
        if isinstance(event, Cancel) and event.rid not in self.awaiting:
            raise LocalProtocolError(f"Cancel for request id {event.rid}, which has no meet "
                                     "outstanding")
        self._track(event, self.awaiting, self.owed, LocalProtocolError, commit=False)
        try:
            body: bytes = msgpack.packb([event.tag, *event.fields()], use_bin_type=True)
        except (TypeError, ValueError) as exc:
            raise LocalProtocolError(f"cannot encode {kind.__name__}: {exc}") from exc
        limit = self.peer_max_frame
        if len(body) > limit:
            what = kind.__name__
            briefcase = getattr(event, "briefcase", None)
            if isinstance(briefcase, Briefcase) and briefcase:
                name = max(briefcase, key=lambda n: sum(len(e) for e in briefcase[n]))
                size = sum(len(e) for e in briefcase[name])
                what = f"the briefcase (largest folder {name}: {size:,} bytes)"
            raise LimitExceeded(
                f"{what} is {len(body):,} bytes encoded; the peer accepts frames of "
                f"at most {limit:,} bytes")
        self._track(event, self.awaiting, self.owed, LocalProtocolError, commit=True)
        self.our_state = new_state
        return len(body).to_bytes(_HEADER, "big") + body

    def start_meet(self, agent: str, briefcase: Briefcase, mode: MeetMode = "sync",
                   timeout: float | None = None) -> tuple[int, bytes]:
        """Convenience: a Meet with a fresh rid, and its bytes."""
        rid = self.new_rid()
        return rid, self.send(Meet(rid, agent, briefcase, mode, timeout))

    # -- incoming
    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the peer. (End of stream is the driver's business.)"""
        self._buffer += data

    def next_event(self) -> Event | _Need:
        """The next complete event from the peer, or NEED_DATA."""
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
        body = bytes(buf[_HEADER:_HEADER + size])
        del buf[:_HEADER + size]
        return self._decode(body)

    def _decode(self, body: bytes) -> Event:
        try:
            value = msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=True,
                                    ext_hook=_reject_ext, timestamp=0)
        except Exception as exc:  # noqa: BLE001 - msgpack raises many unrelated types on garbage
            self._fail(f"undecodable frame ({type(exc).__name__}: {exc})")
        if not isinstance(value, list) or not value or not _is_int(value[0]):
            self._fail("a frame must be an array starting with an event tag")
        cls = _EVENTS.get(value[0])
        if cls is None:
            self._fail(f"unknown event tag {value[0]!r}")
        arity = len(dataclasses.fields(cls))
        if len(value) - 1 != arity:
            self._fail(f"malformed {cls.__name__}: {len(value) - 1} fields, expected {arity}")
        try:
            event: Event = cls.build(value[1:])
        except (TypeError, ValueError) as exc:
            self._fail(f"malformed {cls.__name__}: {exc}")
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
        body: bytes = msgpack.packb([Bye.tag, why[:1000]], use_bin_type=True)
        self.our_state = CLOSED
        return len(body).to_bytes(_HEADER, "big") + body
