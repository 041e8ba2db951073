"""A sync meet's trip, shown as it goes: hops so far and where the agent is.

The trip's home keeps where each of its trips is (place.meets._trips: the other places tell it,
at most once a second of a trip); a caller that shows progress asks the home for it by the
meet's id (ag_status: HOPS and AT) every PROGRESS_EVERY seconds, starting PROGRESS_AFTER
seconds into the meet, so that the usual meet, which ends before then, asks nothing and
shows nothing. The bar is made when the first hop is heard of: a meet that does not move
shows none at all.
"""

from __future__ import annotations

import asyncio
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


async def watch_trip(meet_id: str, address: str, hop: Callable[[int, str], None]) -> None:
    """Call `hop(hops, place)` with where meet `meet_id`'s trip is, as its home at `address`
    says, until the meet ends (cancel this when it does)."""
    await asyncio.sleep(PROGRESS_AFTER)
    seen = -1
    while True:
        try:
            status = await astatus(f"{meet_id}@{address}")
        except TacomaError:  # the meet's own answer says what went wrong, if anything
            status = None
        if status is not None:
            if status.state not in ("queued", "running"):
                return
            if status.hops is not None and status.hops != seen:
                seen = status.hops
                hop(status.hops, status.at)
        await asyncio.sleep(PROGRESS_EVERY)


class TripBar:
    """The progress of one trip: hops against the ITINERARY's length (if it has one; an
    agent that goes further raises the total), made at the first hop heard of."""

    def __init__(self, briefcase: Briefcase, show: bool | None) -> None:
        planned = len(briefcase.folder(ITINERARY)) if ITINERARY in briefcase else 0
        self.total: int | None = planned or None
        self.show = show
        self.bar: Progress | None = None

    def hop(self, hops: int, at: str) -> None:
        if self.bar is None:
            self.bar = Progress(self.total, "trip", show=self.show)
            self.bar.start()
        if self.total is not None and hops > self.total:
            self.total = hops
        self.bar.update(completed=hops, total=self.total, description=f"trip: hop {hops}, "
                        f"at {at}")

    def close(self, ended: bool) -> None:
        """The meet is over; `ended`: the trip came home with its result (its last hops
        may not have been heard of: reports come at most once a second)."""
        if self.bar is not None:
            if ended and self.total is not None:
                self.bar.update(completed=self.total)
            self.bar.stop()
