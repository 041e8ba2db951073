"""What became of a meet, asked by its id: `status` and `result` (the place's ag_status).

A place keeps in its journal every async meet it accepted, every trip that began there and
every sync meet whose caller's connection was lost, with the outcome of each for a while
after it ended (`tacoma place --keep-results`). `status("ID@PLACE")` says where the meet is:
queued, running, done (with its result), failed (with its error) or unknown (the place has
no record of it: a wrong or expired id, another principal's meet, or a sync meet during
which the place was killed). `result` returns the result briefcase, raises the meet's error,
and with `wait=True` waits for the meet to end first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import msgpack

from ..wire._briefcase import Briefcase
from ..wire._errors import MeetError, MeetTimeout, UnknownMeet, error_from_wire
from ..wire._names import STATUS_AGENT
from ._client import connection, place_of

__all__ = ["MeetStatus", "aresult", "astatus", "result", "status"]

#: How long one ag_status meet waits at the place before the client asks again.
_WAIT_SLICE = 60.0


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

    def no_record(self) -> UnknownMeet:
        """The error for a meet whose state is unknown."""
        return UnknownMeet(
            f"place {self.place} has no record of meet {self.id}: the id is wrong, its "
            "outcome expired (tacoma place --keep-results), it is another identity's, or it "
            "was a sync meet during which the place was stopped")


async def astatus(target: str, *, wait: float = 0.0,
                  connect_timeout: float | None = 10.0) -> MeetStatus:
    """The status of meet `ID@PLACE` (a bare id: at the default place); with `wait`, wait
    up to that many seconds for it to end first."""
    meet_id, address = await place_of(target)
    client = await connection(address, connect_timeout)
    request = Briefcase(ID=[meet_id])
    if wait > 0:
        request.replace("WAIT", [repr(float(wait))])
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
    accepted, ended = one("ACCEPTED"), one("ENDED")
    return MeetStatus(meet_id, address, one("STATE") or "unknown", one("AGENT") or "",
                      int(one("RUNS") or 0), float(accepted) if accepted else None,
                      float(ended) if ended else None, result, error)


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


def status(target: str, *, wait: float = 0.0,
           connect_timeout: float | None = 10.0) -> MeetStatus:
    """Blocking `astatus`."""
    from ._runtime import run_blocking

    answer: MeetStatus = run_blocking(astatus(target, wait=wait,
                                              connect_timeout=connect_timeout))
    return answer


def result(target: str, *, wait: bool = True, timeout: float | None = None,
           connect_timeout: float | None = 10.0) -> Briefcase:
    """Blocking `aresult`."""
    from ._runtime import run_blocking

    answer: Briefcase = run_blocking(aresult(target, wait=wait, timeout=timeout,
                                             connect_timeout=connect_timeout))
    return answer
