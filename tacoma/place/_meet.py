"""A meet in progress at a place: one object for its state, and the book of all of them.

A `RunningMeet` holds everything about one meet from the moment the place accepts it to its
answer: its id, the agent met and the briefcase, who it is for (its principal: the name in
the certificate of the client that launched it, kept across every meet its agents make and
every place they move to; `via`, the place that handed it here, if one did), which agent
here made it (its caller: None for a meet from outside), its deadline, whether it is
traced and the place's steps so far, the trip it belongs to, and, while an agent runs for
it, the worker, the program it runs, its resident name and where it went. The meet path
and the residents work on this object; the worker sees only what it needs of it
(`_pool.HandedMeet`); nothing gets the whole place (trio gives each task its own record
the same way).

`Meets` is the book: the ids, the count against --max-meets, the tasks, and why a task was
cancelled (killed, the place stopping, the caller gone).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import itertools
import secrets
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from ..wire._briefcase import Briefcase
from ..wire._errors import AgentKilled, MeetError, MeetTimeout, PlaceUnavailable
from ..wire._names import BUILT_IN
from ..wire._trace import read as read_trace
from ..wire._trace import record

if TYPE_CHECKING:
    from ._pool import Worker
    from ._trips import Trip

__all__ = ["Meets", "RunningMeet"]


class RunningMeet:
    """One meet at this place, from its acceptance to its answer."""

    __slots__ = (
        "_identity",
        "_mark",
        "accepted_at",
        "admin",
        "agent",
        "briefcase",
        "caller",
        "deadline",
        "going",
        "id",
        "installed_as",
        "killed",
        "principal",
        "program",
        "resident",
        "started",
        "timeout",
        "trace",
        "trip",
        "via",
        "went",
        "worker",
    )

    def __init__(self, meet_id: str, agent: str, briefcase: Briefcase, timeout: float | None,
                 principal: str = "", caller: str | None = None, trip: Trip | None = None,
                 traced_at: int = 0, via: str = "") -> None:
        self.id = meet_id
        self.agent = agent
        self.briefcase = briefcase
        self.timeout = timeout  # what the caller asked; the place's own limit applies too
        self.principal = principal  # who it is for: a certificate's name ("" if insecure)
        self.via = via  # the place that handed it here, for a meet forwarded or a hop
        self.caller = caller  # the agent here that made it (its identity); None: outside
        self.admin = False  # made by an identity with the admin role (may use ag_admin)
        self.trip = trip  # the trip it is a hop of, or (once its agent moved) began here
        #: A traced meet's steps at the place so far (see wire._trace); None if untraced.
        self.trace: list[tuple[str, int]] | None = [] if traced_at else None
        self.accepted_at = self._mark = traced_at  # perf_counter_ns() when accepted
        self.started = 0.0  # time.time() when its agent's worker took it (for ps)
        self.deadline = 0.0  # time.monotonic() by which its agent must end
        self.worker: Worker | None = None  # while its agent runs
        self.installed_as: str | None = None  # the installed agent it runs, if it is one
        self.program = b""  # the program its agent runs
        self.resident: str | None = None  # its agent's name while it is resident
        self.went: str | None = None  # where its agent went, once it moved on
        self.going = False  # while its agent's go is under way
        self.killed = False  # stopped by tacoma kill
        self._identity: str | None = None

    @property
    def identity(self) -> str:
        """Who this meet's agent is, for the meets it makes: `agent:NAME` for an installed
        agent, else `code:` and its program's hash (hashed when first asked: most meets
        never ask)."""
        if self.installed_as is not None:
            return f"agent:{self.installed_as}"
        if self._identity is None:
            self._identity = "code:" + hashlib.sha256(self.program).hexdigest()
        return self._identity

    def time_left(self) -> float:
        """Seconds left before the deadline; MeetTimeout if none are."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise MeetTimeout("no time is left of the meet for the agent to go on")
        return remaining

    # -- tracing (see wire._trace): nothing is timed unless the meet is traced
    def mark(self) -> None:
        """Start timing the next step here."""
        if self.trace is not None:
            self._mark = time.perf_counter_ns()

    def step(self, name: str) -> None:
        """Record step `name` as the time since the last step (or mark) ended."""
        if self.trace is not None:
            now = time.perf_counter_ns()
            self.trace.append((name, now - self._mark))
            self._mark = now

    def end_trace(self, result: Briefcase) -> None:
        """Put the place's steps into a traced meet's result, with the worker's return
        (its wait, less the steps the worker timed itself) and the place's whole span."""
        if self.trace is None:
            return
        waited = sum(ns for step, ns in self.trace if step == "_waited")
        if waited:
            inside = sum(ns for side, _, ns in read_trace(result, take=False)
                         if side == "worker")
            record(result, "worker", [("return", max(0, waited - inside))])
        steps = [(step, ns) for step, ns in self.trace if not step.startswith("_")]
        record(result, "place", [*steps, ("span", time.perf_counter_ns() - self.accepted_at)])


