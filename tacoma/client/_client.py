"""Meeting agents at a place: the client side of the meet path.

`ameet` is the one implementation; `meet` runs it on a background event loop so it can be
called from plain scripts and from notebook cells (where a loop is already running in the
caller's thread). Connections are cached per event loop and place, and reused by every meet
to that place: TACOMA measured TCP connect plus process creation as a large part of its
meet (steps 2, 3 and 7 of its Table 1) and proposed exactly this cache as the fix. One
connection carries any number of concurrent meets, told apart by request id.

A target is `agent@HOST:PORT`, or a bare agent name for the embedded place (a place started
in this process on first use, on a free loopback port, shut down at exit).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import time
import weakref
from collections.abc import Mapping
from typing import Any, Literal, cast, overload

from .._version import __version__
from ..wire._address import split_target
from ..wire._briefcase import CODE, TRACE, Briefcase
from ..wire._errors import (
    ConnectionLost,
    TacomaError,
    error_from_wire,
)
from ..wire._protocol import DEFAULT_MAX_FRAME, Accepted, Cancel, Event, Failed, Meet, Result, Role
from ._transport import Channel, connect

__all__ = ["PlaceClient", "Traced", "ameet", "arequest", "asend", "atrace", "meet", "request",
           "send", "trace"]

MeetMode = Literal["sync", "async"]
#: Every mode on the wire: the user's two, and those of messages and moving agents.
WireMode = Literal["sync", "async", "ack", "go"]
_SOFTWARE = f"tacoma/{__version__}"


class PlaceClient:
    """One connection to a place, carrying many concurrent meets."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.channel: Channel | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}

    @classmethod
    async def connect(cls, address: str, timeout: float | None = 10.0,
                      max_frame: int = DEFAULT_MAX_FRAME) -> PlaceClient:
        client = cls(address)
        client.channel = await connect(address, Role.CLIENT, client, max_frame, timeout,
                                       _SOFTWARE)
        return client

    @property
    def usable(self) -> bool:
        return self.channel is not None and not self.channel.is_closing

    async def meet(self, agent: str, briefcase: Briefcase, mode: WireMode = "sync",
                   timeout: float | None = None) -> Briefcase | str:
        """Send a meet and wait for its reply: the result briefcase, or the async meet id."""
        channel = self._open()
        rid = channel.conn.new_rid()
        channel.send(Meet(rid, agent, briefcase, mode, timeout))
        answer: Briefcase | str = await self._reply(channel, rid)
        return answer

    async def traced_meet(self, agent: str, briefcase: Briefcase,
                          timeout: float | None) -> tuple[Briefcase, int, int, int]:
        """A sync meet, timed: its result, and nanoseconds to marshal, to send, and from
        sent to answered (see _trace)."""
        channel = self._open()
        rid = channel.conn.new_rid()
        started = time.perf_counter_ns()
        data = channel.conn.send(Meet(rid, agent, briefcase, "sync", timeout))
        marshalled = time.perf_counter_ns()
        channel.write(data)
        sent = time.perf_counter_ns()
        result = await self._reply(channel, rid)
        return result, marshalled - started, sent - marshalled, time.perf_counter_ns() - sent

    def _open(self) -> Channel:
        channel = self.channel
        if channel is None or channel.is_closing:
            raise ConnectionLost(f"connection to place {self.address} is closed")
        return channel

    async def _reply(self, channel: Channel, rid: int) -> Any:
        """Wait for the answer to meet `rid`; cancel the meet at the place if given up."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            return await future
        finally:
            self._pending.pop(rid, None)
            given_up = future.cancelled() or not future.done()
            if given_up and not channel.is_closing and rid in channel.conn.awaiting:
                # Given up on (cancelled, timed out): the place stops the agent now rather
                # than at the meet's own timeout.
                with contextlib.suppress(TacomaError):
                    channel.send(Cancel(rid))

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()

    # -- EventHandler
    def event_received(self, channel: Channel, event: Event) -> None:
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

    def channel_closed(self, channel: Channel, exc: BaseException | None) -> None:
        reason = channel.close_reason or (str(exc) if exc else "closed")
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionLost(
                    f"place {self.address} closed the connection during the meet: {reason}"))


class ClientCache:
    """Open PlaceClients of one event loop, by address; connects once per place."""

    def __init__(self) -> None:
        self.clients: dict[str, PlaceClient] = {}
        self.connecting: dict[str, asyncio.Future[PlaceClient]] = {}

    async def get(self, address: str, timeout: float | None) -> PlaceClient:
        client = self.clients.get(address)
        if client is not None and client.usable:
            return client
        pending = self.connecting.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        task = asyncio.ensure_future(PlaceClient.connect(address, timeout))
        self.connecting[address] = task
        try:
            client = await asyncio.shield(task)
        finally:
            self.connecting.pop(address, None)
        self.clients[address] = client
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


def _make_briefcase(briefcase: Briefcase | Mapping[str, Any] | None,
                    code: str | bytes | None) -> Briefcase:
    bc = Briefcase(briefcase) if briefcase is not None else Briefcase()
    if code is not None:
        bc[CODE] = [code]
    return bc


@overload
async def ameet(target: str, briefcase: Briefcase | Mapping[str, Any] | None = ..., *,
                code: str | bytes | None = ..., mode: Literal["sync"] = ...,
                timeout: float | None = ..., connect_timeout: float | None = ...) -> Briefcase:
    ...


@overload
async def ameet(target: str, briefcase: Briefcase | Mapping[str, Any] | None = ..., *,
                code: str | bytes | None = ..., mode: Literal["async"],
                timeout: float | None = ..., connect_timeout: float | None = ...) -> str: ...


async def ameet(target: str, briefcase: Briefcase | Mapping[str, Any] | None = None, *,
                code: str | bytes | None = None, mode: MeetMode = "sync",
                timeout: float | None = None,
                connect_timeout: float | None = 10.0) -> Briefcase | str:
    """Meet `agent@place` with a briefcase.

    Sync (the default) waits for the agent to end and returns its briefcase; async returns
    the place's meet id as soon as the place accepted the meet. `code` is put into the CODE
    folder. `timeout` bounds the whole meet, connection included; the place kills the agent
    when it passes. A bare agent name meets at the embedded place.
    """
    agent, address = split_target(target)
    bc = _make_briefcase(briefcase, code)
    if mode not in ("sync", "async"):
        raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
    if address is None:
        from ..place._embedded import embedded_address

        address = await embedded_address()
    try:
        async with asyncio.timeout(timeout):
            client = await _cache().get(address, connect_timeout)
            return await client.meet(agent, bc, mode, timeout)
    except TimeoutError as exc:
        if isinstance(exc, TacomaError):
            raise
        from ..wire._errors import MeetTimeout

        raise MeetTimeout(f"meet {target} did not finish within {timeout} s") from None


@overload
def meet(target: str, briefcase: Briefcase | Mapping[str, Any] | None = ..., *,
         code: str | bytes | None = ..., mode: Literal["sync"] = ...,
         timeout: float | None = ..., connect_timeout: float | None = ...) -> Briefcase: ...


@overload
def meet(target: str, briefcase: Briefcase | Mapping[str, Any] | None = ..., *,
         code: str | bytes | None = ..., mode: Literal["async"],
         timeout: float | None = ..., connect_timeout: float | None = ...) -> str: ...


def meet(target: str, briefcase: Briefcase | Mapping[str, Any] | None = None, *,
         code: str | bytes | None = None, mode: MeetMode = "sync",
         timeout: float | None = None, connect_timeout: float | None = 10.0) -> Briefcase | str:
    """Blocking `ameet`: usable from scripts and from notebook cells alike."""
    from ._runtime import run_blocking

    result = run_blocking(ameet(target, briefcase, code=code, mode=mode,
                                timeout=timeout, connect_timeout=connect_timeout))
    return cast(Briefcase | str, result)


# ---------------------------------------------------------------------------- messages
async def asend(target: str, briefcase: Briefcase | Mapping[str, Any] | None = None, *,
                ack: bool = False, timeout: float | None = None,
                connect_timeout: float | None = 10.0) -> str | asyncio.Future[None]:
    """Send a message to the resident agent `name@place` (see _residents).

    One-way (the default): returns the message id once the message is in the resident's
    mailbox; the resident never answers. With `ack=True`: returns, once the message is sent,
    a future that completes when the resident has taken it (or fails: MailboxFull,
    UnknownAgent, MessageError if the resident ends first, MeetTimeout after `timeout`).
    """
    agent, address = split_target(target)
    if agent.startswith("ag_"):
        raise ValueError(f"{agent} is an agent's name, not a resident's: messages go to "
                         "resident agents (meet starts agents)")
    bc = _make_briefcase(briefcase, None)
    if address is None:
        from ..place._embedded import embedded_address

        address = await embedded_address()
    client = await _cache().get(address, connect_timeout)
    if not ack:
        answer = await _within(client.meet(agent, bc, "async", timeout), timeout, target)
        return str(answer)

    async def acknowledged() -> None:
        await _within(client.meet(agent, bc, "ack", timeout), timeout, target)

    task = asyncio.ensure_future(acknowledged())
    await asyncio.sleep(0)  # the task runs up to its first wait: the message is sent
    return task


async def arequest(target: str, briefcase: Briefcase | Mapping[str, Any] | None = None, *,
                   timeout: float | None = None,
                   connect_timeout: float | None = 10.0) -> Briefcase:
    """Send a request to the resident agent `name@place` and wait for its reply (a sync
    meet with a resident is exactly that)."""
    return await ameet(target, briefcase, timeout=timeout, connect_timeout=connect_timeout)


async def _within(work: Any, timeout: float | None, target: str) -> Any:
    try:
        async with asyncio.timeout(timeout):
            return await work
    except TimeoutError as exc:
        if isinstance(exc, TacomaError):
            raise
        from ..wire._errors import MeetTimeout

        raise MeetTimeout(f"message to {target} not answered within {timeout} s") from None


def send(target: str, briefcase: Briefcase | Mapping[str, Any] | None = None, *,
         ack: bool = False, timeout: float | None = None,
         connect_timeout: float | None = 10.0) -> str | concurrent.futures.Future[None]:
    """Blocking `asend`: the message id, or (ack=True) a concurrent.futures.Future of the
    acknowledgement."""
    from ._runtime import background_loop, run_blocking

    sent = run_blocking(asend(target, briefcase, ack=ack, timeout=timeout,
                              connect_timeout=connect_timeout))
    if isinstance(sent, str):
        return sent

    async def wait() -> None:
        await sent

    return asyncio.run_coroutine_threadsafe(wait(), background_loop())


def request(target: str, briefcase: Briefcase | Mapping[str, Any] | None = None, *,
            timeout: float | None = None, connect_timeout: float | None = 10.0) -> Briefcase:
    """Blocking `arequest`: the resident's reply."""
    return meet(target, briefcase, timeout=timeout, connect_timeout=connect_timeout)


