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

`Meets` is the book: the ids, the count against --max-meets, the async meets queued until a
slot frees (their briefcases wait in the journal, not in memory), the tasks, and why a task
was cancelled (killed, the place stopping, the caller gone).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any

from ...wire._address import canonical_address
from ...wire._briefcase import Briefcase
from ...wire._errors import (
    AgentKilled,
    MeetError,
    MeetTimeout,
    PlaceUnavailable,
    TacomaError,
    kind_of,
)
from ...wire._names import ADMIN_AGENT, HOME_AGENT, STATUS_AGENT, TRIP_AGENT
from ...wire._protocol import Failed
from ...wire._trace import read as read_trace
from ...wire._trace import record
from ._route import TRANSITIONS, BadTransition, Route, State

if TYPE_CHECKING:
    from ...trust._passport import Passport, PathStep
    from ..workers._pool import Worker
    from ._trips import Trip

__all__ = ["ALWAYS_SERVED", "AtCapacity", "Meets", "RunningMeet", "failed"]

log = logging.getLogger("tacoma.place")

#: The place's own agents it serves even at --max-meets, taking no slot of it: a trip's end
#: must reach its home (ag_home), a rear guard must learn where its trip is (ag_trip), the
#: administrator must reach a busy place (ag_admin), and a caller must learn what became of
#: its meet when the place is busiest (ag_status: it holds no more than a future and its
#: request's id while it waits, must not hold the slot of the meet it waits for, and has a
#: bound of its own, `Meets.asking`). The other built-ins hold
#: memory or a thread (ag_cabinet) and are admitted like any meet; ag_echo is answered at
#: once by the session and holds nothing.
ALWAYS_SERVED = frozenset({HOME_AGENT, ADMIN_AGENT, TRIP_AGENT, STATUS_AGENT})


