"""Trips: agents that move from place to place and come home.

Weak mobility, as in TACOMA: an agent moves by carrying its CODE and folders to the next
place, where its program starts again from the top with that briefcase. `go(place)` asks the
agent's place to hand it on; the place meets the same language's agent at the next place in
the `go` mode, and once that place has *taken* the agent (answered Accepted) the agent's
process ends and its worker is released. A hop therefore holds nothing at the place it
leaves: a trip of 4,000 hops holds no worker and no connection open for the trip.

The place where a trip begins (the one that ran the first `go` of an agent met there) is
its *home*: it registers the trip here and waits for its end, within the deadline of the
meet that started it. Every hop carries the trip's home address and id in a HOME folder,
which each place takes out of the briefcase before the agent sees it. Where the agent ends
without going on, its place meets the home's built-in `ag_home` with the final briefcase
(or the failure: kind, message and detail), and the sync meet that started the trip returns
it. So the caller of a sync meet gets the briefcase of the whole trip, and never hangs:
a place that dies with the agent on it ends the trip at the meet's deadline (MeetTimeout).

If the next place cannot take the agent (down, refusing, unknown address), `go` fails in the
agent with the place's error, and the agent is still where it was: it may skip that place,
try again, or end, which sends its briefcase home.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass

from ..wire._briefcase import HOME, Briefcase
from ..wire._errors import MeetError, MeetTimeout, error_from_wire

__all__ = ["Trip", "Trips", "ending"]

# HOME (_briefcase): the folder a hop carries its trip in, [home address, trip id]; the place
# takes it out. ITINERARY: the places an agent still means to visit, in order (`go_next`
# takes the first one off and goes there).


@dataclass(frozen=True, slots=True)
class Trip:
    home: str
    id: str

    def stamp(self, briefcase: Briefcase) -> Briefcase:
        """`briefcase` as it travels on a hop: with the trip in its HOME folder."""
        travelling = Briefcase(briefcase)
        travelling[HOME] = [self.home, self.id]
        return travelling

    @classmethod
    def take(cls, briefcase: Briefcase) -> Trip:
        """The trip a hop's briefcase carries, removed from it; MeetError if malformed."""
        home = briefcase.folder(HOME)
        briefcase.remove(HOME)
        if len(home) != 2:
            raise MeetError("a moving agent's briefcase must carry its trip in HOME: "
                            "[home address, trip id]")
        try:
            return cls(home[0].decode("utf-8"), home[1].decode("ascii"))
        except UnicodeDecodeError:
            raise MeetError("the HOME folder of a moving agent is not text") from None


def ending(trip: Trip, briefcase: Briefcase | None, failure: MeetError | None,
           where: str) -> Briefcase:
    """The briefcase that tells `trip`'s home how it ended: at `where`, with `briefcase` or
    `failure` (HOME is [trip id] or [trip id, kind, message, detail])."""
    if failure is not None:
        end = Briefcase()
        end[HOME] = [trip.id, failure.kind, f"at {where}: {failure.message}", failure.detail]
        return end
    end = Briefcase(briefcase or Briefcase())
    end[HOME] = [trip.id]
    return end


class Trips:
    """The trips that started at this place, waiting for their ends."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.waiting: dict[str, asyncio.Future[Briefcase]] = {}

    def start(self) -> Trip:
        trip = Trip(self.address, secrets.token_hex(16))
        self.waiting[trip.id] = asyncio.get_running_loop().create_future()
        return trip

    async def wait(self, trip: Trip, deadline: float) -> Briefcase:
        """The final briefcase of a trip that started here, by the monotonic `deadline`."""
        future = self.waiting[trip.id]
        try:
            async with asyncio.timeout_at(asyncio.get_running_loop().time()
                                          + max(0.0, deadline - time.monotonic())):
                return await future
        except TimeoutError:
            raise MeetTimeout("the agent's trip did not end in time: it is still on the way, "
                              "or a place it was at went down") from None
        finally:
            self.waiting.pop(trip.id, None)

    def end(self, briefcase: Briefcase) -> bool:
        """Deliver a trip's end (a meet of ag_home); False if no trip here waits for it."""
        home = briefcase.folder(HOME)
        briefcase.remove(HOME)
        if not home:
            raise MeetError("ag_home takes a trip's end: HOME must hold the trip id")
        future = self.waiting.get(home[0].decode("ascii", "replace"))
        if future is None or future.done() or len(home) not in (1, 4):
            return False
        if len(home) == 4:
            kind, message, detail = (part.decode("utf-8", "replace") for part in home[1:])
            future.set_exception(error_from_wire(kind, message, detail))
        else:
            future.set_result(briefcase)
        return True
