"""The client's connections to places: one PlaceClient per place, cached per event loop.

TACOMA measured TCP connect plus process creation as a large part of its meet (steps 2, 3
and 7 of its Table 1) and proposed a connection cache as the fix: every meet to a place
reuses one connection, which carries any number of concurrent meets, told apart by request
id. The place uses the same cache for its agents' meets to other places.

A target is `agent@HOST:PORT`. A bare agent name meets at the *default place*, which the
client does not provide itself (it never imports the place): whoever has one sets it with
`set_default_place`; the public `tacoma` package sets the embedded place there.

A place that goes silent (stopped, hung, or cut off without a reset) must not hold a meet
without a timeout for ever: a client with meets outstanding that has heard nothing from the
place for HEARTBEAT_SECONDS asks whether it is there, with a null meet of ag_echo (answered
at once, taking no slot: any answer will do), and if the place still says nothing
SILENCE_SECONDS later, the connection is dropped and its meets fail with ConnectionLost. A
long meet at a place that answers is left alone, however long it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from .._version import __version__
from ..transport import Channel, connect
from ..wire._address import canonical_address, split_target
from ..wire._briefcase import CODE, CODE_HASH, TRACE, Briefcase
from ..wire._errors import (
    CodeUnknown,
    ConnectError,
    ConnectionLost,
    LazyFolderError,
    MeetError,
    MeetTimeout,
    NotAllowed,
    TacomaError,
    error_from_wire,
)
from ..wire._names import ECHO_AGENT, LAZY_AGENT
from ..wire._program import CODE_BY_HASH_MIN, code_digest
from ..wire._protocol import (
    DEFAULT_MAX_FRAME,
    MIN_IDLE_SECONDS,
    Accepted,
    Cancel,
    Event,
    Failed,
    Meet,
    Result,
    Role,
)
from ..wire._trace import read as read_trace
from ..wire._trace import record
from . import _lazy as lazy_folders
from ._identity import DEFAULT_TERMS, Credentials, Terms, program_of
from ._identity import credentials as process_credentials

__all__ = ["ClientCache", "PlaceClient", "connection", "meet_deadline", "place_of",
           "set_default_place"]

#: Every mode on the wire: the user's two, and those of messages and moving agents.
WireMode = Literal["sync", "async", "ack", "go"]
_SOFTWARE = f"tacoma/{__version__}"
log = logging.getLogger("tacoma.client")


#: How long a cached connection may idle and still be used: well inside any place's idle
#: timeout (`tacoma place --idle-seconds` is at least MIN_IDLE_SECONDS), so that a meet is
#: never sent just as the place closes the connection for idleness.
REUSE_SECONDS = 0.75 * MIN_IDLE_SECONDS
#: How many times a connection that broke on the way (TacomaError.transient) is tried, while
#: the caller's deadline leaves room (see ClientCache.get).
CONNECT_ATTEMPTS = 3
#: A client waiting for meets that has heard nothing from the place for this long asks
#: whether it is there (a null meet of ag_echo); if nothing comes for SILENCE_SECONDS more,
#: the place is taken to be gone. Generous: a place busy with a large briefcase of this
#: client's answers the probe a few seconds late, a lossy path retransmits.
HEARTBEAT_SECONDS = 30.0
SILENCE_SECONDS = 30.0


class PlaceClient:
    """One connection to a place, carrying many concurrent meets.

    `heartbeat` and `silence`: how long the place may say nothing while meets wait before
    it is asked whether it is there, and then before it is taken to be gone (see the
    module's header)."""

    def __init__(self, address: str, heartbeat: float = HEARTBEAT_SECONDS,
                 silence: float = SILENCE_SECONDS) -> None:
        self.address = address
        self.channel: Channel | None = None
        #: Who it meets as (and signs its agents' passports as): see connect.
        self.credentials: Credentials | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._active = time.monotonic()  # when it last sent a meet or had an answer
        #: Send a program the place has by its hash (CODE_HASH) rather than in full.
        self.name_programs = True
        #: (principal, digest) of the programs the place has had from this client.
        self.named: set[tuple[str, bytes]] = set()
        self.heartbeat = heartbeat
        self.silence = silence
        #: How many times the place was asked whether it is there (see _probe).
        self.probes = 0
        self._watch: asyncio.TimerHandle | None = None
        self._probed = 0.0  # loop.time() of the probe not yet answered, or 0

    @classmethod
    async def connect(cls, address: str, timeout: float | None = 10.0,
                      max_frame: int = DEFAULT_MAX_FRAME,
                      credentials: Credentials | None = None,
                      heartbeat: float = HEARTBEAT_SECONDS,
                      silence: float = SILENCE_SECONDS) -> PlaceClient:
        """Connect to the place at `address` as `credentials` (this process's if None)."""
        client = cls(address, heartbeat, silence)
        client.credentials = credentials = credentials or process_credentials()
        context = credentials.context(address)
        client.channel = await connect(address, Role.CLIENT, client, max_frame, timeout,
                                       _SOFTWARE, context)
        return client

    @property
    def usable(self) -> bool:
        return self.channel is not None and not self.channel.is_closing

    @property
    def stale(self) -> bool:
        """Idle for most of the place's idle timeout: the place may be closing it now, and a
        meet sent on it could cross that close. A fresh connection is taken instead."""
        return not self._pending and time.monotonic() - self._active > REUSE_SECONDS

    async def meet(self, agent: str, briefcase: Briefcase, mode: WireMode = "sync",
                   timeout: float | None = None, principal: str = "",
                   meet_id: str = "", papers: bytes | None = None,
                   terms: Terms = DEFAULT_TERMS) -> Briefcase | str:
        """Send a meet and wait for its reply: the result briefcase, or the async meet id.

        `principal` and `papers` are for places only: the identity a place's forwarded meet
        is made for, and that principal's passport for the agent (the peer refuses another
        principal from anyone whose certificate is not a place's, and from a place without
        a valid passport). A client's meet of an agent carries a passport it signs here
        (`terms`: where the agent may go, and what it may do there; see trust._passport),
        with the meet's id in it: a meet without one is given a fresh id. `meet_id`, if
        given, is the id the place runs the meet as (see wire._events.Meet).

        A meet whose briefcase has a TRACE folder is traced (see wire._trace): the client's
        own steps go into the result with the place's and the worker's: marshal, send, and
        transfer (the network, both frames' decoding and waiting to be scheduled: the send
        and the wait for the answer, less the place's own span).
        """
        credentials = self.credentials or process_credentials()
        # Over TLS, a client's launch of an agent carries its passport (plaintext: nobody
        # is anybody there).
        if papers is None and self.channel is not None and self.channel.identity is not None \
                and credentials.signs_for(agent):
            program = program_of(briefcase)
            if not meet_id:
                meet_id = credentials.launch_id(self.address, agent, program, timeout, terms)
            papers = credentials.papers(self.address, agent, program, meet_id, timeout, terms)
            try:
                return await self._meet_named(agent, briefcase, mode, timeout, principal,
                                              meet_id, papers)
            finally:  # once this one is answered, the next like it is signed ahead, on a
                # thread: off the loop, while its caller waits or sleeps (the signature
                # holds the GIL, about 200 us made cold)
                ahead = credentials.ahead(self.address, agent, program, timeout, terms)
                if ahead is not None:
                    asyncio.get_running_loop().run_in_executor(None, ahead)
        papers = papers or b""
        return await self._meet_named(agent, briefcase, mode, timeout, principal, meet_id,
                                      papers)

    async def _meet_named(self, agent: str, briefcase: Briefcase, mode: WireMode,
                          timeout: float | None, principal: str, meet_id: str,
                          papers: bytes) -> Briefcase | str:
        """The meet, its program named by hash where the place has it (CODE_HASH)."""
        program = briefcase.folder(CODE)
        if CODE_HASH in briefcase or sum(len(e) for e in program) < CODE_BY_HASH_MIN:
            return await self._send(agent, briefcase, mode, timeout, principal, meet_id,
                                    papers)
        digest = code_digest(program)
        key = (principal, digest)
        answer: Briefcase | str
        if self.name_programs and key in self.named:
            try:
                answer = await self._send(agent, briefcase.swapped(CODE, CODE_HASH, [digest]),
                                          mode, timeout, principal, meet_id, papers)
            except CodeUnknown:  # forgotten, or the place restarted: send it, once
                self.named.discard(key)
                answer = await self._send(agent, briefcase, mode, timeout, principal, meet_id,
                                          papers)
        else:
            answer = await self._send(agent, briefcase, mode, timeout, principal, meet_id,
                                      papers)
        self.named.add(key)
        if isinstance(answer, Briefcase) and answer.folder(CODE_HASH) == [digest] \
                and CODE not in answer:
            answer = answer.swapped(CODE_HASH, CODE, program)  # the result names it
        return answer

    async def _send(self, agent: str, briefcase: Briefcase, mode: WireMode,
                    timeout: float | None, principal: str, meet_id: str,
                    papers: bytes) -> Briefcase | str:
        channel = self._open()
        rid = channel.conn.new_rid()
        lazy_folders.sending(briefcase, self.address)
        meet = Meet(rid, agent, briefcase, mode, timeout, principal, meet_id, papers)
        reply = self._expect(rid)
        if TRACE not in briefcase:
            try:
                # A large briefcase is encoded on a thread: what cannot be sent fails reply.
                sending = channel.send(meet, functools.partial(self._not_sent, rid))
            except BaseException:
                self._pending.pop(rid, None)
                raise
            answer: Briefcase | str = await self._reply(channel, rid, reply, sending)
            return answer
        try:
            started = time.perf_counter_ns()
            data = channel.conn.send(meet)
            marshalled = time.perf_counter_ns()
            channel.write(data)
            sent = time.perf_counter_ns()
        except BaseException:
            self._pending.pop(rid, None)
            raise
        answer = await self._reply(channel, rid, reply)
        if isinstance(answer, Briefcase):
            waited = time.perf_counter_ns() - sent
            # The place may start before the write returns: the send overlaps its span.
            span = sum(ns for side, step, ns in read_trace(answer, take=False)
                       if (side, step) == ("place", "span"))
            record(answer, "client", [("marshal", marshalled - started),
                                      ("send", sent - marshalled),
                                      ("transfer", max(0, sent - marshalled + waited - span))])
        return answer

    def _open(self) -> Channel:
        channel = self.channel
        if channel is None or channel.is_closing:
            raise ConnectionLost(f"connection to place {self.address} is closed")
        return channel

    def _expect(self, rid: int) -> asyncio.Future[Any]:
        """The future the answer to meet `rid` will be put in (see event_received)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        self._active = time.monotonic()
        if self._watch is None and self.heartbeat > 0:
            self._watch = asyncio.get_running_loop().call_later(self.heartbeat, self._check)
        return future

    def _not_sent(self, rid: int, exc: TacomaError) -> None:
        future = self._pending.get(rid)
        if future is not None and not future.done():
            future.set_exception(exc)

    async def _reply(self, channel: Channel, rid: int, future: asyncio.Future[Any],
                     sending: asyncio.Future[None] | None = None) -> Any:
        """Wait for the answer to meet `rid`; cancel the meet at the place if given up
        (withdraw it, if it is still being encoded: `sending`, see Channel.send)."""
        try:
            return await future
        finally:
            self._pending.pop(rid, None)
            given_up = future.cancelled() or not future.done()
            if given_up and sending is not None and not sending.done():
                sending.cancel()  # never sent
            elif given_up and not channel.is_closing and rid in channel.conn.awaiting:
                # Given up on (cancelled, timed out): the place stops the agent now rather
                # than at the meet's own timeout.
                with contextlib.suppress(TacomaError):
                    channel.send(Cancel(rid))

    def _check(self) -> None:
        """While meets wait: is the place still there? (See the module's header.)"""
        self._watch = None
        channel = self.channel
        if channel is None or channel.is_closing or not self._pending:
            self._probed = 0.0
            return
        loop = asyncio.get_running_loop()
        quiet = channel.quiet_for()
        now = loop.time()
        if self._probed and channel.heard >= self._probed:
            self._probed = 0.0  # it spoke since it was asked (the answer, or anything)
        if quiet < self.heartbeat:
            self._watch = loop.call_later(self.heartbeat - quiet, self._check)
            return
        if not self._probed:
            self._probe(channel)
            self._probed = now
        elif now - self._probed >= self.silence:
            channel.close_reason = (
                f"the place said nothing for {quiet:.0f} s, not even to a null meet "
                f"(ag_echo) sent {now - self._probed:.0f} s ago to see whether it is there: "
                "it may be stopped or overloaded, or the network path to it is down")
            log.warning("place %s: %s; dropping the connection", self.address,
                        channel.close_reason)
            channel.abort()
            return
        self._watch = loop.call_later(min(self.heartbeat, self.silence - (now - self._probed)),
                                      self._check)

    def _probe(self, channel: Channel) -> None:
        """A null meet whose answer (a Result, or a Failed: any answer) shows the place is
        there; a place answers ag_echo at once, without taking a slot."""
        with contextlib.suppress(TacomaError):
            channel.send(Meet(channel.conn.new_rid(), ECHO_AGENT, Briefcase(), "sync"))
            self.probes += 1

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()

    # -- EventHandler
    def event_received(self, channel: Channel, event: Event) -> None:
        self._active = time.monotonic()
        if isinstance(event, Meet):  # the place reads a lazy folder this client sent
            self._serve_lazy(channel, event)
            return
        assert isinstance(event, Accepted | Result | Failed)  # the protocol allows no other
        future = self._pending.get(event.rid)
        if future is None or future.done():
            return  # its caller gave up (timeout, cancellation)
        if isinstance(event, Result):
            future.set_result(event.briefcase)
        elif isinstance(event, Accepted):
            future.set_result(event.meet_id)
        else:
            future.set_exception(error_from_wire(event.kind, event.message, event.detail))

    def _serve_lazy(self, channel: Channel, event: Meet) -> None:
        """Answer the place's meet: chunks of a lazy folder sent to it (client._lazy); a place
        may meet its client for nothing else."""
        reply: Event
        try:
            if event.agent != LAZY_AGENT or event.mode != "sync":
                raise NotAllowed(f"a client answers {LAZY_AGENT} meets only, got "
                                 f"{event.agent} ({event.mode})")
            reply = Result(event.rid, lazy_folders.serve(event.briefcase, self.address))
        except MeetError as exc:
            reply = Failed(event.rid, exc.kind, exc.message, exc.detail)
        except TacomaError as exc:  # a fetch too large for a frame, ...
            reply = Failed(event.rid, LazyFolderError.kind, str(exc), "")
        except OSError as exc:  # the file went away, or cannot be read
            reply = Failed(event.rid, LazyFolderError.kind, f"the client cannot read the "
                           f"lazy folder's data: {exc}", "")

        # Chunks that do not fit the place's frames: a LazyFolderError saying so.
        channel.answer(reply, LazyFolderError.kind)

    def channel_closed(self, channel: Channel, exc: BaseException | None) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        reason = channel.close_reason or (str(exc) if exc else "closed")
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionLost(
                    f"the connection to place {self.address} ended during the meet: "
                    f"{reason}"))


class ClientCache:
    """Open PlaceClients of one event loop, by address; connects once per place (the TLS
    handshake, milliseconds, is paid once per place, never per meet).

    A place's cache connects with the place's own identity (`credentials`); the client
    API's, with this process's (None: `use_identity`, the environment, the default).
    """

    def __init__(self, credentials: Credentials | None = None,
                 vet: Callable[[PlaceClient], None] | None = None) -> None:
        self.credentials = credentials
        #: Called with each new connection before it is used; raises to refuse the peer
        #: (a place refuses to hand meets to a place whose certificate it has revoked).
        self.vet = vet
        self.clients: dict[str, PlaceClient] = {}
        #: The programs each place has had from us, by address (see PlaceClient.named).
        self.named: dict[str, set[tuple[str, bytes]]] = {}
        self.connecting: dict[str, asyncio.Future[PlaceClient]] = {}

    async def get(self, address: str, timeout: float | None,
                  until: float | None = None) -> PlaceClient:
        """The connection to `address`, made if there is none; `timeout` bounds each attempt.

        A path that loses many packets can break a new connection before its Hellos (TCP's
        retransmissions outlast the seconds a place waits for a Hello), or time the TCP
        connect out: such a failure (TacomaError.transient) is tried again, up to
        CONNECT_ATTEMPTS times, while another whole attempt fits before `until` (a
        time.monotonic() deadline: the meet's or the trip's). With no deadline there is
        one attempt, so a dead host or a server that is not a place is reported at once. A
        refused connection, or a peer that answers as something else, is never retried.
        """
        client = self.clients.get(address)  # every meet's way: an address used before
        if client is not None and client.usable and not client.stale:
            return client
        try:
            address = canonical_address(address)
        except ValueError as exc:
            raise ConnectError(str(exc)) from None
        for attempt in range(1, CONNECT_ATTEMPTS + 1):
            try:
                return await self._get(address, timeout)
            except TacomaError as exc:
                if (not exc.transient or attempt == CONNECT_ATTEMPTS or until is None
                        or until - time.monotonic() < (timeout or 0)):
                    raise
                log.info("connecting to %s (attempt %d of %d): %s", address, attempt,
                         CONNECT_ATTEMPTS, exc)
        raise AssertionError("unreachable")  # the last attempt returns or raises

    async def _get(self, address: str, timeout: float | None) -> PlaceClient:
        client = self.clients.get(address)
        if client is not None and client.usable and not client.stale:
            return client
        if client is not None and client.usable:  # stale: let it go, connect anew
            client.close()
        pending = self.connecting.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        task = asyncio.ensure_future(self._connect(address, timeout))
        self.connecting[address] = task
        try:
            client = await asyncio.shield(task)
        finally:
            self.connecting.pop(address, None)
        self.clients[address] = client
        return client

    async def _connect(self, address: str, timeout: float | None) -> PlaceClient:
        client = await PlaceClient.connect(address, timeout, credentials=self.credentials)
        # What the place had on the last connection it most likely has still (a place
        # that restarted asks for it again).
        client.named = self.named.setdefault(address, set())
        if self.vet is not None:
            try:
                self.vet(client)
            except BaseException:
                client.close()
                raise
        return client

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        self.clients.clear()


_caches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ClientCache] = (
    weakref.WeakKeyDictionary())


