"""`tacoma bench`: the mobile-agent benchmark suite, run against tacoma places.

The suite (`_suite`) is the paper's micro-benchmarks and micro-kernels; `run` starts the
places (four local ones unless given addresses), runs the benchmarks asked for at the
loop sizes of the mode (quick or full), showing its progress (tacoma.display.progress), and
`table` prints the result in the shape of Table 8 of the paper, with the paper's Concordia,
Aglets and Voyager figures (`_paper`) in columns of their own, through tacoma.display's
one table helper, with notes under it saying whose figures are whose, and why any that
failed did. A failed benchmark is a row of its own (FAILED, the reason in a note), an entry
in the JSON and a labelled plot: never left out. Between two benchmarks the run waits
until the local places it started are quiet (`_quiet`: no meet running or queued), so
that one benchmark's agents never crowd the next one's out of its share of a place.
benchmarks/test_suite.py runs the same code under pytest-benchmark.
"""

from __future__ import annotations

import math
import time
from contextlib import ExitStack
from typing import IO

from .. import NotAllowed, TacomaError
from ..display import Progress
from ..display import table as show_table
from ._paper import SYSTEMS, TABLE_8, UNITS
from ._suite import (
    BENCHMARKS,
    BenchmarkFailed,
    Context,
    Measured,
    RunInfo,
    dumps,
    languages,
    measure,
)

__all__ = ["BENCHMARKS", "BenchmarkFailed", "Context", "Measured", "Plan", "RunInfo", "dumps",
           "languages", "plan", "run", "table", "table_rows"]

#: Loop sizes and the sustained run's length, per mode. The paper's loop sizes run from 1
#: to 1000 (hops: 4 to 4000); quick keeps the shape (four points of a curve, three for
#: ROAM, and the sustained run) at a size that runs in well under a minute.
FULL_SIZES = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
QUICK_SIZES = [1, 3, 10, 30]
FULL_SUSTAIN, QUICK_SUSTAIN = 10.0, 1.0
#: ROAM's loop size is hops, in whole rounds of its four places.
ROAM_SIZES = {"full": [4, 40, 400, 4000], "quick": [4, 12, 40]}
#: How long the run waits for its local places to be quiet after a benchmark.
QUIET_SECONDS = 60.0

#: Rough seconds per activity on a 2-core machine, for the full run's estimate only.
_COST = {"CL": 0.004, "CR": 0.004, "AD": 0.004, "MSG-1W": 0.0005, "MSG-2W": 0.0007,
         "SYNCH": 0.001, "MSG-MA": 0.05, "ROAM": 0.02, "PROXY": 0.003, "FORW-MSG": 0.002,
         "FORW-MSG-6": 0.002, "FORW-MSG-12": 0.002, "FORW-MA": 0.01}
#: Places' settings for the suite: room for the agents that AD and FORW-MA dispatch (each
#: principal may run a quarter of --max-meets, 32: Context.in_flight stays under it).
PLACE_FLAGS = ("--max-meets", "128", "--pool-size", "4")


class Plan:
    """What a run will do: benchmarks, loop sizes, sustained length; and its estimate."""

    def __init__(self, names: list[str], quick: bool) -> None:
        unknown = [n for n in names if n not in BENCHMARKS]
        if unknown:
            raise ValueError(f"no benchmark {', '.join(unknown)}; the suite has "
                             + ", ".join(BENCHMARKS))
        self.names = names or list(BENCHMARKS)
        self.quick = quick
        self.sustain = QUICK_SUSTAIN if quick else FULL_SUSTAIN

    def sizes(self, name: str) -> list[int]:
        if name == "ROAM":
            return ROAM_SIZES["quick" if self.quick else "full"]
        return QUICK_SIZES if self.quick else FULL_SIZES

    def estimate(self, name: str) -> float:
        """Seconds `name` should take: its activities at nominal cost, the sustained run,
        and a second of set-up."""
        return _COST[name] * sum(self.sizes(name)) + self.sustain + 1.0


def plan(names: list[str], quick: bool) -> Plan:
    return Plan(names, quick)


def run_info(the_plan: Plan, places: list[str] | None = None, language: str = "python",
             isolation: str = "default") -> RunInfo:
    """The context of a run of `the_plan` starting now (for the JSON and the plots)."""
    if places:
        return RunInfo.now(language, "given places", "given places", the_plan.quick)
    return RunInfo.now(language, isolation, "4 local places", the_plan.quick)


#: Isolation settings of the local places (`tacoma place` flags).
ISOLATION = {"default": (), "same-uid": ("--same-uid",), "no-pool": ("--pool-size", "0")}


