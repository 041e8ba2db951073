"""The router: every meet at a place, a client's or an agent's, taken through one table.

A meet comes from outside (a client or another place, over a `Session`, which keeps only
the connection's I/O) or from an agent here (up its worker's channel: `agent_meet`). Either
way `Router.take` does the same four things, once each: checks who may meet what
(`meets._access`), resolves the meet into a `Route` (what its name finds here, or where it
goes), looks up (kind, mode, made by an agent) in the one table `meets._route.TAKE`, and
takes it the `Way` that says, one method each. Every answer, a Result, an Accepted or a
Failed, is sent by `answered`.

The meet path proper (`run`), against TACOMA's 13 steps (Table 1 of the paper):
    receive and examine (5)   a Channel decodes the frame; the protocol core checks it
    locate agent (6)          the meet's Route, resolved when it was taken (`Agents.resolve`:
                              a built-in agent, an interpreter's, or an installed one)
    steps 7 to 13             an agent run in a worker: `_pooled`; the place's own agents
                              and trusted agents are answered in the place's process

A meet's life (taken, queued, running, moving, moved, its end) is its `RunningMeet`'s state,
changed only as `meets._route.TRANSITIONS` allows; nothing is parked on the worker or the
place.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ...client._client import ClientCache
from ...trust._passport import Papers
from ...wire._address import canonical_address, split_target
from ...wire._briefcase import CODE, TRACE, Briefcase
from ...wire._errors import (
    MeetError,
    NotAuthorized,
)
from ...wire._names import ECHO_AGENT, HOME_AGENT, MAILBOX_AGENT, TRIP_AGENT
from ...wire._program import code_digest
from ...wire._protocol import Accepted, Event, Meet, Result
from .._settings import PlaceSettings
from ..meets._access import Access, Principal, Side
from ..meets._meet import Meets, RunningMeet, failed
from ..meets._residents import Residents
from ..meets._route import TAKE, Kind, Route, State, Way, refusal
from ..meets._trips import Trip, Trips
from ..promises._async import AsyncMeets
from ..promises._hops import Hops
from ..promises._journal import Journal
from ..promises._reach import Reach
from ..workers._agents import Agents, BuiltInAgent, Found, PooledAgent, TrustedRun
from ..workers._builds import Builds
from ..workers._pool import Moved, Worker
from ._builtins import BuiltIns
from ._pooled import PooledRuns

__all__ = ["Caller", "Router", "Taken"]

log = logging.getLogger("tacoma.place")

#: Sends one answer to whoever made a meet (a session's reply, or a worker's answer).
Reply = Callable[[Event], None]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a meet, as the router needs to know: its principal (and the place that
    vouches for it, `via`), the side it comes from, whether it may use ag_admin, the serial
    of the certificate that launched it, the connection's address (for refusals); for an
    agent here, the meet its agent serves and its worker."""

    principal: Principal
    side: Side
    admin: bool = False
    serial: str = ""
    peer: str = ""
    meet: RunningMeet | None = None
    worker: Worker | None = None
    #: The connection's own part of taking a meet, once it is allowed (programs named by
    #: hash, lazy folders the client holds): see Session.
    unpack: Callable[[Meet, Principal], None] | None = None


@dataclass(frozen=True, slots=True)
class Taken:
    """A meet that goes on after `take` returns: the task that answers it (cancelling it
    stops the meet), and the meet, if it is one of its own here."""

    task: asyncio.Task[None]
    meet: RunningMeet | None = None