class AtCapacity(PlaceUnavailable):
    """Refused for want of a slot (--max-meets, or the principal's share): an async meet
    waits in the queue instead."""


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
        "chosen_id",
        "deadline",
        "got",
        "id",
        "installed_as",
        "journaled",
        "killed",
        "lines",
        "origins",
        "orphaned",
        "passport",
        "path",
        "principal",
        "program",
        "resident",
        "route",
        "runs",
        "serial",
        "started",
        "state",
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
        #: Where it is in its life here (see _route: the states, and the changes allowed).
        self.state = State.TAKEN
        #: Where it goes, resolved when the place took it (see _route); None for a meet
        #: the place made itself (a hop it handed to itself, one taken up from the
        #: journal), resolved when it starts.
        self.route: Route | None = None
        self.went: str | None = None  # where its agent went, once it moved on (MOVED)
        self.killed = ""  # why it was stopped (tacoma kill, its trip's caller gave up)
        #: Who hears its outcome besides its caller (not states of its life: a meet in any
        #: state may have either). Journaled: the journal holds its row (an async meet, or
        #: one whose agent went on a trip from here). Orphaned: a sync meet whose caller's
        #: connection was lost; it runs on, and its outcome goes into the journal.
        self.journaled = False
        self.orphaned = False
        self.runs = 0  # how many times it started before (re-runs after a restart)
        self.chosen_id = False  # its client chose its id (and can ask for it by id)
        #: The places that hold the data of the lazy folders handed to its agent (in its
        #: briefcase, and in answers and messages since): the only origins this place
        #: fetches from for it (see _lazy). None until one is handed over.
        self.origins: set[str] | None = None
        #: The serial of the certificate that launched it, if this place saw it (a client's
        #: meet, and its agents' meets): revoking that certificate stops it.
        self.serial = ""
        #: Its agent's passport, if it has one (see _passports): handed on with every meet
        #: it makes elsewhere and every hop; the lines of the places that handed it here,
        #: and the digest of the briefcase it came with (a hop's, for this place's line).
        self.passport: Passport | None = None
        self.lines: tuple[bytes, ...] = ()
        self.got = ""
        #: The path its trip's end took, as this place (its home) checked the lines.
        self.path: list[PathStep] | None = None
        self._identity: str | None = None

    def to(self, state: State) -> None:
        """Change its state; BadTransition if the table (_route.TRANSITIONS) forbids it."""
        if state not in TRANSITIONS[self.state]:
            raise BadTransition(f"meet {self.id} cannot go from {self.state.name} to "
                                f"{state.name}")
        self.state = state

    def is_(self, state: State) -> bool:
        """Whether it is in `state` now (a method, not a narrowing: a meet's state changes
        while its code awaits)."""
        return self.state is state

    def ends(self, outcome: BaseException | None) -> None:
        """It ended: with its result (None), an error, or cancelled (CancelledError)."""
        self.to(State.ENDED if outcome is None
                else State.CANCELLED if isinstance(outcome, asyncio.CancelledError)
                else State.FAILED)

    @property
    def recorded(self) -> bool:
        """Whether its outcome goes into the journal when it ends."""
        return self.journaled or self.orphaned

    @property
    def key(self) -> tuple[str, str]:
        """How the place's books know it: ids are per principal."""
        return self.principal, self.id

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

    def note_origins(self, briefcase: Briefcase) -> None:
        """Remember where the lazy folders in `briefcase`, on its way to the agent, are."""
        refs = briefcase.lazy_refs()
        if not refs:
            return
        if self.origins is None:
            self.origins = set()
        for ref in refs:
            with contextlib.suppress(ValueError):  # a malformed one is never fetched
                self.origins.add(canonical_address(ref.origin))

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

    def __init__(self, max_meets: int, address: str, share: float = 1.0,
                 max_queued: int = 0) -> None:
        self.max_meets = max_meets
        self.max_queued = max_queued
        #: Async meets waiting for a slot, oldest first, and how many each principal has
        #: waiting (at most its share of --max-queued).
        self.queued: collections.deque[RunningMeet] = collections.deque()
        self.queue_share = max(1, int(max_queued * share))
        self.queued_by_principal: collections.Counter[str] = collections.Counter()
        self._queued_ids: set[tuple[str, str]] = set()
        self._reserved: collections.Counter[str] = collections.Counter()
        self._reserved_total = 0
        #: Called when a meet ends and frees a slot (the dispatcher starts queued meets).
        self.on_free: Callable[[], None] | None = None
        #: The most meets any one principal may have running (its fair share).
        self.share = max(1, int(max_meets * share))
        self.by_principal: collections.Counter[str] = collections.Counter()
        self.address = address
        #: By principal and id: a client may choose its meet's id, and ids are per principal
        #: (one principal's id never finds, hides or blocks another's meet).
        self.running: dict[tuple[str, str], RunningMeet] = {}
        self.stopping = False
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._ids = itertools.count(1)
        # Meet ids are this run's random prefix and a counter: a place restarted within the
        # same second (the prefix was the time's low bits) gave the ids of its last run.
        self._boot = secrets.token_hex(5)
        self._count = 0
        #: ag_status meets being answered now, by principal, and the most any one principal
        #: may have at once (see `asking`).
        self.asking_by_principal: collections.Counter[str] = collections.Counter()
        self.asking_share = max(1, int((max_meets + max_queued) * share))

    def admit(self, agent: str = "", principal: str = "") -> None:
        """Raise PlaceUnavailable unless one more meet may start now: the place is under
        --max-meets and, if `principal` is given, that principal's running meets (all of
        them, its agents' too) are under its share (no principal: no share is checked, as
        for an agent's own meets, or on an --insecure place).

        Refusals for want of a slot are AtCapacity. ALWAYS_SERVED agents are not refused
        while the place runs, but ag_status past the principal's share of them (`asking`:
        refused here too, before a flood of them takes a task each).
        """
        if self.stopping:
            raise PlaceUnavailable(f"place {self.address} is shutting down")
        if agent in ALWAYS_SERVED:
            if agent == STATUS_AGENT:
                self.may_ask(principal)
            return
        if self._count >= self.max_meets:
            raise AtCapacity(f"place {self.address} is running its maximum of "
                             f"{self.max_meets} meets; try again later")
        if principal and self.by_principal[principal] >= self.share:
            raise AtCapacity(f"{principal} has its share of {self.share} meets running "
                             f"at place {self.address}; try again when some end")

    def may_queue(self, principal: str) -> None:
        """PlaceUnavailable unless one more async meet of `principal` may wait for a slot
        (under --max-queued, and its share of it)."""
        if self.stopping:
            raise PlaceUnavailable(f"place {self.address} is shutting down")
        if len(self.queued) + self._reserved_total >= self.max_queued:
            raise PlaceUnavailable(f"place {self.address} is running its maximum of "
                                   f"{self.max_meets} meets and has {self.max_queued} more "
                                   "queued (--max-queued); try again later")
        if principal and (self.queued_by_principal[principal] + self._reserved[principal]
                          >= self.queue_share):
            raise PlaceUnavailable(f"{principal} has its share of {self.queue_share} async "
                                   f"meets queued at place {self.address}; try again later")

    def reserve(self, principal: str) -> None:
        """Hold a place in the queue for an async meet being written to the journal."""
        self._reserved[principal] += 1
        self._reserved_total += 1

    def unreserve(self, principal: str) -> None:
        self._reserved_total -= 1
        if self._reserved[principal] > 1:
            self._reserved[principal] -= 1
        else:
            del self._reserved[principal]

    def queue(self, meet: RunningMeet) -> None:
        """Let an async meet (journaled, its briefcase dropped here) wait for a slot."""
        meet.to(State.QUEUED)
        meet.briefcase = Briefcase()
        self.queued.append(meet)
        self._queued_ids.add(meet.key)
        self.queued_by_principal[meet.principal] += 1

    def next_queued(self) -> RunningMeet | None:
        """The oldest queued meet that may start now (its principal under its share), taken
        off the queue; None if none may."""
        if self.stopping or self._count >= self.max_meets:
            return None
        for meet in self.queued:
            if not meet.principal or self.by_principal[meet.principal] < self.share:
                self.queued.remove(meet)
                self._queued_ids.discard(meet.key)
                left = self.queued_by_principal[meet.principal] - 1
                if left:
                    self.queued_by_principal[meet.principal] = left
                else:
                    del self.queued_by_principal[meet.principal]
                return meet
        return None

    def find(self, meet_id: str, principal: str) -> tuple[str, RunningMeet] | None:
        """A meet of `principal` this place holds now, by id: ("running", meet) or
        ("queued", meet). Ids are per principal for everyone, administrators included (who
        name the principal of another's meet)."""
        key = (principal, meet_id)
        meet = self.running.get(key)
        if meet is not None:
            return "running", meet
        if key in self._queued_ids:
            return "queued", next(q for q in self.queued if q.key == key)
        return None

    def may_ask(self, principal: str) -> None:
        """PlaceUnavailable if `principal` has its share of ag_status meets (see `asking`)."""
        held = self.asking_by_principal[principal]
        if held >= self.asking_share:
            raise PlaceUnavailable(
                f"{principal or 'anonymous'} has {held} status requests at place "
                f"{self.address} not yet answered (most wait for their meets to end), its "
                f"most ({self.asking_share}: its --share of --max-meets and --max-queued); "
                "ask again when some are answered, and wait for fewer meets at once")

    @contextlib.contextmanager
    def asking(self, principal: str) -> Iterator[None]:
        """Count an ag_status meet of `principal` while it is answered (waiting, perhaps, for
        the meet it asks about to end); PlaceUnavailable if the principal has its share of
        them already.

        ag_status takes no slot of --max-meets (ALWAYS_SERVED: a caller must learn what
        became of its meet when the place is busiest), so this is its bound: as many at once
        as the meets the principal may have here, running and queued (its share of
        --max-meets and --max-queued), a wait for each. Counted here, whichever way the
        meet came (a client, a place, an agent); `admit` refuses with it too, early.
        """
        self.may_ask(principal)
        self.asking_by_principal[principal] += 1
        try:
            yield
        finally:
            left = self.asking_by_principal[principal] - 1
            if left:
                self.asking_by_principal[principal] = left
            else:
                del self.asking_by_principal[principal]

    def new(self, agent: str, briefcase: Briefcase, timeout: float | None,
            principal: str = "", caller: str | None = None, trip: Trip | None = None,
            traced_at: int = 0, via: str = "", meet_id: str = "") -> RunningMeet:
        """A RunningMeet with the id its client chose, or a new one (not yet counted:
        `spawn` counts it). MeetError if a meet with the chosen id is held here now."""
        if meet_id:
            if (principal, meet_id) in self.running or (principal, meet_id) in self._queued_ids:
                raise MeetError(f"a meet with id {meet_id} is already at place "
                                f"{self.address}: ids must be unique")
            chosen = True
        else:
            # A "." no client-chosen id may have: the place's own ids cannot be claimed.
            meet_id = f"{self._boot}.{next(self._ids)}"
            chosen = False
        meet = RunningMeet(meet_id, agent, briefcase, timeout, principal, caller, trip,
                           traced_at, via)
        meet.chosen_id = chosen
        return meet

    def spawn(self, meet: RunningMeet, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run a meet as a task, counted exactly while it runs.

        The count drops in the coroutine's own `finally`, not in a done callback (which runs
        a loop iteration later, so meets arriving meanwhile would be refused as over
        --max-meets); the callback only covers a task cancelled before it started.
        ALWAYS_SERVED agents are not counted (a caller waiting in ag_status must not hold
        the slot of the meet it waits for).
        """
        weight = 0 if meet.agent in ALWAYS_SERVED else 1
        self._count += weight
        principal = meet.principal
        if weight:
            self.by_principal[principal] += 1
        counted = True

        def uncount() -> None:
            nonlocal counted
            if counted:
                counted = False
                self._count -= weight
                if weight:
                    left = self.by_principal[principal] - 1
                    if left:
                        self.by_principal[principal] = left
                    else:
                        del self.by_principal[principal]
                self.running.pop(meet.key, None)
                self._tasks.pop(meet.key, None)
                if self.queued and self.on_free is not None:
                    self.on_free()

        async def tracked() -> None:
            try:
                await coro
            finally:
                uncount()

        task = asyncio.ensure_future(tracked())
        self.running[meet.key] = meet
        self._tasks[meet.key] = task

        def cancelled_early(_: object) -> None:
            uncount()
            coro.close()

        task.add_done_callback(cancelled_early)
        return task

    def tasks(self) -> list[asyncio.Task[None]]:
        return [task for task in self._tasks.values() if not task.done()]

    def kill(self, meet: RunningMeet, why: str = "killed by tacoma kill") -> None:
        """Stop a meet's agent: its task is cancelled, and its caller told AgentKilled."""
        meet.killed = why
        task = self._tasks.get(meet.key)
        if task is not None:
            task.cancel()

    def kill_where(self, stops: Callable[[RunningMeet], bool], why: str) -> int:
        """Stop every running meet (residents too) that `stops` says must stop; how many."""
        stopped = 0
        for meet in list(self.running.values()):
            if not meet.killed and stops(meet):
                self.kill(meet, why)
                stopped += 1
        return stopped

    def cancelled(self, meet: RunningMeet | None) -> MeetError:
        """Why a meet's task was cancelled, as the error its caller gets."""
        if meet is not None and meet.killed:
            return AgentKilled(f"{meet.killed} at place {self.address}")
        if self.stopping:
            return PlaceUnavailable(f"place {self.address} stopped during the meet")
        return MeetError("meet cancelled")


def failed(rid: int, exc: BaseException) -> Failed:
    """The Failed reply for an exception raised while serving a meet."""
    if isinstance(exc, MeetError):
        return Failed(rid, exc.kind, exc.message, exc.detail)
    if isinstance(exc, TacomaError | ValueError):  # ValueError: a bad target from an agent
        return Failed(rid, kind_of(exc), str(exc))
    log.error("meet failed on an unexpected error", exc_info=exc)
    return Failed(rid, PlaceUnavailable.kind,
                  f"the place could not serve this meet: {type(exc).__name__}: {exc}")