def run(the_plan: Plan, places: list[str] | None = None, language: str = "python",
        clients: int = 3, progress: Progress | None = None, *,
        servers: int = 3, agent_bytes: int = 0, message_bytes: int = 1,
        isolation: str = "default") -> list[Measured]:
    """Run the plan at `places` (four addresses), or at four local places started here
    with the `isolation` setting. `progress` shows how far it is (by default a bar in a
    terminal or a notebook, nothing elsewhere; see tacoma.display.progress)."""
    from .. import local_places

    bar = progress or Progress(len(the_plan.names), "tacoma bench")
    with ExitStack() as stack:
        if progress is None:
            stack.enter_context(bar)
        local = not places
        if not places:
            bar.note(f"starting 4 local places ({isolation} isolation)")
            flags = (*PLACE_FLAGS, *ISOLATION[isolation])
            if isolation == "no-pool":  # the last --pool-size given wins
                flags = (*flags[:2], *ISOLATION[isolation])
            places = stack.enter_context(local_places(4, *flags)).addresses
        if len(places) < 4:
            raise ValueError("the suite needs four places (A, B, C, D)")
        ctx = Context(list(places), language, clients, servers, agent_bytes, message_bytes)
        results = []
        started = time.monotonic()
        planned = sum(the_plan.estimate(n) for n in the_plan.names)
        spent_planned = 0.0
        count = len(the_plan.names)
        for i, name in enumerate(the_plan.names, 1):
            bar.update(description=f"[{i}/{count}] {name}")

            def step(line: str, i: int = i) -> None:
                bar.update(description=f"[{i}/{count}] {line}")

            result = measure(ctx, name, the_plan.sizes(name), the_plan.sustain, step)
            result.parameters["isolation"] = isolation if local else "given places"
            if local:  # the next benchmark starts at quiet places, whatever this one left
                leftover = _quiet(places, QUIET_SECONDS)
                if leftover:
                    result.failure = (f"{result.failure}; and {leftover}" if result.failure
                                      else leftover)
            if result.failure:  # reported, and the suite goes on
                bar.note(f"{name} FAILED: {result.short_failure}")
            results.append(result)
            spent_planned += the_plan.estimate(name)
            elapsed = time.monotonic() - started
            left = (planned - spent_planned) * elapsed / spent_planned
            bar.advance()
            if i < count:
                bar.note(f"{elapsed:.0f} s so far; about {left:.0f} s to go")
        return results


def _quiet(places: list[str], seconds: float) -> str:
    """Wait until no meet is running or queued at `places` (the run's own local places,
    whose administrator it is: nothing else meets there); "" once they are (or if it may
    not ask), else what was still there after `seconds`."""
    from .. import place_status

    deadline = time.monotonic() + seconds
    pause = 0.01
    while True:
        busy = []
        for address in places:
            try:
                found = place_status(address)
            except NotAllowed:  # not its administrator: its own meets were waited for
                return ""
            except TacomaError as exc:
                return f"could not ask place {address} whether its meets ended: {exc}"
            if found.running or found.queued:
                busy.append(f"{found.running} running and {found.queued} queued at "
                            f"{address}")
        if not busy:
            return ""
        if time.monotonic() + pause > deadline:
            return (f"its meets had not ended {seconds:.0f} s after it did: "
                    + "; ".join(busy))
        time.sleep(pause)  # meets end in their own time: no event of theirs reaches us
        pause = min(0.25, pause * 2)


def _rate(value: float) -> str:
    if math.isnan(value):
        return "FAILED"
    if math.isinf(value):
        return "inf"
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


#: What the table's reader needs to know, printed under it.
TABLE_NOTES = (
    "The Concordia, Aglets and Voyager columns are quoted from the paper (Dikaiakos, "
    "Kyriakou and Samaras, Table 8: Pentium III 500 MHz, Windows NT, JRE 1.1.7, 100 Mbps "
    "Ethernet), never measured here; tacoma's are this run's.",
    "Peak is the best rate of any loop size and of the sustained run, so where the "
    "sustained run was the fastest the two are equal.",
)


def table_rows(results: list[Measured]) -> tuple[list[str], list[list[str]]]:
    """The headers and rows of the table: our peak and sustained rates beside the paper's
    (Table 8's shape)."""
    header = ["benchmark", "unit", "tacoma peak", "tacoma sust."]
    for system in SYSTEMS:
        header += [f"{system} peak", f"{system} sust."]
    rows = []
    for result in results:
        row = [result.name, UNITS[result.name], _rate(result.peak_rate),
               _rate(result.sustained_rate)]
        paper = TABLE_8.get(result.name, {})
        for system in SYSTEMS:
            peak, sustained = paper.get(system, (math.nan, math.nan))
            row += ["-" if math.isnan(peak) else _rate(peak),
                    "-" if math.isnan(sustained) else _rate(sustained)]
        rows.append(row)
    return header, rows


def table(results: list[Measured], file: IO[str] | None = None) -> None:
    """Print the table (on stdout, or `file`), the notes and any failures under it."""
    header, rows = table_rows(results)
    notes = [*TABLE_NOTES, *(f"{r.name} failed: {r.short_failure}" for r in results
                             if r.failure)]
    show_table(header, rows, right=header[2:], notes=notes, file=file)


def details(results: list[Measured]) -> str:
    """Total and average time per loop size, per benchmark, and what was checked."""
    lines = []
    for result in results:
        if result.failure:
            lines.append(f"{result.name}: failed: {result.failure}")
            if not result.runs:
                continue
            lines.append("  done before it failed (no rate is reported):")
        else:
            lines.append(f"{result.name} ({result.unit}; checked: {result.checked})")
        done = [*result.runs, *([result.sustained] if result.sustained else [])]
        for r in done:
            label = "sustained" if r is result.sustained else f"n={r.size}"
            lines.append(f"  {label:>14}  total {r.seconds * 1000:11,.1f} ms  "
                         f"average {r.average * 1000:9,.3f} ms  rate {_rate(r.rate)}")
    return "\n".join(lines)
