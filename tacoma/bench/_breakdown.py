"""`tacoma bench breakdown`: the median of each step of a meet's critical path, beside
TACOMA v1.3's Table 1 (seed 000: 13 steps, 21,675 µs in all).

N traced meets (tacoma.trace, see tacoma/wire/_trace.py) of a minimal Python agent at a local
place, from a pooled worker, 0.1 s apart (untimed) so that the pool is refilled and the
place unloaded, as a single meet in TACOMA's measurements.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections import defaultdict
from typing import IO

from .. import local_places, trace
from ..display import Progress
from ..display import table as show_table
from ..wire._trace import TACOMA_STEPS, TACOMA_UNMATCHED
from ._paper import TACOMA_MEET_US

__all__ = ["breakdown", "breakdown_table"]


def breakdown(meets: int, agent: str = "ag_python", code: str = "pass",
              place: str | None = None, progress: Progress | None = None,
              ) -> tuple[dict[tuple[str, str], float], float]:
    """Median µs per (side, step) over `meets` traced meets, and the median total;
    `progress` counts the meets (by default a bar in a terminal or a notebook)."""
    steps: dict[tuple[str, str], list[float]] = defaultdict(list)
    totals = []
    bar = progress or Progress(meets, "traced meets")

    def run(address: str) -> None:
        trace(f"{agent}@{address}", code=code)  # warm: connection, first worker
        bar.update(total=meets, description="traced meets")
        for _ in range(meets):
            time.sleep(0.1)
            timed = trace(f"{agent}@{address}", {"DATA": [b"x" * 42]}, code=code)
            if timed.briefcase.folder("DATA") != [b"x" * 42]:
                raise RuntimeError("the traced meet returned another briefcase")
            for side, step, seconds in timed.steps:
                steps[(side, step)].append(seconds * 1e6)
            totals.append(timed.total * 1e6)
            bar.advance()

    with bar if progress is None else contextlib.nullcontext():
        if place is not None:
            run(place)
        else:
            bar.update(description="starting a local place")
            with local_places(1) as places:
                run(places.addresses[0])
    return ({key: statistics.median(values) for key, values in steps.items()},
            statistics.median(totals))


def breakdown_table(medians: dict[tuple[str, str], float], total: float,
                    file: IO[str] | None = None) -> None:
    """Print our median steps beside TACOMA 1.3's (on stdout, or `file`)."""
    rows = []
    for key, value in medians.items():
        theirs, their_us = TACOMA_STEPS.get(key, ("", 0))
        rows.append((key[0], key[1], f"{value:,.1f}", theirs,
                     f"{their_us:,}" if theirs else ""))
    rows.append(("", "(connection kept)", "-", TACOMA_UNMATCHED[0], f"{TACOMA_UNMATCHED[1]:,}"))
    rows.append(("", "total (median meet)", f"{total:,.1f}", "total", f"{TACOMA_MEET_US:,}"))
    show_table(("side", "step", "tacoma µs", "TACOMA 1.3 step", "µs"), rows,
               right=("tacoma µs", "µs"), file=file,
               notes=["The TACOMA 1.3 columns are quoted from Johansen, Sudmann and van "
                      "Renesse, Performance issues in TACOMA, Table 1; never measured here."])
