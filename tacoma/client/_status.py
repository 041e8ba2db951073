"""What became of a meet, asked by its id: `status` and `result` (the place's ag_status).

A place keeps in its journal every async meet it accepted, every trip that began there and
every sync meet whose caller's connection was lost, with the outcome of each for a while
after it ended (`tacoma place --keep-results`). `status("ID@PLACE")` says where the meet is:
queued, running, done (with its result), failed (with its error) or unknown (the place has
no record of it: a wrong or expired id, another principal's meet, or a sync meet during
which the place was killed). Ids are per principal: an administrator asks about another
principal's meet by naming it (`principal=`). `result` returns the result briefcase,
raises the meet's error, and with `wait=True` waits for the meet to end first. `results`
waits for many meets at once, with a progress bar (tacoma.display.progress) in a terminal
or a notebook.
"""

from __future__ import annotations

import asyncio
import datetime
import html
import json
import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgpack

from ..display import Progress, html_table
from ..trust._passport import PathStep
from ..wire._briefcase import Briefcase
from ..wire._errors import MeetError, MeetTimeout, UnknownMeet, error_from_wire
from ..wire._names import STATUS_AGENT
from ..wire._text import escape
from ._client import connection, place_of

__all__ = ["MeetStatus", "PathStep", "aresult", "aresults", "astatus", "cancelled", "result",
           "results", "status"]

#: How long one ag_status meet waits at the place before the client asks again.
_WAIT_SLICE = 60.0
#: Meets `results` waits for at once: each wait is an ag_status meet held open at its
#: place, and a thousand of them at one place would only crowd its connection.
_WAITS_AT_ONCE = 64
#: Characters of an error's detail (an agent's traceback) shown in a notebook.
_DETAIL_CHARS = 20_000


@dataclass(frozen=True)
class MeetStatus:
    """A meet as its place knows it."""

    id: str
    place: str
    state: str  # queued, running, done, failed or unknown
    agent: str = ""
    runs: int = 0  # how many times its agent started (more than 1: run again after a restart)
    accepted: float | None = None  # time.time() when the place took it (journaled meets)
    ended: float | None = None
    result: Briefcase | None = None  # when done
    error: MeetError | None = None  # when failed
    hops: int | None = None  # a trip under way that began at this place: hand-overs so far
    at: str = ""  # and the place it was last heard at
    #: A trip that ended: the hand-overs its result took, each signed by its place.
    path: tuple[PathStep, ...] = ()

    def __repr__(self) -> str:
        took = (f", took {self.ended - self.accepted:,.3f} s"
                if self.ended is not None and self.accepted is not None else "")
        what = (f", result={self.result!r}" if self.result is not None
                else f", error={type(self.error).__name__}: {self.error}"
                if self.error is not None else "")
        trip = f", hop {self.hops} at {self.at}" if self.hops is not None else ""
        # Escaped: the agent's name, the place it is at and the error are a place's words.
        return escape(f"MeetStatus({self.id}@{self.place}: {self.state}"
                      f"{', ' + self.agent if self.agent else ''}, runs={self.runs}{trip}"
                      f"{took}{what})")

    def _repr_html_(self) -> str:
        def when(stamp: float | None) -> str:
            return ("" if stamp is None else
                    datetime.datetime.fromtimestamp(stamp).isoformat(" ", "milliseconds"))

        fields = [("meet", f"{self.id}@{self.place}"), ("state", self.state),
                  ("agent", self.agent), ("runs", str(self.runs)),
                  ("trip", f"hop {self.hops} at {self.at}" if self.hops is not None else ""),
                  ("accepted", when(self.accepted)), ("ended", when(self.ended))]
        shown = html_table(("", ""), [row for row in fields if row[1]],
                           caption=f"meet {self.id}: {self.state}")
        if self.result is not None:
            shown += self.result._repr_html_()
        if self.error is not None:
            detail = self.error.detail[:_DETAIL_CHARS]
            more = "\n..." if len(self.error.detail) > _DETAIL_CHARS else ""
            shown += (f"<div><b>{html.escape(type(self.error).__name__)}</b>: "
                      f"{html.escape(escape(str(self.error)))}</div>"
                      + (f"<pre>{html.escape(escape(detail + more, newlines=True))}</pre>"
                         if detail else ""))
        return f"<div>{shown}</div>"

    def no_record(self) -> UnknownMeet:
        """The error for a meet whose state is unknown."""
        return UnknownMeet(
            f"place {self.place} has no record of meet {self.id}: the id is wrong, its "
            "outcome expired (tacoma place --keep-results), it is another identity's, or it "
            "was a sync meet during which the place was stopped")


