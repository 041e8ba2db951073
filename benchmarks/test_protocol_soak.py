"""A soak of the protocol core: a million hostile frames, and nothing but protocol errors.

Every byte a place reads from a peer goes through `tacoma.wire._protocol.Connection`; any
exception other than RemoteProtocolError escaping it would be a traceback in the place's
log and a connection left without a Bye (issue 13 found one: a deeply nested Hello). The
unit tests fuzz it with hypothesis (tests/test_protocol.py); this runs far more frames than
a test run can afford, from a seeded generator, and reports how many frames a second the
decoder rejects or accepts. It is not part of CI (`testpaths = tests`).

The frames: real events of every kind, msgpack values of every type (nil, bool, ints at
the edges, floats, str, bin, ext, arrays and maps, nested up to past msgpack's own depth
limit) in every field position, wrong field counts and tags, and real frames with bytes
flipped, cut or inserted. Each is fed after a client's Hello to a fresh place-side
Connection, whole or in two pieces.

    TACOMA_SOAK_FRAMES=100000 python -m pytest benchmarks/test_protocol_soak.py -q
"""

from __future__ import annotations

import os
import random
import struct
import traceback
from typing import Any

import msgpack
from tacoma.wire._briefcase import Briefcase
from tacoma.wire._errors import RemoteProtocolError
from tacoma.wire._events import Accepted, Bye, Cancel, Failed, Hello, Log, Meet, Result
from tacoma.wire._protocol import NEED_DATA, PROTOCOL_VERSION, Connection, Role

#: Frames per run (environment variable TACOMA_SOAK_FRAMES).
FRAMES = int(os.environ.get("TACOMA_SOAK_FRAMES", 10**6))
SEED = 12

TEMPLATES = [Hello(PROTOCOL_VERSION, Role.CLIENT, 2**20, "x"),
             Meet(1, "ag_echo", Briefcase(X=[b"1"]), "sync", None, ""), Accepted(1, "id"),
             Result(1, Briefcase()), Failed(1, "agent-failed", "m", ""), Log("info", "x"),
             Bye("x"), Cancel(1)]
CLIENT_HELLO = Connection(Role.CLIENT).send(Hello(PROTOCOL_VERSION, Role.CLIENT, 2**20, "x"))


