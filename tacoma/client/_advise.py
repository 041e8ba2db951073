"""`tacoma advise`: move the code to the data, or the data to the code?

Spalink, Hartman and Gibson (seed 001) found that moving agrep to the file server helps or
hurts depending on the server's CPU speed and load, and that this is hard to predict. The
advisor predicts it from costs measured now, against the place in question:

- the meet's overhead there: a pooled Python meet that does nothing (median of 3);
- the bandwidth to it: a sample of the data (`--sample`, 2 MB) fetched by a reader agent
  (`READER`, which also says how much data there is);
- the place's load, cores and each agent's CPU share (`tacoma status PLACE`, where this
  client may ask: on loopback, with the place's admin token);
- the program's cost per byte: the program run on the sample at the place (LIMIT), and
  here, on the fetched sample (the program's own process time and wall time).

    move  = overhead + code / bandwidth + bytes x (place's seconds per byte)
    fetch = batches x overhead + bytes / bandwidth + bytes x (this machine's seconds per byte)

The program is a scanning agent with search.py's contract (examples/search): it reads the
files below $TACOMA_DATA/DIR, stops after LIMIT bytes if given, and says how many it read
in SCANNED. Run here, it gets `bc`, `log` and `fail` (a Python program only: the data
way runs the program on this machine).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..wire._briefcase import CODE, Briefcase
from ..wire._errors import AgentFailed, MeetError, TacomaError
from ._api import meet

__all__ = ["READER", "Advice", "advise", "fetch", "move", "run_here"]

#: The agent that reads the place's data for the advisor: the files below
#: $TACOMA_DATA/DIR in order, from file SKIP on, LIMIT bytes at most (WHOLE: whole files
#: only, at least one), with TOTAL bytes and COUNT files of the whole directory.
READER = """
import os
root = os.path.realpath(os.path.join(os.environ["TACOMA_DATA"], bc.text("DIR")[0]))
if not os.path.isdir(root):
    fail(f"no directory {bc.text('DIR')[0]} in the place's data directory")
limit, skip = int(bc.text("LIMIT")[0]), int(bc.text("SKIP")[0])
whole = bool(bc.folder("WHOLE"))
names, data, total, count, taken, full = [], [], 0, 0, 0, False
for directory, dirs, files in os.walk(root):
    dirs.sort()
    for name in sorted(files):
        path = os.path.join(directory, name)
        size = os.path.getsize(path)
        total += size
        count += 1
        full = full or taken >= limit or (whole and bool(names) and taken + size > limit)
        if count <= skip or full:  # the files taken are consecutive, from SKIP on
            continue
        with open(path, "rb") as file:
            chunk = file.read(-1 if whole else limit - taken)
        names.append(os.path.relpath(path, root))
        data.append(chunk)
        taken += len(chunk)
bc["NAMES"], bc["DATA"] = names, data
bc["TOTAL"], bc["COUNT"] = [str(total)], [str(count)]
for folder in ("LIMIT", "SKIP", "WHOLE", "DIR"):
    bc.remove(folder)
