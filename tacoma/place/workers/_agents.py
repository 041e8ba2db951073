"""The agents a place can meet, and how a name finds one (TACOMA's step 6, locate agent).

A name is one of the place's own agents (BUILT_IN: answered by the place, no worker), an
interpreter's agent (ag_python: the program comes in the CODE folder), an agent installed
in STATE/agents (`tacoma install`: its program is the file, its interpreter told by the
file's suffix), or a trusted agent in STATE/trusted, run by the place itself (_trusted).
Languages come from the discovered interpreters; the place names none.
A name the place does not have is answered with the closest names it has (did you mean),
in the error itself, so that the Python API and the CLI alike say it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...agent._interpreter import Interpreter
from ...wire._errors import MeetError, PlaceUnavailable, UnknownAgent
from ...wire._names import BUILT_IN
from ._pool import WorkerPool
from ._trusted import Trusted, TrustedAgent
from ._warm import WarmWorkers

__all__ = ["Agents", "BuiltInAgent", "Found", "PooledAgent", "TrustedRun"]


@dataclass(frozen=True, slots=True)
class BuiltInAgent:
    """One of the place's own agents (BUILT_IN): answered by the place, no worker."""

    name: str


@dataclass(frozen=True, slots=True)
class TrustedRun:
    """An agent installed with --trusted: run in the place's own process (_trusted)."""

    agent: TrustedAgent


@dataclass(frozen=True, slots=True)
class PooledAgent:
    """An agent run in a worker of `pool`: an interpreter's (its program in CODE), or one
    installed in STATE/agents (`installed`: its program)."""

    pool: WorkerPool
    installed: bytes | None = None


#: What a name finds (Agents.resolve): how the place runs that agent.
Found = BuiltInAgent | TrustedRun | PooledAgent


class Agents:
    """The agents of one place: its interpreters, their worker pools, installed agents."""

    def __init__(self, agents_dir: Path, interpreters: dict[str, Interpreter], address: str,
                 resident_names: Callable[[], list[str]], trusted_dir: Path,
                 max_bytes: int, warm: WarmWorkers) -> None:
        self.agents_dir = agents_dir
        self.interpreters = interpreters  # by agent name, as discovered
        self.pools: dict[str, WorkerPool] = {}  # by agent name, for languages that run here
        self.warm = warm  # their workers kept warm, for later meets of a principal's program
        self.address = address
        self.resident_names = resident_names
        #: Agents installed with --trusted, run in the place's own process.
        self.trusted = Trusted(trusted_dir, interpreters, address, max_bytes)

    def names(self) -> list[str]:
        """Every agent this place can meet now: built-in, interpreters, installed."""
        installed = sorted({*(p.stem for p in self._installed_files()), *self.trusted.names()})
        return [*BUILT_IN, *sorted(self.pools), *installed]

    def _installed_files(self) -> list[Path]:
        suffixes = {s for i in self.interpreters.values() for s in i.suffixes}
        try:
            return [p for p in self.agents_dir.iterdir()
                    if p.suffix in suffixes and p.is_file()]
        except OSError:
            return []

    def has(self, name: str) -> bool:
        """Whether the place has an agent called `name` (built in, a language, installed)."""
        try:
            self.resolve(name)
        except UnknownAgent:
            return False
        except MeetError:  # a language that cannot run here: the name is still taken
            return True
        return True

    def resolve(self, agent: str) -> Found:
        """How the place runs `agent`: itself (a built-in, or a trusted agent), or in a
        worker of a pool (with the program of an installed agent). UnknownAgent lists what
        the place has."""
        if agent in BUILT_IN:
            return BuiltInAgent(agent)
        pool = self.pools.get(agent)
        if pool is not None:
            return PooledAgent(pool)
        if (trusted := self.trusted.get(agent)) is not None:
            return TrustedRun(trusted)
        if "/" not in agent and not agent.startswith("."):
            for interpreter in self.interpreters.values():
                for suffix in interpreter.suffixes:
                    path = self.agents_dir / f"{agent}{suffix}"
                    try:
                        if path.is_file() and interpreter.agent in self.pools:
                            return PooledAgent(self.pools[interpreter.agent],
                                               path.read_bytes())
                    except OSError:  # a name too long for a file, say: not installed
                        continue
        if (trusted := self.trusted.look_again(agent)) is not None:  # installed since
            return TrustedRun(trusted)
        if agent in self.interpreters:
            reason = self.interpreters[agent].check() or "its worker pool is not running"
            raise PlaceUnavailable(f"agent {agent} cannot run at this place: {reason}")
        names, resident_names = self.names(), sorted(self.resident_names())
        # A name without "ag_" is a resident's (`tacoma send echo@...`): guess among names
        # of its kind, or "echo" gets "did you mean ag_echo?", which is no resident.
        if agent.startswith("ag_"):
            what, candidates = "agent", names
        else:
            what = "agent or resident"
            candidates = [*resident_names, *(n for n in names if not n.startswith("ag_"))]
        # One guess: names share their "ag_", which makes weak second guesses look close.
        close = difflib.get_close_matches(agent, candidates, n=1, cutoff=0.7)
        guess = f"; did you mean {close[0]}?" if close else ""
        raise UnknownAgent(f"no {what} {agent!r} at place {self.address}{guess}",
                           "agents here: " + ", ".join(names)
                           + "; resident agents: " + (", ".join(resident_names) or "none"))
