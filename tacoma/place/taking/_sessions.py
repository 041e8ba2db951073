"""Client sessions: one per connection to the place, and only the connection's I/O.

A session reads Meet and Cancel events off its Channel, and sends the replies. Every Meet
goes to the router (`_router.Router.take`, which decides what it is and where it goes) with
who sent it (its `Caller`); what goes on after that, a task, is tracked here by request id,
so that a Cancel stops its meet's agent and a broken connection stops the agents of its
sync meets, except those whose client chose the meet's id: a client that can ask for the
outcome by id later (`tacoma status`) gets it recorded in the journal, and its agent runs
on to its end. The session's own part of taking a meet is what only the connection knows:
programs named by hash (a result may name them back), the lazy folders its client holds
(the place asks the client for their chunks: `ask`), and when it has been idle too long.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from ...transport import Channel
from ...wire._briefcase import CODE, Briefcase
from ...wire._errors import LazyFolderError, MeetError, error_from_wire
from ...wire._names import LAZY_AGENT
from ...wire._protocol import Cancel, Event, Failed, Meet, Result
from ..meets._access import Access, Principal, Side
from ..meets._meet import RunningMeet, failed
from ..stores._codes import CodeStore, named_in_reply
from ..stores._lazy import LazyStore
from ._router import Caller, Router

__all__ = ["Session"]

log = logging.getLogger("tacoma.place")


class Session:
    """A client connection to the place and the meets it has in flight."""

    def __init__(self, router: Router, sessions: set[Session], access: Access,
                 codes: CodeStore, lazy: LazyStore, idle_seconds: float) -> None:
        self.router = router
        self.meets = router.meets
        self.address = router.address
        self.sessions = sessions
        self.access = access
        self.codes = codes  # programs named by hash (see stores._codes)
        self.lazy = lazy  # lazy folders this connection's client holds (see stores._lazy)
        self.idle_seconds = idle_seconds
        self.side = Side.ANYONE  # where its meets come from, once its peer is known
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
            self.side = self.access.side(peer)
            self.sessions.add(self)
            self._check_idle()
        return refused

    def _check_idle(self) -> None:
        """Close the connection once it has had no meet in flight and sent nothing for
        --idle-seconds (idle connections must not hold the place's slots)."""
        limit = self.idle_seconds
        quiet = time.monotonic() - self._active
        if self.channel.is_closing:
            return
        if quiet >= limit and not self.channel.conn.owed and not self.tasks \
                and not self.lazy.relaying(self):
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
        self.lazy.forget(self)
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
        """Hand a meet from this client to the router; track it while it goes on."""
        peer = self.channel.identity
        try:
            if event.principal and event.principal != self.own.name:
                principal = self.access.principal(peer, event.principal, event.papers,
                                                  self.channel.peer, event.agent)
            elif event.papers:  # a client's passport, or a place's lines for its own hop
                principal = self.access.passports.own(self.own, event.papers, event,
                                                      self.side is Side.CLIENT)
            else:
                principal = self.own
        except MeetError as exc:
            self._reply(failed(event.rid, exc))
            return
        serial = principal.serial if principal.via else peer.serial if peer is not None else ""
        caller = Caller(principal, self.side, admin=self.admin and not principal.via,
                        serial=serial, peer=self.channel.peer, unpack=self._unpack)
        taken = self.router.take(caller, event, self._reply)
        if taken is not None:
            self._track(event.rid, taken.task, taken.meet)
            if taken.meet is not None and taken.meet.chosen_id:
                self.chosen[event.rid] = taken.meet

    def _unpack(self, event: Meet, principal: Principal) -> None:
        """This connection's part of taking a meet, once it is allowed: a program named by
        hash is filled in (and a sync meet's result may name it so, see _reply), and the
        client's own lazy folders get this place as their origin."""
        digest = self.codes.take(principal.name, event.briefcase)
        if digest is not None and event.mode == "sync":
            self._programs[event.rid] = (event.briefcase[CODE], digest)
        if own := sum(not ref.origin for ref in event.briefcase.lazy_refs()):
            self._take_lazy(event.briefcase, principal, own)

    def _take_lazy(self, briefcase: Briefcase, principal: Principal, count: int) -> None:
        """A client's own lazy folders in a meet from this connection (`count` with no
        origin yet): this place is their origin, seals them, and relays (asks the client for
        the chunks), within --lazy-bytes and the principal's share of it."""
        lazy = self.lazy
        lazy.may_relay(self, principal.name, count)
        relay = functools.partial(lazy.relay, self, principal.name)
        briefcase.with_origin(self.address, relay, lazy.seal)

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
