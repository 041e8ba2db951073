"""`tacoma bench spalink`: Spalink, Hartman and Gibson's trace-driven simulator, rebuilt.

Their model (seed 001, section 3.3), as they give it:
- a file server with one CPU, one disk and an LRU block cache of 8 KB blocks (fully
  associative, write-through); an infinite metadata cache;
- disk: one request at a time, 8 ms seek + size / 10 MB/s;
- CPU: per request, the cycles of their Figure 1 (metadata read 33k, write 64k; block read
  100k, write 199k, at 133 MHz), divided by the server's speed; file requests have
  priority, mobile code gets only idle cycles (it is preempted);
- network: 20 µs + size / 100 Mbit/s each way, no contention;
- agrep at the server takes 100 blocks (800 KB) of the cache for itself.

What is synthetic here (their traces are not public): agrep's trace is a sequential pass
over 23 MB in 1,400 files (1 or 2 metadata requests per file, alternately: 42% of its
requests are metadata, as in theirs), each request issued when the previous one ended plus
agrep's computation on the block (15 cycles a byte at 133 MHz, scaled by the speed of the
CPU it runs on); the background is independent requests arriving at random (Poisson, 600
a second, as in a busy interval), 87% metadata as in their Auspex trace, 80% reads, over
2,000 files whose popularity falls off as Zipf's law (so a cache helps it, unlike agrep).
Our assumptions where the paper is silent: agrep's accesses at the server cost half the cycles of a
remote request (file system work, no network protocol); writes go to the disk (write
through). Each run warms the caches with 60 s of background, then runs agrep and the
background together until agrep ends; it reports agrep's run time, both workloads' block
hit rates, and their mean response times during agrep's run.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from ..display import table as show_table

__all__ = ["Outcome", "simulate", "spalink_tables"]

BLOCK = 8192
BASE_MHZ = 133.0
CYCLES = {("meta", "read"): 33_000, ("meta", "write"): 64_000,
          ("block", "read"): 100_000, ("block", "write"): 199_000}
AGREP_CYCLES_PER_BYTE = 15
AGREP_BLOCKS = 100  # 800 KB of the server's cache, when agrep runs there
SEEK, DISK_RATE = 0.008, 10e6
LINK, NET_RATE = 20e-6, 100e6 / 8
WARM_UP = 60.0
BACKGROUND_RATE = 600.0
#: Simulated seconds agrep may take before the run stops: a starved agrep (a saturated
#: server's CPU gives mobile code no cycles) is reported as taking longer than this.
LIMIT = 600.0
BACKGROUND_FILES = 2000


@dataclass
class Outcome:
    where: str  # "client" or "server": where agrep ran
    cache_mb: float
    speed: float  # server CPU speed against the client's
    agrep_s: float
    agrep_hits: float  # share of agrep's block requests that hit the server cache
    background_hits: float
    agrep_latency_ms: float
    background_latency_ms: float


class _Sim:
    """The server: an event queue, a preemptive two-class CPU, a FIFO disk, the caches."""

    def __init__(self, cache_blocks: int, speed_mhz: float, seed: int) -> None:
        self.now = 0.0
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.sequence = 0
        self.speed = speed_mhz * 1e6
        self.cache: OrderedDict[tuple[str, int], None] = OrderedDict()
        self.capacity = cache_blocks
        self.metadata: set[tuple[str, int]] = set()
        self.rng = random.Random(seed)  # noqa: S311 - a simulation's randomness
        self.disk_free = 0.0
        # CPU: the running job (class, finish time, remaining seconds, done), and queues.
        self.cpu: list[object] | None = None
        self.cpu_version = 0
        self.queues: list[deque[tuple[float, Callable[[], None]]]] = [deque(), deque()]

    def at(self, when: float, action: Callable[[], None]) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (when, self.sequence, action))

    def run(self, until: Callable[[], bool]) -> None:
        while self.events and not until():
            self.now, _, action = heapq.heappop(self.events)
            action()

    # -- the CPU: class 0 (file requests) preempts class 1 (agrep's computation)
    def compute(self, seconds: float, klass: int, done: Callable[[], None]) -> None:
        running = self.cpu
        if running is None:
            self._start(klass, seconds, done)
        elif klass == 0 and running[0] == 1:
            left = float(running[1]) - self.now  # type: ignore[arg-type]
            self.queues[1].appendleft((left, running[2]))  # type: ignore[arg-type]
            self._start(0, seconds, done)
        else:
            self.queues[klass].append((seconds, done))

    def _start(self, klass: int, seconds: float, done: Callable[[], None]) -> None:
        self.cpu_version += 1
        version = self.cpu_version
        self.cpu = [klass, self.now + seconds, done]

        def finish() -> None:
            if version != self.cpu_version:
                return  # preempted
            self.cpu = None
            for queued in self.queues:
                if queued:
                    left, then = queued.popleft()
                    klass_next = 0 if queued is self.queues[0] else 1
                    self._start(klass_next, left, then)
                    break
            done()

        self.at(self.now + seconds, finish)

    def disk(self, size: int, done: Callable[[], None]) -> None:
        start = max(self.now, self.disk_free)
        self.disk_free = start + SEEK + size / DISK_RATE
        self.at(self.disk_free, done)

    def lookup(self, key: tuple[str, int]) -> bool:
        if key in self.cache:
            self.cache.move_to_end(key)
            return True
        self.cache[key] = None
        while len(self.cache) > self.capacity:
            self.cache.popitem(last=False)
        return False

    def request(self, kind: str, op: str, key: tuple[str, int], remote: bool,
                done: Callable[[bool], None], share: float = 1.0) -> None:
        """One file request: network in (remote), CPU, cache, disk on a miss, network out."""
        size = BLOCK if kind == "block" else 128

        def served(hit: bool) -> None:
            if remote:
                self.at(self.now + LINK + size / NET_RATE, lambda: done(hit))
            else:
                done(hit)

        def cached() -> None:
            if kind == "meta":
                hit = key in self.metadata
                self.metadata.add(key)
            else:
                hit = self.lookup(key) and op == "read"
            if hit:
                served(True)
            else:
                self.disk(size, lambda: served(False))

        def processed() -> None:
            self.compute(CYCLES[kind, op] * share / self.speed, 0, cached)

        if remote:
            self.at(self.now + LINK + 128 / NET_RATE, processed)
        else:
            processed()


def _agrep_trace(seed: int) -> list[tuple[str, str, tuple[str, int]]]:
    rng = random.Random(seed)  # noqa: S311 - a simulation's randomness
    trace: list[tuple[str, str, tuple[str, int]]] = []
    total, files = 23 * 1024 * 1024, 1400
    for index in range(files):
        trace.append(("meta", "read", ("agrep", index)))
        if index % 2:
            trace.append(("meta", "read", ("agrep-attr", index)))
        blocks = max(1, round(rng.expovariate(files / (total / BLOCK))))
        trace += [("block", "read", ("agrep", index * 10_000 + b)) for b in range(blocks)]
    return trace


def simulate(where: str, cache_mb: float = 32.0, speed: float = 1.0,
             seed: int = 1) -> Outcome:
    """One run: agrep at the `where` ("client" or "server"), a server cache of `cache_mb`,
    a server CPU `speed` times the client's (133 MHz)."""
    blocks = int(cache_mb * 1024 * 1024 / BLOCK)
    if where == "server":
        blocks = max(1, blocks - AGREP_BLOCKS)
    sim = _Sim(blocks, BASE_MHZ * speed, seed)
    rng = sim.rng
    files = range(BACKGROUND_FILES)
    zipf = list(itertools.accumulate(1 / (i + 1) for i in files))
    background: list[tuple[float, float, bool, str]] = []  # (issued, latency, hit, kind)
    state = {"agrep_done": -1.0, "agrep_started": WARM_UP}

    def background_request() -> None:
        if state["agrep_done"] >= 0 or sim.now > WARM_UP + LIMIT:
            return
        kind = "meta" if rng.random() < 0.87 else "block"
        op = "read" if rng.random() < 0.8 else "write"
        file = rng.choices(files, cum_weights=zipf)[0]
        key = ("bg", file * 100 + (rng.randrange(16) if kind == "block" else 0))
        issued = sim.now

        def done(hit: bool) -> None:
            background.append((issued, sim.now - issued, hit, kind))

        sim.request(kind, op, key, True, done)
        sim.at(sim.now + rng.expovariate(BACKGROUND_RATE), background_request)

    trace = _agrep_trace(seed)
    agrep: list[tuple[float, bool, str]] = []
    position = [0]

    def agrep_next() -> None:
        if position[0] == len(trace):
            state["agrep_done"] = sim.now
            return
        kind, op, key = trace[position[0]]
        position[0] += 1
        issued = sim.now

        def done(hit: bool) -> None:
            agrep.append((sim.now - issued, hit, kind))
            work = AGREP_CYCLES_PER_BYTE * (BLOCK if kind == "block" else 0)
            if where == "server":
                sim.compute(work / sim.speed, 1, agrep_next)
            else:  # the client's own CPU, uncontended
                sim.at(sim.now + work / (BASE_MHZ * 1e6), agrep_next)

        sim.request(kind, op, key, where == "client", done,
                    share=0.5 if where == "server" else 1.0)

    sim.at(0.0, background_request)
    sim.at(WARM_UP, agrep_next)
    sim.run(lambda: state["agrep_done"] >= 0 or sim.now > WARM_UP + LIMIT)
    if state["agrep_done"] < 0:  # starved: it did not end within LIMIT
        state["agrep_done"] = math.inf
    during = [latency for issued, latency, _, _ in background if issued >= WARM_UP]
    blocks_bg = [hit for issued, _, hit, kind in background
                 if issued >= WARM_UP and kind == "block"]
    agrep_blocks = [hit for _, hit, kind in agrep if kind == "block"]
    return Outcome(
        where, cache_mb, speed, state["agrep_done"] - WARM_UP,
        sum(agrep_blocks) / max(1, len(agrep_blocks)),
        sum(blocks_bg) / max(1, len(blocks_bg)),
        1e3 * sum(latency for latency, _, _ in agrep) / max(1, len(agrep)),
        1e3 * sum(during) / max(1, len(during)))