def _value(rng: random.Random, depth: int = 0) -> bytes:
    """One msgpack value, as bytes (built by hand where the packer would refuse it)."""
    kind = rng.randrange(14)
    if kind == 0:
        return b"\xc0"  # nil
    if kind == 1:
        return rng.choice([b"\xc2", b"\xc3"])
    if kind == 2:
        return msgpack.packb(rng.choice([0, 1, -1, 2**63 - 1, 2**64 - 1, -(2**63), 2**31,
                                         PROTOCOL_VERSION, 1024]))
    if kind == 3:
        return b"\xcb" + struct.pack(">d", rng.choice([0.0, -1.0, float("inf"),
                                                       float("nan"), 1e308, 0.001]))
    if kind == 4:
        return msgpack.packb(rng.choice(["", "client", "place", "sync", "async", "info",
                                         "ag_echo", "x" * rng.randrange(300)]))
    if kind == 5:
        return msgpack.packb(bytes(rng.randrange(256) for _ in range(rng.randrange(20))),
                             use_bin_type=True)
    if kind == 6:
        return b"\xd4" + bytes([rng.randrange(256), rng.randrange(256)])  # fixext 1
    if kind == 7:
        return b"\xd6\xff" + os.urandom(4)  # a Timestamp
    if kind == 8:
        return b"\x91" * rng.choice([1, 10, 500, 990, 1020, 3000]) + b"\xc0"  # nested
    if kind == 9 and depth < 3:
        items = [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
        return bytes([0x90 | len(items)]) + b"".join(items)
    if kind == 10 and depth < 3:
        pairs = [_value(rng, depth + 1) + _value(rng, depth + 1)
                 for _ in range(rng.randrange(3))]
        return bytes([0x80 | len(pairs)]) + b"".join(pairs)
    if kind == 11:
        return b"\xdd" + struct.pack(">I", rng.choice([0, 1, 2**31]))  # array32, short
    if kind == 12:
        return msgpack.packb({"X": [b"1"], "CODE": [b"pass"]}, use_bin_type=True)
    return os.urandom(rng.randrange(1, 8))  # not a value at all, or several


def _frame(rng: random.Random) -> bytes:
    template = rng.choice(TEMPLATES)
    fields = [msgpack.packb(v, use_bin_type=True) for v in template.fields()]
    shape = rng.randrange(5)
    if shape == 0:  # a real event
        body = msgpack.packb([template.tag, *template.fields()], use_bin_type=True)
    elif shape == 1:  # one field replaced
        if fields:
            fields[rng.randrange(len(fields))] = _value(rng)
        body = bytes([0x90 | (len(fields) + 1)]) + msgpack.packb(template.tag) + b"".join(
            fields)
    elif shape == 2:  # a field more or less, or another tag
        count = max(0, len(fields) + rng.choice([-1, 1]))
        fields = [*fields, _value(rng)][:count]
        tag = rng.choice([template.tag, 0, 9, -1, 2**40])
        body = bytes([0x90 | (count + 1)]) + msgpack.packb(tag) + b"".join(fields)
    elif shape == 3:  # any value at all
        body = _value(rng)
    else:  # a real frame, damaged
        body = bytearray(msgpack.packb([template.tag, *template.fields()], use_bin_type=True))
        for _ in range(rng.randrange(1, 4)):
            where = rng.randrange(len(body))
            action = rng.randrange(3)
            if action == 0:
                body[where] = rng.randrange(256)
            elif action == 1:
                del body[where:]
                if not body:
                    body = bytearray(b"\xc0")
            else:
                body[where:where] = os.urandom(rng.randrange(1, 4))
        body = bytes(body)
    return len(body).to_bytes(4, "big") + body


def _feed(data: bytes, cut: int) -> str:
    """Feed one frame after a Hello; "event", "error" (RemoteProtocolError) or "need"."""
    conn = Connection(Role.PLACE)
    outcome = "need"
    for piece in (CLIENT_HELLO + data[:cut], data[cut:]):
        conn.receive_data(piece)
        while True:
            try:
                event = conn.next_event()
            except RemoteProtocolError:
                return "error"
            if event is NEED_DATA:
                break
            outcome = "event"
    return outcome


def test_a_million_hostile_frames_raise_only_protocol_errors(benchmark: Any,
                                                            summary: Any) -> None:
    rng = random.Random(SEED)  # noqa: S311 - a reproducible soak, not a secret
    frames = [_frame(rng) for _ in range(min(FRAMES, 20_000))]  # reused, cut differently
    counts = {"event": 0, "error": 0, "need": 0}
    escaped: list[str] = []

    def soak() -> None:
        for i in range(FRAMES):
            data = frames[i % len(frames)]
            try:
                counts[_feed(data, rng.randrange(len(data) + 1))] += 1
            except Exception:  # noqa: BLE001 - what the soak is looking for
                if len(escaped) < 5:
                    escaped.append(traceback.format_exc())
                counts.setdefault("escaped", 0)
                counts["escaped"] += 1

    benchmark.pedantic(soak, rounds=1, iterations=1)
    assert not escaped, "exceptions escaped the protocol core:\n" + "\n".join(escaped)
    assert sum(counts.values()) == FRAMES
    seconds = benchmark.stats.stats.median if benchmark.stats else 0
    benchmark.extra_info.update(measures=f"{FRAMES:,} hostile frames fed to a place-side "
                                f"Connection after a Hello", frames=FRAMES, seed=SEED,
                                **counts)
    if seconds:
        benchmark.extra_info["frames_per_s"] = round(FRAMES / seconds)
    summary(f"{FRAMES:,} frames: {counts['event']:,} events, {counts['error']:,} protocol "
            f"errors, {counts['need']:,} incomplete, 0 escaped"
            + (f" ({FRAMES / seconds:,.0f} frames/s)" if seconds else ""))
