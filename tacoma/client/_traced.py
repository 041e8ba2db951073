"""Traced meets from the client: a sync meet, and where its time went on every side.

A meet is traced when its briefcase carries a TRACE folder (see wire._trace): the client,
the place and the worker each time their own steps and put them into the result. `atrace`
asks for that, reads the steps back out, and adds the one step only the caller can time:
the connection (cached, or new).
"""

from __future__ import annotations

import dataclasses
import time

from ..wire._briefcase import TRACE, Briefcase
from ..wire._trace import read
from ._api import Folders, make_briefcase
from ._client import connection, meet_deadline, place_of

__all__ = ["Traced", "atrace", "trace"]


@dataclasses.dataclass
class Traced:
    """A traced meet's result and where its time went: (side, step, seconds) in order of
    the meet's path (see tacoma/wire/_trace.py), and the whole meet's seconds."""

    briefcase: Briefcase
    steps: list[tuple[str, str, float]]
    total: float

    def table(self) -> str:
        lines = [f"{'side':<7} {'step':<22} {'µs':>10}"]
        for side, step, seconds in self.steps:
            lines.append(f"{side:<7} {step:<22} {seconds * 1e6:>10,.1f}")
        lines.append(f"{'':<7} {'total':<22} {self.total * 1e6:>10,.1f}")
        return "\n".join(lines)


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
    async with meet_deadline(timeout, f"meet {target} did not finish"):
        client = await connection(address, connect_timeout)
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
