"""Running meets: the meet path at a place, and the meets agents make from inside one.

The meet path, against TACOMA's 13 steps (Table 1 of the paper):
    receive and examine (5)   a Channel decodes the frame; the protocol core checks it
    locate agent (6)          `Agents.resolve`: a built-in agent, an interpreter's, or an
                              installed one
    pipes, fork, exec (7, 8)  off the critical path: a pre-started worker is taken from the pool
    deliver briefcase (9)     one write on the worker's socketpair
    unmarshal, start (10)     in the worker, which is already running its interpreter
    return status (11, 12)    the worker's Result is sent back to whoever met
    terminate (13)            the connection stays open for the next meet; the used worker is
                              destroyed in the background

An agent meets other agents by sending Meets up its worker channel (`agent_meet`): at this
place (a meet of its own, counted and killable like any), at another place (through the
place's cached client connections), a resident here (a message, see _residents), its
mailbox (ag_mailbox), or the place's own services; and it moves by a meet in the `go`
mode (`Hops.go`, see _hops and _trips). Every meet's state is its `RunningMeet`; nothing
is parked on the worker or the place.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ...client._client import ClientCache
from ...wire._address import canonical_address, split_target
from ...wire._briefcase import CODE, CODE_NAME, RERUN, TRACE, Briefcase
from ...wire._errors import (
    MeetError,
    MeetTimeout,
    MessageError,
    NotAuthorized,
    PlaceUnavailable,
    TacomaError,
)
from ...wire._names import BUILT_IN, HOME_AGENT, MAILBOX_AGENT, TRIP_AGENT
from ...wire._program import program_bytes, program_name
from ...wire._protocol import Accepted, Event, Meet, Result
from .._settings import PlaceSettings
from ..meets._access import Access, Principal, Side
from ..meets._meet import AtCapacity, Meets, RunningMeet, failed
from ..meets._residents import Residents
from ..meets._trips import Trips
from ..promises._hops import Hops, Moved
from ..promises._journal import Journal, Record
from ..promises._reach import Reach
from ..workers._agents import Agents, BuiltInAgent, PooledAgent
from ..workers._builds import Builds
from ..workers._pool import Worker
from ._builtins import BuiltIns

__all__ = ["Router", "failed"]

log = logging.getLogger("tacoma.place")


class Router:
    """Runs the meets of one place, whoever made them (a client, or an agent here)."""

    def __init__(self, settings: PlaceSettings, agents: Agents, meets: Meets,
                 builtins: BuiltIns, builds: Builds, residents: Residents,
                 trips: Trips, access: Access, journal: Journal,
                 clients: ClientCache) -> None:
        self.settings = settings
        self.agents = agents
        self.meets = meets
        self.journal = journal
        meets.on_free = self._start_queued
        self.builtins = builtins
        self.builds = builds
        self.residents = residents
        self.trips = trips
        self.address = meets.address
        self.access = access
        # Connections to other places, for agents' meets, made as this place's identity.
        self.clients = clients
        #: The programs meets named by hash (see _codes).
        self.codes = builtins.codes
        self.background: set[asyncio.Task[None]] = set()
        #: Long-lived tasks the place cancels when it stops: journal pruning, and trips
        #: adopted from the journal waiting for their deadlines.
        self._watching: set[asyncio.Task[None]] = set()
        #: Connections to the places agents name (see _reach).
        self.reach = Reach(self.clients, self.address)
        self.hops = Hops(self.address, trips, meets, journal, self.clients,
                         builtins.trip_ended, self.run, self.in_background, self.bounded,
                         self.reach, settings.trip_timings)

    # ------------------------------------------------------------------ the meet path
    async def run(self, meet: RunningMeet) -> Briefcase:
        """Run one meet at this place and return the agent's briefcase.

        If the agent moves on, a meet that began here returns the briefcase its trip ends
        with; a hop of a trip that began elsewhere raises _Moved.
        """
        meet.step("examine")
        self._not_revoked(meet)
        found = self.agents.resolve(meet.agent)
        meet.step("find agent")
        if isinstance(found, BuiltInAgent) and found.name == TRIP_AGENT:
            return await self.hops.serve_trip(meet.briefcase)  # from places (see _access)
        if not isinstance(found, PooledAgent):  # the place runs it itself
            result = await (
                self.builtins.serve(meet.agent, meet.briefcase, meet.caller, meet.admin,
                                    meet.principal) if isinstance(found, BuiltInAgent)
                else self.agents.trusted.run(found.agent, meet.briefcase, meet.principal,
                                             self.bounded(meet.timeout)))
            meet.end_trace(result)
            return result
        pool, installed_code = found.pool, found.installed
        timeout = self.bounded(meet.timeout)
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
        if pool.interpreter.build is not None:
            started = time.monotonic()
            await self.builds.ensure(pool.interpreter, program_bytes(briefcase), timeout,
                                     program_name(briefcase))
            timeout -= time.monotonic() - started
            if timeout <= 0:
                raise MeetTimeout(f"compiling {meet.agent}'s program took the meet's whole "
                                  "time")
        worker = await pool.take()
        meet.step("take worker")
        if meet.trace is not None:
            briefcase[TRACE] = []  # the worker's signal to time its own steps
        meet.installed_as = meet.agent if installed_code is not None else None
        meet.program = program_bytes(briefcase)
        meet.started, meet.deadline = time.time(), time.monotonic() + timeout
        meet.worker = worker
        meet.note_origins(briefcase)
        hop = meet.trip is not None  # a hop of a trip that began elsewhere
        try:
            try:
                result = (await worker.run(meet, timeout,
                                           functools.partial(self.agent_meet, meet))).briefcase
            except Exception:
                if meet.went is None:
                    raise
            finally:
                meet.worker = None
                self.residents.leave(meet)
                pool.release(worker)
            if meet.went is not None:  # the agent moved on: its trip goes on without us
                if hop:
                    raise Moved
                assert meet.trip is not None
                try:
                    result = await self.trips.wait(meet.trip, meet.deadline)
                except asyncio.CancelledError:  # the caller gave up: stop it where it is
                    self.in_background(self.hops.stop_trip(meet.trip.id, [meet.went]))
                    raise
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

    def _not_revoked(self, meet: RunningMeet) -> None:
        """NotAuthorized if `meet`'s principal was revoked (its agents make no more meets,
        and a queued meet of it does not start; see Place.stop_revoked)."""
        if self.access.stops(meet.principal, meet.serial):
            raise NotAuthorized(f"{meet.principal or 'this principal'} is revoked at place "
                                f"{self.address}: its agents' meets are refused")

    # ------------------------------------------------------------------ async meets
    async def submit(self, meet: RunningMeet) -> str:
        """Take an async meet: write it to the journal (synced), then start it, or queue it
        if the place is at --max-meets (or its principal at its share); its id.

        Its caller is answered only once this returns: an accepted async meet outlives a
        crash of the place. Refused (PlaceUnavailable) if it could only queue and the queue
        is full. A meet sent again with an id the journal has from the same principal (its
        Accepted was lost) is taken once.
        """
        self.agents.resolve(meet.agent)  # answered before it runs: refuse it now if it cannot
        if meet.agent in (HOME_AGENT, TRIP_AGENT):
            raise MeetError(f"{meet.agent} is met in sync mode, by places")
        reserved = False
        try:
            self.meets.admit("", meet.principal)
        except AtCapacity:
            # A place in the queue is held for it while it is written (so that a burst of
            # async meets cannot pass --max-queued between the check and the write).
            self.meets.may_queue(meet.principal)
            self.meets.reserve(meet.principal)
            reserved = True
        try:
            outcome = await self.journal.accept(meet.id, meet.agent, meet.principal, meet.via,
                                                meet.caller, meet.timeout, meet.briefcase,
                                                "queued")
        finally:
            if reserved:
                self.meets.unreserve(meet.principal)
        if outcome == "same":
            return meet.id  # sent again: it is taken once
        meet.journaled = True
        try:
            self.meets.admit("", meet.principal)
        except PlaceUnavailable:  # at capacity, or stopping: it waits in the journal
            self.meets.queue(meet)
            log.debug("async meet %s queued (%d waiting)", meet.id, len(self.meets.queued))
        else:
            self.meets.spawn(meet, self.run_async(meet))
        return meet.id

    def _start_queued(self) -> None:
        """Start the queued async meets that may start now (called when a slot frees)."""
        while (meet := self.meets.next_queued()) is not None:
            self.meets.spawn(meet, self.run_async(meet))

    async def run_async(self, meet: RunningMeet) -> None:
        """Run an async meet (journaled), and record how it ended.

        A place stopping cancels it without a record: it stays in the journal and runs again
        when the place starts again (at least once; RERUN tells the agent).
        """
        try:
            if meet.stored:
                meet.briefcase = await self.journal.briefcase(meet.id, meet.principal)
                meet.stored = False
            try:
                meet.runs = await self.journal.started(meet.id, meet.principal) - 1
            except TacomaError as exc:
                # The journal cannot count this start (its disk is full): the meet was
                # accepted, so it runs all the same; it stays unended in the journal until
                # its outcome is written, and runs again after a restart if it never is.
                log.warning("async meet %s starts, but the journal cannot count it: %s",
                            meet.id, exc)
            if meet.runs:
                meet.briefcase[RERUN] = [str(meet.runs).encode()]
            result = await self.run(meet)
        except asyncio.CancelledError:
            if meet.killed or not self.meets.stopping:
                await asyncio.shield(self.record(meet, None, self.meets.cancelled(meet)))
            raise
        except Exception as exc:
            if isinstance(exc, TacomaError):
                log.info("async meet %s (%s) failed: %s", meet.id, meet.agent, exc)
            else:
                log.error("async meet %s (%s) failed on an unexpected error", meet.id,
                          meet.agent, exc_info=exc)
            await self.record(meet, None, exc)
        else:
            log.info("async meet %s (%s) done", meet.id, meet.agent)
            await self.record(meet, result, None)

    async def record(self, meet: RunningMeet, result: Briefcase | None,
                     exc: BaseException | None) -> None:
        """Put a meet's outcome in the journal, if its caller may ask for it there (an async
        meet, a trip that began here, a sync meet whose caller is gone)."""
        if meet.journaled or meet.orphaned:
            await self._record(meet.id, meet.agent, meet.principal, meet.via, result, exc)

    async def _record(self, meet_id: str, agent: str, principal: str, via: str,
                      result: Briefcase | None, exc: BaseException | None) -> None:
        error = None
        if exc is not None:
            failure = failed(0, exc)
            error = (failure.kind, failure.message, failure.detail)
        await self.journal.ended_when_room(meet_id, agent, principal, via, result, error,
                                           lambda: self.meets.stopping)

    async def resume(self) -> None:
        """At start: take up what the journal says was under way when the place stopped.

        Async meets that had not ended are queued and run again (RERUN tells the agent how
        often they started before); meets whose agents were out on a trip from here wait for
        its end again; a sync meet whose caller was gone is recorded as failed (sync meets
        are at most once).
        """
        records = await self.journal.open()
        for record in records:
            if record.trip is not None:  # long-lived: not one settle() waits for
                adopted = asyncio.ensure_future(self._adopt(record))
                self._watching.add(adopted)
                adopted.add_done_callback(self._watching.discard)
            elif record.kind == "async":
                meet = RunningMeet(record.id, record.agent, Briefcase(), record.timeout,
                                   record.principal, record.caller, via=record.via)
                meet.journaled = True
                meet.runs = record.runs
                self.meets.queue(meet)
            else:
                await self._record(record.id, record.agent, record.principal, record.via,
                                   None, PlaceUnavailable(
                                       f"place {self.address} stopped during the meet, and "
                                       "sync meets are not run again"))
        if records:
            log.info("the journal had %d meets under way: %d async meets to run again, %d "
                     "trips to wait for", len(records), len(self.meets.queued),
                     sum(1 for r in records if r.trip is not None))
        self._start_queued()
        # Not a background task: settle() waits for those, and this one never ends.
        self._watching.add(asyncio.ensure_future(self.journal.prune_while_open()))

    async def _adopt(self, record: Record) -> None:
        """A trip that was out when the place stopped: its end, when it comes home, is
        recorded (ag_home, through the journal); if none came by a minute past its deadline,
        its outcome is recorded as unknown."""
        await asyncio.sleep(max(0.0, (record.deadline or 0.0) - time.time()) + 60.0)
        now = await self.journal.get(record.id, record.principal)
        if now is not None and now.ended is None:
            lost = MeetTimeout("the trip did not come home by its deadline (its home "
                               "restarted while it was out): its outcome is unknown")
            await self._record(record.id, record.agent, record.principal, record.via, None,
                               lost)

    async def settle(self) -> None:
        """After the meets ended: give the ends of trips on their way home a moment."""
        if self.background:
            await asyncio.wait(list(self.background), timeout=5)

    async def close(self) -> None:
        """Stop compiling, and close the connections to other places."""
        await self.builds.close()
        for task in self._watching:
            task.cancel()
        self.hops.close()
        self.clients.close()

    def in_background(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def bounded(self, timeout: float | None) -> float:
        """A meet's timeout within the place's own limit (--meet-seconds)."""
        limit = self.settings.limits.meet_seconds
        return limit if timeout is None else min(timeout, limit)

    async def answered(self, rid: int, work: Callable[[], Awaitable[Briefcase]],
                       meet: RunningMeet | None, answer: Callable[[Event], None]) -> None:
        """Answer request `rid` with what `work()` returns: its Result, or a Failed saying
        why it failed or was cancelled (the caller left or cancelled, the meet was killed,
        the place stops); a cancellation still cancels. `work` is called here, not by the
        caller: a task cancelled before it starts then leaves no coroutine never awaited."""
        try:
            result = await work()
        except asyncio.CancelledError:
            answer(failed(rid, self.meets.cancelled(meet)))
            if meet is not None and (meet.journaled or meet.orphaned):
                await asyncio.shield(self.record(meet, None, self.meets.cancelled(meet)))
            raise
        except Exception as exc:  # noqa: BLE001 - every meet gets an answer, whatever failed
            answer(failed(rid, exc))
            if meet is not None:
                await self.record(meet, None, exc)
            return
        answer(Result(rid, result))
        if meet is not None and (meet.journaled or meet.orphaned):
            await self.record(meet, result, None)

    # ------------------------------------------------------------------ agents' own meets
    async def agent_meet(self, meet: RunningMeet, worker: Worker, event: Meet) -> None:
        """The agent of `meet`, run by `worker`, meets another agent (here, or at another
        place through a client), sends a message (a meet with a resident), uses its
        mailbox, or moves on."""
        def hand(reply: Event) -> None:  # what reaches the agent: its lazy folders noted
            if isinstance(reply, Result):
                meet.note_origins(reply.briefcase)
            worker.answer(reply)

        try:
            self._not_revoked(meet)
            if meet.went is not None:
                raise MeetError(f"the agent has gone to {meet.went}")
            if event.mode == "go":
                await self.hops.go(worker, meet, event)
                return
            agent, address = split_target(event.agent)
            if address is not None:
                address = canonical_address(address)
                if address == self.address:
                    address = None  # here, as a bare name
            if address is None:
                self.access.check(Principal(meet.principal), agent, event.mode, Side.AGENT,
                                  self.address)
            else:  # the other place checks the rest
                self.access.check_onward(agent)
            if address is not None:
                # The other place authorizes it: this place vouches for the principal.
                client = await self.reach.get(address, meet.principal, 10.0)
                answer = await client.meet(agent, event.briefcase, event.mode, event.timeout,
                                           meet.principal)
            elif agent == MAILBOX_AGENT:
                answer = await self.residents.serve(meet, event.briefcase)
            elif self.residents.get(agent) is not None:
                sender = f"{meet.resident}@{self.address}" if meet.resident else meet.identity
                answer = await self.residents.message(agent, event, sender, meet.principal,
                                                      self.bounded(event.timeout))
            elif event.mode == "ack":
                raise MessageError(f"the ack mode is for messages to resident agents, and "
                                   f"{agent} is not one here")
            elif agent in BUILT_IN and event.mode == "sync":
                # The place's own services (cabinets, ...) run no agent: an admitted agent
                # may use them even while the place is at --max-meets.
                answer = await self.builtins.serve(agent, event.briefcase, meet.identity,
                                                   principal=meet.principal,
                                                   origins=meet.origins)
            else:
                # An agent's meets count against --max-meets and its principal's share like
                # anyone's, and can be killed. Its async ones are journaled and may queue,
                # as a client's; a sync one past a bound is refused (PlaceUnavailable).
                inner = self.meets.new(agent, event.briefcase, event.timeout, meet.principal,
                                       meet.identity)
                inner.serial = meet.serial
                if event.mode == "async":
                    # Shielded: once journaled, it is queued or started even if the agent
                    # is killed meanwhile (else its row would wait for a restart).
                    answer = await asyncio.shield(self.submit(inner))
                else:
                    # Its principal's share too: refused, the agent hears PlaceUnavailable
                    # (its own meet holds its slot: a share of one admits no nested meet).
                    self.meets.admit(agent, meet.principal)
                    # A meet of its own, so that it can be killed.
                    task = self.meets.spawn(inner, self.answered(
                        event.rid, functools.partial(self.run, inner), inner, hand))
                    try:
                        await asyncio.shield(task)
                    except asyncio.CancelledError:
                        task.cancel()
                        raise
                    return
            hand(Accepted(event.rid, answer) if isinstance(answer, str)
                 else Result(event.rid, answer))
        except Exception as exc:  # noqa: BLE001 - the agent is waiting for an answer
            hand(failed(event.rid, exc))
