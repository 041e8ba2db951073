"""The place's side of trips: hand-overs, hops run here, rear guards, recovery and stops.

What a trip is, and what it promises, is in `_trips` (the trip as data, and the book of the
trips at a place); this is what a place does for them: `go` hands an agent on (journaling
the trip at its home first), `run_hop` runs a hop that arrived and sends the trip's end
home (again while the home is unreachable), `_guard` is a rear guard, `_recover` does what
the agent chose in RECOVERY, and `serve_trip` answers other places' rear guards and stops
(the built-in `ag_trip`). The meet path itself (`Router.run`) is given as a callable: it
runs a hop's agent like any meet's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from ...client._client import ClientCache, PlaceClient
from ...trust._passport import Papers, Passport, briefcase_digest
from ...wire._briefcase import ITINERARY, RECOVERY, Briefcase
from ...wire._errors import (
    ConnectError,
    ConnectionLost,
    MeetError,
    MeetTimeout,
    PlaceUnavailable,
    error_from_wire,
)
from ...wire._names import HOME_AGENT, TRIP_AGENT
from .._settings import TripTimings
from ..meets._meet import Meets, RunningMeet, failed
from ..meets._passports import Carried, Passports
from ..meets._route import State
from ..meets._trips import RECOVERIES, Trip, Trips, ending
from ..workers._pool import Moved
from ._journal import Journal
from ._reach import Reach

if TYPE_CHECKING:
    from ..workers._pool import Worker

__all__ = ["Hops"]

log = logging.getLogger("tacoma.place")

#: What _trip_op says of a place whose connection was refused (no place listens there).
REFUSED = "refused"
#: Seconds for each attempt to connect to the next place of a trip (see Hops._reach).
CONNECT_TIMEOUT = 10.0
#: How many times a hand-over whose connection broke is sent, and how long each waits
#: for its answer (see Hops._send_over).
CONNECT_ATTEMPTS = 3


class Hops:
    """What one place does for trips (see the module's docstring)."""

    def __init__(self, address: str, trips: Trips, meets: Meets, journal: Journal,
                 clients: ClientCache,
                 home: Callable[[Briefcase, str, Passport | None, tuple[bytes, ...]],
                                Awaitable[None]],
                 run: Callable[[RunningMeet], Awaitable[Briefcase | Moved]],
                 in_background: Callable[[Coroutine[Any, Any, Any]], None],
                 bounded: Callable[[float | None], float], reach: Reach,
                 timings: TripTimings, passports: Passports) -> None:
        self.address = address
        self.passports = passports  # the lines this place signs (see meets._passports)
        self.timings = timings
        self.trips = trips
        self.meets = meets
        self.journal = journal
        self.clients = clients
        self._home = home  # a trip's end, at its home when that is here (ag_home)
        self._run = run
        self._in_background = in_background
        self._bounded = bounded
        self.reach = reach  # the places an agent names: its moves, its ITINERARY

    def close(self) -> None:
        """Stop the rear guards (the place stops)."""
        self.trips.close()

    async def go(self, worker: Worker, meet: RunningMeet, target: str,
                 briefcase: Briefcase) -> str:
        """Hand the agent of `meet` on to the place `target` (see meets._trips): the meet id
        it has there, once that place has taken it (its meet here is then MOVED). Any
        failure (the place is down, refuses, cannot run the language) reaches the agent,
        which is still here, running.
        """
        if meet.state is State.MOVING:
            raise MeetError("the agent is already going to another place")
        agent = worker.pool.interpreter.agent
        recovery = briefcase.text(RECOVERY) if briefcase.folder(RECOVERY) else []
        if recovery and recovery[0] not in RECOVERIES:
            raise MeetError(f"RECOVERY must be one of {', '.join(RECOVERIES)}, not "
                            f"{recovery[0]!r}")
        first = meet.trip is None
        meet.to(State.MOVING)
        trip: Trip | None = None
        try:
            digest = meet.passport.digest if meet.passport is not None else ""
            if meet.trip is None:  # the trip begins here: its home journals it
                trip = self.trips.start(time.time() + meet.time_left(), meet.principal, digest)
                meet.journaled = True  # first: if cancelled while written, it is recorded
                await self.journal.trip(meet.id, meet.agent, meet.principal, meet.via,
                                        meet.timeout, trip.id, trip.deadline, digest)
            else:
                trip = meet.trip
            meet_id = await self._hand_over(trip, target, briefcase, agent,
                                            meet.principal, meet.time_left(), _carried(meet))
        except BaseException:
            if meet.is_(State.MOVING):  # else it ended meanwhile (its worker died)
                meet.to(State.RUNNING)
            if first and trip is not None:  # the trip did not start after all
                self.trips.forget(trip.id)
                self._in_background(self.journal.trip_not_begun(meet.id, meet.principal))
            raise
        meet.trip = trip
        meet.went = target
        if meet.is_(State.MOVING):  # else it ended during the hand-over (its worker
            # died): the trip goes on all the same, and its end is recorded at home
            meet.to(State.MOVED)
            worker.moved_on(target)  # its run ends Moved, once the agent has its answer
        if not first:
            self._release_guard(trip)
        return meet_id

    async def run_hop(self, meet: RunningMeet) -> None:
        """Run one hop of a trip; where the agent ends, send the trip's end home."""
        trip = meet.trip
        assert trip is not None
        self.trips.arrived(trip, meet)
        try:
            result = await self._run(meet)
            if isinstance(result, Moved):
                return  # it went on: the next place has the trip now (and go noted where)
        except asyncio.CancelledError as exc:
            meet.ends(exc)
            self.trips.left(trip, "")
            end = ending(trip, None, self.meets.cancelled(meet), self.address)
            self._in_background(self._send_home(trip, meet.principal, end, _carried(meet)))
            raise
        except Exception as exc:  # noqa: BLE001 - whatever ended the trip, home hears it
            meet.ends(exc)
            failure = failed(0, exc)
            end = ending(trip, None, error_from_wire(failure.kind, failure.message,
                                                     failure.detail), self.address)
        else:
            meet.ends(None)
            end = ending(trip, result, None, self.address)
        self.trips.left(trip, "")
        await self._send_home(trip, meet.principal, end, _carried(meet))

    async def _send_home(self, trip: Trip, principal: str, end: Briefcase,
                         carried: Carried) -> None:
        """Deliver the end of `principal`'s trip to its home (which takes it for the trip's
        own passport only), with this place's line, trying again while the home is
        unreachable (restarting, cut off) until a minute after the trip's deadline."""
        line = self.passports.line(trip, trip.home, carried.got, end, carried.passport,
                                   ended=True)
        papers = carried.papers(line)
        if trip.home == self.address:
            await self._home(end, principal, carried.passport, papers.lines)
            self._release_guard(trip)
            return
        named = principal if carried.passport is not None else ""  # else: as this place
        wire = papers.to_wire()
        left = trip.time_left()
        give_up = time.monotonic() + (max(0.0, left) if left is not None else 0.0) + 60.0
        pause = 0.5
        while True:
            try:
                client = await self.clients.get(trip.home, timeout=10.0)
                await asyncio.wait_for(client.meet(HOME_AGENT, Briefcase(end), "sync", 30.0,
                                                   named, papers=wire),
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

    def _moved(self, onward: Trip, target: str, home: bool, report: bool) -> None:
        """Hop `onward` went to `target`: the home notes it, another place tells the home
        when a report is due (best effort, in the background: the next one corrects a lost
        one, and the trip's end does not wait for it)."""
        if home:
            self.trips.moved(onward.id, onward.hop, target)
        elif report:
            self._in_background(self._trip_op(onward.home, "at", onward.id, onward.hop, target))

    def _release_guard(self, trip: Trip) -> None:
        """Tell the place that handed the agent here that its rear guard may go."""
        if trip.guard and trip.guard != self.address:
            self._in_background(self._trip_op(trip.guard, "released", trip.id, trip.hop))

    async def _trip_op(self, address: str, op: str, trip_id: str,
                       hop: int | None = None, at: str | None = None) -> str:
        """One ag_trip meet at another place: its STATE; "" if it could not be asked, and
        REFUSED if no place listens there now (its connection refused)."""
        request = Briefcase(OP=[op], TRIP=[trip_id])
        if hop is not None:
            request.replace("HOP", [str(hop)])
        if at is not None:
            request.replace("AT", [at])
        try:
            wait = self.timings.refused_for / 2
            async with asyncio.timeout(wait):
                client = await self.clients.get(address, timeout=wait)
                answer = await client.meet(TRIP_AGENT, request, "sync", wait)
        except Exception as exc:  # noqa: BLE001 - the caller decides what silence means
            log.debug("ag_trip %s at %s: %s", op, address, exc)
            refused = isinstance(exc, ConnectError) and isinstance(
                exc.__cause__, ConnectionRefusedError)
            return REFUSED if refused else ""
        assert isinstance(answer, Briefcase)
        return answer.text("STATE")[0] if answer.folder("STATE") else ""

    async def serve_trip(self, request: Briefcase) -> Briefcase:
        """ag_trip, for other places: `where` (a rear guard's heartbeat: here, moved,
        ended or unknown), `released` (the hop it guards was handed on, or ended), `stop`
        (the trip's caller gave up: stop the agent here, or pass the stop on), `at` (hop HOP
        of a trip that began here went to the place AT)."""
        op = request.text("OP")[0] if request.folder("OP") else ""
        trip_id = request.text("TRIP")[0] if request.folder("TRIP") else ""
        try:
            hop = int(request.text("HOP")[0]) if request.folder("HOP") else 0
        except ValueError:
            raise MeetError("HOP must be a hop number") from None
        if op == "where":
            return Briefcase(STATE=[self.trips.where((trip_id, hop))])
        if op == "at":
            at = request.text("AT")[0] if request.folder("AT") else ""
            self.trips.moved(trip_id, hop, at)
            return Briefcase(STATE=["noted"])
        if op == "released":
            return Briefcase(STATE=["released" if self.trips.release((trip_id, hop))
                                    else "unknown"])
        if op == "stop":
            if not self.trips.mark_stopped(trip_id):
                return Briefcase(STATE=["stopped"])  # this place passed the stop on already
            stopped = self._stop_here(trip_id)
            onward = self.trips.next_places(trip_id)
            if onward:
                self._in_background(self._pass_stop(trip_id, onward))
            return Briefcase(STATE=["stopped" if stopped else "passed" if onward
                                    else "unknown"])
        raise MeetError(f"unknown {TRIP_AGENT} operation {op!r}: where, released, stop or at")

    def _stop_here(self, trip_id: str) -> bool:
        stopped = False
        for hop in self.trips.running(trip_id):
            assert isinstance(hop, RunningMeet)
            self.meets.kill(hop, "stopped: its trip's caller gave up")
            stopped = True
        for key in [k for k in self.trips.guards if k[0] == trip_id]:
            self.trips.release(key)
        return stopped

    async def stop_trip(self, trip_id: str, places: Sequence[str | None]) -> None:
        """Stop trip `trip_id` wherever it is now, starting from `places`. Each place
        handles a trip's stop once (a trip may pass a place many times)."""
        if not self.trips.mark_stopped(trip_id):
            return
        self._stop_here(trip_id)
        await self._pass_stop(trip_id, places)

    async def _pass_stop(self, trip_id: str, places: Sequence[str | None]) -> None:
        for place in dict.fromkeys(places):
            if place and place != self.address:
                await self._trip_op(place, "stop", trip_id)

    async def _guard(self, trip: Trip, target: str, briefcase: Briefcase, agent: str,
                     principal: str, carried: Carried) -> None:
        """The rear guard of hop `trip`, handed to `target` (see _trips): ask where the
        agent is, every `timings.every` seconds; if `target` is lost with it, do what it
        chose."""
        heard, reason, timings = time.monotonic(), "", self.timings
        try:
            while True:
                await asyncio.sleep(timings.every)
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
                refused = state == REFUSED
                limit = timings.refused_for if refused else timings.silent_for
                if time.monotonic() - heard >= limit:
                    reason = (f"it refused its rear guard's connections for {limit:g} s"
                              if refused else
                              f"it did not answer its rear guard for {limit:g} s")
                    break
        finally:
            self.trips.guards.pop(trip.key, None)
        log.warning("trip %s: place %s was lost with the agent on it: %s", trip.id, target,
                    reason)
        self._in_background(self._recover(trip, target, briefcase, agent, principal,
                                         reason, carried))

    async def _recover(self, lost: Trip, target: str, briefcase: Briefcase, agent: str,
                       principal: str, reason: str, carried: Carried) -> None:
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
        give_up = time.monotonic() + self._bounded(None)  # a trip without a deadline
        while candidates:
            if self.trips.is_stopped(trip.id):
                return  # its caller gave up: nothing to hand on, nobody to tell
            left = trip.time_left()
            if (left is not None and left <= 0) or time.monotonic() > give_up:
                break
            place = candidates[0] if choice == "retry" else candidates.pop(0)
            if choice == "skip":
                briefcase.replace(ITINERARY, [p.encode() for p in candidates])
            try:
                await self._hand_over(trip, place, briefcase, agent, principal,
                                      left if left is not None else self._bounded(None),
                                      carried)
                log.info("trip %s: the agent went on to %s (%s)", trip.id, place, choice)
                return
            except Exception as exc:  # noqa: BLE001 - try the next, or again
                log.info("trip %s: %s could not take the agent: %s", trip.id, place, exc)
                if choice == "skip":
                    briefcase["SKIPPED"] = [*briefcase.get("SKIPPED", []), place.encode()]
                else:
                    await asyncio.sleep(self.timings.every)
        if self.trips.is_stopped(trip.id):
            return
        if choice == "skip" and (trip.time_left() or 1) > 0:
            briefcase.remove(ITINERARY)
            await self._send_home(trip, principal, ending(trip, briefcase, None,
                                                          self.address), carried)
            return
        failure = PlaceUnavailable(f"the agent was lost at place {target}: {reason}")
        await self._send_home(trip, principal, ending(trip, None, failure, self.address),
                              carried)

    async def _reach(self, target: str, timeout: float, principal: str) -> PlaceClient:
        """The connection to hand `principal`'s agent to `target` over: tried again after a
        transient failure while the trip has the time (see ClientCache.get), and under
        Reach's rules where no place answered before (the agent chose the address)."""
        return await self.reach.get(target, principal, min(CONNECT_TIMEOUT, timeout),
                                    until=time.monotonic() + timeout)

    async def _send_over(self, target: str, travelling: Briefcase, agent: str,
                         principal: str, timeout: float, papers: Papers) -> str:
        """Send the go meet of a hand-over to `target`: the meet id it took the agent as.

        A connection that breaks during the meet (a path losing packets, the other end's
        idle close crossing it) leaves it unknown whether `target` took the agent: the meet
        is sent again on a new connection, up to CONNECT_ATTEMPTS times while the trip has
        the time, and the place that took it already answers with the same id (it knows the
        hop: see Trips.taken_as), so the agent runs once.
        """
        give_up = time.monotonic() + timeout
        wire = papers.to_wire()
        named = principal if papers.passport else ""  # else: as this place itself
        for attempt in range(1, CONNECT_ATTEMPTS + 1):
            client = await self._reach(target, max(0.0, give_up - time.monotonic()),
                                       principal)
            left = max(0.0, give_up - time.monotonic())
            last = attempt == CONNECT_ATTEMPTS or left < CONNECT_TIMEOUT
            wait = asyncio.timeout(min(left, self.timings.hand_over_wait))
            try:
                # A connection that went silent (half open, its host gone) is not waited on
                # past timings.hand_over_wait: the hand-over goes again on a new one.
                async with wait:
                    return str(await client.meet(agent, travelling, "go", left, named,
                                                 papers=wire))
            except ConnectionLost as exc:
                if last:
                    raise
                why = str(exc)
            except TimeoutError:
                if not wait.expired():
                    raise  # the next place's own MeetTimeout: it answered
                client.close()
                why = f"no answer within {min(left, self.timings.hand_over_wait):g} s"
                if last:
                    raise MeetTimeout(f"place {target} did not answer the hand-over "
                                      f"({why})") from None
            log.info("handing an agent to %s again (attempt %d of %d): %s", target,
                     attempt + 1, CONNECT_ATTEMPTS, why)
        raise AssertionError("unreachable")  # the last attempt returns or raises

    async def _hand_over(self, trip: Trip, target: str, briefcase: Briefcase, agent: str,
                         principal: str, timeout: float, carried: Carried) -> str:
        """Hand the agent (hop `trip` here) to `target`, with its passport and this place's
        line, and guard it there: its meet id."""
        now = time.time()
        home = trip.home == self.address
        report = not home and trip.report_due(now)
        onward = trip.onward(self.address, now if report else None)
        papers = carried.papers(self.passports.line(onward, target, carried.got, briefcase,
                                                    carried.passport))
        if target == self.address:
            self.meets.admit()
            hop = self.meets.new(agent, Briefcase(briefcase), timeout, principal, trip=onward)
            hop.passport, hop.lines = carried.passport, papers.lines
            hop.got = briefcase_digest(briefcase) if papers.lines else ""
            self.meets.spawn(hop, self.run_hop(hop))
            self.trips.left(trip, target)
            self._moved(onward, target, home, report)
            return hop.id
        meet_id = await self._send_over(target, onward.stamp(briefcase), agent, principal,
                                        timeout, papers)
        self.trips.left(trip, target)
        self._moved(onward, target, home, report)
        guard = asyncio.ensure_future(self._guard(onward, target, Briefcase(briefcase), agent,
                                                  principal, carried))
        self.trips.guards[onward.key] = guard
        return meet_id


def _carried(meet: RunningMeet) -> Carried:
    """What the agent of `meet` carries on (see meets._passports)."""
    return Carried(meet.passport, meet.lines, meet.got)