class Router:
    """Takes and runs the meets of one place, whoever made them (a client, or an agent)."""

    def __init__(self, settings: PlaceSettings, agents: Agents, meets: Meets,
                 builtins: BuiltIns, builds: Builds, residents: Residents,
                 trips: Trips, access: Access, journal: Journal,
                 clients: ClientCache) -> None:
        self.settings = settings
        self.agents = agents
        self.trusted = agents.trusted  # trusted agents, run in the place's own process
        self.meets = meets
        self.journal = journal
        self.builtins = builtins
        self.builds = builds
        self.residents = residents
        self.trips = trips
        self.address = meets.address
        self.access = access
        # Connections to other places, for agents' meets, made as this place's identity.
        self.clients = clients
        self.background: set[asyncio.Task[None]] = set()
        #: Async meets, and the outcomes callers ask for by id (see promises._async).
        self.promised = AsyncMeets(meets, journal, self._result, self.address)
        #: Connections to the places agents name (see _reach).
        self.reach = Reach(self.clients, self.address)
        self.hops = Hops(self.address, trips, meets, journal, self.clients,
                         builtins.trip_ended, self.run, self.in_background, self.bounded,
                         self.reach, settings.trip_timings, access.passports)
        #: Running agents in workers (see _pooled).
        self.pooled = PooledRuns(builds, residents, trips, agents.warm, self.bounded,
                                 self.in_background, self.hops.stop_trip, self.agent_meet)
        #: The one table's ways (meets._route.TAKE), one method each.
        self._ways: dict[Way, Callable[[Caller, Meet, Route, Reply, int], Taken | None]] = {
            Way.ECHO: self._echo, Way.CALL: self._call, Way.SERVE: self._serve,
            Way.RUN: self._run_meet, Way.SUBMIT: self._submit, Way.MESSAGE: self._message,
            Way.HOP: self._hop, Way.MOVE: self._move, Way.FORWARD: self._forward,
            Way.MAILBOX: self._mailbox,
        }

    # ------------------------------------------------------------------ taking a meet
    def take(self, caller: Caller, event: Meet, reply: Reply) -> Taken | None:
        """Take one meet: checked, routed once, and taken the way the table says. What goes
        on after this returns is a Taken; a refusal, or an answer given at once, is sent
        with `reply` here."""
        by_agent = caller.meet is not None
        # A traced meet from outside is timed from here (see wire._trace).
        accepted = time.perf_counter_ns() if not by_agent and TRACE in event.briefcase else 0
        try:
            route = self._route(caller, event)
            way = TAKE.get((route.kind, event.mode, by_agent))
            if way is None:
                raise refusal(route, event.mode)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s (%s) for %s%s from %s: %s", event.agent, event.mode,
                          caller.principal.name or "anonymous",
                          f" via {caller.principal.via}" if caller.principal.via else "",
                          caller.peer or (caller.meet.id if caller.meet else ""), way.name)
            return self._ways[way](caller, event, route, reply, accepted)
        except Exception as exc:  # noqa: BLE001 - refused (failed() logs what is a bug)
            reply(failed(event.rid, exc))
            return None

    def _route(self, caller: Caller, event: Meet) -> Route:
        """Check that `caller` may make this meet, and resolve it into its Route (who may
        meet what is checked first: a caller who may not learns nothing of what is here)."""
        meet = caller.meet
        if meet is not None:  # an agent here
            self._not_revoked(meet)
            if meet.state is State.MOVED:
                raise MeetError(f"the agent has gone to {meet.went}")
            if event.mode == "go":  # its target is a place (Hops.go checks the rest)
                return Route(Kind.MOVE, event.agent, address=canonical_address(event.agent))
            agent, address = split_target(event.agent)
            if address is not None and (address := canonical_address(address)) != \
                    self.address:
                self.access.check_onward(agent)  # the other place checks the rest
                return Route(Kind.REMOTE, agent, address=address)
        else:
            agent = event.agent
        self.access.check(caller.principal, agent, event.mode, caller.side, self.address,
                          caller.peer)
        if caller.unpack is not None:
            caller.unpack(event, caller.principal)
        if meet is not None and agent == MAILBOX_AGENT:
            return Route(Kind.MAILBOX, agent)
        if event.mode != "go" and self.residents.get(agent) is not None:
            return Route(Kind.RESIDENT, agent)
        route = self._resolved(agent)
        if (meet is None or caller.principal.via) and caller.principal.passport is not None \
                and isinstance(route.found, PooledAgent) and route.found.installed is None:
            # A program run for the principal is its passport's (the launch's, or one another
            # place hands on, or one an agent another place handed here starts here):
            # whoever holds a passport runs the programs it names only.
            self.access.passports.check_program(caller.principal, agent, event.briefcase)
        return route

    def _resolved(self, agent: str) -> Route:
        """The route of an agent this place runs (TACOMA's step 6, locate agent)."""
        found = self.agents.resolve(agent)
        return Route(_kind(found), agent, found)

    def _new(self, caller: Caller, event: Meet, route: Route, accepted: int = 0,
             trip: Trip | None = None) -> RunningMeet:
        """A meet of its own here for `event` (not yet counted: Meets.spawn counts it)."""
        outside = caller.meet is None
        meet = self.meets.new(route.agent, event.briefcase, event.timeout,
                              caller.principal.name,
                              None if caller.meet is None else caller.meet.identity,
                              trip=trip, traced_at=accepted, via=caller.principal.via,
                              meet_id=event.meet_id if outside else "")
        meet.route = route
        meet.admin = caller.admin
        meet.serial = caller.serial
        passport = caller.principal.passport
        if isinstance(route.found, PooledAgent) and route.found.installed is not None:
            # An installed agent's program is this place's, which no passport can name: it
            # meets other places as this place, not as its principal.
            passport = None
        elif passport is not None and not outside and not caller.principal.via and \
                CODE in event.briefcase and \
                not passport.runs(code_digest(event.briefcase[CODE]).hex()):
            # Another program its agent starts at its launch place: the passport stays
            # with its own (at a place another handed it to, _route refused it already).
            passport = None
        meet.passport = passport
        meet.lines = caller.principal.lines
        return meet

    # -- the ways (meets._route.Way), one each
    def _echo(self, caller: Caller, event: Meet, route: Route, reply: Reply,
              accepted: int) -> Taken | None:
        """The null agent holds nothing and waits for nothing: answered here and now, it
        never takes a slot. Traced, it is timed through the whole path; while the place
        stops, it is refused like any."""
        if accepted or self.meets.stopping:
            return self._run_meet(caller, event, route, reply, accepted)
        reply(Result(event.rid, event.briefcase))
        return None

    def _call(self, caller: Caller, event: Meet, route: Route, reply: Reply,
              accepted: int) -> Taken | None:
        """A trusted agent whose meet is a plain function: answered here and now, on the
        place's own loop (see workers._trusted); as _echo when traced or stopping."""
        if accepted or self.meets.stopping:
            return self._run_meet(caller, event, route, reply, accepted)
        assert isinstance(route.found, TrustedRun)
        agent, trusted = route.found.agent, self.trusted
        returned = trusted.call(agent, event.briefcase, caller.principal.name)
        if inspect.isawaitable(returned):  # a wrapper of an async def, found out now
            async def finish() -> Briefcase:
                done = await trusted.finish(agent, returned, self.bounded(event.timeout))
                return trusted.result(agent, event.briefcase, done)

            self.in_background(self.answered(event.rid, finish, None, reply))
            return None
        reply(Result(event.rid, trusted.result(agent, event.briefcase, returned)))
        return None

    def _serve(self, caller: Caller, event: Meet, route: Route, reply: Reply,
               accepted: int) -> Taken | None:
        """The place's own service, for an agent here: it runs no agent, so an admitted
        agent may use it even while the place is at --max-meets."""
        meet = caller.meet
        assert meet is not None
        return self._answering(event.rid, functools.partial(
            self.builtins.serve, route.agent, event.briefcase, meet.identity,
            principal=meet.principal, origins=meet.origins, passport=meet.passport,
            via=meet.via), reply)

    def _run_meet(self, caller: Caller, event: Meet, route: Route, reply: Reply,
                  accepted: int) -> Taken | None:
        """A sync meet of its own: counted against --max-meets and its principal's share
        (refused, PlaceUnavailable, past either), killable, answered with its result."""
        self.meets.admit(route.agent, caller.principal.name)
        meet = self._new(caller, event, route, accepted)
        task = self.meets.spawn(meet, self.answered(
            event.rid, functools.partial(self._result, meet), meet, reply))
        return Taken(task, meet)

    def _submit(self, caller: Caller, event: Meet, route: Route, reply: Reply,
                accepted: int) -> Taken | None:
        """An async meet: answered Accepted once the journal holds it (see submit). Not
        cancellable: once journaled, it runs whatever its caller does."""
        if caller.meet is None and event.meet_id and \
                self.meets.find(event.meet_id, caller.principal.name):
            reply(Accepted(event.rid, event.meet_id))  # sent again: taken once
            return None
        meet = self._new(caller, event, route)
        self.in_background(self.answered(event.rid, functools.partial(self.promised.submit, meet),
                                         None, reply))
        return None

    def _message(self, caller: Caller, event: Meet, route: Route, reply: Reply,
                 accepted: int) -> Taken | None:
        """A message to a resident agent (see meets._residents): in its mailbox is all a
        one-way sender hears; the others wait for its reply, or for it to take it."""
        meet = caller.meet
        sender = "client" if meet is None else \
            f"{meet.resident}@{self.address}" if meet.resident else meet.identity
        message = self.residents.deliver(route.agent, event.mode, event.briefcase, sender,
                                         caller.principal.name)
        if message.answer is None:
            reply(Accepted(event.rid, message.id))
            return None
        return self._answering(event.rid, functools.partial(
            self.residents.answer_of, event, message.answer, self.bounded(event.timeout)),
            reply)

    def _hop(self, caller: Caller, event: Meet, route: Route, reply: Reply,
             accepted: int) -> Taken | None:
        """A moving agent arriving from another place (`go`, see promises._hops): taken
        once, answered Accepted before it runs, then run as the trip's next hop."""
        trip = Trip.take(event.briefcase)
        principal = caller.principal
        trip, got = self.access.passports.arrived(principal, trip, event.briefcase,
                                                  principal.via or principal.name)
        sender = (principal.name, principal.via)
        if (taken := self.trips.taken_as(trip, sender)) is not None:
            # Sent again (the connection broke before the answer): taken once, and
            # answered even at a full place, or the agent would go on from both.
            reply(Accepted(event.rid, taken))
            return None
        # No principal's share: a trip's hop is the admitted meet, going on.
        self.meets.admit()
        meet = self._new(caller, event, route, trip=trip)
        meet.got = got
        self.trips.take(trip, meet.id, sender)
        reply(Accepted(event.rid, meet.id))
        self.meets.spawn(meet, self.hops.run_hop(meet))
        return None

    def _move(self, caller: Caller, event: Meet, route: Route, reply: Reply,
              accepted: int) -> Taken | None:
        """The agent here moves on to the place `route.address` (see promises._hops)."""
        assert caller.meet is not None
        assert caller.worker is not None
        return self._answering(event.rid, functools.partial(
            self.hops.go, caller.worker, caller.meet, route.address, event.briefcase), reply)

    def _forward(self, caller: Caller, event: Meet, route: Route, reply: Reply,
                 accepted: int) -> Taken | None:
        """An agent here meets an agent at another place: that place authorizes it under
        the agent's passport, which this place carries (it vouches for nobody)."""
        assert caller.meet is not None
        passport = caller.meet.passport
        # Its passport goes with it; without one, this place meets as itself.
        principal = caller.principal.name if passport is not None else ""
        papers = Papers(passport.raw).to_wire() if passport is not None else b""

        async def meet_there() -> Briefcase | str:
            client = await self.reach.get(route.address, caller.principal.name, 10.0)
            return await client.meet(route.agent, event.briefcase, event.mode,
                                     event.timeout, principal, papers=papers)

        return self._answering(event.rid, meet_there, reply)

    def _mailbox(self, caller: Caller, event: Meet, route: Route, reply: Reply,
                 accepted: int) -> Taken | None:
        """The agent here uses its own mailbox (reside, receive, reply, leave)."""
        assert caller.meet is not None
        return self._answering(event.rid, functools.partial(
            self.residents.serve, caller.meet, event.briefcase), reply)

    def _answering(self, rid: int, work: Callable[[], Awaitable[Briefcase | str]],
                   reply: Reply) -> Taken:
        return Taken(asyncio.ensure_future(self.answered(rid, work, None, reply)))

    # ------------------------------------------------------------------ the meet path
    async def _result(self, meet: RunningMeet) -> Briefcase:
        """Run a meet that began here to its end (a trip it goes on is waited for)."""
        outcome = await self.run(meet)
        assert not isinstance(outcome, Moved)  # only a hop of a trip from elsewhere moves
        return outcome

    async def run(self, meet: RunningMeet) -> Briefcase | Moved:
        """Run one meet at this place and return the agent's briefcase.

        If the agent moves on, a meet that began here returns the briefcase its trip ends
        with; a hop of a trip that began elsewhere returns Moved.
        """
        meet.step("examine")
        self._not_revoked(meet)
        route = meet.route
        if route is None:  # a hop this place handed itself, or one the journal kept
            route = meet.route = self._resolved(meet.agent)
        meet.to(State.RUNNING)
        meet.step("find agent")
        found = route.found
        if isinstance(found, PooledAgent):
            return await self.pooled.run(meet, found)
        if route.kind is Kind.TRIPS:
            return await self.hops.serve_trip(meet.briefcase)  # from places (see _access)
        if isinstance(found, TrustedRun):
            result = await self.trusted.run(found.agent, meet.briefcase, meet.principal,
                                            self.bounded(meet.timeout))
        else:  # the place's own agents
            result = await self.builtins.serve(meet.agent, meet.briefcase, meet.caller,
                                               meet.admin, meet.principal,
                                               passport=meet.passport, lines=meet.lines,
                                               via=meet.via)
        meet.end_trace(result)
        return result

    def _not_revoked(self, meet: RunningMeet) -> None:
        """NotAuthorized if `meet`'s principal was revoked (its agents make no more meets,
        and a queued meet of it does not start; see Place.stop_revoked)."""
        if self.access.stops(meet.principal, meet.serial):
            raise NotAuthorized(f"{meet.principal or 'this principal'} is revoked at place "
                                f"{self.address}: its agents' meets are refused")

    async def resume(self) -> None:
        """At start: take up what the journal says was under way (see promises._async)."""
        await self.promised.resume()

    async def settle(self) -> None:
        """After the meets ended: give the ends of trips on their way home a moment."""
        if self.background:
            await asyncio.wait(list(self.background), timeout=5)

    async def close(self) -> None:
        """Stop compiling, and close the connections to other places."""
        await self.builds.close()
        self.promised.close()
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

    async def answered(self, rid: int, work: Callable[[], Awaitable[Briefcase | str]],
                       meet: RunningMeet | None, answer: Reply) -> None:
        """Answer request `rid` with what `work()` returns (a briefcase: its Result; a meet
        or message id: Accepted), or a Failed saying why it failed or was cancelled (the
        caller left or cancelled, the meet was killed, the place stops); a cancellation
        still cancels. The one place every meet's answer is made. `work` is called here,
        not by the caller: a task cancelled before it starts then leaves no coroutine never
        awaited. A meet of its own (`meet`) ends here, and is recorded if it must be."""
        try:
            result = await work()
        except asyncio.CancelledError as exc:
            answer(failed(rid, self.meets.cancelled(meet)))
            if meet is not None:
                meet.ends(exc)
                if meet.recorded:
                    await asyncio.shield(self.promised.record(meet, None,
                                                               self.meets.cancelled(meet)))
            raise
        except Exception as exc:  # noqa: BLE001 - every meet gets an answer, whatever failed
            answer(failed(rid, exc))
            if meet is not None:
                meet.ends(exc)
                await self.promised.record(meet, None, exc)
            return
        answer(Accepted(rid, result) if isinstance(result, str) else Result(rid, result))
        if meet is not None:
            meet.ends(None)
            if meet.recorded:
                assert isinstance(result, Briefcase)
                await self.promised.record(meet, result, None)

    # ------------------------------------------------------------------ agents' own meets
    async def agent_meet(self, meet: RunningMeet, worker: Worker, event: Meet) -> None:
        """The agent of `meet`, run by `worker`, makes a meet (up its worker's channel):
        taken like any (see take), and waited for here, so that the agent's end (its worker
        destroyed) stops it; what reaches the agent has its lazy folders noted."""
        def hand(reply: Event) -> None:
            if isinstance(reply, Result):
                meet.note_origins(reply.briefcase)
            worker.answer(reply)

        # An agent another place handed here acts under its passport here too (via).
        taken = self.take(Caller(Principal(meet.principal, meet.via, meet.passport),
                                 Side.AGENT, serial=meet.serial, meet=meet, worker=worker),
                          event, hand)
        if taken is None:
            return
        try:
            await asyncio.shield(taken.task)
        except asyncio.CancelledError:
            taken.task.cancel()
            raise


def _kind(found: Found) -> Kind:
    """The route kind of what a name finds here."""
    if isinstance(found, BuiltInAgent):
        return {ECHO_AGENT: Kind.ECHO, HOME_AGENT: Kind.HOME,
                TRIP_AGENT: Kind.TRIPS}.get(found.name, Kind.BUILT_IN)
    if isinstance(found, TrustedRun):
        plain = found.agent.plain and found.agent.call is not None
        return Kind.TRUSTED_CALL if plain else Kind.TRUSTED
    return Kind.POOLED
