"""Drive the tacoma protocol core in memory: a connected pair, and frames made by hand.

For tests, and for authors of an agent channel in another language (h11's tests/helpers.py
is the model). `Pair` joins two real `Connection`s: whatever one end's `send` returns is fed
to the other end's `receive_data`, and the events that come out are collected, so a
conversation runs whole with nothing mocked and no socket, deterministically. Frames a
tacoma sender would refuse to write (a stray reply, a forbidden event, garbage) are made
with `frame` and `raw`, straight from the documented wire format: a 4-byte big-endian
length, then one msgpack array `[tag, field, ...]`.

Standard library and msgpack only, like the protocol core it drives: no asyncio.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgpack

from .wire._events import encode
from .wire._protocol import (
    COUNTERPART,
    DEFAULT_MAX_FRAME,
    NEED_DATA,
    PROTOCOL_VERSION,
    Connection,
    Event,
    Hello,
    Role,
)

__all__ = [
    "Pair", "feed_in_pieces", "frame", "frame_body", "get_all_events", "hello_from", "raw",
    "receive_and_get",
]


# ------------------------------------------------------------------------ frames by hand
def frame_body(body: bytes) -> bytes:
    """A frame carrying `body` as is."""
    return len(body).to_bytes(4, "big") + body


def frame(*items: Any) -> bytes:
    """A frame carrying the msgpack array `items`, written by hand."""
    return frame_body(msgpack.packb(list(items), use_bin_type=True))


def raw(event: Event) -> bytes:
    """The frame for `event`, bypassing every check a sending Connection would make."""
    return frame_body(encode(event))


def hello_from(role: Role, version: int = PROTOCOL_VERSION,
               max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """The Hello frame a peer playing `role` opens with (any version, for mismatches)."""
    return raw(Hello(version, role, max_frame))


# ---------------------------------------------------------------------- reading events
def get_all_events(conn: Connection) -> list[Event]:
    """Every complete event `conn` can produce now."""
    got: list[Event] = []
    while True:
        event = conn.next_event()
        if event is NEED_DATA:
            return got
        assert isinstance(event, Event)  # next_event returns an Event or NEED_DATA
        got.append(event)


def receive_and_get(conn: Connection, data: bytes) -> list[Event]:
    """Feed `data` to `conn`, and return every event that completes."""
    conn.receive_data(data)
    return get_all_events(conn)


def feed_in_pieces(conn: Connection, data: bytes, cuts: Iterable[int]) -> list[Event]:
    """Feed `data` split at `cuts`, collecting events after every piece."""
    got: list[Event] = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        got += receive_and_get(conn, data[start:cut])
        start = cut
    return got


# ------------------------------------------------------------------------------- a pair
class Pair:
    """Two Connections joined in memory: `pair[role]` is the end playing `role`.

    `role` and its counterpart (client and place, or host and worker) each get an end;
    `max_frames` sets an end's largest accepted frame. With `handshake` both ends have said
    Hello, so meets can flow at once.
    """

    def __init__(self, role: Role = Role.CLIENT, *, max_frames: dict[Role, int] | None = None,
                 handshake: bool = True) -> None:
        limits = max_frames or {}
        self.ends = {r: Connection(r, max_frame=limits.get(r, DEFAULT_MAX_FRAME))
                     for r in (role, COUNTERPART[role])}
        if handshake:
            for r in self.ends:
                self.send(r, self[r].hello())

    def __getitem__(self, role: Role) -> Connection:
        return self.ends[role]

    def peer(self, role: Role) -> Connection:
        """The end that `role`'s end talks to."""
        return self.ends[COUNTERPART[role]]

    def send(self, role: Role, *events: Event, expect: list[Event] | None = None) -> list[Event]:
        """Send `events` from `role`'s end, deliver them, and check what the peer got.

        The peer must get exactly `expect` (by default, the events sent); AssertionError
        otherwise, so this works in any test runner.
        """
        data = b"".join(self[role].send(event) for event in events)
        got = receive_and_get(self.peer(role), data)
        wanted = list(events) if expect is None else expect
        if got != wanted:
            raise AssertionError(f"the {COUNTERPART[role].value} got {got!r}, "
                                 f"expected {wanted!r}")
        return got

    def deliver(self, role: Role, data: bytes) -> list[Event]:
        """Hand-made bytes from `role`'s side to its peer."""
        return receive_and_get(self.peer(role), data)