def _seconds(value: float) -> str:
    return f"> {LIMIT:g} (starved)" if math.isinf(value) else f"{value:.1f}"


CACHE_MB = [4.0, 8.0, 16.0, 32.0, 64.0]
SPEEDS = [0.25, 0.5, 1.0, 2.0, 4.0]


def spalink_tables(quick: bool = False, file: IO[str] | None = None) -> list[Outcome]:
    """Their Figures 2 and 3 (against the server's cache) and 6 and 7 (against its CPU
    speed), as tables: agrep at the client and at the server."""
    caches = CACHE_MB[1::2] if quick else CACHE_MB
    speeds = SPEEDS[::2] if quick else SPEEDS
    outcomes = []
    rows = []
    for cache in caches:
        client, server = simulate("client", cache), simulate("server", cache)
        outcomes += [client, server]
        rows.append([f"{cache:g} MB", _seconds(client.agrep_s), _seconds(server.agrep_s),
                     f"{client.agrep_hits:.0%}", f"{server.agrep_hits:.0%}",
                     f"{client.background_hits:.0%}", f"{server.background_hits:.0%}",
                     f"{client.background_latency_ms:.1f}",
                     f"{server.background_latency_ms:.1f}"])
    show_table(["server cache", "agrep s (client)", "agrep s (server)", "agrep hits (C)",
                "agrep hits (S)", "bg hits (C)", "bg hits (S)", "bg ms (C)", "bg ms (S)"],
               rows, title="Spalink et al., Figures 2-4: against the server's cache (CPU 133 "
                           "MHz both)",
               notes=["Theirs: agrep's run time barely changes with the cache (its single "
                      "sequential pass hits almost never); the background's hit rate "
                      "grows with it, and falls a little when agrep runs at the server."],
               file=file)
    rows = []
    for speed in speeds:
        client, server = simulate("client", speed=speed), simulate("server", speed=speed)
        outcomes += [client, server]
        rows.append([f"{speed:g}x", _seconds(client.agrep_s), _seconds(server.agrep_s),
                     "server" if server.agrep_s < client.agrep_s else "client",
                     f"{client.agrep_latency_ms:.2f}", f"{server.agrep_latency_ms:.2f}",
                     f"{client.background_latency_ms:.1f}",
                     f"{server.background_latency_ms:.1f}"])
    show_table(["server CPU", "agrep s (client)", "agrep s (server)", "faster",
                "agrep ms/req (C)", "agrep ms/req (S)", "bg ms (C)", "bg ms (S)"], rows,
               title="Spalink et al., Figures 6-7: against the server's CPU speed (32 MB "
                     "cache)",
               notes=["Theirs: agrep gains a little at the server when the server is as fast "
                      "as the client or faster (the disk dominates), and degrades sharply "
                      "as the server slows, starved by the background's priority; the "
                      "background's latency rises with it.",
                      "The traces are synthetic (see tacoma/bench/_spalink.py); the model is "
                      "theirs: 8 ms + size/10 MB/s disk, Figure 1's cycles, 20 µs + "
                      "size/100 Mbit/s network, file requests before mobile code."],
               file=file)
    return outcomes
