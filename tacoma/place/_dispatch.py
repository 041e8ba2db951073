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
mode (`_go`, see _trips). Every meet's state is its `RunningMeet`; nothing is parked on the
worker or the place.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from ..client._client import ClientCache, PlaceClient
from ..wire._address import canonical_address, split_target
from ..wire._briefcase import CODE, ITINERARY, RECOVERY, RERUN, TRACE, Briefcase
from ..wire._errors import (
    MeetError,
    MeetTimeout,
    MessageError,
    PlaceUnavailable,
    TacomaError,
    error_from_wire,
    kind_of,
)
from ..wire._names import BUILT_IN, HOME_AGENT, MAILBOX_AGENT, TRIP_AGENT
from ..wire._program import program_bytes
from ..wire._protocol import Accepted, Event, Failed, Meet, Result
from ._access import Access, Principal
from ._agents import Agents
from ._builds import Builds
from ._builtins import BuiltIns
from ._journal import Journal, Record
from ._meet import AtCapacity, Meets, RunningMeet
from ._pool import Worker
from ._residents import Residents
from ._settings import PlaceSettings
from ._trips import HEARTBEAT, LOST_AFTER, RECOVERIES, Trip, Trips, ending

__all__ = ["Dispatch", "failed"]

log = logging.getLogger("tacoma.place")


