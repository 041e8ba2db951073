"""`tacoma bench breakdown`: the median of each step of a meet's critical path, beside
TACOMA v1.3's Table 1 (seed 000: 13 steps, 21,675 µs in all).

N traced meets (tacoma.trace, see tacoma/wire/_trace.py) of a minimal Python agent at a local
place, from a pooled worker, 0.1 s apart (untimed) so that the pool is refilled and the
place unloaded, as a single meet in TACOMA's measurements.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

from .. import local_places, trace
from ..wire._trace import TACOMA_STEPS, TACOMA_UNMATCHED
from ._paper import TACOMA_MEET_US

__all__ = ["breakdown", "breakdown_table"]


def breakdown(meets: int, agent: str = "ag_python", code: str = "pass",
              place: str | None = None) -> tuple[dict[tuple[str, str], float], float]:
    """Median µs per (side, step) over `meets` traced meets, and the median total."""
    steps: dict[tuple[str, str], list[float]] = defaultdict(list)
    totals = []

    def run(address: str) -> None:
        trace(f"{agent}@{address}", code=code)  # warm: connection, first worker
        for _ in range(meets):
            time.sleep(0.1)
            timed = trace(f"{agent}@{address}", {"DATA": [b"x" * 42]}, code=code)
            if timed.briefcase.folder("DATA") != [b"x" * 42]:
                raise RuntimeError("the traced meet returned another briefcase")
            for side, step, seconds in timed.steps:
                steps[(side, step)].append(seconds * 1e6)
            totals.append(timed.total * 1e6)

    if place is not None:
        run(place)
    else:
        with local_places(1) as places:
            run(places.addresses[0])
    return ({key: statistics.median(values) for key, values in steps.items()},
            statistics.median(totals))


def breakdown_table(medians: dict[tuple[str, str], float], total: float) -> str:
    rows = [("side", "step", "tacoma µs", "TACOMA 1.3 step", "µs")]
    for key, value in medians.items():
        theirs, their_us = TACOMA_STEPS.get(key, ("", 0))
        rows.append((key[0], key[1], f"{value:,.1f}", theirs,
                     f"{their_us:,}" if theirs else ""))
    rows.append(("", "(connection kept)", "-", TACOMA_UNMATCHED[0], f"{TACOMA_UNMATCHED[1]:,}"))
    rows.append(("", "total (median meet)", f"{total:,.1f}", "total", f"{TACOMA_MEET_US:,}"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(c.rjust(w) if i in (2, 4) else c.ljust(w)
                               for i, (c, w) in enumerate(zip(row, widths, strict=True))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
