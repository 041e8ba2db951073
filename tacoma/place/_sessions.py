"""Client sessions: one per connection to the place, and how each of its meets is taken.

A session reads Meet and Cancel events off its Channel. A Meet becomes, by its mode and
name: a message to a resident agent (see _residents), a moving agent arriving (`go`, see
_trips: answered Accepted once taken), an async meet (answered Accepted, then run), or a
sync meet (run, then answered with its Result). Every meet runs in a task of its own; its
failure, however it happens, becomes a Failed reply on its own request id and touches
nothing else. A broken connection loses only its own meets (whose agents are killed:
nobody is left to receive their result).
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..client._transport import Channel
from ..wire._briefcase import TRACE
from ..wire._errors import LimitExceeded, MeetError, MessageError, ProtocolError, kind_of
from ..wire._protocol import Accepted, Cancel, Event, Failed, Meet, Result
from ._access import Access, Principal
from ._dispatch import Dispatch, failed
from ._meet import RunningMeet
from ._trips import Trip

__all__ = ["Session"]

log = logging.getLogger("tacoma.place")


class Session:
    """A client connection to the place and the meets it has in flight."""

    def __init__(self, dispatch: Dispatch, sessions: set[Session], access: Access) -> None:
        self.dispatch = dispatch
        self.meets = dispatch.meets
        self.sessions = sessions
        self.access = access
        self.channel: Channel
        self.tasks: dict[int, asyncio.Task[None]] = {}  # by request id
        #: Its peer, as the principal of the meets it makes for itself, and whether that
        #: peer may use ag_admin (both known once its certificate is: see admit).
        self.own = Principal("")
        self.admin = False
        self._active = time.monotonic()  # when it last sent or was answered
        self._idle: asyncio.TimerHandle | None = None

    def admit(self, channel: Channel) -> str:
        """Channel admission (see _transport.Admission): the place's access rules."""
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
        limit = self.dispatch.settings.idle_seconds
        quiet = time.monotonic() - self._active
        if self.channel.is_closing:
            return
        if quiet >= limit and not self.channel.conn.owed and not self.tasks:
            self.channel.close(f"idle for {limit:g} s with no meet in flight")
            return
        wait = limit - quiet if quiet < limit else limit
        self._idle = asyncio.get_running_loop().call_later(wait, self._check_idle)

    # -- EventHandler
    def event_received(self, channel: Channel, event: Event) -> None:
        self._active = time.monotonic()
        if isinstance(event, Cancel):
            task = self.tasks.get(event.rid)
            if task is not None:
                task.cancel()  # _serve answers it, and its agent is killed
            return
        assert isinstance(event, Meet)  # the only other event a client may send
        self.accept(event)

    def channel_closed(self, channel: Channel, exc: BaseException | None) -> None:
        if self._idle is not None:
            self._idle.cancel()
        if self in self.sessions:  # admitted, and not yet closed
            self.sessions.discard(self)
            self.access.closed(channel)
        for task in self.tasks.values():
            task.cancel()  # sync meets nobody waits for any more: kill their agents

    # -- meets
    def accept(self, event: Meet) -> None:
        """Start serving a meet from this client."""
        accepted = time.perf_counter_ns() if TRACE in event.briefcase else 0
        peer = self.channel.identity
        try:
            principal = (self.access.principal(peer, event.principal) if event.principal
                         else self.own)
            self.access.authorize(principal, event.agent, self.dispatch.address, peer,
                                  self.channel.peer)
            if event.mode == "go":
                self.access.may_move(peer)
        except MeetError as exc:
            self._reply(failed(event.rid, exc))
            return
        if event.mode != "go" and self.dispatch.residents.get(event.agent) is not None:
            self._accept_message(event)
            return
        try:
            # A principal's share is checked for the meets its client makes, and for the
            # async meets its agents make through other places; not for a forwarded sync
            # meet (its agent's meet waits on it) nor a trip's hop (the admitted meet, going
            # on).
            shared = event.mode != "go" and (not principal.via or event.mode == "async")
            self.meets.admit(event.agent if event.mode == "sync" else "",
                             principal.name if shared else "")
            if event.mode == "ack":
                raise MessageError(f"the ack mode is for messages to resident agents, and "
                                   f"{event.agent} is not one here")
            trip = Trip.take(event.briefcase) if event.mode == "go" else None
            if event.mode != "sync":  # answered before it runs: refuse it now if it cannot
                self.dispatch.agents.resolve(event.agent)
        except MeetError as exc:
            self._reply(failed(event.rid, exc))
            return
        meet = self.meets.new(event.agent, event.briefcase, event.timeout, principal.name,
                              trip=trip, traced_at=accepted if event.mode == "sync" else 0,
                              via=principal.via)
        meet.admin = self.admin and not principal.via
        if log.isEnabledFor(logging.DEBUG):
            log.debug("meet %s: %s (%s) for %s%s from %s", meet.id, event.agent, event.mode,
                      principal.name or "anonymous",
                      f" via {principal.via}" if principal.via else "", self.channel.peer)
        if trip is not None:
            self._reply(Accepted(event.rid, meet.id))
            self.meets.spawn(meet, self.dispatch.run_hop(meet))
        elif event.mode == "async":
            self._reply(Accepted(event.rid, meet.id))
            self.meets.spawn(meet, self.dispatch.run_async(meet))
        else:
            task = self.meets.spawn(meet, self.dispatch.answered(
                event.rid, self.dispatch.run(meet), meet, self._reply))
            self._track(event.rid, task, meet)

    def _accept_message(self, event: Meet) -> None:
        """A meet with a resident agent: a message to it (see _residents)."""
        try:
            message = self.dispatch.residents.deliver(event.agent, event.mode,
                                                      event.briefcase, "client")
        except MeetError as exc:
            self._reply(failed(event.rid, exc))
            return
        if message.answer is None:  # one-way: in the mailbox is all the sender hears
            self._reply(Accepted(event.rid, message.id))
            return
        task = asyncio.ensure_future(self.dispatch.answered(
            event.rid, self.dispatch.answer_of(event, message.answer), None, self._reply))
        self._track(event.rid, task)

    def _track(self, rid: int, task: asyncio.Task[None],
               meet: RunningMeet | None = None) -> None:
        self.tasks[rid] = task

        def done(_: object) -> None:
            self.tasks.pop(rid, None)
            if task.cancelled() and rid in self.channel.conn.owed:
                # Cancelled before its coroutine started (a Cancel right behind its Meet):
                # nothing ran to answer it, so answer here, and the rid is forgotten.
                self._reply(failed(rid, self.meets.cancelled(meet)))

        task.add_done_callback(done)

    def _reply(self, event: Event) -> None:
        """Send a reply, if the client is still there to get it."""
        channel = self.channel
        if channel.is_closing:
            return
        self._active = time.monotonic()
        try:
            channel.send(event)
        except (LimitExceeded, ProtocolError) as exc:
            if isinstance(event, Result):
                channel.send(Failed(event.rid, kind_of(exc),
                                    f"the result briefcase cannot be sent: {exc}"))
            else:
                log.error("cannot send %s: %s", type(event).__name__, exc)
