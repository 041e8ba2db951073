"""`tacoma bench`: the mobile-agent benchmark suite, run against tacoma places.

The suite (`_suite`) is the paper's micro-benchmarks and micro-kernels; `run` starts the
places (four local ones unless given addresses), runs the benchmarks asked for at the
loop sizes of the mode (quick or full), and `table` prints the result in the shape of
Table 8 of the paper, with the paper's Concordia, Aglets and Voyager figures (`_paper`) in
columns of their own. benchmarks/test_suite.py runs the same code under pytest-benchmark.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import ExitStack

from .. import TacomaError
from ._paper import SYSTEMS, TABLE_8, UNITS
from ._suite import BENCHMARKS, BenchmarkFailed, Context, Measured, Run, dumps, languages, measure

__all__ = ["BENCHMARKS", "BenchmarkFailed", "Context", "Measured", "Plan", "dumps",
           "languages", "plan", "run", "table"]

#: Loop sizes and the sustained run's length, per mode. The paper's loop sizes run from 1
#: to 1000 (hops: 4 to 4000); quick keeps the shape at a size that runs in under a minute.
FULL_SIZES = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
QUICK_SIZES = [1, 10, 30]
FULL_SUSTAIN, QUICK_SUSTAIN = 10.0, 1.0
#: ROAM's loop size is hops, in whole rounds of its four places.
ROAM_SIZES = {"full": [4, 40, 400, 4000], "quick": [4, 40]}

#: Rough seconds per activity on a 2-core machine, for the full run's estimate only.
_COST = {"CL": 0.004, "CR": 0.004, "AD": 0.004, "MSG-1W": 0.0005, "MSG-2W": 0.0007,
         "SYNCH": 0.001, "MSG-MA": 0.05, "ROAM": 0.02, "PROXY": 0.003, "FORW-MSG": 0.002,
         "FORW-MSG-6": 0.002, "FORW-MSG-12": 0.002, "FORW-MA": 0.01}
#: Places' settings for the suite: room for the agents that AD and FORW-MA pile up.
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


#: Isolation settings of the local places (`tacoma place` flags).
ISOLATION = {"default": (), "same-uid": ("--same-uid",), "no-pool": ("--pool-size", "0")}


def run(the_plan: Plan, places: list[str] | None = None, language: str = "python",
        clients: int = 3, progress: Callable[[str], None] = lambda _: None, *,
        servers: int = 3, agent_bytes: int = 0, message_bytes: int = 1,
        isolation: str = "default") -> list[Measured]:
    """Run the plan at `places` (four addresses), or at four local places started here
    with the `isolation` setting."""
    from .. import local_places

    with ExitStack() as stack:
        local = not places
        if not places:
            progress(f"starting 4 local places ({isolation} isolation)")
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
        for i, name in enumerate(the_plan.names, 1):
            progress(f"[{i}/{len(the_plan.names)}] {name}")
            try:
                results.append(measure(ctx, name, the_plan.sizes(name), the_plan.sustain,
                                       progress))
                results[-1].parameters["isolation"] = isolation if local else "given places"
            except (BenchmarkFailed, TacomaError) as exc:  # reported, and the suite goes on
                progress(f"{name} FAILED: {exc}")
                results.append(Measured(name, UNITS[name], [], Run(0, 0, 0.0), "",
                                        failure=f"{type(exc).__name__}: {exc}"))
            spent_planned += the_plan.estimate(name)
            elapsed = time.monotonic() - started
            left = (planned - spent_planned) * elapsed / spent_planned
            if i < len(the_plan.names):
                progress(f"{elapsed:.0f} s so far; about {left:.0f} s to go")
        return results


def _rate(value: float) -> str:
    if math.isnan(value):
        return "FAILED"
    if math.isinf(value):
        return "inf"
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def table(results: list[Measured]) -> str:
    """Our peak and sustained rates beside the paper's (Table 8's shape)."""
    header = ["benchmark", "unit", "tacoma peak", "tacoma sust."]
    for system in SYSTEMS:
        header += [f"{system} peak", f"{system} sust."]
    rows = [header]
    for result in results:
        row = [result.name, UNITS[result.name], _rate(result.peak_rate),
               _rate(result.sustained_rate)]
        paper = TABLE_8.get(result.name, {})
        for system in SYSTEMS:
            peak, sustained = paper.get(system, (math.nan, math.nan))
            row += ["-" if math.isnan(peak) else _rate(peak),
                    "-" if math.isnan(sustained) else _rate(sustained)]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in
                 enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines += [f"{r.name} failed: {r.failure}" for r in results if r.failure]
    return "\n".join(lines)


def details(results: list[Measured]) -> str:
    """Total and average time per loop size, per benchmark, and what was checked."""
    lines = []
    for result in results:
        if result.failure:
            lines.append(f"{result.name}: failed: {result.failure}")
            continue
        lines.append(f"{result.name} ({result.unit}; checked: {result.checked})")
        for r in [*result.runs, result.sustained]:
            label = "sustained" if r is result.sustained else f"n={r.size}"
            lines.append(f"  {label:>14}  total {r.seconds * 1000:11,.1f} ms  "
                         f"average {r.average * 1000:9,.3f} ms  rate {_rate(r.rate)}")
    return "\n".join(lines)