async def astatus(target: str, *, wait: float = 0.0, principal: str | None = None,
                  connect_timeout: float | None = 10.0) -> MeetStatus:
    """The status of meet `ID@PLACE` (a bare id: at the default place); with `wait`, wait
    up to that many seconds for it to end first.

    Meet ids are per principal: the meet is your own identity's, or, for an identity with
    the admin role, that of `principal` (another's without the role: NotAllowed)."""
    meet_id, address = await place_of(target)
    client = await connection(address, connect_timeout)
    request = Briefcase(ID=[meet_id])
    if wait > 0:
        request.replace("WAIT", [repr(float(wait))])
    if principal is not None:
        request.replace("PRINCIPAL", [principal])
    answer = await client.meet(STATUS_AGENT, request, "sync",
                               wait + 30.0 if wait > 0 else 30.0)
    assert isinstance(answer, Briefcase)
    return _status_of(answer, meet_id, address)


def _status_of(answer: Briefcase, meet_id: str, address: str) -> MeetStatus:
    def one(folder: str) -> str | None:
        values = answer.text(folder) if folder in answer else []
        return values[0] if values else None

    result = None
    if answer.folder("RESULT"):
        result = Briefcase.from_wire(msgpack.unpackb(answer.folder("RESULT")[0], raw=False))
    error = None
    if "ERROR" in answer:
        kind, message, detail = [*answer.text("ERROR"), "", "", ""][:3]
        error = error_from_wire(kind, message, detail)
    accepted, ended, hops = one("ACCEPTED"), one("ENDED"), one("HOPS")
    path: list[PathStep] = []
    for line in answer.get("PATH", []):
        try:
            place, came, went, at, sent, done, note = json.loads(line)
            path.append(PathStep(str(place), str(came), str(went), float(at), str(sent),
                                 bool(done), str(note)))
        except (ValueError, TypeError):
            path.append(PathStep("?", "", "", 0.0, "", False, "the place sent a malformed "
                                 "line of the path"))
    return MeetStatus(meet_id, address, one("STATE") or "unknown", one("AGENT") or "",
                      int(one("RUNS") or 0), float(accepted) if accepted else None,
                      float(ended) if ended else None, result, error,
                      int(hops) if hops else None, one("AT") or "", tuple(path))