"""
#: Bytes fetched per meet on the data way.
BATCH = 8 * 1024 * 1024


@dataclass
class Advice:
    """The advisor's measurements, its two predictions, and its choice."""

    target: str  # AGENT@PLACE
    directory: str
    data_bytes: int
    code_bytes: int
    overhead_s: float  # the program met at the place on one byte: its fixed cost there
    bandwidth: float  # bytes/s, the data way's
    place_per_byte: float  # seconds per byte at the place (wall)
    here_per_byte: float  # seconds per byte here (wall)
    load: float | None  # the place's host load, None if this client may not ask
    cpus: int | None
    agent_cpus: float | None
    overhead_fetch: float = 0.0  # a pooled null meet: each batch of the data way costs one
    move_s: float = 0.0
    fetch_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: The program and its own folders, for `run`.
    program: str = field(default="", repr=False)
    extra: Briefcase | None = field(default=None, repr=False)

    def run(self, way: str | None = None, timeout: float = 600) -> tuple[Briefcase, float]:
        """Run the better way (or `way`: "move" or "fetch") whole: the program's result
        briefcase, and the seconds it took end to end."""
        chosen = way or self.better
        if chosen not in ("move", "fetch"):
            raise ValueError(f"way is 'move' or 'fetch', got {way!r}")
        return (move if chosen == "move" else fetch)(self, self.program, self.extra, timeout)

    def __post_init__(self) -> None:
        batches = max(1, math.ceil(self.data_bytes / BATCH))
        self.move_s = (self.overhead_s + self.code_bytes / self.bandwidth
                       + self.data_bytes * self.place_per_byte)
        self.fetch_s = (batches * self.overhead_fetch + self.data_bytes / self.bandwidth
                        + self.data_bytes * self.here_per_byte)

    @property
    def better(self) -> str:
        return "move" if self.move_s <= self.fetch_s else "fetch"

    def why(self) -> str:
        transfer = self.data_bytes / self.bandwidth
        place, here = self.place_per_byte * 1e6, self.here_per_byte * 1e6
        where = ""
        if self.load is not None:
            where = (f" (its host: load {self.load:g} on {self.cpus} cores, each agent "
                     f"{self.agent_cpus:g} of a core)")
        if self.better == "move":
            return (f"moving the code saves fetching {self.data_bytes / 1e6:,.1f} MB "
                    f"({transfer:.2f} s at {self.bandwidth / 1e6:,.0f} MB/s), and the place"
                    f"{where} scans at {place:.3f} µs a byte against {here:.3f} here")
        return (f"the place{where} scans at {place:.3f} µs a byte against {here:.3f} here: "
                f"scanning {self.data_bytes / 1e6:,.1f} MB there costs more than fetching it "
                f"({transfer:.2f} s at {self.bandwidth / 1e6:,.0f} MB/s)")

    def summary(self) -> str:
        lines = [
            f"advice for {self.target} on {self.directory!r} "
            f"({self.data_bytes / 1e6:,.1f} MB), program {self.code_bytes:,} bytes:",
            f"  move the code to the data:  {self.move_s:8.2f} s predicted",
            f"  fetch the data to the code: {self.fetch_s:8.2f} s predicted",
            f"  better: {'move the code' if self.better == 'move' else 'fetch the data'}, "
            f"because {self.why()}",
            f"  measured: the program's start at the place {self.overhead_s * 1e3:.1f} ms, a "
            f"meet {self.overhead_fetch * 1e3:.1f} ms, bandwidth "
            f"{self.bandwidth / 1e6:,.0f} MB/s, place {self.place_per_byte * 1e6:.3f} µs/B, "
            f"here {self.here_per_byte * 1e6:.3f} µs/B",
        ]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def _agent_of(target: str) -> tuple[str, str]:
    agent, sep, place = target.rpartition("@")
    if not sep or not agent or not place:
        raise ValueError(f"advise needs AGENT@PLACE, got {target!r}")
    return agent, place


def _reader(place: str, directory: str, limit: int, skip: int = 0,
            whole: bool = False, timeout: float = 600) -> tuple[Briefcase, float]:
    request = Briefcase(DIR=[directory], LIMIT=[str(limit)], SKIP=[str(skip)])
    if whole:
        request["WHOLE"] = ["1"]
    started = time.perf_counter()
    answer = meet(f"ag_python@{place}", request, code=READER, timeout=timeout)
    return answer, time.perf_counter() - started


def run_here(program: str, directory: Path, sub: str = ".", limit: int | None = None,
             extra: Briefcase | None = None) -> tuple[Briefcase, float]:
    """Run a Python agent program here on files below `directory` (as $TACOMA_DATA): its
    briefcase and the wall seconds it took."""
    bc = Briefcase(extra or {})
    bc["DIR"] = [sub]
    if limit is not None:
        bc["LIMIT"] = [str(limit)]

    def fail(message: str) -> None:
        raise AgentFailed(message)

    def log(message: str, level: str = "info") -> None:
        print(f"agent: {message}", file=sys.stderr)

    before = os.environ.get("TACOMA_DATA")
    os.environ["TACOMA_DATA"] = str(directory)
    started = time.perf_counter()
    try:
        exec(compile(program, "<program>", "exec"),  # noqa: S102 - the user's own program, here
             {"bc": bc, "fail": fail, "log": log, "Briefcase": Briefcase,
              "__name__": "__agent__"})
    finally:
        if before is None:
            del os.environ["TACOMA_DATA"]
        else:
            os.environ["TACOMA_DATA"] = before
    return bc, time.perf_counter() - started


