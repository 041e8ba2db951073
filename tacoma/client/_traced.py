"""Traced meets from the client: a sync meet, and where its time went on every side.

A meet is traced when its briefcase carries a TRACE folder (see wire._trace): the client,
the place and the worker each time their own steps and put them into the result. `atrace`
asks for that, reads the steps back out, and adds the one step only the caller can time:
the connection (cached, or new).
"""

from __future__ import annotations

import dataclasses
import html
import io
import time
from typing import IO

from ..display import html_table, table
from ..wire._briefcase import TRACE, Briefcase
from ..wire._text import escape
from ..wire._trace import read
from ._api import Folders, make_briefcase
from ._client import connection, meet_deadline, place_of

__all__ = ["Traced", "atrace", "trace"]


@dataclasses.dataclass(repr=False)
class Traced:
    """A traced meet's result and where its time went: (side, step, seconds) in order of
    the meet's path (see tacoma/wire/_trace.py), and the whole meet's seconds.

    `table()` prints the steps as `tacoma meet --trace` does, `str()` is that table, and a
    notebook shows the table beside a bar chart of the steps (inline SVG: nothing to
    install).
    """

    briefcase: Briefcase
    steps: list[tuple[str, str, float]]
    total: float

    HEADERS = ("side", "step", "µs")

    def rows(self) -> list[tuple[str, str, str]]:
        """The table's rows: each step's µs, then the total."""
        return [*((side, step, f"{seconds * 1e6:,.1f}") for side, step, seconds in self.steps),
                ("", "total", f"{self.total * 1e6:,.1f}")]

    def table(self, file: IO[str] | None = None) -> None:
        """Print the steps and the total, in µs (on stdout, or `file`)."""
        table(self.HEADERS, self.rows(), right=["µs"], file=file)

    def __str__(self) -> str:
        out = io.StringIO()
        self.table(file=out)
        return out.getvalue().rstrip("\n")

    def __repr__(self) -> str:
        return (f"Traced(total={self.total * 1e3:,.3f} ms, {len(self.steps)} steps, "
                f"briefcase={self.briefcase!r})")

    def _repr_html_(self) -> str:
        caption = f"traced meet: {self.total * 1e6:,.1f} µs in all"
        return ("<div style='display:flex;gap:2em;align-items:flex-start'>"
                f"{html_table(self.HEADERS, self.rows(), caption=caption)}"
                f"{self.chart()}</div>")

    def chart(self) -> str:
        """The steps as horizontal bars (SVG), one colour per side, scaled to the longest."""
        bar_x, width, row = 190, 260, 18
        longest = max((seconds for _, _, seconds in self.steps), default=0.0) or 1.0
        parts = []
        for i, (side, step, seconds) in enumerate(self.steps):
            y = i * row
            length = max(1.0, width * seconds / longest)
            colour = _SIDE_COLOURS.get(side, "#7f7f7f")
            label = html.escape(escape(f"{side} {step}"))  # a place's and a worker's words
            parts.append(
                f"<text x='{bar_x - 6}' y='{y + 13}' text-anchor='end'>{label}</text>"
                f"<rect x='{bar_x}' y='{y + 3}' width='{length:.1f}' height='{row - 6}' "
                f"fill='{colour}'><title>{label}: {seconds * 1e6:,.1f} µs</title></rect>"
                f"<text x='{bar_x + length + 4:.1f}' y='{y + 13}'>{seconds * 1e6:,.1f}</text>")
        height = max(1, len(self.steps)) * row + 4
        return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{bar_x + width + 70}' "
                f"height='{height}' font-family='sans-serif' font-size='11'>"
                f"{''.join(parts)}</svg>")


#: The bars' colours, one per side of the meet's path.
_SIDE_COLOURS = {"client": "#1f77b4", "place": "#ff7f0e", "worker": "#2ca02c"}


#: The order of steps in a Traced (others, a language's own, come after their side's).
_ORDER = ["client marshal", "client connect or reuse", "client send", "place examine",
          "place find agent", "place take worker", "place hand to worker",
          "worker receive and unmarshal", "worker start", "worker run", "worker return",
          "client transfer"]


async def atrace(target: str, briefcase: Folders = None, *, code: str | bytes | None = None,
                 timeout: float | None = None, connect_timeout: float | None = 10.0) -> Traced:
    """A sync meet, traced: the result and the time of each step on the client, the place
    and the agent's worker, after TACOMA's Table 1 (see tacoma/wire/_trace.py)."""
    bc = make_briefcase(briefcase, code)
    bc[TRACE] = []
    agent, address = await place_of(target)
    started = time.perf_counter_ns()
    async with meet_deadline(timeout, f"meet {target} did not finish") as deadline:
        client = await connection(address, connect_timeout, deadline.until)
        reused = time.perf_counter_ns()
        result = await client.meet(agent, bc, "sync", timeout)
    total = time.perf_counter_ns() - started
    assert isinstance(result, Briefcase)
    steps = {f"{side} {step}": ns for side, step, ns in read(result)}
    steps.pop("place span", 0)  # the client's transfer is what is left of its wait
    steps["client connect or reuse"] = reused - started
    ordered = sorted(steps, key=lambda k: _ORDER.index(k) if k in _ORDER else len(_ORDER))
    timed = []
    for key in ordered:
        side, step = key.split(" ", 1)
        timed.append((side, step, steps[key] / 1e9))
    return Traced(result, timed, total / 1e9)


def trace(target: str, briefcase: Folders = None, *, code: str | bytes | None = None,
          timeout: float | None = None, connect_timeout: float | None = 10.0) -> Traced:
    """Blocking `atrace`."""
    from ._runtime import run_blocking

    return run_blocking(atrace(target, briefcase, code=code, timeout=timeout,
                               connect_timeout=connect_timeout))
