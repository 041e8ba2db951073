"""Trusted agents: run in the place's own process, with no worker (PAN's in-kernel mode).

Every agent runs in a worker of its own, isolated by the operating system, unless whoever
runs the place installed it with `tacoma install --trusted` (into STATE/trusted). A trusted
agent is a service the place's owner vouches for, such as a directory or a cache: the place
loads its program once, through the interpreter that can run programs in the place's own
process (InProcess: only the place's own language has one; the kernel names none), and
calls it for each meet with it. It keeps its state between meets, costs no process, and
has the place's whole power: nothing isolates it, limits it or stops it.

So a trusted agent must be quick: a plain function runs on the place's event loop and holds
every other meet up while it runs (a sync meet with one is answered at once, as ag_echo
is); one that returns an awaitable is awaited, bounded by the meet's timeout. Whatever it
raises is its meet's error (AgentFailed, or the tacoma error it raised), and the place goes
on. The --allow rules apply to a trusted agent as to any.

The directory is read when the place starts, again when a meet names an agent the place
does not have, and at most once a second for changed files: an agent installed while the
place runs is met at once, and an updated one is loaded again (its state starts afresh).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ...agent._interpreter import InProcess, Interpreter
from ...wire._briefcase import Briefcase
from ...wire._errors import (
    AgentFailed,
    LimitExceeded,
    MeetTimeout,
    PlaceUnavailable,
    TacomaError,
)
from ...wire._names import RESERVED_AGENTS

__all__ = ["Trusted", "TrustedAgent"]

log = logging.getLogger("tacoma.place")

#: How often, at most, the directory is read again for changed agents (seconds).
RESCAN_EVERY = 1.0
#: How soon it is read again for a name nothing at the place has (a burst of meets with
#: unknown names reads it once, not once each).
RELOOK_AFTER = 0.05


@dataclass
class TrustedAgent:
    name: str
    path: Path
    #: What tells a changed file: (inode, size, mtime in ns).
    stamp: tuple[int, int, int]
    #: Its meet function, or None if it could not be loaded (then `problem` says why).
    call: Callable[..., object] | None
    problem: str = ""
    #: Whether `call` answers without awaiting (a sync meet with it is answered inline);
    #: False once it returned an awaitable.
    plain: bool = True
    meets: int = 0


def _awaits(call: Callable[..., object]) -> bool:
    """Whether `call` is known to return an awaitable (an async def, or an object whose
    __call__ is one); a wrapper that returns one is found out at its first meet."""
    return (inspect.iscoroutinefunction(call)
            or inspect.iscoroutinefunction(type(call).__call__))


class Trusted:
    """The trusted agents of one place, by name."""

    def __init__(self, directory: Path, interpreters: Mapping[str, Interpreter],
                 address: str, max_bytes: int) -> None:
        self.directory = directory
        self.address = address
        #: The most bytes a result may hold (the place's --max-briefcase).
        self.max_bytes = max_bytes
        #: The in-process loaders, by the suffix of the files they load.
        self.loaders: dict[str, InProcess] = {
            suffix: i.in_process for i in interpreters.values() if i.in_process is not None
            for suffix in i.suffixes}
        #: Names a trusted agent cannot take: the place's own and its languages' agents.
        self.taken_names = frozenset({*RESERVED_AGENTS, *interpreters})
        self.agents: dict[str, TrustedAgent] = {}
        self._scanned = 0.0
        self.scan()

    def scan(self) -> None:
        """Load what is new or changed in the directory; forget what is gone."""
        self._scanned = time.monotonic()
        found: dict[str, Path] = {}
        try:
            for path in sorted(self.directory.iterdir()):
                name = path.stem
                if path.suffix not in self.loaders or not name.isidentifier() \
                        or name in self.taken_names or name in found or not path.is_file():
                    continue  # `tacoma install` writes no such file; a hand-made one is ignored
                found[name] = path
        except OSError:
            pass  # no directory: no trusted agents
        for name in [n for n in self.agents if n not in found]:
            log.info("trusted agent %s is gone", name)
            del self.agents[name]
        for name, path in found.items():
            try:
                info = path.stat()
            except OSError:
                continue
            stamp = (info.st_ino, info.st_size, info.st_mtime_ns)
            known = self.agents.get(name)
            if known is None or known.stamp != stamp or known.path != path:
                self.agents[name] = self._load(name, path, stamp)

    def _load(self, name: str, path: Path, stamp: tuple[int, int, int]) -> TrustedAgent:
        try:
            # By its whole path: its tracebacks show its lines, read from the file.
            call = self.loaders[path.suffix].load(path.read_bytes(), str(path),
                                                  {"place": self.address})
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - even SystemExit: the place goes on
            log.error("trusted agent %s cannot be loaded: %s", name, exc)
            return TrustedAgent(name, path, stamp, None, str(exc) or type(exc).__name__)
        log.info("trusted agent %s loaded from %s", name, path)
        return TrustedAgent(name, path, stamp, call, plain=not _awaits(call))

    def get(self, name: str) -> TrustedAgent | None:
        """The trusted agent called `name`, if there is one (its file read again if it
        changed, at most once a second)."""
        if time.monotonic() - self._scanned >= RESCAN_EVERY and self.agents:
            self.scan()
        return self.agents.get(name)

    def look_again(self, name: str) -> TrustedAgent | None:
        """For a name nothing else at the place has: read the directory now (an agent just
        installed), unless it was read a moment ago."""
        if name not in self.agents and time.monotonic() - self._scanned >= RELOOK_AFTER:
            self.scan()
        return self.agents.get(name)

    def names(self) -> list[str]:
        return sorted(self.agents)

    def call(self, agent: TrustedAgent, briefcase: Briefcase, principal: str) -> object:
        """Call the agent's meet: its result as returned (perhaps an awaitable)."""
        if agent.call is None:
            raise PlaceUnavailable(f"trusted agent {agent.name} cannot run at this place: "
                                   f"{agent.problem}")
        agent.meets += 1
        try:
            return agent.call(briefcase, principal)
        except TacomaError:
            raise
        except BaseException as exc:  # noqa: BLE001 - its failure is its meet's, never the place's
            raise self._failed(agent, exc) from None

    def result(self, agent: TrustedAgent, briefcase: Briefcase, returned: object) -> Briefcase:
        """The meet's result from what the agent returned (None: `briefcase` as it left it),
        checked as a worker's result is: bytes in every folder, within --max-briefcase."""
        if returned is None:
            returned = briefcase
        if not isinstance(returned, Briefcase):
            raise AgentFailed(f"trusted agent {agent.name} returned a "
                              f"{type(returned).__name__}, not a Briefcase (or None, for the "
                              "briefcase it was given)")
        try:
            returned.to_wire()
        except (TypeError, ValueError) as exc:
            raise AgentFailed(f"trusted agent {agent.name} returned a briefcase that cannot "
                              f"be sent: {exc}") from None
        if (size := returned.size()) > self.max_bytes:
            raise LimitExceeded(f"trusted agent {agent.name} returned {size:,} bytes, more "
                                f"than the place's --max-briefcase of {self.max_bytes:,}")
        return returned

    async def run(self, agent: TrustedAgent, briefcase: Briefcase, principal: str,
                  timeout: float) -> Briefcase:
        """One meet with the agent, bounded by `timeout` if it awaits."""
        return self.result(agent, briefcase,
                           await self.finish(agent, self.call(agent, briefcase, principal),
                                             timeout))

    async def finish(self, agent: TrustedAgent, returned: object, timeout: float) -> object:
        """What the agent returned, awaited (within `timeout`) if it is an awaitable."""
        if not inspect.isawaitable(returned):
            return returned
        agent.plain = False  # from now on, its meets are not answered inline
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                return await returned
        except TacomaError:
            raise
        except asyncio.CancelledError:
            raise  # the meet was cancelled (its caller gave up, the place stops)
        except BaseException as exc:  # noqa: BLE001 - as in call
            if isinstance(exc, TimeoutError) and deadline.expired():
                raise MeetTimeout(f"trusted agent {agent.name} did not answer within "
                                  f"{timeout:g} s") from None
            raise self._failed(agent, exc) from None

    def _failed(self, agent: TrustedAgent, exc: BaseException) -> AgentFailed:
        log.info("trusted agent %s failed: %s: %s", agent.name, type(exc).__name__, exc)
        # From the agent's own frame on: the place's frames are not its story.
        own = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        return AgentFailed(f"trusted agent {agent.name} failed: {type(exc).__name__}: {exc}",
                           "".join(traceback.format_exception(type(exc), exc, own)))