async def aresult(target: str, *, wait: bool = True, timeout: float | None = None,
                  connect_timeout: float | None = 10.0) -> Briefcase:
    """The result of meet `ID@PLACE`: its briefcase if it is done, its error raised if it
    failed. With `wait` (the default) wait for it to end, up to `timeout` seconds (None:
    as long as it takes); MeetTimeout if it has not ended by then, or (without `wait`) if
    it has not ended yet. UnknownMeet if the place has no record of it."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = _WAIT_SLICE if deadline is None else min(_WAIT_SLICE, deadline - time.monotonic())
        meet_status = await astatus(target, wait=max(0.0, left) if wait else 0.0,
                                    connect_timeout=connect_timeout)
        if meet_status.state == "done":
            assert meet_status.result is not None
            return meet_status.result
        if meet_status.state == "failed":
            assert meet_status.error is not None
            raise meet_status.error
        if meet_status.state == "unknown":
            raise meet_status.no_record()
        if not wait or (deadline is not None and time.monotonic() >= deadline):
            raise MeetTimeout(f"meet {meet_status.id} at place {meet_status.place} is "
                              f"{meet_status.state}, not yet ended")


def status(target: str, *, wait: float = 0.0, principal: str | None = None,
           connect_timeout: float | None = 10.0) -> MeetStatus:
    """Blocking `astatus`."""
    from ._runtime import run_blocking

    answer: MeetStatus = run_blocking(astatus(target, wait=wait, principal=principal,
                                              connect_timeout=connect_timeout))
    return answer


def result(target: str, *, wait: bool = True, timeout: float | None = None,
           connect_timeout: float | None = 10.0) -> Briefcase:
    """Blocking `aresult`."""
    from ._runtime import run_blocking

    answer: Briefcase = run_blocking(aresult(target, wait=wait, timeout=timeout,
                                             connect_timeout=connect_timeout))
    return answer


#: How long a caller that interrupted a meet asks its place whether the agent stopped.
CONFIRM_SECONDS = 5.0


def _stopped(where: str) -> bool:
    """Whether the place confirms that meet `where` (ID@PLACE, or a bare id at the embedded
    place) no longer runs, within CONFIRM_SECONDS. Asked again until it does: a Cancel is
    acted on at once, but the place has no way to say so to a client that gave up on the
    meet's answer."""
    deadline = time.monotonic() + CONFIRM_SECONDS
    while True:
        try:
            state = status(where, connect_timeout=CONFIRM_SECONDS).state
        except MeetError:
            return False
        if state not in ("queued", "running"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def cancelled(meet_id: str, place: str | None, *, started: bool = True) -> tuple[str, str]:
    """What to tell a person who interrupted the sync meet `meet_id` (which `meet` then
    cancelled) at `place` (None: the embedded place): a message, and a hint (or "").

    `started`: whether the place can have run it at all (false for the embedded place when
    it had not started yet: nothing ran, and asking would start it)."""
    if not started or _stopped(f"{meet_id}@{place}" if place else meet_id):
        return f"meet {meet_id} cancelled; the agent was stopped", ""
    at = place or "the embedded place"
    hint = (f"`tacoma ps {place}` shows whether it runs; `tacoma kill {meet_id}@{place}` "
            "stops it" if place else "")
    return (f"meet {meet_id} cancelled, but {at} did not confirm that its agent stopped",
            hint)


# ---------------------------------------------------------------------------- many meets
Outcome = Briefcase | MeetError


async def _gather(targets: Sequence[str], timeout: float | None, return_exceptions: bool,
                  connect_timeout: float | None, ended: Callable[[], None]) -> list[Outcome]:
    """The outcome of each meet, in order; `ended()` is called as each one ends."""
    deadline = None if timeout is None else time.monotonic() + timeout
    at_once = asyncio.Semaphore(_WAITS_AT_ONCE)

    async def one(target: str) -> Outcome:
        async with at_once:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                outcome: Outcome = await aresult(target, timeout=left,
                                                 connect_timeout=connect_timeout)
            except MeetError as exc:
                if not return_exceptions:
                    raise
                outcome = exc
        ended()
        return outcome

    tasks = [asyncio.ensure_future(one(target)) for target in targets]
    try:
        # gather fails as soon as one fails; the finally stops waiting for the others
        # (the meets themselves go on at their places).
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


async def aresults(targets: Sequence[str], *, timeout: float | None = None,
                   return_exceptions: bool = False, progress: bool | None = None,
                   connect_timeout: float | None = 10.0) -> list[Outcome]:
    """The results of many meets (`ID@PLACE` each, as `tacoma.meet(mode="async")` and the
    place make them), in the order given, waiting for all to end (up to `timeout` seconds
    in all). The first meet to fail raises its error; with `return_exceptions`, its error
    takes its place in the list instead (as in asyncio.gather). `progress`: a bar of the
    meets ended, in a terminal or a notebook (None: where there is one; True: also as
    lines elsewhere; False: none)."""
    with Progress(len(targets), "meets ended", show=progress) as bar:
        return await _gather(targets, timeout, return_exceptions, connect_timeout,
                             bar.advance)


def results(targets: Sequence[str], *, timeout: float | None = None,
            return_exceptions: bool = False, progress: bool | None = None,
            connect_timeout: float | None = 10.0) -> list[Outcome]:
    """Blocking `aresults`. The bar is drawn from the calling thread (a notebook's output
    belongs to the cell that runs there), while the waits run on the background loop."""
    from ._runtime import background_loop, get_interruptibly

    ends: queue.SimpleQueue[bool] = queue.SimpleQueue()  # True: one ended; False: all done
    future = asyncio.run_coroutine_threadsafe(
        _gather(targets, timeout, return_exceptions, connect_timeout,
                lambda: ends.put(True)), background_loop())
    future.add_done_callback(lambda _: ends.put(False))
    try:
        with Progress(len(targets), "meets ended", show=progress) as bar:
            while get_interruptibly(ends):
                bar.advance()
    except KeyboardInterrupt:
        future.cancel()
        raise
    return future.result()
