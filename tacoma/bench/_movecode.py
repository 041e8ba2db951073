"""`tacoma bench movecode`: Spalink, Hartman and Gibson's question, measured on this machine.

They moved agrep to a file server, or left it at the client fetching the files, and varied
the server's cache, its CPU speed against the client's, and its background load (Figures
6 and 7: agrep's run time and the background's access latency against server CPU speed).
Here the search is examples/search/search.py over a corpus made by its corpus.py, at a
local place, both ways (`tacoma advise`'s `move` and `fetch`: the same program, run at the
place or here on the fetched files); varied:

- the place's CPU share: each agent's CPU quota (`tacoma place --cpus`: a CPU cgroup, so as
  root only), standing in for a slower server;
- its background load: that many clients, each fetching one whole file after another
  through a reader agent (an isolated worker per request), as NFS clients would;
- the data's size.

For each setting it prints both ways' run times, which was faster, what `tacoma advise`
predicted beforehand, and the background clients' median response time during each way.
"""

from __future__ import annotations

import importlib.util
import os
import random
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO

from .. import Briefcase, TacomaError, local_places, meet
from ..client import _advise
from ..display import Progress
from ..display import table as show_table

__all__ = ["MovecodeRow", "example_dir", "measure_movecode", "movecode_table"]

SIZES_MB = [5.0, 20.0]
QUICK_SIZES_MB = [5.0]
CPUS = [1.0, 0.5, 0.25, 0.1]
QUICK_CPUS = [1.0, 0.25]
CLIENTS = [0, 2, 4]
QUICK_CLIENTS = [0, 2]


@dataclass
class MovecodeRow:
    size: int
    cpus: float | None  # None: not applied (not root)
    clients: int
    move_s: float
    fetch_s: float
    predicted: str  # "move" or "fetch", by tacoma advise
    predicted_move_s: float
    predicted_fetch_s: float
    background_move_ms: float | None  # the background's median response time
    background_fetch_ms: float | None
    matches: int

    @property
    def faster(self) -> str:
        return "move" if self.move_s <= self.fetch_s else "fetch"


def example_dir() -> Path:
    """examples/search: beside the tacoma package (a clone, an editable install), or in the
    current directory (a clone, with tacoma installed from it)."""
    places = [Path(__file__).resolve().parent.parent.parent / "examples" / "search",
              Path.cwd() / "examples" / "search"]
    for here in places:
        if (here / "search.py").is_file():
            return here
    raise FileNotFoundError(f"tacoma bench movecode runs examples/search, which is neither "
                            f"at {places[0]} nor at {places[1]}: run it in a clone of tacoma")


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Background:
    """`count` clients fetching one whole file after another through the reader agent,
    each response time recorded with when it ended."""

    def __init__(self, address: str, directory: str, files: int, count: int) -> None:
        self.address, self.directory, self.files = address, directory, files
        self.times: list[tuple[float, float]] = []  # (ended, seconds)
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                        for i in range(count)]

    def __enter__(self) -> _Background:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def _client(self, seed: int) -> None:
        rng = random.Random(seed)  # noqa: S311 - which file to read, not a secret
        while not self.stop.is_set():
            request = Briefcase(DIR=[self.directory], LIMIT=["1"], WHOLE=["1"],
                                SKIP=[str(rng.randrange(self.files))])
            started = time.perf_counter()
            try:
                meet(f"ag_python@{self.address}", request, code=_advise.READER, timeout=120)
            except TacomaError as exc:
                self.errors.append(str(exc))
                return
            ended = time.perf_counter()
            self.times.append((ended, ended - started))

    def median_ms(self, start: float, end: float) -> float | None:
        during = [s for ended, s in self.times if start <= ended <= end]
        return statistics.median(during) * 1e3 if during else None


