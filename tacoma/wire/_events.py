"""The events of the tacoma wire protocol, and the one codec they all share.

An event is a frozen, slotted dataclass that declares only its tag and its typed fields.
Each field's annotation names a *field type* (`FIELD_TYPES`: a request id, a bounded str,
a Role, a Briefcase, a meet mode, a timeout, ...) that says, once for every event using it,
what a value must be and how it goes on the wire. `@_event` reads a class's fields when the
class is made and writes its checks (`__post_init__`), `fields` and `build` from them, so
adding an event, or a field, means declaring it, not writing its checks again.

On the wire an event is one msgpack array `[tag, field, ...]`, its fields in declared order
(`encode`, `decode`; framing is the protocol's business, in `_protocol`). Every frame of
every meet passes through here, so the methods `@_event` writes are straight-line code, as
dataclasses writes `__init__`: no loop over the fields and no reflection per frame.

Annotations stay strings (PEP 563) and are never evaluated: the agent's worker imports this
module and typing costs it ~9 ms to import, so the names that annotate fields are looked up
in `FIELD_TYPES` as text, and the type aliases mypy reads exist only when type checking.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import operator
import re
import reprlib
from dataclasses import dataclass

import msgpack

from ._briefcase import Briefcase

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, Final, Literal, Self, TypeVar, dataclass_transform

    # What mypy sees of each field type; at run time these names only key FIELD_TYPES.
    Rid = int
    RidRef = int
    Version = int
    FrameLimit = int
    AgentName = str
    ShortText = str
    MeetId = str
    Papers = bytes
    LogLevel = str
    MeetMode = Literal["sync", "async", "ack", "go"]
    Timeout = float | None

    E = TypeVar("E", bound="Event")
else:
    def dataclass_transform(**_: object) -> Any:
        """Tells mypy that `_event` makes dataclasses; at run time there is nothing to do."""
        return lambda function: function

__all__ = [
    "EVENTS", "FIELD_TYPES", "LOG_LEVELS", "MODES", "PIECE_BYTES", "PIECE_ELEMENTS", "Accepted",
    "Bye", "Cancel", "Event", "Failed", "FieldType", "Hello", "Keep", "Log", "Meet", "Ready",
    "Result", "Role",
    "decode", "encode", "encode_in_pieces",
]

#: The largest request id: one msgpack int64, so every peer can hold it.
MAX_RID: Final = 2**63 - 1
#: The most bytes of a Meet's papers (a passport and the places' lines: trust._passport).
MAX_PAPERS: Final = 1 << 20

#: Meet modes, and what each asks of the peer:
#:   sync   run the agent (or, for a resident agent, deliver a request) and answer with the
#:          result (the resident's reply) when it ends;
#:   async  start the agent (or deliver a one-way message) and answer Accepted at once;
#:   ack    deliver a message to a resident agent and answer Result when it has taken it;
#:   go     a moving agent arrives: take it (answer Accepted) and run it as a hop of its trip
#:          (see the place's trips: the trip's home gets the final briefcase).
MODES: Final = ("sync", "async", "ack", "go")

#: The levels of an agent's Log line (a tuple, not a set: an unhashable value is just "no").
LOG_LEVELS: Final = ("debug", "info", "warning", "error")


class Role(enum.StrEnum):
    CLIENT = "client"
    PLACE = "place"
    HOST = "host"
    WORKER = "worker"


# ---------------------------------------------------------------------------- field types
class FieldType:
    """One type of event field: the check a value must pass, and its wire form.

    `expected` ends the sentence "Meet.rid must be ..."; `to_wire` and `from_wire` are None
    where a value goes on the wire as it is. `from_wire` raises TypeError or ValueError on
    what it cannot take; `check` then runs on what it made, as on any value built locally.
    """

    __slots__ = ("check", "expected", "from_wire", "to_wire")

    def __init__(self, expected: str, check: Callable[[Any], bool],
                 to_wire: Callable[[Any], Any] | None = None,
                 from_wire: Callable[[Any], Any] | None = None) -> None:
        self.expected = expected
        self.check = check
        self.to_wire = to_wire
        self.from_wire = from_wire

    def __repr__(self) -> str:
        return f"<FieldType: {self.expected}>"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# The checks run on every event built, so each is one expression: no helper calls, and
# isinstance against tuples rather than `int | float` (which makes a union at every call).
def _is_rid(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_RID


#: A meet id a client chooses: 8 to 64 letters, digits, "_" and "-" (or "": the place names
#: the meet). Place-made ids have a "." in them, so that no client can claim one.
_MEET_ID = re.compile(r"[A-Za-z0-9_-]{8,64}").fullmatch


def _is_meet_id(v: Any) -> bool:
    return v == "" or (isinstance(v, str) and _MEET_ID(v) is not None)


def _is_timeout(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                         and v > 0 and math.isfinite(v))


def _role_from_wire(value: object) -> Role:
    role = Role._value2member_map_.get(value) if isinstance(value, str) else None
    if role is None:  # reprlib: a peer's value may be huge or deeply nested
        raise TypeError(f"unknown role {reprlib.repr(value)}")
    return role  # type: ignore[return-value]  # the map holds only Role members


#: Every field type an event may declare, by the name its fields are annotated with.
FIELD_TYPES: Final[dict[str, FieldType]] = {
    "Rid": FieldType("an int from 0 to 2**63 - 1", _is_rid),
    # A reply or Cancel only names a rid; the connection's books, not the type, refuse one
    # that no meet has.
    "RidRef": FieldType("an int", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "Version": FieldType("an int >= 0",
                         lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    "FrameLimit": FieldType("an int >= 1024",
                            lambda v: isinstance(v, int) and not isinstance(v, bool)
                            and v >= 1024),
    "Role": FieldType("a Role", lambda v: isinstance(v, Role),
                      operator.attrgetter("value"), _role_from_wire),
    "AgentName": FieldType("a non-empty str of at most 1024 characters",
                           lambda v: isinstance(v, str) and 0 < len(v) <= 1024),
    "ShortText": FieldType("a short str", lambda v: isinstance(v, str) and len(v) <= 200),
    "MeetId": FieldType('"" or 8 to 64 letters, digits, _ and -', _is_meet_id),
    "str": FieldType("a str", lambda v: isinstance(v, str)),
    "Briefcase": FieldType("a Briefcase", lambda v: isinstance(v, Briefcase),
                           Briefcase.to_wire, Briefcase.from_wire),
    "MeetMode": FieldType("one of " + ", ".join(MODES), lambda v: v in MODES),
    "LogLevel": FieldType("debug, info, warning or error", lambda v: v in LOG_LEVELS),
    "Timeout": FieldType("None or a positive finite number", _is_timeout),
    "Papers": FieldType(f"bytes of at most {MAX_PAPERS:,}",
                        lambda v: isinstance(v, bytes) and len(v) <= MAX_PAPERS),
}


# --------------------------------------------------------------------------------- events
class Event:
    """A protocol event: a value, checked when built, that travels as `[tag, field, ...]`.

    Subclasses are frozen, slotted dataclasses made by `@_event`, which writes their
    `__post_init__` (the checks), `fields` and `build` from `wire_fields`.
    """

    __slots__ = ()
    tag: ClassVar[int] = 0
    #: Each field's name and type, in declared order: what follows the tag on the wire.
    wire_fields: ClassVar[tuple[tuple[str, FieldType], ...]] = ()
    #: The wire values of the trailing fields that have defaults: a frame may leave them
    #: out (a peer that does not use a newer optional field need not send it).
    wire_defaults: ClassVar[tuple[Any, ...]] = ()

    def __post_init__(self) -> None:
        """Check every field (raise TypeError, saying which and why); called by __init__.

        Declared here so that the dataclass's __init__ calls the one `@_event` writes.
        """
        raise NotImplementedError

    def fields(self) -> list[Any]:
        """The wire form of the fields, in declared order (what follows the tag)."""
        raise NotImplementedError

    @classmethod
    def build(cls, fields: list[Any]) -> Self:
        """The event whose wire fields are `fields`; TypeError or ValueError if malformed."""
        raise NotImplementedError


#: Every event class, by tag.
EVENTS: Final[dict[int, type[Event]]] = {}


@dataclass_transform(frozen_default=True)
def _event(cls: type[E]) -> type[E]:
    """Make `cls` a frozen, slotted dataclass, and write its codec from its fields, once.

    Every frame goes through `__post_init__`, `fields` and `build`, so they are not loops
    over `wire_fields` (measured 10-60% slower per event than the hand-written methods they
    replaced) but straight-line methods written from it, as dataclasses writes `__init__`.
    For Result they read:

        def __post_init__(self):
            if not check_0(self.rid): raise TypeError(complaint_0)
            if not check_1(self.briefcase): raise TypeError(complaint_1)
        def fields(self):
            return [self.rid, to_wire_1(self.briefcase)]
        def build(cls, values):
            v0, v1 = values
            return cls(v0, from_wire_1(v1))
    """
    if cls.tag in EVENTS or cls.tag <= 0:
        raise TypeError(f"{cls.__name__}.tag {cls.tag} is not a new positive tag")
    cls = dataclass(frozen=True, slots=True)(cls)
    wire_fields = []
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]  # a dataclass, just made
        kind = FIELD_TYPES.get(field.type)  # type: ignore[arg-type]  # a string (PEP 563)
        if kind is None:
            raise TypeError(f"{cls.__name__}.{field.name} is annotated {field.type!r}, which "
                            f"is no field type; use one of {', '.join(FIELD_TYPES)}")
        wire_fields.append((field.name, kind))
    cls.wire_fields = tuple(wire_fields)
    defaults: list[Any] = []
    for field, (_, kind) in zip(dataclasses.fields(cls), wire_fields,  # type: ignore
                                strict=True):
        if field.default is dataclasses.MISSING:
            defaults.clear()  # only a trailing run of defaulted fields may be left out
        else:
            defaults.append(kind.to_wire(field.default) if kind.to_wire else field.default)
    cls.wire_defaults = tuple(defaults)

    # Each field i is read as self.<name>, passed to check_i, and converted by to_wire_i on
    # the way out and from_wire_i on the way in where its type has them.
    namespace: dict[str, Any] = {}
    checks, values, built = [], [], []
    for i, (name, kind) in enumerate(wire_fields):
        namespace[f"check_{i}"] = kind.check
        namespace[f"complaint_{i}"] = f"{cls.__name__}.{name} must be {kind.expected}"
        checks.append(f"    if not check_{i}(self.{name}): raise TypeError(complaint_{i})")
        values.append(f"to_wire_{i}(self.{name})" if kind.to_wire else f"self.{name}")
        built.append(f"from_wire_{i}(v{i})" if kind.from_wire else f"v{i}")
        namespace[f"to_wire_{i}"] = kind.to_wire
        namespace[f"from_wire_{i}"] = kind.from_wire
    source = "\n".join([
        "def __post_init__(self):", *(checks or ["    pass"]),
        "def fields(self):",
        f"    return [{', '.join(values)}]",
        "def build(cls, values):",
        *(["    " + "".join(f"v{i}, " for i in range(len(wire_fields))) + "= values"]
          if wire_fields else []),
        f"    return cls({', '.join(built)})",
    ])
    # The source is written above from field names (identifiers) and fixed text only.
    exec(compile(source, f"<event {cls.__name__}>", "exec"), namespace)  # noqa: S102
    for method in ("__post_init__", "fields", "build"):
        function = namespace[method]
        function.__qualname__ = f"{cls.__name__}.{method}"
        setattr(cls, method, classmethod(function) if method == "build" else function)
    EVENTS[cls.tag] = cls
    return cls


@_event
class Hello(Event):
    """First frame in each direction: protocol version, role, largest frame accepted."""

    tag = 1
    version: Version
    role: Role
    max_frame: FrameLimit
    software: ShortText = ""


@_event
class Meet(Event):
    """Ask the peer to run `agent` with `briefcase`; `timeout` in seconds bounds the meet.

    `principal` is who the meet is made for: empty from a client (the place knows its
    peer's name from the peer's certificate), the launching identity's name when a place
    forwards an agent's meet or moves an agent to another place (honoured only from a peer
    whose certificate says it is a place, with that principal's passport in `papers`), and
    that name again from a place to the worker
    that runs the agent (the agent API's `principal`).

    `meet_id` is the id the client chose for the meet ("": the place makes one). Knowing it
    before any answer, a client that loses its connection can ask the place for the meet's
    outcome by id (`tacoma status`) instead of running it again; an async meet sent twice
    with the same id is taken once.

    `papers` (trust._passport) carry the agent's passport, signed by its principal, and the
    lines of the places that handed it on: a place names a principal other than its own
    only with that principal's passport.
    """

    tag = 2
    rid: Rid
    agent: AgentName
    briefcase: Briefcase
    mode: MeetMode = "sync"
    timeout: Timeout = None
    principal: ShortText = ""
    meet_id: MeetId = ""
    papers: Papers = b""


@_event
class Accepted(Event):
    """Reply to an async Meet: the place took it and runs it as `meet_id`."""

    tag = 3
    rid: RidRef
    meet_id: ShortText


@_event
class Result(Event):
    """Reply to a sync Meet: the agent ended and this is its briefcase."""

    tag = 4
    rid: RidRef
    briefcase: Briefcase


@_event
class Failed(Event):
    """Reply to a Meet that failed: an error kind (see _errors.KINDS), message and detail."""

    tag = 5
    rid: RidRef
    kind: str
    message: str
    detail: str = ""


@_event
class Log(Event):
    """A line for the place's log, from an agent."""

    tag = 6
    level: LogLevel
    message: str


@_event
class Bye(Event):
    """Last frame: the sender closes the connection, saying why."""

    tag = 7
    reason: str = ""


@_event
class Cancel(Event):
    """The sender no longer wants meet `rid`: the peer stops it and answers it Failed."""

    tag = 8
    rid: RidRef


@_event
class Ready(Event):
    """From a worker that served a meet and may serve another (a warm worker, see
    place.workers._warm): it has made itself clean and waits for the next Meet."""

    tag = 9


@_event
class Keep(Event):
    """To a worker, just before its Meet: if that meet ends well, the place keeps the
    worker warm for a later meet of the same principal and program (a program it met
    before), so the worker makes itself clean and says Ready. A worker that hears none
    ends after its meet."""

    tag = 10


# ---------------------------------------------------------------------------------- codec
#: A large body is coded a piece at a time, this many array elements or bytes per msgpack
#: call (see `encode` and `decode`): msgpack holds the GIL for the whole of a call, so one
#: call over a briefcase of millions of elements would stop every other thread, the event
#: loop's among them, for as long as it takes (half a second for 20,000,000 elements);
#: pieces this size take a few milliseconds each.
PIECE_ELEMENTS: Final = 1 << 15
PIECE_BYTES: Final = 1 << 18


def encode(event: Event) -> bytes:
    """The msgpack body that carries `event`; TypeError or ValueError if it cannot."""
    body: bytes = msgpack.packb([event.tag, *event.fields()], use_bin_type=True)
    return body


def encode_in_pieces(event: Event, piece: int = PIECE_ELEMENTS) -> list[bytes | memoryview]:
    """`encode(event)`, in pieces (joined end to end, they are its bytes), made `piece`
    array elements at a time: for a thread that encodes a large briefcase while an event
    loop runs beside it. Left in pieces, so that tens of megabytes are not copied once
    more to be joined."""
    fields = [event.tag, *event.fields()]
    pieces: list[bytes | memoryview] = []
    _pack(fields, pieces, piece, outer=True)
    return pieces


def _container_header(size: int, fix: int, wide: bytes, wider: bytes) -> bytes:
    """msgpack's header of an array or map of `size` items, as small as msgpack makes it."""
    if size < 16:
        return bytes((fix | size,))
    return wide + size.to_bytes(2, "big") if size < 1 << 16 else wider + size.to_bytes(4, "big")


def _pack(value: object, pieces: list[bytes | memoryview], piece: int,
          outer: bool = False) -> None:
    """Append to `pieces` what msgpack.packb makes of `value`: maps (the briefcase) and the
    event's `outer` array item by item, a long array (a folder) `piece` items at a time,
    anything else in one call."""
    if type(value) is dict:
        pieces.append(_container_header(len(value), 0x80, b"\xde", b"\xdf"))
        for key, item in value.items():
            pieces.append(msgpack.packb(key, use_bin_type=True))
            _pack(item, pieces, piece)
    elif type(value) is list and (outer or len(value) > piece):
        pieces.append(_container_header(len(value), 0x90, b"\xdc", b"\xdd"))
        if outer:
            for item in value:
                _pack(item, pieces, piece)
            return
        for start in range(0, len(value), piece):
            items = value[start:start + piece]
            # packb makes the items an array of their own: they follow its header.
            packed = msgpack.packb(items, use_bin_type=True)
            skip = len(_container_header(len(items), 0x90, b"\xdc", b"\xdd"))
            pieces.append(memoryview(packed)[skip:])
    else:
        pieces.append(msgpack.packb(value, use_bin_type=True))


def _reject_ext(code: int, data: bytes) -> object:
    raise ValueError(f"msgpack extension type {code} is not allowed")


def _unpack_in_pieces(body: bytes | bytearray, piece: int) -> object:
    """msgpack.unpackb(body) (with decode's options), fed `piece` bytes at a time: msgpack's
    Unpacker takes up a value where the last piece left it."""
    unpacker = msgpack.Unpacker(raw=False, use_list=True, strict_map_key=True,
                                ext_hook=_reject_ext, timestamp=0,
                                max_buffer_size=len(body))
    view = memoryview(body)
    for start in range(0, len(body), piece):
        unpacker.feed(view[start:start + piece])
        try:
            value = unpacker.unpack()
        except msgpack.OutOfData:
            continue
        if unpacker.tell() != len(body):
            raise ValueError(f"{len(body) - unpacker.tell():,} bytes after the event")
        return value
    raise ValueError("the frame ends before the event does")


def decode(body: bytes | bytearray, piece: int = PIECE_BYTES) -> Event:
    """The event a msgpack body carries; ValueError, saying what is wrong, for anything else.

    msgpack decodes with every extension type refused, so only nil, bool, int, float, str,
    bytes, arrays and maps can arrive (the one extension msgpack decodes itself, Timestamp,
    is a type no field accepts); the event's class then checks each field. A body over
    `piece` bytes is decoded that many at a time (see PIECE_BYTES: it is decoded on a
    thread).
    """
    try:
        value = (_unpack_in_pieces(body, piece) if len(body) > piece else
                 msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=True,
                                 ext_hook=_reject_ext, timestamp=0))
    except Exception as exc:  # noqa: BLE001 - msgpack raises many unrelated types on garbage
        raise ValueError(f"undecodable frame ({type(exc).__name__}: {exc})") from None
    if not isinstance(value, list) or not value or not _is_int(value[0]):
        raise ValueError("a frame must be an array starting with an event tag")
    cls = EVENTS.get(value[0])
    if cls is None:
        raise ValueError(f"unknown event tag {value[0]!r}")
    fields = value[1:]
    missing = len(cls.wire_fields) - len(fields)
    if missing:
        if not 0 < missing <= len(cls.wire_defaults):
            least = len(cls.wire_fields) - len(cls.wire_defaults)
            raise ValueError(f"malformed {cls.__name__}: {len(fields)} fields, expected "
                             f"{least} to {len(cls.wire_fields)}")
        fields += cls.wire_defaults[-missing:]
    try:
        return cls.build(fields)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"malformed {cls.__name__}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever a peer's frame makes a check raise
        # (RecursionError on a deeply nested value, say) is the peer's protocol error.
        raise ValueError(f"malformed {cls.__name__} ({type(exc).__name__})") from None