class Meets:
    """The meets running at one place: ids, admission against --max-meets, their tasks."""

    def __init__(self, max_meets: int, address: str, share: float = 1.0) -> None:
        self.max_meets = max_meets
        #: The most meets any one principal may have running (its fair share).
        self.share = max(1, int(max_meets * share))
        self.by_principal: collections.Counter[str] = collections.Counter()
        self.address = address
        self.running: dict[str, RunningMeet] = {}
        self.stopping = False
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._ids = itertools.count(1)
        # Meet ids are this run's random prefix and a counter: a place restarted within the
        # same second (the prefix was the time's low bits) gave the ids of its last run.
        self._boot = secrets.token_hex(5)
        self._count = 0

    def admit(self, agent: str = "", principal: str = "") -> None:
        """Raise PlaceUnavailable unless one more meet may start now: the place is under
        --max-meets and, if `principal` is given, that principal's running meets (all of
        them, its agents' too) are under its share (no principal: no share is checked, as
        for an agent's own meets, or on an --insecure place).

        The place's own agents (BUILT_IN) take no worker and are always served while the
        place runs: a trip's end must reach its home (ag_home), and the administrator
        must reach a busy place (ag_admin).
        """
        if self.stopping:
            raise PlaceUnavailable(f"place {self.address} is shutting down")
        if agent in BUILT_IN:
            return
        if self._count >= self.max_meets:
            raise PlaceUnavailable(f"place {self.address} is running its maximum of "
                                   f"{self.max_meets} meets; try again later")
        if principal and self.by_principal[principal] >= self.share:
            raise PlaceUnavailable(f"{principal} has its share of {self.share} meets running "
                                   f"at place {self.address}; try again when some end")

    def new(self, agent: str, briefcase: Briefcase, timeout: float | None,
            principal: str = "", caller: str | None = None, trip: Trip | None = None,
            traced_at: int = 0, via: str = "") -> RunningMeet:
        """A RunningMeet with a new id (not yet counted: `spawn` counts it)."""
        return RunningMeet(f"{self._boot}-{next(self._ids)}", agent, briefcase, timeout,
                           principal, caller, trip, traced_at, via)

    def spawn(self, meet: RunningMeet, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run a meet as a task, counted exactly while it runs.

        The count drops in the coroutine's own `finally`, not in a done callback (which runs
        a loop iteration later, so meets arriving meanwhile would be refused as over
        --max-meets); the callback only covers a task cancelled before it started.
        """
        self._count += 1
        principal = meet.principal
        self.by_principal[principal] += 1
        counted = True

        def uncount() -> None:
            nonlocal counted
            if counted:
                counted = False
                self._count -= 1
                left = self.by_principal[principal] - 1
                if left:
                    self.by_principal[principal] = left
                else:
                    del self.by_principal[principal]
                self.running.pop(meet.id, None)
                self._tasks.pop(meet.id, None)

        async def tracked() -> None:
            try:
                await coro
            finally:
                uncount()

        task = asyncio.ensure_future(tracked())
        self.running[meet.id] = meet
        self._tasks[meet.id] = task

        def cancelled_early(_: object) -> None:
            uncount()
            coro.close()

        task.add_done_callback(cancelled_early)
        return task

    def tasks(self) -> list[asyncio.Task[None]]:
        return [task for task in self._tasks.values() if not task.done()]

    def kill(self, meet: RunningMeet) -> None:
        """Stop a meet's agent: its task is cancelled, and its caller told AgentKilled."""
        meet.killed = True
        task = self._tasks.get(meet.id)
        if task is not None:
            task.cancel()

    def cancelled(self, meet: RunningMeet | None) -> MeetError:
        """Why a meet's task was cancelled, as the error its caller gets."""
        if meet is not None and meet.killed:
            return AgentKilled(f"killed by tacoma kill at place {self.address}")
        if self.stopping:
            return PlaceUnavailable(f"place {self.address} stopped during the meet")
        return MeetError("meet cancelled")