# ---------------------------------------------------------------------------- traced meets
@dataclasses.dataclass
class Traced:
    """A traced meet's result and where its time went: (side, step, seconds) in order of
    the meet's path (see tacoma/wire/_trace.py), and the whole meet's seconds."""

    briefcase: Briefcase
    steps: list[tuple[str, str, float]]
    total: float

    def table(self) -> str:
        lines = [f"{'side':<7} {'step':<22} {'µs':>10}"]
        for side, step, seconds in self.steps:
            lines.append(f"{side:<7} {step:<22} {seconds * 1e6:>10,.1f}")
        lines.append(f"{'':<7} {'total':<22} {self.total * 1e6:>10,.1f}")
        return "\n".join(lines)


#: The order of steps in a Traced (others, a language's own, come after their side's).
_ORDER = ["client marshal", "client connect or reuse", "client send", "place examine",
          "place find agent", "place take worker", "place hand to worker",
          "worker receive and unmarshal", "worker start", "worker run", "worker return",
          "client transfer"]


async def atrace(target: str, briefcase: Briefcase | Mapping[str, Any] | None = None, *,
                 code: str | bytes | None = None, timeout: float | None = None,
                 connect_timeout: float | None = 10.0) -> Traced:
    """A sync meet, traced: the result and the time of each step on the client, the place
    and the agent's worker, after TACOMA's Table 1 (see tacoma/wire/_trace.py)."""
    from ..wire._trace import read

    agent, address = split_target(target)
    bc = _make_briefcase(briefcase, code)
    bc[TRACE] = []
    if address is None:
        from ..place._embedded import embedded_address

        address = await embedded_address()
    started = time.perf_counter_ns()
    try:
        async with asyncio.timeout(timeout):
            client = await _cache().get(address, connect_timeout)
            connected = time.perf_counter_ns()
            result, marshal, send, waited = await client.traced_meet(agent, bc, timeout)
    except TimeoutError as exc:
        if isinstance(exc, TacomaError):
            raise
        from ..wire._errors import MeetTimeout

        raise MeetTimeout(f"meet {target} did not finish within {timeout} s") from None
    total = time.perf_counter_ns() - started
    steps = {f"{side} {step}": ns for side, step, ns in read(result)}
    span = steps.pop("place span", 0)
    steps.update({"client marshal": marshal, "client connect or reuse": connected - started,
                  # The place may start before the write returns: the send overlaps it.
                  "client send": send, "client transfer": max(0, send + waited - span)})
    ordered = sorted(steps, key=lambda k: _ORDER.index(k) if k in _ORDER else len(_ORDER))
    timed = []
    for key in ordered:
        side, step = key.split(" ", 1)
        timed.append((side, step, steps[key] / 1e9))
    return Traced(result, timed, total / 1e9)


def trace(target: str, briefcase: Briefcase | Mapping[str, Any] | None = None, *,
          code: str | bytes | None = None, timeout: float | None = None,
          connect_timeout: float | None = 10.0) -> Traced:
    """Blocking `atrace`."""
    from ._runtime import run_blocking

    return run_blocking(atrace(target, briefcase, code=code, timeout=timeout,
                               connect_timeout=connect_timeout))