def measure_movecode(quick: bool, progress: Progress | None = None,
                     sizes_mb: list[float] | None = None, cpus: list[float] | None = None,
                     clients: list[int] | None = None) -> list[MovecodeRow]:
    example = example_dir()
    corpus, search = _module(example / "corpus.py"), example / "search.py"
    program = search.read_text()
    extra = Briefcase(PATTERN=[corpus.PHRASE.encode()], ERRORS=["1"])
    sizes_mb = sizes_mb or (QUICK_SIZES_MB if quick else SIZES_MB)
    clients = clients if clients is not None else (QUICK_CLIENTS if quick else CLIENTS)
    shares: list[float | None] = list(cpus or (QUICK_CPUS if quick else CPUS))
    if os.geteuid() != 0:
        shares = [None]  # no CPU cgroup without root: the share cannot be set
    bar = progress or Progress(0, "movecode")
    bar.update(total=len(shares) * len(sizes_mb) * len(clients))
    rows = []
    for share in shares:
        flags = ("--cpus", str(share)) if share is not None else ()
        with local_places(1, *flags, "--pool-size", "4") as places:
            address, data = places.addresses[0], places.state_dirs[0] / "data"
            for size in sizes_mb:
                directory = f"corpus-{size:g}"
                planted = corpus.make(data / directory, size)
                files = sum(len(names) for _, _, names in os.walk(data / directory))
                for count in clients:
                    bar.update(description=f"cpus {share or 'all'}, {size:g} MB, "
                                           f"{count} clients")
                    with _Background(address, directory, files, count) as background:
                        time.sleep(0.5 if count else 0)  # the load under way first
                        advice = _advise.advise(f"ag_python@{address}", program, directory,
                                                extra=extra)
                        started = time.perf_counter()
                        moved, move_s = advice.run("move")
                        middle = time.perf_counter()
                        fetched, fetch_s = advice.run("fetch")
                        ended = time.perf_counter()
                    if background.errors:
                        raise RuntimeError(f"a background client failed: "
                                           f"{background.errors[0]}")
                    if sorted(moved["MATCHES"]) != sorted(fetched["MATCHES"]) or \
                            len(moved["MATCHES"]) != planted:
                        raise RuntimeError(f"the two ways found {len(moved['MATCHES'])} and "
                                           f"{len(fetched['MATCHES'])} lines, of {planted}")
                    rows.append(MovecodeRow(
                        int(size * 1e6), share, count, move_s, fetch_s, advice.better,
                        advice.move_s, advice.fetch_s, background.median_ms(started, middle),
                        background.median_ms(middle, ended), planted))
                    bar.advance()
    return rows


def movecode_table(rows: list[MovecodeRow], file: IO[str] | None = None) -> None:
    def ms(value: float | None) -> str:
        return "" if value is None else f"{value:,.0f}"

    table_rows = [[f"{r.size / 1e6:g} MB", "all" if r.cpus is None else f"{r.cpus:g}",
                   str(r.clients), f"{r.move_s:.2f}", f"{r.fetch_s:.2f}",
                   "code" if r.faster == "move" else "data",
                   f"{'code' if r.predicted == 'move' else 'data'} "
                   f"({r.predicted_move_s:.2f} / {r.predicted_fetch_s:.2f})",
                   ms(r.background_move_ms), ms(r.background_fetch_ms)] for r in rows]
    right = sum(1 for r in rows if r.predicted == r.faster)
    notes = [
        "move: search.py sent to the place (the code to the data); fetch: the files fetched "
        "in 8 MB meets and searched here (the data to the code); seconds, end to end.",
        "cpus: each agent's CPU quota at the place (--cpus), standing in for a slower "
        "server; clients: background clients fetching whole files through an agent.",
        "advice: what tacoma advise predicted before the run (move / fetch, seconds); "
        f"it picked the faster way in {right} of {len(rows)} settings.",
        "background: the background clients' median response time, ms, during each way.",
        "Spalink, Hartman and Gibson (simulated, 1998): moving agrep helps when the server "
        "is as fast as the client or faster, and hurts more and more as it is slower; see "
        "tacoma bench spalink for their model.",
    ]
    if any(r.cpus is None for r in rows):
        notes.append("cpus all: not root, so the place could not set a CPU share; only the "
                     "background load varied.")
    show_table(["data", "cpus", "clients", "move s", "fetch s", "faster", "advice",
                "bg ms (move)", "bg ms (fetch)"], table_rows,
               title="tacoma bench movecode: the code to the data, or the data to the code",
               notes=notes, right=["move s", "fetch s", "bg ms (move)", "bg ms (fetch)"],
               file=file)