def _cache() -> ClientCache:
    loop = asyncio.get_running_loop()
    cache = _caches.get(loop)
    if cache is None:
        cache = _caches[loop] = ClientCache()
    return cache


#: Returns the address of the place where bare agent names meet (see set_default_place).
DefaultPlace = Callable[[], Awaitable[str]]
_default_place: DefaultPlace | None = None


def set_default_place(provider: DefaultPlace | None, replace: bool = True) -> None:
    """Make bare agent names (no @HOST:PORT) meet at the place `provider()` returns (unless
    one is set already and `replace` is false)."""
    global _default_place
    if replace or _default_place is None:
        _default_place = provider


async def place_of(target: str) -> tuple[str, str]:
    """The agent a target names and its place's address (the default place's, for a bare
    name: starting it, if it must start, is not part of any meet's time)."""
    agent, address = split_target(target)
    if address is None:
        if _default_place is None:
            raise ValueError(f"meet target {target!r} names no place: give AGENT@HOST:PORT "
                             "(tacoma.meet meets a bare name at its embedded place)")
        address = await _default_place()
    return agent, address


async def connection(address: str, connect_timeout: float | None,
                     until: float | None = None) -> PlaceClient:
    """The cached connection to the place at `address`, made if there is none (see
    ClientCache.get for `until`)."""
    return await _cache().get(address, connect_timeout, until)


class meet_deadline:
    """`async with meet_deadline(timeout, what)`: bound a block by `timeout` seconds; past
    it, MeetTimeout saying that `what` did not happen in time.

    asyncio's TimeoutError becomes MeetTimeout here, at one boundary; a TacomaError that is
    a TimeoutError (the place's own MeetTimeout) passes unchanged. A class, not an
    asynccontextmanager, because it is on every meet's path.
    """

    __slots__ = ("_timeout", "seconds", "until", "what")

    def __init__(self, timeout: float | None, what: str) -> None:
        self.seconds = timeout
        self.what = what
        self._timeout = asyncio.timeout(timeout)
        #: The deadline as a time.monotonic() (None: none), for ClientCache.get.
        self.until = None if timeout is None else time.monotonic() + timeout

    async def __aenter__(self) -> meet_deadline:
        await self._timeout.__aenter__()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: Any) -> None:
        try:
            await self._timeout.__aexit__(kind, exc, tb)
        except TimeoutError as expired:
            exc = expired
        if isinstance(exc, TimeoutError) and not isinstance(exc, TacomaError):
            raise MeetTimeout(f"{self.what} within {self.seconds} s") from None
