"""Async meets, and the outcomes a caller asks for by id: promises kept across failures.

An async meet is answered Accepted only once the journal holds it (synced): it outlives a
crash of the place. It then runs at once, or waits in the queue for a slot (its briefcase
in the journal, not in memory); a place that restarts runs again every async meet that had
not ended (at least once; RERUN tells the agent how often it started before), waits again
for the trips that were out from here, and records as failed the sync meets whose callers
were gone (sync meets are at most once). Every outcome a caller may ask for by id (an async
meet's, a trip's that began here, an orphaned sync meet's) is recorded here. The meet path
itself is given as a callable (`run`), as to `_hops`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import msgpack

from ...trust._passport import Passport
from ...wire._briefcase import RERUN, Briefcase
from ...wire._errors import MeetTimeout, PlaceUnavailable, TacomaError
from ..meets._meet import AtCapacity, Meets, RunningMeet, failed
from ..meets._route import State
from ._journal import Journal, Record

__all__ = ["AsyncMeets"]

log = logging.getLogger("tacoma.place")


class AsyncMeets:
    """The async meets of one place, and the outcomes it records (see the module)."""

    def __init__(self, meets: Meets, journal: Journal,
                 run: Callable[[RunningMeet], Awaitable[Briefcase]], address: str) -> None:
        self.meets = meets
        self.journal = journal
        self._run = run
        self.address = address
        meets.on_free = self._start_queued
        #: Long-lived tasks cancelled when the place stops: journal pruning, and trips
        #: adopted from the journal waiting for their deadlines.
        self._watching: set[asyncio.Task[None]] = set()

    async def submit(self, meet: RunningMeet) -> str:
        """Take an async meet: write it to the journal (synced), then start it, or queue it
        if the place is at --max-meets (or its principal at its share); its id.

        Its caller is answered only once this returns: an accepted async meet outlives a
        crash of the place. Refused (PlaceUnavailable) if it could only queue and the queue
        is full. A meet sent again with an id the journal has from the same principal (its
        Accepted was lost) is taken once.
        """
        reserved = False
        try:
            self.meets.admit("", meet.principal)
        except AtCapacity:
            # A place in the queue is held for it while it is written (so that a burst of
            # async meets cannot pass --max-queued between the check and the write).
            self.meets.may_queue(meet.principal)
            self.meets.reserve(meet.principal)
            reserved = True
        try:
            passport = meet.passport
            outcome = await self.journal.accept(meet.id, meet.agent, meet.principal, meet.via,
                                                meet.caller, meet.timeout, meet.briefcase,
                                                "queued", passport.raw if passport else b"",
                                                passport.digest if passport else "")
        finally:
            if reserved:
                self.meets.unreserve(meet.principal)
        if outcome == "same":
            return meet.id  # sent again: it is taken once
        meet.journaled = True
        try:
            self.meets.admit("", meet.principal)
        except PlaceUnavailable:  # at capacity, or stopping: it waits in the journal
            self.meets.queue(meet)
            log.debug("async meet %s queued (%d waiting)", meet.id, len(self.meets.queued))
        else:
            self.meets.spawn(meet, self.run_async(meet))
        return meet.id

    def _start_queued(self) -> None:
        """Start the queued async meets that may start now (called when a slot frees)."""
        while (meet := self.meets.next_queued()) is not None:
            self.meets.spawn(meet, self.run_async(meet))

    async def run_async(self, meet: RunningMeet) -> None:
        """Run an async meet (journaled), and record how it ended.

        A place stopping cancels it without a record: it stays in the journal and runs again
        when the place starts again (at least once; RERUN tells the agent).
        """
        try:
            if meet.state is State.QUEUED:  # its briefcase waited in the journal
                meet.briefcase = await self.journal.briefcase(meet.id, meet.principal)
            try:
                meet.runs = await self.journal.started(meet.id, meet.principal) - 1
            except TacomaError as exc:
                # The journal cannot count this start (its disk is full): the meet was
                # accepted, so it runs all the same; it stays unended in the journal until
                # its outcome is written, and runs again after a restart if it never is.
                log.warning("async meet %s starts, but the journal cannot count it: %s",
                            meet.id, exc)
            if meet.runs:
                meet.briefcase[RERUN] = [str(meet.runs).encode()]
            result = await self._run(meet)
        except asyncio.CancelledError as exc:
            meet.ends(exc)
            if meet.killed or not self.meets.stopping:
                await asyncio.shield(self.record(meet, None, self.meets.cancelled(meet)))
            raise
        except Exception as exc:
            meet.ends(exc)
            if isinstance(exc, TacomaError):
                log.info("async meet %s (%s) failed: %s", meet.id, meet.agent, exc)
            else:
                log.error("async meet %s (%s) failed on an unexpected error", meet.id,
                          meet.agent, exc_info=exc)
            await self.record(meet, None, exc)
        else:
            meet.ends(None)
            log.info("async meet %s (%s) done", meet.id, meet.agent)
            await self.record(meet, result, None)

    async def record(self, meet: RunningMeet, result: Briefcase | None,
                     exc: BaseException | None) -> None:
        """Put a meet's outcome in the journal, if its caller may ask for it there (an async
        meet, a trip that began here, a sync meet whose caller is gone)."""
        if meet.recorded:
            path = (msgpack.packb([step.to_wire() for step in meet.path], use_bin_type=True)
                    if meet.path is not None else None)
            await self._record(meet.id, meet.agent, meet.principal, meet.via, result, exc,
                               path)

    async def _record(self, meet_id: str, agent: str, principal: str, via: str,
                      result: Briefcase | None, exc: BaseException | None,
                      path: bytes | None = None) -> None:
        error = None
        if exc is not None:
            failure = failed(0, exc)
            error = (failure.kind, failure.message, failure.detail)
        await self.journal.ended_when_room(meet_id, agent, principal, via, result, error,
                                           lambda: self.meets.stopping, path)

    async def resume(self) -> None:
        """At start: take up what the journal says was under way when the place stopped.

        Async meets that had not ended are queued and run again (RERUN tells the agent how
        often they started before); meets whose agents were out on a trip from here wait for
        its end again; a sync meet whose caller was gone is recorded as failed (sync meets
        are at most once).
        """
        records = await self.journal.open()
        for record in records:
            if record.trip is not None:  # long-lived: not one settle() waits for
                adopted = asyncio.ensure_future(self._adopt(record))
                self._watching.add(adopted)
                adopted.add_done_callback(self._watching.discard)
            elif record.kind == "async":
                meet = RunningMeet(record.id, record.agent, Briefcase(), record.timeout,
                                   record.principal, record.caller, via=record.via)
                if record.papers:  # its passport, to hand on as before the restart
                    meet.passport = Passport.read(record.papers)
                meet.journaled = True
                meet.runs = record.runs
                self.meets.queue(meet)
            else:
                await self._record(record.id, record.agent, record.principal, record.via,
                                   None, PlaceUnavailable(
                                       f"place {self.address} stopped during the meet, and "
                                       "sync meets are not run again"))
        if records:
            log.info("the journal had %d meets under way: %d async meets to run again, %d "
                     "trips to wait for", len(records), len(self.meets.queued),
                     sum(1 for r in records if r.trip is not None))
        self._start_queued()
        # Not a background task: settle() waits for those, and this one never ends.
        self._watching.add(asyncio.ensure_future(self.journal.prune_while_open()))

    async def _adopt(self, record: Record) -> None:
        """A trip that was out when the place stopped: its end, when it comes home, is
        recorded (ag_home, through the journal); if none came by a minute past its deadline,
        its outcome is recorded as unknown."""
        await asyncio.sleep(max(0.0, (record.deadline or 0.0) - time.time()) + 60.0)
        now = await self.journal.get(record.id, record.principal)
        if now is not None and now.ended is None:
            lost = MeetTimeout("the trip did not come home by its deadline (its home "
                               "restarted while it was out): its outcome is unknown")
            await self._record(record.id, record.agent, record.principal, record.via, None,
                               lost)

    def close(self) -> None:
        """Stop pruning the journal and waiting for adopted trips (the place stops)."""
        for task in self._watching:
            task.cancel()
