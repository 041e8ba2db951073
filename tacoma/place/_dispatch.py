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
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from ..client._client import ClientCache, PlaceClient
from ..wire._address import canonical_address, split_target
from ..wire._briefcase import CODE, TRACE, Briefcase
from ..wire._errors import (
    MeetError,
    MeetTimeout,
    MessageError,
    PlaceUnavailable,
    TacomaError,
    error_from_wire,
    kind_of,
)
from ..wire._names import BUILT_IN, HOME_AGENT, MAILBOX_AGENT
from ..wire._program import program_bytes
from ..wire._protocol import Accepted, Event, Failed, Meet, Result
from ._access import Access, Principal
from ._agents import Agents
from ._builds import Builds
from ._builtins import BuiltIns
from ._meet import Meets, RunningMeet
from ._pool import Worker
from ._residents import Residents
from ._settings import PlaceSettings
from ._trips import Trip, Trips, ending

__all__ = ["Dispatch", "failed"]

log = logging.getLogger("tacoma.place")


class Dispatch:
    """Runs the meets of one place, whoever made them (a client, or an agent here)."""

    def __init__(self, settings: PlaceSettings, agents: Agents, meets: Meets,
                 builtins: BuiltIns, builds: Builds, residents: Residents,
                 trips: Trips, access: Access) -> None:
        self.settings = settings
        self.agents = agents
        self.meets = meets
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
            result = await self.builtins.serve(meet.agent, meet.briefcase, meet.caller,
                                               meet.admin)
            meet.end_trace(result)
            return result
        timeout = self.bounded(meet.timeout)
        briefcase = meet.briefcase
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
                result = await self.trips.wait(meet.trip, meet.deadline)
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

    async def run_async(self, meet: RunningMeet) -> None:
        """Run a meet nobody waits for (async), and log how it ended."""
        try:
            await self.run(meet)
        except TacomaError as exc:
            log.info("async meet %s (%s) failed: %s", meet.id, meet.agent, exc)
        except Exception:
            log.exception("async meet %s (%s) failed on an unexpected error", meet.id,
                          meet.agent)
        else:
            log.info("async meet %s (%s) done", meet.id, meet.agent)

    async def run_hop(self, meet: RunningMeet) -> None:
        """Run one hop of a trip; where the agent ends, send the trip's end home."""
        trip = meet.trip
        assert trip is not None
        try:
            result = await self.run(meet)
        except _Moved:
            return  # it went on: the next place has the trip now
        except asyncio.CancelledError:
            end = ending(trip, None, self.meets.cancelled(meet), self.address)
            self.in_background(self._send_home(trip, end))
            raise
        except Exception as exc:  # noqa: BLE001 - whatever ended the trip, home hears it
            failure = failed(0, exc)
            end = ending(trip, None, error_from_wire(failure.kind, failure.message,
                                                     failure.detail), self.address)
        else:
            end = ending(trip, result, None, self.address)
        await self._send_home(trip, end)

    async def _send_home(self, trip: Trip, end: Briefcase) -> None:
        try:
            if trip.home == self.address:
                self.trips.end(end)
                return
            client = await self.client(trip.home)
            await asyncio.wait_for(client.meet(HOME_AGENT, end, "sync", 30.0), 30.0)
        except Exception as exc:  # noqa: BLE001 - nobody else to tell; the home times out
            log.warning("trip %s ended here but cannot reach its home %s: %s", trip.id,
                        trip.home, exc)

    async def settle(self) -> None:
        """After the meets ended: give the ends of trips on their way home a moment."""
        if self.background:
            await asyncio.wait(list(self.background), timeout=5)

    async def close(self) -> None:
        """Stop compiling, and close the connections to other places."""
        await self.builds.close()
        self.clients.close()

    def in_background(self, coro: Coroutine[Any, Any, None]) -> None:
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
            raise
        except Exception as exc:  # noqa: BLE001 - every meet gets an answer, whatever failed
            answer(failed(rid, exc))
            return
        answer(Result(rid, result))

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
                answer = await self.builtins.serve(agent, event.briefcase, meet.identity)
            else:
                # An agent's meets count against --max-meets like anyone's, and can be killed.
                # Its async ones against its principal's share too (a sync one waits for
                # its answer, within the meet that was admitted: checking it could only
                # deadlock the parent on its own slot).
                self.meets.admit("", meet.principal if event.mode == "async" else "")
                inner = self.meets.new(agent, event.briefcase, event.timeout, meet.principal,
                                       meet.identity)
                if event.mode == "async":
                    self.agents.resolve(agent)  # answered before it runs: refuse it now
                    self.meets.spawn(inner, self.run_async(inner))
                    answer = inner.id
                else:
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
        trip = meet.trip or self.trips.start()
        meet.going = True
        try:
            if target == self.address:
                self.meets.admit()
                hop = self.meets.new(agent, Briefcase(event.briefcase), meet.time_left(),
                                     meet.principal, trip=trip)
                self.meets.spawn(hop, self.run_hop(hop))
                meet_id = hop.id
            else:
                client = await self.client(target)
                meet_id = str(await client.meet(agent, trip.stamp(event.briefcase), "go",
                                                meet.time_left(), meet.principal))
        except BaseException:
            meet.going = False
            if meet.trip is None:  # the trip did not start after all
                self.trips.waiting.pop(trip.id, None)
            raise
        meet.trip = trip
        worker.answer(Accepted(event.rid, meet_id))
        meet.went = target
        worker.moved_on()


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
