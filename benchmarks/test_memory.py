"""What bulk load leaves behind in a place, and whom one large briefcase holds up.

Three loads, each at a place of its own (started with `tacoma place`, as in use):

- many TLS connections: CONNECTIONS opened and closed, CONNECTIONS_AT_ONCE at a time, one
  ag_echo meet on each; the place's VmRSS before, straight after, and after SETTLE_SECONDS;
- unfinished large frames: UNFINISHED connections that each send all but the last byte of a
  FRAME_BYTES frame, then are dropped; the place's VmRSS before, at its peak (sampled while
  they send), and FIVE_SECONDS after they were dropped;
- one large briefcase: an ag_echo meet whose folder holds LARGE_ELEMENTS one-byte elements,
  sent by another process, while this one measures how long a new client (a new connection
  and one ag_echo) waits, over and over, until the large echo is back.

Fixed waits here are the measurement itself (memory a settle time after a load), never a
wait for something to happen. VmRSS is read from /proc/PID/status. Nothing here asserts a
number: each benchmark checks that it did its work, and reports in extra_info and in the
summary printed at the end of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest
import tacoma
from tacoma import Briefcase
from tacoma.client._client import PlaceClient
from tacoma.client._identity import Credentials
from tacoma.wire._protocol import PROTOCOL_VERSION

from _harness import ServerProcess, rss_kib, start_place

Summary = Callable[[str], None]

#: The many-connections load.
CONNECTIONS = 20_000
CONNECTIONS_AT_ONCE = 48
WARMUP_CONNECTIONS = 480
SETTLE_SECONDS = 3.0
#: The unfinished-frames load: the place's --max-briefcase allows such a frame, and its
#: default --max-receiving (256 MiB) holds four of them at once.
UNFINISHED = 8
FRAME_BYTES = 60_000_000
MAX_BRIEFCASE = "64M"
FIVE_SECONDS = 5.0
#: How often the place's VmRSS is read while the frames arrive, and for how long it must
#: not rise for the peak to be over.
SAMPLE_SECONDS = 0.05
STABLE_SECONDS = 1.5
#: The large-briefcase load, and the longest a new client should wait beside it.
LARGE_ELEMENTS = 20_000_000
GOAL_SECONDS = 0.1
#: The other process: it meets ag_echo with the large folder and checks what came back.
LARGE_CLIENT = """
import sys, tacoma
address = sys.argv[1]
elements = [b"x"] * int(sys.argv[2])
print("sending", flush=True)
result = tacoma.meet(f"ag_echo@{address}", {"MANY": elements}, timeout=600)
assert len(result.folder("MANY")) == len(elements), len(result.folder("MANY"))
print("done", flush=True)
"""
SMALL = Briefcase(OK=[b"1"])


@pytest.fixture
def large_frame_place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A place whose --max-briefcase allows a FRAME_BYTES frame."""
    server = start_place(tmp_path_factory.mktemp("large_frame_place") / "state",
                         "--max-briefcase", MAX_BRIEFCASE)
    try:
        yield server
    finally:
        server.stop_checked()


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


async def _connect_meet_close(address: str) -> None:
    """A new connection, one ag_echo on it, and its close, until the connection is gone."""
    client = await PlaceClient.connect(address)
    try:
        assert await client.meet("ag_echo", SMALL) == SMALL
    finally:
        client.close()
        if client.channel is not None:
            await client.channel.closed


async def _connections(address: str, count: int) -> None:
    """`count` connections opened and closed, CONNECTIONS_AT_ONCE at a time."""
    left = iter(range(count))

    async def worker() -> None:
        for _ in left:
            await _connect_meet_close(address)

    await asyncio.gather(*(worker() for _ in range(CONNECTIONS_AT_ONCE)))


