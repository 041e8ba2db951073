"""Meeting agents and sending messages: the client API, async and blocking.

`ameet` is the one implementation of a meet; `meet` runs it on a background event loop
(`_runtime`) so it can be called from plain scripts and from notebook cells, where a loop
already runs in the caller's thread. Messages are meets too (see place.meets._residents): `asend`
is an async (one-way) or ack meet with a resident, `arequest` a sync one.

Interrupting a blocking meet (Ctrl-C in a script, a notebook's stop button) cancels it, and
`meet` waits, briefly, for that cancellation to reach the place before it lets the
KeyboardInterrupt go on: the client names its meets, and a place that sees only a lost
connection lets the agent of a named meet run on (its caller may ask for the outcome by id),
so a process that exited at once would leave its agent running.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

from ..wire._address import split_target
from ..wire._briefcase import CODE, FRESH, Briefcase
from ..wire._errors import ConnectionLost
from ._client import connection, meet_deadline, place_of
from ._identity import DEFAULT_TERMS, Terms, credentials, program_of
from ._trip_progress import TripBar, shows_trip, watch_trip

__all__ = ["ameet", "arequest", "asend", "make_briefcase", "meet", "request",
           "run_interruptible", "send"]

MeetMode = Literal["sync", "async"]
Folders = Briefcase | Mapping[str, Any] | None
T = TypeVar("T")

#: How long an interrupted blocking meet waits for its cancellation to be sent.
CANCEL_SECONDS = 5.0


def make_briefcase(briefcase: Folders, code: str | bytes | None,
                   fresh: bool = False) -> Briefcase:
    """The briefcase of a meet: a copy of `briefcase`, with `code` in CODE if given, and a
    FRESH folder if `fresh`."""
    bc = Briefcase(briefcase) if briefcase is not None else Briefcase()
    if code is not None:
        bc[CODE] = [code]
    if fresh:
        bc[FRESH] = [b""]
    return bc


@overload
async def ameet(target: str, briefcase: Folders = ..., *, code: str | bytes | None = ...,
                mode: Literal["sync"] = ..., timeout: float | None = ...,
                connect_timeout: float | None = ..., meet_id: str | None = ...,
                progress: bool | None = ..., places: Sequence[str] | None = ...,
                may: Sequence[str] | None = ...,
                programs: Sequence[str | bytes] | str | None = ...,
                fresh: bool = ...) -> Briefcase: ...


@overload
async def ameet(target: str, briefcase: Folders = ..., *, code: str | bytes | None = ...,
                mode: Literal["async"], timeout: float | None = ...,
                connect_timeout: float | None = ..., meet_id: str | None = ...,
                progress: bool | None = ..., places: Sequence[str] | None = ...,
                may: Sequence[str] | None = ...,
                programs: Sequence[str | bytes] | str | None = ...,
                fresh: bool = ...) -> str: ...


async def ameet(target: str, briefcase: Folders = None, *, code: str | bytes | None = None,
                mode: MeetMode = "sync", timeout: float | None = None,
                connect_timeout: float | None = 10.0, meet_id: str | None = None,
                progress: bool | None = None, places: Sequence[str] | None = None,
                may: Sequence[str] | None = None,
                programs: Sequence[str | bytes] | str | None = None,
                fresh: bool = False) -> Briefcase | str:
    """Meet `agent@place` with a briefcase.

    Sync (the default) waits for the agent to end and returns its briefcase; async returns
    the place's meet id as soon as the place accepted the meet. `code` is put into the CODE
    folder. `timeout` bounds the whole meet, connection included; the place kills the agent
    when it passes. A bare agent name meets at the default place (tacoma.meet's: the
    embedded place). `meet_id`: the id to run the meet as (8 to 64 letters, digits, _ and
    -, unique at the place; default: a new random one), for a caller that must name the
    meet before it ends (to ask for it by id, or to say which meet it cancelled).
    `progress`: show a trip's hops as the agent moves, in a terminal or a notebook (None,
    the default: for a briefcase with an ITINERARY; True: any sync meet, one that does not
    move shown running at its place, also as lines in a log; False: never); nothing shows
    for a meet that ends within a second.

    The agent carries a passport signed with your identity (see Passports in the
    documentation): what it may do for you at other places. `places`: the places it may
    visit, as patterns of HOST:PORT addresses or place names (default: any place of the
    cluster, "*"); `may`: what it may do there, of "meet", "move", "cabinet", "lazy" and
    "status" (default: all); `programs`: the programs (their source) that agents it starts
    elsewhere may run for you besides its own ("*": any program; default: none).

    `fresh`: run the agent in a fresh worker process, never a warm one (a place keeps a
    worker warm for later meets of the same program for the same principal, and only
    those: see Warm workers in the documentation); it puts a FRESH folder in the
    briefcase, which asks the same of every place the agent goes to.
    """
    bc = make_briefcase(briefcase, code, fresh)
    terms = Terms.of(places, may, programs)
    if not shows_trip(progress, mode, bc):
        return await _ameet(target, bc, mode, timeout, connect_timeout, meet_id, None, terms)
    bar = TripBar(bc, progress)
    ended = False
    try:
        result = await _ameet(target, bc, mode, timeout, connect_timeout, meet_id, bar.hop,
                              terms)
        ended = True
        return result
    finally:
        bar.close(ended)


async def _ameet(target: str, bc: Briefcase, mode: MeetMode, timeout: float | None,
                 connect_timeout: float | None, meet_id: str | None,
                 hop: Callable[[int | None, str], None] | None,
                 terms: Terms = DEFAULT_TERMS) -> Briefcase | str:
    """The meet; `hop(hops, place)` is told where its trip is as it goes, if given."""
    if mode not in ("sync", "async"):
        raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
    agent, address = await place_of(target)
    async with meet_deadline(timeout, f"meet {target} did not finish") as deadline:
        client = await connection(address, connect_timeout, deadline.until)
        # Named here, so that a caller who loses the connection can ask for the outcome by
        # id (and an async meet sent again after a lost answer is taken once): the id of
        # the passport signed ahead for it, if there is one.
        meet_id = meet_id or (client.credentials or credentials()).launch_id(
            client.address, agent, program_of(bc), timeout, terms)
        watching = (asyncio.ensure_future(watch_trip(meet_id, address, hop))
                    if hop is not None else None)
        try:
            return await client.meet(agent, bc, mode, timeout, meet_id=meet_id, terms=terms)
        except ConnectionLost as exc:
            raise ConnectionLost(
                f"{exc}; the meet's outcome is unknown here: ask the place for it by id "
                f"(tacoma status {meet_id}@{address}, or tacoma.result)",
                meet_id=meet_id) from None
        finally:
            if watching is not None:
                watching.cancel()


@overload
def meet(target: str, briefcase: Folders = ..., *, code: str | bytes | None = ...,
         mode: Literal["sync"] = ..., timeout: float | None = ...,
         connect_timeout: float | None = ..., meet_id: str | None = ...,
         progress: bool | None = ..., places: Sequence[str] | None = ...,
         may: Sequence[str] | None = ...,
         programs: Sequence[str | bytes] | str | None = ...,
                fresh: bool = ...) -> Briefcase: ...


@overload
def meet(target: str, briefcase: Folders = ..., *, code: str | bytes | None = ...,
         mode: Literal["async"], timeout: float | None = ...,
         connect_timeout: float | None = ..., meet_id: str | None = ...,
         progress: bool | None = ..., places: Sequence[str] | None = ...,
         may: Sequence[str] | None = ...,
         programs: Sequence[str | bytes] | str | None = ...,
                fresh: bool = ...) -> str: ...


def meet(target: str, briefcase: Folders = None, *, code: str | bytes | None = None,
         mode: MeetMode = "sync", timeout: float | None = None,
         connect_timeout: float | None = 10.0, meet_id: str | None = None,
         progress: bool | None = None, places: Sequence[str] | None = None,
         may: Sequence[str] | None = None,
         programs: Sequence[str | bytes] | str | None = None,
                fresh: bool = False) -> Briefcase | str:
    """Blocking `ameet`: usable from scripts and from notebook cells alike. Interrupted
    (KeyboardInterrupt), it cancels the meet at the place, which stops the agent. A trip's
    progress is drawn from the calling thread (a notebook's output belongs to the cell
    running there), while the meet runs on the background loop."""
    bc = make_briefcase(briefcase, code, fresh)
    terms = Terms.of(places, may, programs)
    if not shows_trip(progress, mode, bc):
        return run_interruptible(lambda: _ameet(target, bc, mode, timeout, connect_timeout,
                                                meet_id, None, terms))
    from ._runtime import get_interruptibly

    hops: queue.SimpleQueue[tuple[int | None, str] | None] = queue.SimpleQueue()
    bar = TripBar(bc, progress)

    def drawing(future: concurrent.futures.Future[Briefcase | str]) -> Briefcase | str:
        future.add_done_callback(lambda _: hops.put(None))
        try:
            while (heard := get_interruptibly(hops)) is not None:
                bar.hop(*heard)
        finally:
            bar.close(future.done() and not future.cancelled()
                      and future.exception() is None)
        return future.result()

    return run_interruptible(lambda: _ameet(target, bc, mode, timeout, connect_timeout,
                                            meet_id, lambda n, at: hops.put((n, at)),
                                            terms),
                             wait=drawing)


def run_interruptible(make: Callable[[], Coroutine[Any, Any, T]],
                      wait: Callable[[concurrent.futures.Future[T]], T] | None = None) -> T:
    """Run the coroutine `make()` on the background loop and wait for it; on an interrupt,
    wait up to CANCEL_SECONDS for its cancellation to finish (what it sends to say so has
    then left), and raise the KeyboardInterrupt.

    The coroutine is made on the loop, so that one cancelled before it started is never
    made at all (and leaves no never-awaited coroutine behind).
    """
    from ._runtime import run_blocking

    lock = threading.Lock()
    started = abandoned = False
    ended = threading.Event()

    async def guarded() -> T:
        nonlocal started
        with lock:  # held for a moment only: it orders this against the interrupt below
            if abandoned:
                raise asyncio.CancelledError
            started = True
        try:
            return await make()
        finally:
            ended.set()

    try:
        return run_blocking(guarded(), wait)
    except KeyboardInterrupt:
        with lock:
            abandoned = True
            running = started
        if running:  # else it never starts: nothing was sent, nothing to cancel
            ended.wait(CANCEL_SECONDS)
        raise


# ---------------------------------------------------------------------------- messages
async def asend(target: str, briefcase: Folders = None, *, ack: bool = False,
                timeout: float | None = None,
                connect_timeout: float | None = 10.0) -> str | asyncio.Future[None]:
    """Send a message to the resident agent `name@place` (see place.meets._residents).

    One-way (the default): returns the message id once the message is in the resident's
    mailbox; the resident never answers. With `ack=True`: returns, once the message is sent,
    a future that completes when the resident has taken it (or fails: MailboxFull,
    UnknownAgent, MessageError if the resident ends first, MeetTimeout after `timeout`).
    """
    agent = split_target(target)[0]
    if agent.startswith("ag_"):
        raise ValueError(f"{agent} is an agent's name, not a resident's: messages go to "
                         "resident agents (meet starts agents)")
    bc = make_briefcase(briefcase, None)
    agent, address = await place_of(target)
    client = await connection(address, connect_timeout)
    what = f"message to {target} not answered"
    if not ack:
        async with meet_deadline(timeout, what):
            return str(await client.meet(agent, bc, "async", timeout))

    async def acknowledged() -> None:
        async with meet_deadline(timeout, what):
            await client.meet(agent, bc, "ack", timeout)

    task = asyncio.ensure_future(acknowledged())
    await asyncio.sleep(0)  # the task runs up to its first wait: the message is sent
    return task


async def arequest(target: str, briefcase: Folders = None, *, timeout: float | None = None,
                   connect_timeout: float | None = 10.0) -> Briefcase:
    """Send a request to the resident agent `name@place` and wait for its reply (a sync
    meet with a resident is exactly that)."""
    return await ameet(target, briefcase, timeout=timeout, connect_timeout=connect_timeout)


def send(target: str, briefcase: Folders = None, *, ack: bool = False,
         timeout: float | None = None,
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


def request(target: str, briefcase: Folders = None, *, timeout: float | None = None,
            connect_timeout: float | None = 10.0) -> Briefcase:
    """Blocking `arequest`: the resident's reply (interrupted, it cancels the request)."""
    return meet(target, briefcase, timeout=timeout, connect_timeout=connect_timeout)
