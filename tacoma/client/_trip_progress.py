"""A sync meet's trip, shown as it goes: hops so far and where the agent is.

The trip's home keeps where each of its trips is (place.meets._trips: the other places tell it,
at most once a second of a trip); a caller that shows progress asks the home for it by the
meet's id (ag_status: HOPS and AT) every PROGRESS_EVERY seconds, starting PROGRESS_AFTER
seconds into the meet, so that the usual meet, which ends before then, asks nothing and
shows nothing. The bar is made when the place first answers, and counts its time from the
meet's start. A meet that does not move shows that it runs, and where.

The bar's last step is the way home: a trip at the last place of its ITINERARY still works
there and has its briefcase to bring back, so the bar is full only when the result is in.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..display import Progress
from ..wire._briefcase import ITINERARY, Briefcase
from ..wire._errors import TacomaError
from ._status import astatus

__all__ = ["PROGRESS_AFTER", "PROGRESS_EVERY", "TripBar", "shows_trip", "watch_trip"]

#: Seconds into a sync meet before its caller first asks where its trip is.
PROGRESS_AFTER = 1.0
#: Seconds between the caller's questions after that.
PROGRESS_EVERY = 0.5


def shows_trip(progress: bool | None, mode: str, briefcase: Briefcase) -> bool:
    """Whether a meet watches its trip: sync meets only; None (the default) for a briefcase
    with an ITINERARY (a trip is planned), True for any, False never."""
    if mode != "sync" or progress is False:
        return False
    return progress is True or ITINERARY in briefcase


async def watch_trip(meet_id: str, address: str,
                     hop: Callable[[int | None, str], None]) -> None:
    """Call `hop(hops, place)` with where meet `meet_id`'s trip is, as its home at `address`
    says (hops None: the meet runs at `address` and has not moved), until the meet ends
    (cancel this when it does)."""
    await asyncio.sleep(PROGRESS_AFTER)
    seen: tuple[int | None, str] | None = None
    while True:
        try:
            status = await astatus(f"{meet_id}@{address}")
        except TacomaError:  # the meet's own answer says what went wrong, if anything
            status = None
        if status is not None:
            if status.state not in ("queued", "running"):
                return
            now = (status.hops, status.at or address)
            if now != seen:
                seen = now
                hop(*now)
        await asyncio.sleep(PROGRESS_EVERY)


class TripBar:
    """The progress of one sync meet: made when its place first answers, it counts hops
    against the ITINERARY's length and the way home (an agent that goes further raises the
    total); a meet that does not move shows where it runs."""

    def __init__(self, briefcase: Briefcase, show: bool | None) -> None:
        self.planned = len(briefcase.folder(ITINERARY)) if ITINERARY in briefcase else 0
        self.total: int | None = self.planned + 1 if self.planned else None
        self.show = show
        self.bar: Progress | None = None
        self.hops: int | None = None
        self.started = time.monotonic()  # the meet's start: the time shown counts from it

    def hop(self, hops: int | None, at: str) -> None:
        if self.bar is None:
            self.bar = Progress(self.total, "meet", show=self.show, started=self.started,
                                count=False)
            self.bar.start()
        if hops is None:
            self.bar.update(description=f"meet: running at {at}")
            return
        self.hops = hops
        if self.total is None or hops >= self.total:
            self.total = hops + 1  # further than planned: the way home is still to come
        self.bar.update(completed=hops, total=self.total,
                        description=f"trip: hop {hops}, at {at}")

    def close(self, ended: bool) -> None:
        """The meet is over; `ended`: it came back with its result (a trip's last hops may
        not have been heard of: reports come at most once a second)."""
        if self.bar is None:
            return
        moved = self.hops is not None or self.planned
        if ended:
            hops = max(self.hops or 0, self.planned)
            self.bar.title = (f"trip: home after {hops} hop{'s' * (hops != 1)}" if moved
                              else "meet: ended")
            total = self.total or 1
            self.bar.update(completed=total, total=total)
        else:
            self.bar.title = "trip: not completed" if moved else "meet: not completed"
        self.bar.stop()