def test_place_memory_over_many_tls_connections(benchmark: Any,
                                                loop: asyncio.AbstractEventLoop,
                                                fresh_place: ServerProcess,
                                                summary: Summary) -> None:
    """The place's VmRSS around CONNECTIONS TLS connections, CONNECTIONS_AT_ONCE at a time,
    one ag_echo each: before, straight after, and SETTLE_SECONDS later."""
    address = fresh_place.address
    loop.run_until_complete(_connections(address, WARMUP_CONNECTIONS))
    before = rss_kib(fresh_place.pid)
    benchmark.pedantic(lambda: loop.run_until_complete(_connections(address, CONNECTIONS)),
                       rounds=1, iterations=1)
    after = rss_kib(fresh_place.pid)
    time.sleep(SETTLE_SECONDS)  # the measurement: what is still held once it settled
    settled = rss_kib(fresh_place.pid)
    assert tacoma.meet(f"ag_echo@{address}", SMALL, timeout=30) == SMALL
    benchmark.extra_info.update(
        measures=f"wall time of {CONNECTIONS} TLS connections to the place opened and "
                 f"closed, {CONNECTIONS_AT_ONCE} at a time, one sync ag_echo meet each "
                 f"(after {WARMUP_CONNECTIONS} warm-up connections), and the place's VmRSS "
                 f"before, straight after, and {SETTLE_SECONDS:g} s after",
        connections=CONNECTIONS, at_once=CONNECTIONS_AT_ONCE,
        rss_before_kib=before, rss_after_kib=after, rss_settled_kib=settled,
        rss_growth_kib=settled - before)
    summary(f"place VmRSS {_mib(before)} -> {_mib(after)} after {CONNECTIONS:,} TLS "
            f"connections ({CONNECTIONS_AT_ONCE} at a time) -> {_mib(settled)} "
            f"{SETTLE_SECONDS:g} s later ({(settled - before) / 1024:+.1f} MiB)")


def _frame(obj: object) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return len(body).to_bytes(4, "big") + body