def _write(root: Path, names: list[str], data: list[bytes]) -> None:
    for name, content in zip(names, data, strict=True):
        path = (root / name).resolve()
        if not path.is_relative_to(root.resolve()):
            raise MeetError(f"the reader named a file outside its directory: {name}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def advise(target: str, program: str | bytes, data: str | int = ".", *,
           sample: int = 2 * 1024 * 1024, extra: Briefcase | None = None,
           timeout: float = 600) -> Advice:
    """Measure, and predict both ways, for `program` (Python, search.py's contract) met as
    `target` (AGENT@PLACE) on `data`: a directory of the place's data directory, or a
    number of bytes (then the place's whole data directory is the sample's source).
    `extra` holds the program's own folders (PATTERN, ...).

    >>> advice = tacoma.advise("ag_python@HOST:7707", open("search.py").read(), "corpus",
    ...                        extra=tacoma.Briefcase(PATTERN=["mobile agents"]))
    >>> print(advice.summary()); result, seconds = advice.run()  # doctest: +SKIP
    """
    from ._place_status import place_status

    agent, place = _agent_of(target)
    if agent != "ag_python":
        raise ValueError(f"advise runs the program here for the data way, so it advises on "
                         f"Python programs (ag_python) only, not {agent}")
    code = program.decode() if isinstance(program, bytes) else program
    directory = data if isinstance(data, str) else "."
    notes: list[str] = []
    # The meet's overhead: a pooled Python meet that does nothing (after one to warm).
    overheads = []
    for _ in range(4):
        started = time.perf_counter()
        meet(f"ag_python@{place}", code="pass", timeout=timeout)
        overheads.append(time.perf_counter() - started)
    overhead = statistics.median(overheads[1:])
    # The data's size, and a sample of it: the bandwidth of the data way.
    got, seconds = _reader(place, directory, sample, timeout=timeout)
    fetched = sum(len(d) for d in got["DATA"])
    if not fetched:
        data_dir = "STATE_DIR/data"
        # The place shows its state directory to whom may ask its status only.
        with contextlib.suppress(TacomaError):
            data_dir = str(Path(place_status(place, timeout=10).state_dir) / "data")
        raise MeetError(
            f"the place's data directory holds nothing under {directory!r}: agents read "
            f"the files below the place's data directory ({data_dir} on the place's host; "
            f"$TACOMA_DATA to an agent). Copy the data there (e.g. `cp -r logs {data_dir}/` "
            "on that host), then give `--data logs`")
    bandwidth = fetched / max(seconds - overhead, seconds / 10)
    size = int(got.text("TOTAL")[0]) if isinstance(data, str) else int(data)
    # The program at the place, on one byte and on the sample: the difference is the cost
    # of the bytes, whatever the program's own start costs (compiling, listing files).
    def there(limit: int) -> tuple[float, int, float | None]:
        request = Briefcase(extra or {})
        request["DIR"], request["LIMIT"] = [directory], [str(limit)]
        started = time.perf_counter()
        answer = meet(target, request, code=code, timeout=timeout)
        return (time.perf_counter() - started,
                int(answer.text("SCANNED")[0]) if answer.folder("SCANNED") else limit,
                float(answer.text("CPU")[0]) if answer.folder("CPU") else None)

    place_fixed, _, cpu_fixed = there(1)
    place_seconds, scanned, cpu_sample = there(fetched)
    with tempfile.TemporaryDirectory(prefix="tacoma-advise-") as temp:
        _write(Path(temp), got.text("NAMES"), got["DATA"])
        _, here_fixed = run_here(code, Path(temp), limit=1, extra=extra)
        here, here_seconds = run_here(code, Path(temp), limit=fetched, extra=extra)
    here_scanned = int(here.text("SCANNED")[0]) if here.folder("SCANNED") else fetched
    load = cpus = agent_cpus = None
    try:
        status = place_status(place, timeout=10)
        load, cpus, agent_cpus = status.load, status.cpus, status.agent_cpus
    except TacomaError as exc:
        notes.append(f"the place's load is unknown ({exc}); its trial run measured it anyway")
    place_per_byte = max(place_seconds - place_fixed, 1e-6) / max(scanned, 1)
    if agent_cpus is not None and agent_cpus < 1 and cpu_sample is not None \
            and cpu_fixed is not None:
        # A CPU cgroup's quota is counted per 100 ms period: a short trial runs within one
        # period's burst at full speed, a long scan at the share. Its own CPU time, at the
        # share, is what a long scan costs there at least.
        sustained = max(cpu_sample - cpu_fixed, 0.0) / max(scanned, 1) / agent_cpus
        if sustained > place_per_byte:
            notes.append(f"each agent there gets {agent_cpus:g} of a core: the trial ran "
                         "within one quota period's burst, so the scan is counted at the "
                         "share")
            place_per_byte = sustained
    return Advice(target, directory, size, len(code.encode()), place_fixed, bandwidth,
                  place_per_byte,
                  max(here_seconds - here_fixed, 1e-6) / max(here_scanned, 1),
                  load, cpus, agent_cpus, overhead_fetch=overhead, notes=notes,
                  program=code, extra=extra)


def move(advice: Advice, program: str, extra: Briefcase | None = None,
         timeout: float = 600) -> tuple[Briefcase, float]:
    """The code way, whole: the program met at the place on the whole directory."""
    request = Briefcase(extra or {})
    request["DIR"] = [advice.directory]
    started = time.perf_counter()
    result = meet(advice.target, request, code=program, timeout=timeout)
    return result, time.perf_counter() - started


def fetch(advice: Advice, program: str, extra: Briefcase | None = None,
          timeout: float = 600, batch: int = BATCH) -> tuple[Briefcase, float]:
    """The data way, whole: the directory's files fetched in batches, the program run here."""
    _, place = _agent_of(advice.target)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tacoma-advise-") as temp:
        skip = 0
        while True:
            got, _ = _reader(place, advice.directory, batch, skip=skip, whole=True,
                             timeout=timeout)
            names = got.text("NAMES")
            if not names:
                break
            _write(Path(temp), names, got["DATA"])
            skip += len(names)
            if skip >= int(got.text("COUNT")[0]):
                break
        result, _ = run_here(program, Path(temp), extra=extra)
    result.remove(CODE)
    return result, time.perf_counter() - started