class Dispatch:
    """Runs the meets of one place, whoever made them (a client, or an agent here)."""

    def __init__(self, settings: PlaceSettings, agents: Agents, meets: Meets,
                 builtins: BuiltIns, builds: Builds, residents: Residents,
                 trips: Trips, access: Access, journal: Journal) -> None:
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
        self.clients = ClientCache(access.credentials, access.vet_place)
        self.background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ the meet path
    async def run(self, meet: RunningMeet) -> Briefcase:
        """Run one meet at this place and return the agent's briefcase.

        If the agent moves on, a meet that began here returns the briefcase its trip ends
        with; a hop of a trip that began elsewhere raises _Moved.
        """
        meet.step("examine")
        pool, installed_code = self.agents.resolve(meet.agent)
        meet.step("find agent")
        if pool is None:
            if meet.agent == TRIP_AGENT:  # between places only (Session checks the peer)
                return await self.serve_trip(meet.briefcase)
            result = await self.builtins.serve(meet.agent, meet.briefcase, meet.caller,
                                               meet.admin, meet.principal)
            meet.end_trace(result)
            return result
        timeout = self.bounded(meet.timeout)
        if meet.trip is not None and meet.trip.deadline:  # a hop: the trip's one deadline
            timeout = min(timeout, meet.trip.deadline - time.time())
            if timeout <= 0:
                raise MeetTimeout("the trip's deadline passed before the agent arrived here")
        briefcase = meet.briefcase
        if RERUN in briefcase and not meet.runs:  # only the place says it is a re-run
            briefcase.remove(RERUN)
        callers_code = briefcase.get(CODE)
        if installed_code is not None:
            briefcase[CODE] = [installed_code]
        elif not briefcase.get(CODE):
            raise MeetError(f"{meet.agent} needs its program in the CODE folder "
                            f"(tacoma meet {meet.agent} --code FILE)")
        if pool.interpreter.build is not None:
            started = time.monotonic()
            await self.builds.ensure(pool.interpreter, program_bytes(briefcase), timeout)
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
                    raise _Moved
                assert meet.trip is not None
                try:
                    result = await self.trips.wait(meet.trip, meet.deadline)
                except asyncio.CancelledError:  # the caller gave up: stop it where it is
                    self.in_background(self._stop_trip(meet.trip.id, [meet.went]))
                    raise
        finally:
            if not hop and meet.trip is not None:  # a trip that began here is over
                self.trips.waiting.pop(meet.trip.id, None)
        if installed_code is not None:  # the caller gets back its own CODE, not ours
            if callers_code is None:
                result.remove(CODE)
            else:
                result[CODE] = callers_code
        meet.end_trace(result)
        return result

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
        try:
            self.meets.admit("", meet.principal)
        except AtCapacity:
            self.meets.may_queue(meet.principal)
        meet.briefcase.remove(RERUN)
        outcome = await self.journal.accept(meet.id, meet.agent, meet.principal, meet.via,
                                            meet.caller, meet.timeout, meet.briefcase,
                                            "queued")
        if outcome == "taken":
            raise MeetError(f"meet id {meet.id} is taken at place {self.address}: choose "
                            "another")
        if outcome == "same":
            return meet.id  # sent again: it is taken once
        meet.journaled = True
        try:
            self.meets.admit("", meet.principal)
        except AtCapacity:
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
                meet.briefcase = await self.journal.briefcase(meet.id)
                meet.stored = False
            meet.runs = await self.journal.started(meet.id) - 1
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
        if not (meet.journaled or meet.orphaned):
            return
        error = None
        if exc is not None:
            failure = failed(0, exc)
            error = (failure.kind, failure.message, failure.detail)
        try:
            await self.journal.ended(meet.id, meet.agent, meet.principal, meet.via, result,
                                     error)
        except Exception:
            log.exception("cannot record the outcome of meet %s in the journal", meet.id)

    async def resume(self) -> None:
        """At start: take up what the journal says was under way when the place stopped.

        Async meets that had not ended are queued and run again (RERUN tells the agent how
        often they started before); meets whose agents were out on a trip from here wait for
        its end again; a sync meet whose caller was gone is recorded as failed (sync meets
        are at most once).
        """
        records = await self.journal.open()
        for record in records:
            meet = self.meets.new(record.agent, Briefcase(), record.timeout, record.principal,
                                  record.caller, via=record.via)
            meet.id = record.id
            meet.journaled = True
            if record.trip is not None:
                self.in_background(self._adopt(record))
            elif record.kind == "async":
                meet.runs = record.runs
                self.meets.queue(meet)
            else:
                await self.record(meet, None, PlaceUnavailable(
                    f"place {self.address} stopped during the meet, and sync meets are not "
                    "run again"))
        if records:
            log.info("the journal had %d meets under way: %d async meets to run again, %d "
                     "trips to wait for", len(records), len(self.meets.queued),
                     sum(1 for r in records if r.trip is not None))
        self._start_queued()

    async def _adopt(self, record: Record) -> None:
        """A trip that was out when the place stopped: its end, when it comes home, is
        recorded (ag_home, through the journal); if none came by a minute past its deadline,
        its outcome is recorded as unknown."""
        await asyncio.sleep(max(0.0, (record.deadline or 0.0) - time.time()) + 60.0)
        now = await self.journal.get(record.id)
        if now is not None and now.ended is None:
            meet = RunningMeet(record.id, record.agent, Briefcase(), record.timeout,
                               record.principal, via=record.via)
            meet.journaled = True
            await self.record(meet, None, MeetTimeout(
                "the trip did not come home by its deadline (its home restarted while it "
                "was out): its outcome is unknown"))

    # ------------------------------------------------------------------ trips (see _trips)
    async def run_hop(self, meet: RunningMeet) -> None:
        """Run one hop of a trip; where the agent ends, send the trip's end home."""
        trip = meet.trip
        assert trip is not None
        self.trips.arrived(trip, meet)
        try:
            result = await self.run(meet)
        except _Moved:
            return  # it went on: the next place has the trip now (and _go noted where)
        except asyncio.CancelledError:
            self.trips.left(trip, "")
            end = ending(trip, None, self.meets.cancelled(meet), self.address)
            self.in_background(self._send_home(trip, end))
            raise
        except Exception as exc:  # noqa: BLE001 - whatever ended the trip, home hears it
            failure = failed(0, exc)
            end = ending(trip, None, error_from_wire(failure.kind, failure.message,
                                                     failure.detail), self.address)
        else:
            end = ending(trip, result, None, self.address)
        self.trips.left(trip, "")
        await self._send_home(trip, end)

    async def _send_home(self, trip: Trip, end: Briefcase) -> None:
        """Deliver a trip's end to its home, trying again while the home is unreachable
        (restarting, cut off) until a minute after the trip's deadline."""
        if trip.home == self.address:
            await self.builtins.serve(HOME_AGENT, end, None)
            self._release_guard(trip)
            return
        left = trip.time_left()
        give_up = time.monotonic() + (max(0.0, left) if left is not None else 0.0) + 60.0
        pause = 0.5
        while True:
            try:
                client = await self.client(trip.home)
                await asyncio.wait_for(client.meet(HOME_AGENT, Briefcase(end), "sync", 30.0),
                                       30.0)
                self._release_guard(trip)
                return
            except Exception as exc:  # noqa: BLE001 - try again: the home may come back
                if time.monotonic() + pause > give_up:
                    log.warning("trip %s ended here but its home %s cannot be reached: %s",
                                trip.id, trip.home, exc)
                    return
                log.info("trip %s: its home %s cannot be reached (%s); trying again",
                         trip.id, trip.home, exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)

    def _release_guard(self, trip: Trip) -> None:
        """Tell the place that handed the agent here that its rear guard may go."""
        if trip.guard and trip.guard != self.address:
            self.in_background(self._trip_op(trip.guard, "released", trip.id, trip.hop))

    async def _trip_op(self, address: str, op: str, trip_id: str,
                       hop: int | None = None) -> str:
        """One ag_trip meet at another place: its STATE, or "" if it could not be asked."""
        request = Briefcase(OP=[op], TRIP=[trip_id])
        if hop is not None:
            request.replace("HOP", [str(hop)])
        try:
            async with asyncio.timeout(LOST_AFTER / 2):
                client = await self.clients.get(address, timeout=LOST_AFTER / 2)
                answer = await client.meet(TRIP_AGENT, request, "sync", LOST_AFTER / 2)
        except Exception as exc:  # noqa: BLE001 - the caller decides what silence means
            log.debug("ag_trip %s at %s: %s", op, address, exc)
            return ""
        assert isinstance(answer, Briefcase)
        return answer.text("STATE")[0] if answer.folder("STATE") else ""

    async def serve_trip(self, request: Briefcase) -> Briefcase:
        """ag_trip, for other places: `where` (a rear guard's heartbeat: here, moved,
        ended or unknown), `released` (the hop it guards was handed on, or ended), `stop`
        (the trip's caller gave up: stop the agent here, or pass the stop on)."""
        op = request.text("OP")[0] if request.folder("OP") else ""
        trip_id = request.text("TRIP")[0] if request.folder("TRIP") else ""
        try:
            hop = int(request.text("HOP")[0]) if request.folder("HOP") else 0
        except ValueError:
            raise MeetError("HOP must be a hop number") from None
        if op == "where":
            return Briefcase(STATE=[self.trips.where((trip_id, hop))])
        if op == "released":
            return Briefcase(STATE=["released" if self.trips.release((trip_id, hop))
                                    else "unknown"])
        if op == "stop":
            stopped = self._stop_here(trip_id)
            onward = self.trips.next_places(trip_id)
            if onward:
                self.in_background(self._stop_trip(trip_id, onward))
            return Briefcase(STATE=["stopped" if stopped else "passed" if onward
                                    else "unknown"])
        raise MeetError(f"unknown {TRIP_AGENT} operation {op!r}: where, released or stop")

    def _stop_here(self, trip_id: str) -> bool:
        stopped = False
        for hop in self.trips.running(trip_id):
            assert isinstance(hop, RunningMeet)
            self.meets.kill(hop, "stopped: its trip's caller gave up")
            stopped = True
        for key in [k for k in self.trips.guards if k[0] == trip_id]:
            self.trips.release(key)
        return stopped

    async def _stop_trip(self, trip_id: str, places: Sequence[str | None]) -> None:
        """Stop trip `trip_id` wherever it is now, starting from `places`."""
        self._stop_here(trip_id)
        for place in places:
            if place and place != self.address:
                await self._trip_op(place, "stop", trip_id)

    async def _guard(self, trip: Trip, target: str, briefcase: Briefcase, agent: str,
                     principal: str) -> None:
        """The rear guard of hop `trip`, handed to `target` (see _trips): ask where the
        agent is every HEARTBEAT; if `target` is lost with it, do what it chose."""
        heard, reason = time.monotonic(), ""
        try:
            while True:
                await asyncio.sleep(HEARTBEAT)
                left = trip.time_left()
                if left is not None and left <= 0:
                    return  # the trip is over by its deadline, wherever the agent is
                state = await self._trip_op(target, "where", trip.id, trip.hop)
                if state in ("moved", "ended"):
                    return
                if state == "here":
                    heard = time.monotonic()
                    continue
                if state == "unknown":
                    reason = "it no longer has the agent (it restarted)"
                    break
                if time.monotonic() - heard >= LOST_AFTER:
                    reason = f"it did not answer its rear guard for {LOST_AFTER:g} s"
                    break
        finally:
            self.trips.guards.pop(trip.key, None)
        log.warning("trip %s: place %s was lost with the agent on it: %s", trip.id, target,
                    reason)
        self.in_background(self._recover(trip, target, briefcase, agent, principal,
                                         reason))

    async def _recover(self, lost: Trip, target: str, briefcase: Briefcase, agent: str,
                       principal: str, reason: str) -> None:
        """Do what the agent chose in RECOVERY when place `target` was lost with it."""
        choice = briefcase.text(RECOVERY)[0] if briefcase.folder(RECOVERY) else "fail"
        trip = dataclasses.replace(lost, hop=lost.hop - 1)  # as it was here
        candidates: list[str] = []
        if choice == "retry":
            candidates = [target]
        elif choice == "skip":
            briefcase = Briefcase(briefcase)
            briefcase["SKIPPED"] = [*briefcase.get("SKIPPED", []), target.encode()]
            candidates = [p.decode("utf-8", "replace") for p in briefcase.get(ITINERARY, [])]
        elif choice not in RECOVERIES:
            reason += f" (and RECOVERY {choice!r} is none of {', '.join(RECOVERIES)})"
        while candidates:
            left = trip.time_left()
            if left is not None and left <= 0:
                break
            place = candidates[0] if choice == "retry" else candidates.pop(0)
            if choice == "skip":
                briefcase.replace(ITINERARY, [p.encode() for p in candidates])
            try:
                await self._hand_over(trip, place, briefcase, agent, principal,
                                      left if left is not None else self.bounded(None))
                log.info("trip %s: the agent went on to %s (%s)", trip.id, place, choice)
                return
            except Exception as exc:  # noqa: BLE001 - try the next, or again
                log.info("trip %s: %s could not take the agent: %s", trip.id, place, exc)
                if choice == "skip":
                    briefcase["SKIPPED"] = [*briefcase.get("SKIPPED", []), place.encode()]
                else:
                    await asyncio.sleep(HEARTBEAT)
        if choice == "skip" and (trip.time_left() or 1) > 0:
            briefcase.remove(ITINERARY)
            await self._send_home(trip, ending(trip, briefcase, None, self.address))
            return
        failure = PlaceUnavailable(f"the agent was lost at place {target}: {reason}")
        await self._send_home(trip, ending(trip, None, failure, self.address))

    async def _hand_over(self, trip: Trip, target: str, briefcase: Briefcase, agent: str,
                         principal: str, timeout: float) -> str:
        """Hand the agent (hop `trip` here) to `target`, and guard it there: its meet id."""
        onward = trip.onward(self.address)
        if target == self.address:
            self.meets.admit()
            hop = self.meets.new(agent, Briefcase(briefcase), timeout, principal, trip=onward)
            self.meets.spawn(hop, self.run_hop(hop))
            self.trips.left(trip, target)
            return hop.id
        client = await self.client(target)
        meet_id = str(await client.meet(agent, onward.stamp(briefcase), "go", timeout,
                                        principal))
        self.trips.left(trip, target)
        guard = asyncio.ensure_future(self._guard(onward, target, Briefcase(briefcase), agent,
                                                  principal))
        self.trips.guards[onward.key] = guard
        return meet_id

    async def settle(self) -> None:
        """After the meets ended: give the ends of trips on their way home a moment."""
        if self.background:
            await asyncio.wait(list(self.background), timeout=5)

    async def close(self) -> None:
        """Stop compiling, and close the connections to other places."""
        await self.builds.close()
        self.clients.close()

    def in_background(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def client(self, address: str) -> PlaceClient:
        return await self.clients.get(address, timeout=10.0)

    def bounded(self, timeout: float | None) -> float:
        """A meet's timeout within the place's own limit (--meet-seconds)."""
        limit = self.settings.limits.meet_seconds
        return limit if timeout is None else min(timeout, limit)

    async def answered(self, rid: int, work: Coroutine[Any, Any, Briefcase],
                       meet: RunningMeet | None, answer: Callable[[Event], None]) -> None:
        """Answer request `rid` with what `work` returns: its Result, or a Failed saying why
        it failed or was cancelled (the caller left or cancelled, the meet was killed, the
        place stops); a cancellation still cancels."""
        try:
            result = await work
        except asyncio.CancelledError:
            answer(failed(rid, self.meets.cancelled(meet)))
            if meet is not None and meet.journaled:
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

    # ------------------------------------------------------------------ messages
    async def answer_of(self, meet: Meet, answer: asyncio.Future[Briefcase]) -> Briefcase:
        """The resident's answer to a message: its reply (sync) or that it took it (ack)."""
        timeout = self.bounded(meet.timeout)
        try:
            async with asyncio.timeout(timeout):
                return await answer
        except TimeoutError:
            if answer.done() and not answer.cancelled():
                raise
            what = "take the message" if meet.mode == "ack" else "reply"
            raise MeetTimeout(f"{meet.agent} did not {what} within {timeout:g} s") from None

    async def message(self, name: str, meet: Meet, sender: str) -> Briefcase | str:
        """Deliver a message to resident `name` here: the message id (one-way), or the
        resident's answer."""
        message = self.residents.deliver(name, meet.mode, meet.briefcase, sender)
        if message.answer is None:
            return message.id
        return await self.answer_of(meet, message.answer)

    # ------------------------------------------------------------------ agents' own meets
    async def agent_meet(self, meet: RunningMeet, worker: Worker, event: Meet) -> None:
        """The agent of `meet`, run by `worker`, meets another agent (here, or at another
        place through a client), sends a message (a meet with a resident), uses its
        mailbox, or moves on."""
        try:
            if meet.went is not None:
                raise MeetError(f"the agent has gone to {meet.went}")
            if event.mode == "go":
                await self._go(worker, meet, event)
                return
            agent, address = split_target(event.agent)
            if address is not None:
                address = canonical_address(address)
                if address == self.address:
                    address = None  # here, as a bare name
            if address is None and agent != MAILBOX_AGENT:  # its own mailbox meets nobody
                # Here, the --allow rules hold for the principal whichever agent meets.
                self.access.authorize(Principal(meet.principal), agent, self.address)
            if address is not None:
                # The other place authorizes it: this place vouches for the principal.
                client = await self.client(address)
                answer = await client.meet(agent, event.briefcase, event.mode, event.timeout,
                                           meet.principal)
            elif agent == MAILBOX_AGENT:
                answer = await self.residents.serve(meet, event.briefcase)
            elif self.residents.get(agent) is not None:
                sender = f"{meet.resident}@{self.address}" if meet.resident else meet.identity
                answer = await self.message(agent, event, sender)
            elif event.mode == "ack":
                raise MessageError(f"the ack mode is for messages to resident agents, and "
                                   f"{agent} is not one here")
            elif agent in BUILT_IN and event.mode == "sync":
                # The place's own services (cabinets, ...) run no agent: an admitted agent
                # may use them even while the place is at --max-meets.
                answer = await self.builtins.serve(agent, event.briefcase, meet.identity,
                                                   principal=meet.principal)
            else:
                # An agent's meets count against --max-meets like anyone's, and can be killed.
                # Its async ones against its principal's share too (a sync one waits for
                # its answer, within the meet that was admitted: checking it could only
                # deadlock the parent on its own slot).
                # Its async ones are journaled and may queue, as a client's.
                inner = self.meets.new(agent, event.briefcase, event.timeout, meet.principal,
                                       meet.identity)
                if event.mode == "async":
                    answer = await self.submit(inner)
                else:
                    self.meets.admit()
                    # A meet of its own, so that it can be killed.
                    task = self.meets.spawn(inner, self.answered(
                        event.rid, self.run(inner), inner, worker.answer))
                    try:
                        await asyncio.shield(task)
                    except asyncio.CancelledError:
                        task.cancel()
                        raise
                    return
            worker.answer(Accepted(event.rid, answer) if isinstance(answer, str)
                          else Result(event.rid, answer))
        except Exception as exc:  # noqa: BLE001 - the agent is waiting for an answer
            worker.answer(failed(event.rid, exc))

    async def _go(self, worker: Worker, meet: RunningMeet, event: Meet) -> None:
        """Hand a moving agent on to the place `event.agent` (see _trips).

        Answered Accepted once the next place has taken the agent; any failure (the place
        is down, refuses, cannot run the language) reaches the agent, which is still here.
        """
        if meet.going:
            raise MeetError("the agent is already going to another place")
        target = canonical_address(event.agent)
        agent = worker.pool.interpreter.agent
        recovery = event.briefcase.text(RECOVERY) if event.briefcase.folder(RECOVERY) else []
        if recovery and recovery[0] not in RECOVERIES:
            raise MeetError(f"RECOVERY must be one of {', '.join(RECOVERIES)}, not "
                            f"{recovery[0]!r}")
        first = meet.trip is None
        meet.going = True
        trip: Trip | None = None
        try:
            if meet.trip is None:  # the trip begins here: its home journals it
                trip = self.trips.start(time.time() + meet.time_left())
                await self.journal.trip(meet.id, meet.agent, meet.principal, meet.via,
                                        meet.timeout, trip.id, trip.deadline)
                meet.journaled = True
            else:
                trip = meet.trip
            meet_id = await self._hand_over(trip, target, event.briefcase, agent,
                                            meet.principal, meet.time_left())
        except BaseException:
            meet.going = False
            if first and trip is not None:  # the trip did not start after all
                self.trips.waiting.pop(trip.id, None)
            raise
        meet.trip = trip
        worker.answer(Accepted(event.rid, meet_id))
        meet.went = target
        worker.moved_on()
        if not first:
            self._release_guard(trip)


class _Moved(Exception):
    """Raised by Dispatch.run for a hop whose agent moved on to another place."""


def failed(rid: int, exc: BaseException) -> Failed:
    """The Failed reply for an exception raised while serving a meet."""
    if isinstance(exc, MeetError):
        return Failed(rid, exc.kind, exc.message, exc.detail)
    if isinstance(exc, TacomaError | ValueError):  # ValueError: a bad target from an agent
        return Failed(rid, kind_of(exc), str(exc))
    log.error("meet failed on an unexpected error", exc_info=exc)
    return Failed(rid, PlaceUnavailable.kind,
                  f"the place could not serve this meet: {type(exc).__name__}: {exc}")
