"""Client sessions: one per connection to the place, and how each of its meets is taken.

A session reads Meet and Cancel events off its Channel. A Meet becomes, by its mode and
name: a message to a resident agent (see _residents), a moving agent arriving (`go`, see
_trips: answered Accepted once taken), an async meet (journaled, answered Accepted, then
run or queued: see _journal), or a sync meet (run, then answered with its Result). Every
meet runs in a task of its own; its failure, however it happens, becomes a Failed reply on
its own request id and touches nothing else. A Cancel stops its meet's agent. A broken
connection stops the agents of its sync meets, except those whose client chose the meet's
id: a client that can ask for the outcome by id later (`tacoma status`) gets it recorded
in the journal, and its agent runs on to its end.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time

from ...transport import Channel
from ...wire._briefcase import CODE, TRACE, Briefcase
from ...wire._errors import (
    LazyFolderError,
    LimitExceeded,
    MeetError,
    MessageError,
    ProtocolError,
    TacomaError,
    error_from_wire,
)
from ...wire._names import ECHO_AGENT, LAZY_AGENT
from ...wire._protocol import Accepted, Cancel, Event, Failed, Meet, Result
from ..meets._access import Access, Principal
from ..meets._meet import RunningMeet, failed
from ..meets._trips import Trip
from ..stores._codes import named_in_reply
from ..workers._trusted import TrustedAgent
from ._router import Router

__all__ = ["Session"]

log = logging.getLogger("tacoma.place")


class Session:
    """A client connection to the place and the meets it has in flight."""

    def __init__(self, router: Router, sessions: set[Session], access: Access) -> None:
        self.router = router
        self.meets = router.meets
        self.sessions = sessions
        self.access = access
        self.channel: Channel
        self.tasks: dict[int, asyncio.Task[None]] = {}  # by request id
        #: The sync meets of tasks whose clients chose their ids (by request id).
        self.chosen: dict[int, RunningMeet] = {}
        #: Its peer, as the principal of the meets it makes for itself, and whether that
        #: peer may use ag_admin (both known once its certificate is: see admit).
        self.own = Principal("")
        self.admin = False
        self._active = time.monotonic()  # when it last sent or was answered
        self._idle: asyncio.TimerHandle | None = None
        #: The program, and its digest, of sync meets whose result may name it by hash.
        self._programs: dict[int, tuple[list[bytes], bytes]] = {}
        #: The place's own meets of its client (a lazy folder's chunks), by request id.
        self._asking: dict[int, asyncio.Future[Briefcase]] = {}

    async def ask(self, request: Briefcase, timeout: float) -> Briefcase:
        """Meet the client's ag_lazy (the chunks of a lazy folder it sent): its answer, or
        LazyFolderError if it is gone or does not answer within `timeout`."""
        channel = self.channel
        if channel.is_closing:
            raise LazyFolderError(f"the client that holds the data ({channel.peer}) is gone")
        rid = channel.conn.new_rid()
        asked: asyncio.Future[Briefcase] = asyncio.get_running_loop().create_future()
        self._asking[rid] = asked
        try:
            channel.send(Meet(rid, LAZY_AGENT, request, "sync", timeout))
            async with asyncio.timeout(timeout):
                return await asked
        except TimeoutError:
            raise LazyFolderError(f"the client that holds the data ({channel.peer}) did not "
                                  f"answer within {timeout:g} s") from None
        finally:
            self._asking.pop(rid, None)

    def admit(self, channel: Channel) -> str:
        """Channel admission (see tacoma.transport: Admission): the place's access rules."""
        refused = self.access.admit(channel)
        if not refused:
            peer = channel.identity
            self.own = Principal(peer.name if peer is not None else "")
            self.admin = peer is not None and peer.is_admin
            self.sessions.add(self)
            self._check_idle()
        return refused

    def _check_idle(self) -> None:
        """Close the connection once it has had no meet in flight and sent nothing for
        --idle-seconds (idle connections must not hold the place's slots)."""
        limit = self.router.settings.idle_seconds
        quiet = time.monotonic() - self._active
        if self.channel.is_closing:
            return
        if quiet >= limit and not self.channel.conn.owed and not self.tasks \
                and not self.router.builtins.lazy.relaying(self):
            self.channel.close(f"idle for {limit:g} s with no meet in flight")
            return
        wait = limit - quiet if quiet < limit else limit
        self._idle = asyncio.get_running_loop().call_later(wait, self._check_idle)

    # -- EventHandler
    def event_received(self, channel: Channel, event: Event) -> None:
        self._active = time.monotonic()
        if isinstance(event, Result | Failed):  # the client answers the place (see ask)
            asked = self._asking.get(event.rid)
            if asked is not None and not asked.done():
                if isinstance(event, Result):
                    asked.set_result(event.briefcase)
                else:
                    asked.set_exception(error_from_wire(event.kind, event.message,
                                                        event.detail))
            return
        if isinstance(event, Cancel):
            task = self.tasks.get(event.rid)
            if task is not None:
                task.cancel()  # _serve answers it, and its agent is killed
            return
        assert isinstance(event, Meet)  # the only other event a client may send
        try:
            self.accept(event)
        except Exception as exc:  # a bug: this meet fails, the connection goes on
            log.exception("taking meet %d of %s failed", event.rid, channel.peer)
            if event.rid in channel.conn.owed and event.rid not in self.tasks:
                self._reply(failed(event.rid, exc))

    def channel_closed(self, channel: Channel, exc: BaseException | None) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self.router.builtins.lazy.forget(self)
        for asked in self._asking.values():
            if not asked.done():
                asked.set_exception(LazyFolderError(
                    f"the client that holds the data ({channel.peer}) is gone"))
        if self in self.sessions:  # admitted, and not yet closed
            self.sessions.discard(self)
            self.access.closed(channel)
        for rid, task in self.tasks.items():
            meet = self.chosen.get(rid)
            if meet is not None:  # its caller can ask by id: it runs on, and is recorded
                meet.orphaned = True
                log.info("meet %s runs on without its caller (%s), whose connection was "
                         "lost; its outcome goes into the journal", meet.id, channel.peer)
            else:
                task.cancel()  # sync meets nobody waits for any more: kill their agents

    # -- meets
    def accept(self, event: Meet) -> None:
        """Start serving a meet from this client."""
        accepted = time.perf_counter_ns() if TRACE in event.briefcase else 0
        peer = self.channel.identity
        try:
            principal = (self.access.principal(peer, event.principal) if event.principal
                         else self.own)
            self.access.check(principal, event.agent, event.mode, self.access.side(peer),
                              self.router.address, self.channel.peer)
            digest = self.router.codes.take(principal.name, event.briefcase)
            if own := sum(not ref.origin for ref in event.briefcase.lazy_refs()):
                self._take_lazy(event.briefcase, principal, own)
        except (MeetError, ProtocolError, LimitExceeded) as exc:
            self._reply(failed(event.rid, exc))
            return
        if digest is not None and event.mode == "sync":
            self._programs[event.rid] = (event.briefcase[CODE], digest)
        if event.mode != "go" and self.router.residents.get(event.agent) is not None:
            self._accept_message(event, principal.name)
            return
        if event.mode == "sync" and not accepted and not self.meets.stopping:
            if event.agent == ECHO_AGENT:
                # The null agent holds nothing and waits for nothing: answered here and now,
                # it never takes a slot (every other meet, built-in or not, counts).
                self._reply(Result(event.rid, event.briefcase))
                return
            trusted = self.router.agents.trusted.get(event.agent)
            if trusted is not None and trusted.plain and trusted.call is not None:
                self._serve_trusted(event, trusted, principal.name)  # likewise
                return
        try:
            # A principal's share is checked for every meet made for it, its agents' through
            # other places too (else one meet's agents could fill a place by meeting on
            # and on); not for a trip's hop (the admitted meet, going on).
            shared = event.mode != "go"
            trip = Trip.take(event.briefcase) if event.mode == "go" else None
            if trip is not None:
                trips, sender = self.router.hops.trips, (principal.name, principal.via)
                if (taken := trips.taken_as(trip, sender)) is not None:
                    # Sent again (the connection broke before the answer): taken once, and
                    # answered even at a full place, or the agent would go on from both.
                    self._reply(Accepted(event.rid, taken))
                    return
            if event.mode == "ack":
                raise MessageError(f"the ack mode is for messages to resident agents, and "
                                   f"{event.agent} is not one here")
            if event.mode != "async":  # async meets are admitted, or queued, by submit
                self.meets.admit(event.agent if event.mode == "sync" else "",
                                 principal.name if shared else "")
            elif event.meet_id and self.meets.find(event.meet_id, principal.name):
                self._reply(Accepted(event.rid, event.meet_id))  # sent again: taken once
                return
            if trip is not None:  # answered before it runs: refuse it now if it cannot
                self.router.agents.resolve(event.agent)
            meet = self.meets.new(event.agent, event.briefcase, event.timeout, principal.name,
                                  trip=trip,
                                  traced_at=accepted if event.mode == "sync" else 0,
                                  via=principal.via, meet_id=event.meet_id)
            if trip is not None:
                trips.take(trip, meet.id, sender)
        except MeetError as exc:
            self._reply(failed(event.rid, exc))
            return
        meet.admin = self.admin and not principal.via
        if peer is not None and not principal.via:
            meet.serial = peer.serial
        if log.isEnabledFor(logging.DEBUG):
            log.debug("meet %s: %s (%s) for %s%s from %s", meet.id, event.agent, event.mode,
                      principal.name or "anonymous",
                      f" via {principal.via}" if principal.via else "", self.channel.peer)
        if trip is not None:
            self._reply(Accepted(event.rid, meet.id))
            self.meets.spawn(meet, self.router.hops.run_hop(meet))
        elif event.mode == "async":
            # Not cancellable: once journaled, an async meet runs whatever its caller does.
            self.router.in_background(self._submit(event.rid, meet))
        else:
            task = self.meets.spawn(meet, self.router.answered(
                event.rid, functools.partial(self.router.run, meet), meet, self._reply))
            self._track(event.rid, task, meet)
            if meet.chosen_id:
                self.chosen[event.rid] = meet

    def _take_lazy(self, briefcase: Briefcase, principal: Principal, count: int) -> None:
        """A client's own lazy folders in a meet from this connection (`count` with no
        origin yet): this place is their origin, seals them, and relays (asks the client for
        the chunks), within --lazy-bytes and the principal's share of it."""
        lazy = self.router.builtins.lazy
        lazy.may_relay(self, principal.name, count)
        relay = functools.partial(lazy.relay, self, principal.name)
        briefcase.with_origin(self.router.address, relay, lazy.seal)

    def _serve_trusted(self, event: Meet, agent: TrustedAgent, principal: str) -> None:
        """A sync meet with a trusted agent whose meet is a plain function: answered here and
        now, on the place's own loop (see _trusted)."""
        trusted = self.router.agents.trusted
        try:
            returned = trusted.call(agent, event.briefcase, principal)
            if inspect.isawaitable(returned):  # a wrapper of an async def, found out now
                self.router.in_background(self._await_trusted(event, agent, returned))
                return
            self._reply(Result(event.rid, trusted.result(agent, event.briefcase, returned)))
        except TacomaError as exc:
            self._reply(failed(event.rid, exc))

    async def _await_trusted(self, event: Meet, agent: TrustedAgent, returned: object) -> None:
        trusted = self.router.agents.trusted
        try:
            done = await trusted.finish(agent, returned, self.router.bounded(event.timeout))
            self._reply(Result(event.rid, trusted.result(agent, event.briefcase, done)))
        except TacomaError as exc:
            self._reply(failed(event.rid, exc))

    async def _submit(self, rid: int, meet: RunningMeet) -> None:
        """An async meet: answered Accepted once the journal holds it (see _journal)."""
        try:
            meet_id = await self.router.submit(meet)
        except Exception as exc:  # noqa: BLE001 - refused, or a journal that cannot write
            self._reply(failed(rid, exc))
        else:
            self._reply(Accepted(rid, meet_id))

    def _accept_message(self, event: Meet, principal: str) -> None:
        """A meet with a resident agent: a message to it from `principal` (see _residents)."""
        try:
            message = self.router.residents.deliver(event.agent, event.mode,
                                                      event.briefcase, "client", principal)
        except MeetError as exc:
            self._reply(failed(event.rid, exc))
            return
        if message.answer is None:  # one-way: in the mailbox is all the sender hears
            self._reply(Accepted(event.rid, message.id))
            return
        task = asyncio.ensure_future(self.router.answered(
            event.rid, functools.partial(self.router.residents.answer_of, event,
                                         message.answer, self.router.bounded(event.timeout)),
            None,
            self._reply))
        self._track(event.rid, task)

    def _track(self, rid: int, task: asyncio.Task[None],
               meet: RunningMeet | None = None) -> None:
        self.tasks[rid] = task

        def done(_: object) -> None:
            self.tasks.pop(rid, None)
            self.chosen.pop(rid, None)
            if task.cancelled() and rid in self.channel.conn.owed:
                # Cancelled before its coroutine started (a Cancel right behind its Meet):
                # nothing ran to answer it, so answer here, and the rid is forgotten.
                self._reply(failed(rid, self.meets.cancelled(meet)))

        task.add_done_callback(done)

    def _reply(self, event: Event) -> None:
        """Send a reply, if the client is still there to get it. A large result is encoded
        on a thread (see Channel.send): the place serves others meanwhile."""
        channel = self.channel
        program = self._programs.pop(event.rid, None) if isinstance(event, Result | Failed) \
            else None
        if channel.is_closing:
            return
        self._active = time.monotonic()
        if program is not None and isinstance(event, Result):
            # The caller has the program: a result that still holds it names it instead.
            event = Result(event.rid, named_in_reply(event.briefcase, *program))
        channel.answer(event)