class Unfinished:
    """A connection that says Hello and sends all but the last byte of a FRAME_BYTES frame;
    what the place sends on it is kept in `heard` as it comes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.heard = bytearray()
        self.listening = asyncio.ensure_future(self._listen(reader))

    @classmethod
    async def open(cls, address: str) -> Unfinished:
        host, port = address.rsplit(":", 1)
        context = Credentials().context(address)
        reader, writer = await asyncio.open_connection(
            host, int(port), ssl=context, server_hostname=host if context else None)
        return cls(reader, writer)

    async def _listen(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await reader.read(65536):
                self.heard.extend(chunk)

    async def send(self, almost: bytes) -> None:
        self.writer.write(_frame([1, PROTOCOL_VERSION, "client", 2**20, "benchmark"]))
        self.writer.write(almost)
        with contextlib.suppress(ConnectionError, OSError):  # refused: closed as it sends
            await self.writer.drain()

    @property
    def refused(self) -> bool:
        return b"budget for incoming briefcases" in self.heard

    async def drop(self) -> None:
        self.writer.transport.abort()
        self.listening.cancel()
        await asyncio.gather(self.listening, return_exceptions=True)


async def _peak_rss(pid: int) -> int:
    """The process's VmRSS at its peak: read every SAMPLE_SECONDS until it has not risen for
    STABLE_SECONDS (the frames have arrived, or stopped arriving)."""
    peak = rss_kib(pid)
    since = time.monotonic()
    while time.monotonic() - since < STABLE_SECONDS:
        await asyncio.sleep(SAMPLE_SECONDS)
        rss = rss_kib(pid)
        if rss > peak:
            peak, since = rss, time.monotonic()
    return peak


def test_place_memory_after_unfinished_large_frames(benchmark: Any,
                                                    loop: asyncio.AbstractEventLoop,
                                                    large_frame_place: ServerProcess,
                                                    summary: Summary) -> None:
    """The place's VmRSS around UNFINISHED connections that each send all but the last byte
    of a FRAME_BYTES frame and are then dropped: before, at the peak, FIVE_SECONDS after."""
    place = large_frame_place
    assert tacoma.meet(f"ag_echo@{place.address}", SMALL, timeout=30) == SMALL
    before = rss_kib(place.pid)
    # A Meet's frame, up to its last byte: the place buffers it whole before decoding.
    almost = FRAME_BYTES.to_bytes(4, "big") + bytes(FRAME_BYTES - 1)

    async def load() -> tuple[int, int]:
        unfinished = await asyncio.gather(*(Unfinished.open(place.address)
                                            for _ in range(UNFINISHED)))
        sampling = asyncio.ensure_future(_peak_rss(place.pid))
        await asyncio.gather(*(each.send(almost) for each in unfinished))
        peak = await sampling
        refused = sum(each.refused for each in unfinished)
        await asyncio.gather(*(each.drop() for each in unfinished))
        return UNFINISHED - refused, peak

    kept, peak = benchmark.pedantic(lambda: loop.run_until_complete(load()),
                                    rounds=1, iterations=1)
    time.sleep(FIVE_SECONDS)  # the measurement: what is still held five seconds later
    after = rss_kib(place.pid)
    assert tacoma.meet(f"ag_echo@{place.address}", SMALL, timeout=30) == SMALL
    benchmark.extra_info.update(
        measures=f"{UNFINISHED} TLS connections each sending all but the last byte of a "
                 f"{FRAME_BYTES:,}-byte frame, then dropped; the place's VmRSS before, at "
                 f"its peak, and {FIVE_SECONDS:g} s after",
        connections=UNFINISHED, frame_bytes=FRAME_BYTES, held_by_the_place=kept,
        rss_before_kib=before, rss_peak_kib=peak, rss_after_kib=after,
        rss_growth_kib=after - before)
    summary(f"place VmRSS {_mib(before)} -> {_mib(peak)} at the peak of {UNFINISHED} "
            f"unfinished {FRAME_BYTES / 1e6:g} MB frames ({kept} held, the rest refused) -> "
            f"{_mib(after)} {FIVE_SECONDS:g} s after they were dropped")


def test_new_clients_wait_beside_a_large_briefcase(benchmark: Any,
                                                   loop: asyncio.AbstractEventLoop,
                                                   fresh_place: ServerProcess,
                                                   summary: Summary) -> None:
    """How long a new client (a new connection, one ag_echo) waits while another process's
    ag_echo of LARGE_ELEMENTS one-byte elements is received, echoed and sent back."""
    address = fresh_place.address

    async def measure() -> list[float]:
        waits: list[float] = []
        large = await asyncio.create_subprocess_exec(
            sys.executable, "-c", LARGE_CLIENT, address, str(LARGE_ELEMENTS),
            stdout=subprocess.PIPE)
        assert large.stdout is not None
        assert await large.stdout.readline() == b"sending\n"
        finished = asyncio.ensure_future(large.wait())
        while not finished.done():
            started = time.perf_counter()
            await _connect_meet_close(address)
            waits.append(time.perf_counter() - started)
        assert await large.stdout.read() == b"done\n", "the large echo failed"
        assert finished.result() == 0
        return waits

    waits = benchmark.pedantic(lambda: loop.run_until_complete(measure()),
                               rounds=1, iterations=1)
    longest, median = max(waits), statistics.median(waits)
    over = sum(wait > GOAL_SECONDS for wait in waits)
    benchmark.extra_info.update(
        measures=f"wall time of one ag_echo meet of {LARGE_ELEMENTS:,} one-byte elements "
                 "from another process (its encoding, sending, echo and decoding), while "
                 "this one opens a new connection and meets ag_echo on it, again and again; "
                 "the longest and median such wait",
        elements=LARGE_ELEMENTS, new_clients=len(waits),
        longest_wait_ms=round(longest * 1000, 1), median_wait_ms=round(median * 1000, 1),
        waits_over_goal=over, goal_ms=GOAL_SECONDS * 1000)
    summary(f"a new client's ag_echo waited at most {longest * 1000:,.0f} ms (median "
            f"{median * 1000:.1f} ms; {over} of {len(waits)} clients over "
            f"{GOAL_SECONDS * 1000:g} ms) beside an echo of {LARGE_ELEMENTS:,} elements")
