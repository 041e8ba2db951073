"""`tacoma bench lazy`: Accent's copy-on-reference experiment, with briefcases.

Zayas (seed 003) migrated processes whose address spaces were copied whole ("pure copy")
or sent as IOUs and fetched on first touch ("pure IOU"), with 0 to 15 pages prefetched per
fault, and reported transfer time (Table 4-5), remote execution time (Figure 4-1), their
sum, and bytes moved (Figure 4-3). Here the process is a meet and the address space is a
briefcase folder of 1 MB to 1 GB of random bytes, of which a Python agent touches 0.1%,
1%, 10% or 100%, sequentially or at random chunks, in reads of 64 KiB: sent eagerly (the
bytes in the meet's frame) or lazily (`tacoma.lazy`, read through the place from this
client) with prefetch 0, 1, 3, 7 and 15, each prefetch value at a place of its own
(`tacoma place --prefetch N`).

Measured, per meet: transfer (the meet sent until the agent runs, from the agent's own
clock, which is this machine's), run (the agent's reads), end to end (the client's wall
time), and bytes moved (eager: the folder; lazy: what this client served, manifest
included). A lazy file's manifest is made once per file version and kept, as a client
does; the first reference's hashing time is reported apart.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .. import Briefcase, lazy, local_places, meet
from ..client import _lazy as client_lazy
from ..display import Progress
from ..display import table as show_table

__all__ = ["ACCENT", "LazyRow", "lazy_table", "measure_lazy"]

MB = 1_000_000
SIZES = [1 * MB, 10 * MB, 100 * MB, 1000 * MB]
QUICK_SIZES = [1 * MB, 10 * MB]
FRACTIONS = [0.001, 0.01, 0.1, 1.0]
PREFETCH = [0, 1, 3, 7, 15]
QUICK_PREFETCH = [0, 1, 3]
PATTERNS = ("sequential", "random")
READ = 64 * 1024
#: The largest eager briefcase the bench's places accept (a frame holds it whole).
MAX_EAGER = 256 * 1024 * 1024

#: Accent's Table 4-5 (seconds to transfer the address space): pure IOU and pure copy, and
#: its headline findings, quoted beside ours.
ACCENT: dict[str, tuple[float, float]] = {
    "transfer_iou_s": (0.15, 0.21), "transfer_copy_s": (8.5, 168.5),
    "bytes_saved_pct": (58.2, 58.2),
}

#: The agent: touch FRACTION of DATA in READ-byte reads, in order or at random chunks.
AGENT = """
import math, random, time
start = time.time()
size = bc.folder_size("DATA")
fraction, pattern, read = float(bc.text("FRACTION")[0]), bc.text("PATTERN")[0], READ
reads = max(1, math.ceil(size * fraction / read))
offsets = (range(0, reads * read, read) if pattern == "sequential"
           else random.Random(7).sample(range(0, size, read), min(reads, -(-size // read))))
touched = 0
for at in offsets:
    touched += len(bc.read("DATA", at, read))
bc.remove("DATA")
bc["T"] = [repr(start), repr(time.time()), str(touched)]
""".replace("READ", str(READ))


@dataclass
class LazyRow:
    size: int
    fraction: float
    pattern: str
    strategy: str  # "eager" or "lazy"
    prefetch: int | None
    transfer_ms: float
    run_ms: float
    total_ms: float
    moved: int
    touched: int


def _one(address: str, bc: Briefcase, fraction: float, pattern: str) -> tuple[float, float,
                                                                                float, int]:
    bc["FRACTION"], bc["PATTERN"] = [str(fraction)], [pattern]
    sent = time.time()
    result = meet(f"ag_python@{address}", bc, code=AGENT, timeout=600)
    done = time.time()
    start, end, touched = (float(result.text("T")[0]), float(result.text("T")[1]),
                           int(result.text("T")[2]))
    return (start - sent) * 1e3, (end - start) * 1e3, (done - sent) * 1e3, touched


def _fractions(size: int) -> list[float]:
    """The shares read of a briefcase of `size`: all of FRACTIONS, but for briefcases over
    100 MB, which are not read whole (a gigabyte in 64 KiB reads, at random with prefetch
    15, moves 16 GB: minutes, to say what the 100 MB rows say)."""
    return FRACTIONS if size <= 100 * MB else [f for f in FRACTIONS if f < 1.0]


def _warm(address: str, path: Path) -> None:
    """A few untimed meets first, eager and lazy: a new place's first meets pay for
    warming its pool, its connection and its caches."""
    for _ in range(3):
        _one(address, Briefcase(DATA=[path.read_bytes()[:MB]]), 0.01, "sequential")
        _one(address, Briefcase(DATA=lazy(path)), 0.01, "sequential")


@contextmanager
def _data(sizes: list[int]) -> Iterator[dict[int, Path]]:
    with tempfile.TemporaryDirectory(prefix="tacoma-bench-lazy-") as directory:
        paths = {}
        for size in sizes:
            path = Path(directory) / f"{size}.bin"
            with open(path, "wb") as file:
                left = size
                while left:
                    block = os.urandom(min(left, 16 * MB))
                    file.write(block)
                    left -= len(block)
            paths[size] = path
        yield paths


def measure_lazy(quick: bool, progress: Progress | None = None, sizes: list[int] | None = None,
                 repeat: int | None = None) -> tuple[list[LazyRow], dict[int, float]]:
    """The rows (medians of `repeat` meets each), and the first reference's hashing time
    per size in ms."""
    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    prefetches = QUICK_PREFETCH if quick else PREFETCH
    repeat = repeat or (1 if quick else 3)
    combos = sum(len(_fractions(size)) for size in sizes) * len(PATTERNS)
    bar = progress or Progress(0, "lazy")
    bar.update(total=combos * (len(prefetches) + 1))
    rows: list[LazyRow] = []
    hashing: dict[int, float] = {}
    flags = ("--max-briefcase", str(MAX_EAGER + MB), "--max-receiving", str(2 * MAX_EAGER + MB),
             "--lazy-seconds", "1h", "--meet-seconds", "600", "--cpu-seconds", "600")
    with _data(sizes) as paths:
        for size in sizes:  # the manifest, made once per file version, as a client does
            started = time.perf_counter()
            lazy(paths[size])
            hashing[size] = (time.perf_counter() - started) * 1e3
        with local_places(1, *flags) as places:
            eager_address = places.addresses[0]
            _warm(eager_address, paths[sizes[0]])
            for size in sizes:
                data = paths[size].read_bytes() if size <= MAX_EAGER else None
                for fraction in _fractions(size):
                    for pattern in PATTERNS:
                        bar.update(description=f"eager {size // MB} MB, {fraction:.1%}")
                        if data is not None:
                            runs = [_one(eager_address, Briefcase(DATA=[data]), fraction,
                                         pattern) for _ in range(repeat)]
                            rows.append(_row(size, fraction, pattern, "eager", None, runs,
                                             size))
                        bar.advance()
                del data
        for prefetch in prefetches:
            with local_places(1, *flags, "--prefetch", str(prefetch)) as places:
                _warm(places.addresses[0], paths[sizes[0]])
                for size in sizes:
                    for fraction in _fractions(size):
                        for pattern in PATTERNS:
                            bar.update(description=f"lazy PF{prefetch} {size // MB} MB, "
                                                   f"{fraction:.1%}")
                            runs, moved = [], []
                            for _ in range(repeat):
                                before = client_lazy.served["bytes"]
                                runs.append(_one(places.addresses[0],
                                                 Briefcase(DATA=lazy(paths[size])),
                                                 fraction, pattern))
                                moved.append(client_lazy.served["bytes"] - before)
                            rows.append(_row(size, fraction, pattern, "lazy", prefetch, runs,
                                             int(statistics.median(moved))))
                            bar.advance()
    return rows, hashing


def _row(size: int, fraction: float, pattern: str, strategy: str, prefetch: int | None,
         runs: list[tuple[float, float, float, int]], moved: int) -> LazyRow:
    return LazyRow(size, fraction, pattern, strategy, prefetch,
                   statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
                   statistics.median(r[2] for r in runs), moved, runs[0][3])


def _size(count: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count:.0f} B"


def lazy_table(rows: list[LazyRow], hashing: dict[int, float],
               file: IO[str] | None = None) -> None:
    """Accent's Table 4-5 and Figures 4-1 and 4-3: per briefcase, touched share and pattern,
    the eager meet against the lazy one at each prefetch, as transfer / run / end to end
    (ms); then the bytes each moved; then the goal's row."""
    prefetches = sorted({r.prefetch for r in rows if r.prefetch is not None})
    by = {(r.size, r.fraction, r.pattern, r.prefetch): r for r in rows}
    times, moved = [], []
    for size in sorted({r.size for r in rows}):
        for fraction in _fractions(size):
            for pattern in PATTERNS:
                eager = by.get((size, fraction, pattern, None))
                key = [_size(size), f"{fraction:.1%}", pattern]
                cells, bytes_cells = [*key], [*key, _size(size) if eager else "n/a"]
                cells.append(f"{eager.transfer_ms:,.0f} / {eager.run_ms:,.0f} / "
                             f"{eager.total_ms:,.0f}" if eager else "n/a")
                for prefetch in prefetches:
                    row = by.get((size, fraction, pattern, prefetch))
                    cells.append(f"{row.transfer_ms:,.0f} / {row.run_ms:,.0f} / "
                                 f"{row.total_ms:,.0f}" if row else "")
                    bytes_cells.append(f"{_size(row.moved)} ({row.moved / size:.1%})" if row
                                       else "")
                times.append(cells)
                moved.append(bytes_cells)
    show_table(["briefcase", "touched", "pattern", "eager",
                *[f"lazy PF{p}" for p in prefetches]], times,
               title="tacoma bench lazy: transfer / run / end to end, ms (Accent's Table 4-5 "
                     "and Figure 4-1)",
               notes=["transfer: the meet sent until the agent starts; run: the agent's "
                      "reads (a lazy folder's fetches included); end to end: the client's "
                      "wall time."], file=file)
    notes = [
        "Bytes this client served to each lazy meet (chunks and manifest), and their share "
        "of the eager meet's; eager: the folder, in the meet's frame.",
        "First reference of each file (its manifest: a SHA-256 per 64 KiB chunk), made once "
        "per file version: " + ", ".join(f"{_size(s)} {ms:,.0f} ms"
                                          for s, ms in sorted(hashing.items())) + ".",
        f"Accent (Zayas 1987, measured there): address space transfer "
        f"{ACCENT['transfer_iou_s'][0]}-{ACCENT['transfer_iou_s'][1]} s by IOU against "
        f"{ACCENT['transfer_copy_s'][0]}-{ACCENT['transfer_copy_s'][1]} s by copy (Table "
        f"4-5); {ACCENT['bytes_saved_pct'][0]}% fewer bytes moved on average; one page "
        "prefetched per fault always paid.",
    ]
    goal = _goal(rows)
    if goal:
        notes.append(goal)
    show_table(["briefcase", "touched", "pattern", "eager",
                *[f"lazy PF{p}" for p in prefetches]], moved,
               title="tacoma bench lazy: bytes moved (Accent's Figure 4-3)",
               notes=notes, file=file)


def _goal(rows: list[LazyRow]) -> str:
    """The issue's goal: 100 MB with 1% touched, lazily, within 1.2x of a 1 MB eager meet,
    moving at most 3% of the eager bytes."""
    base = [r for r in rows if r.strategy == "eager" and r.size == MB and r.fraction == 0.01
            and r.pattern == "sequential"]
    big = [r for r in rows if r.strategy == "lazy" and r.size == 100 * MB and r.prefetch == 1
           and r.fraction == 0.01 and r.pattern == "sequential"]
    if not base or not big:
        return ""
    ratio, share = big[0].total_ms / base[0].total_ms, big[0].moved / (100 * MB)
    met = "met" if ratio <= 1.2 and share <= 0.03 else "not met"
    return (f"Goal (100 MB, 1% touched, lazy, prefetch 1, against 1 MB eager): "
            f"{big[0].total_ms:,.0f} ms / {base[0].total_ms:,.0f} ms = {ratio:.2f}x "
            f"(goal 1.2x), {share:.1%} of the eager bytes (goal 3%): {met}.")
