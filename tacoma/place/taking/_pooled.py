"""Running a meet's agent in a worker: that, and nothing else (TACOMA's steps 7 to 13).

    pipes, fork, exec (7, 8)  off the critical path: a pre-started worker is taken from the pool
    deliver briefcase (9)     one write on the worker's socketpair
    unmarshal, start (10)     in the worker, which is already running its interpreter
    return status (11, 12)    the worker's Result is sent back to whoever met
    terminate (13)            the connection stays open for the next meet; the used worker is
                              destroyed in the background, or kept warm for the next meet
                              of the same principal and program (workers._warm)

The program is the caller's (CODE) or the installed agent's, compiled first for a compiled
language (`workers._builds`); the meet's time is the place's bound, and a hop's is its
trip's one deadline. The agent's own meets go to the router (`agent_meet`, given as a
callable); an agent that moves on ends its worker's run Moved, and a trip that began here
is then waited for to its end.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from ...wire._briefcase import CODE, CODE_NAME, FRESH, RERUN, TRACE, Briefcase
from ...wire._errors import MeetError, MeetTimeout
from ...wire._program import program_bytes, program_name
from ...wire._protocol import Meet, Result
from ..meets._meet import RunningMeet
from ..meets._residents import Residents
from ..meets._trips import Trips
from ..workers._agents import PooledAgent
from ..workers._builds import Builds
from ..workers._pool import Moved, Worker, WorkerPool
from ..workers._warm import WarmKey, WarmWorkers

__all__ = ["PooledRuns"]

#: Seconds of a meet's time left, at least, when it gives up waiting for room in its pool:
#: enough for its caller to hear why before its own time runs out.
ROOM_MARGIN = 0.5


class PooledRuns:
    """Runs meets' agents in workers (see the module)."""

    def __init__(self, builds: Builds, residents: Residents, trips: Trips, warm: WarmWorkers,
                 bounded: Callable[[float | None], float],
                 in_background: Callable[[Coroutine[Any, Any, Any]], None],
                 stop_trip: Callable[[str, Sequence[str | None]], Coroutine[Any, Any, None]],
                 agent_meet: Callable[[RunningMeet, Worker, Meet], Awaitable[None]]) -> None:
        self.builds = builds
        self.residents = residents
        self.trips = trips
        self.warm = warm
        self._bounded = bounded
        self._in_background = in_background
        self._stop_trip = stop_trip
        self._agent_meet = agent_meet

    async def _worker(self, pool: WorkerPool, key: WarmKey | None) -> Worker:
        """A warm worker of `key` if one waits, else one of the pool's fresh ones."""
        if key is not None:
            worker = await self.warm.take(key)
            if worker is not None:
                return worker
        return await pool.take()

    async def run(self, meet: RunningMeet, found: PooledAgent) -> Briefcase | Moved:
        """Run the agent of `meet` in a worker of its pool, and return its briefcase; if
        it moves on, the briefcase its trip ends with (a trip that began here), or Moved (a
        hop of a trip that began elsewhere)."""
        pool, installed_code = found.pool, found.installed
        timeout = self._bounded(meet.timeout)
        if meet.trip is not None and meet.trip.deadline:  # a hop: the trip's one deadline
            timeout = min(timeout, meet.trip.deadline - time.time())
            if timeout <= 0:
                raise MeetTimeout("the trip's deadline passed before the agent arrived here")
        briefcase = meet.briefcase
        if RERUN in briefcase and not meet.runs:  # only the place says it is a re-run
            briefcase.remove(RERUN)
        callers_code, callers_name = briefcase.get(CODE), briefcase.get(CODE_NAME)
        if installed_code is not None:
            briefcase[CODE] = [installed_code]
            # its errors name its installed file ("ag_hello.py"), as it was installed
            briefcase[CODE_NAME] = [f"{meet.agent}{pool.interpreter.suffixes[0]}".encode()]
        elif not briefcase.get(CODE):
            raise MeetError(f"{meet.agent} needs its program in the CODE folder "
                            f"(tacoma meet {meet.agent} --code FILE)")
        program = program_bytes(briefcase)
        build = pool.interpreter.build
        if build is not None and (pool.builds_all or build.wanted(program)):
            started = time.monotonic()
            await self.builds.ensure(pool.interpreter, program, timeout,
                                     program_name(briefcase))
            timeout -= time.monotonic() - started
            if timeout <= 0:
                raise MeetTimeout(f"compiling {meet.agent}'s program took the meet's whole "
                                  "time")
        key = (WarmKey.of(pool.interpreter, meet.principal, briefcase[CODE])
               if pool.reuses and FRESH not in briefcase else None)
        # A meet from outside may wait for room, but for the end of its time, in which its
        # caller is told why; an agent's own meet here may not (its caller holds room
        # already, and could wait for itself).
        waited_from = time.monotonic()
        give_back = await pool.hold(meet.principal, max(0.0, timeout - ROOM_MARGIN)
                                    if meet.caller is None else None)
        timeout -= time.monotonic() - waited_from
        try:
            worker = await self._worker(pool, key)
        except BaseException:
            if give_back is not None:
                give_back(None, False)
            raise
        meet.step("take worker")
        if meet.trace is not None:
            briefcase[TRACE] = []  # the worker's signal to time its own steps
        meet.installed_as = meet.agent if installed_code is not None else None
        meet.program = program
        meet.started, meet.deadline = time.time(), time.monotonic() + timeout
        meet.worker = worker
        meet.note_origins(briefcase)
        hop = meet.trip is not None  # a hop of a trip that began elsewhere
        outcome: Result | Moved | None = None
        try:
            try:
                outcome = await worker.run(meet, timeout,
                                           functools.partial(self._agent_meet, meet),
                                           keep=key is not None and self.warm.wants(key))
            finally:
                meet.worker = None
                resided = meet.resident is not None
                self.residents.leave(meet)
                kept = False
                try:
                    # Kept warm only after a meet that ended well (not moved on, not
                    # resident).
                    kept = (key is not None and isinstance(outcome, Result) and not resided
                            and self.warm.offer(key, worker))
                    pool.release(worker, kept=kept)
                finally:
                    if give_back is not None:
                        give_back(worker, kept)
            if isinstance(outcome, Moved):  # the agent moved on: its trip goes on
                if hop:
                    return outcome  # the next place has the trip now
                assert meet.trip is not None
                try:
                    result, meet.path = await self.trips.wait(meet.trip, meet.deadline)
                except asyncio.CancelledError:  # the caller gave up: stop it where it is
                    self._in_background(self._stop_trip(meet.trip.id, [outcome.to]))
                    raise
            else:
                result = outcome.briefcase
        finally:
            if not hop and meet.trip is not None:  # a trip that began here is over
                self.trips.forget(meet.trip.id)
        if installed_code is not None:  # the caller gets back its own CODE, not ours
            for name, callers in ((CODE, callers_code), (CODE_NAME, callers_name)):
                if callers is not None:
                    result[name] = callers
                elif name in result:
                    result.remove(name)
        meet.end_trace(result)
        return result
