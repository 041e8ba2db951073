"""Trips: agents that move from place to place and come home, and end in a known state.

Weak mobility, as in TACOMA: an agent moves by carrying its CODE and folders to the next
place, where its program starts again from the top with that briefcase. `go(place)` asks the
agent's place to hand it on; the place meets the same language's agent at the next place in
the `go` mode, and once that place has *taken* the agent (answered Accepted) the agent's
process ends and its worker is released.

The place where a trip begins (the one that ran the first `go` of an agent met there) is
its *home*: it writes the trip to its journal (so that a home that restarts still takes
the trip's end) and waits for its end. Every hop carries, in a HOME folder that each place
takes out before the agent sees it, the trip's home, id, **deadline** and hop number, and
the place that handed it on. The deadline is set once, at the first `go`, from the meet's
own, and never restarted: every place runs the agent only until then (clocks of places
must agree to within the precision callers need; the sender's remaining time bounds it too).

**Rear guards** (TACOMA's NAP): a place that handed the agent on keeps a copy of the
briefcase it handed over, and a rear guard that asks the next place every HEARTBEAT
seconds where the agent is (`ag_trip`, OP where). The next place releases it as soon as it
has handed the agent on in turn (OP released), or its end was sent home. When the next
place refuses its questions for LOST_AFTER seconds (killed), leaves them unanswered for
SILENT_AFTER seconds (cut off, or a path losing most packets) or says it no longer
has the agent (restarted), the guard does what the agent chose in its RECOVERY folder:

    fail   (the default) the home hears that the agent was lost at that place, and why;
    retry  hand the same briefcase to that place again, until its deadline;
    skip   hand it to the next place of its ITINERARY instead, noting the skipped place in
           SKIPPED; with no place left, the trip ends home with that briefcase.

So the caller of a trip learns within seconds that a place died with its agent, rather
than at its deadline. What is not covered: a place that dies in the instant between handing
the agent on and releasing its guard (the guard may then relaunch an agent that lives on),
and two adjacent places dying together (the caller hears MeetTimeout at the deadline, and
can ask for the outcome by id later).

**Where a trip is**: the home keeps each of its trips' whereabouts (hops so far, and the
place it is at), for `tacoma status` and a caller's progress bar. The home knows the hand-
overs it makes itself; the other places tell it of theirs (`ag_trip`, OP at), at most once
every REPORT_EVERY seconds of a trip (the time of the last report travels in HOME), so
that a trip of a thousand fast hops costs its home about one message a second, and a trip
that ends within a second none at all.

**Stopping a trip**: when the caller cancels, the home sends OP stop down the trip's path:
each place stops the agent if it is there, or passes the stop on to where it handed it.
A trip's end that arrives after its caller stopped waiting (deadline, lost connection) is
recorded in the home's journal under the meet's id, never dropped.

If the next place cannot take the agent (down, refusing, unknown address), `go` fails in the
agent with the place's error, and the agent is still where it was: it may skip that place,
try again, or end, which sends its briefcase home. A connection that may have been lost on
the path (timed out, or reset or silent before the Hellos) is tried again first, up to
CONNECT_ATTEMPTS times (see ClientCache.get).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from ...wire._briefcase import HOME, Briefcase
from ...wire._errors import MeetError, MeetTimeout, error_from_wire

__all__ = ["REPORT_EVERY", "Trip", "Trips", "ending"]

#: Seconds of a trip between reports of where it is to its home (see the module's header).
REPORT_EVERY = 1.0
#: The longest a place remembers a hop it took (seconds past the trip's deadline, at most).
TAKEN_AT_MOST = 3600.0
#: A trip's id, as its home makes it (see Trips.start).
TRIP_ID = re.compile(rb"[0-9a-f]{32}")
#: What an agent may choose in RECOVERY (the first is the default).
RECOVERIES = ("fail", "retry", "skip")


@dataclass(frozen=True, slots=True)
class Trip:
    """A trip, as one hop of it carries it."""

    home: str
    id: str
    deadline: float = 0.0  # time.time() by which the trip must end (0: none carried)
    hop: int = 0  # hand-overs so far
    guard: str = ""  # the place that handed the agent here, and guards it
    reported: float = 0.0  # time.time() when its home last heard where it is

    def onward(self, guard: str, reported: float | None = None) -> Trip:
        """The trip as the next hop carries it, handed on by `guard` (who told the home
        where it went at `reported`, if it did)."""
        return dataclasses.replace(self, hop=self.hop + 1, guard=guard,
                                   reported=self.reported if reported is None else reported)

    def report_due(self, now: float) -> bool:
        """Whether the place handing this trip on at `now` tells its home where it went."""
        return now - self.reported >= REPORT_EVERY

    @property
    def key(self) -> tuple[str, int]:
        return self.id, self.hop

    def time_left(self) -> float | None:
        return self.deadline - time.time() if self.deadline else None

    def stamp(self, briefcase: Briefcase) -> Briefcase:
        """`briefcase` as it travels on a hop: with the trip in its HOME folder."""
        travelling = Briefcase(briefcase)
        travelling[HOME] = [self.home, self.id, repr(self.deadline), str(self.hop), self.guard,
                            repr(self.reported)]
        return travelling

    @classmethod
    def take(cls, briefcase: Briefcase) -> Trip:
        """The trip a hop's briefcase carries, removed from it; MeetError if malformed."""
        home = briefcase.folder(HOME)
        briefcase.remove(HOME)
        if len(home) not in (2, 5, 6):
            raise MeetError("a moving agent's briefcase must carry its trip in HOME: "
                            "[home address, trip id, deadline, hop, guard, reported]")
        if any(len(part) > 300 for part in home):
            raise MeetError("the HOME folder of a moving agent is malformed (too long)")
        try:
            texts = [part.decode("utf-8") for part in home]
            if len(texts) == 2:
                return cls(texts[0], texts[1])
            reported = float(texts[5]) if len(texts) == 6 else 0.0
            return cls(texts[0], texts[1], float(texts[2]), int(texts[3]), texts[4], reported)
        except (UnicodeDecodeError, ValueError):
            raise MeetError("the HOME folder of a moving agent is malformed") from None


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
    """The trips of one place: those that began here (waiting for their ends), the hops
    running here, those it handed on (until their deadlines), and its rear guards."""

    def __init__(self, address: str) -> None:
        self.address = address
        #: The trips that began here, by id: the end their meet waits for (and the path
        #: it took), and whose trip it is: its principal and its passport's digest ("": it
        #: has none). An end is taken only under the trip's own passport.
        self.waiting: dict[str, asyncio.Future[tuple[Briefcase, list[Any] | None]]] = {}
        self.owners: dict[str, tuple[str, str]] = {}
        #: Hops running here, by (trip id, hop).
        self.here: dict[tuple[str, int], object] = {}
        #: Hops this place handed on or ended: where they went ("" if ended here), kept
        #: until the trip's deadline (monotonic), for rear guards and stops.
        self.passed: dict[tuple[str, int], tuple[str, float]] = {}
        #: Rear guards kept here, by the hop they watch (trip id, hop at the next place).
        self.guards: dict[tuple[str, int], asyncio.Task[None]] = {}
        #: Trips whose caller gave up, whose stop this place handled: until when (monotonic).
        self.stopped: dict[str, float] = {}
        #: Where the trips that began here are: (hops so far, place), as last heard.
        self.whereabouts: dict[str, tuple[int, str]] = {}
        #: Hops this place took, by (trip id, hop): (meet id, who handed it over (principal,
        #: and the place it came through), until (monotonic)), so that a hand-over sent
        #: again after its answer was lost is taken once.
        self.taken: dict[tuple[str, int], tuple[str, tuple[str, str], float]] = {}

    def start(self, deadline: float, principal: str, passport: str = "") -> Trip:
        """A trip of `principal`'s agent (whose passport's digest is `passport`) begins
        here."""
        trip = Trip(self.address, secrets.token_hex(16), deadline, reported=time.time())
        self.waiting[trip.id] = asyncio.get_running_loop().create_future()
        self.owners[trip.id] = (principal, passport)
        self.whereabouts[trip.id] = (0, self.address)
        return trip

    def moved(self, trip_id: str, hop: int, place: str) -> None:
        """Hop `hop` of trip `trip_id`, which began here, went to `place` (reports may
        arrive out of order: the latest hop wins; trips of others are ignored)."""
        known = self.whereabouts.get(trip_id)
        if known is not None and hop > known[0]:
            self.whereabouts[trip_id] = (hop, place)

    async def wait(self, trip: Trip, deadline: float) -> tuple[Briefcase, list[Any] | None]:
        """The final briefcase of a trip that started here, by the monotonic `deadline`,
        and the path it took (see trust._passport.PathStep; None where nobody signs lines)."""
        future = self.waiting[trip.id]
        try:
            async with asyncio.timeout_at(asyncio.get_running_loop().time()
                                          + max(0.0, deadline - time.monotonic())):
                return await future
        except TimeoutError:
            raise MeetTimeout("the agent's trip did not end by its deadline: the agent is "
                              "stopped wherever it is, and its end, if one comes, is "
                              "recorded under the meet's id (tacoma status)") from None
        finally:
            self.forget(trip.id)

    def forget(self, trip_id: str) -> None:
        """Trip `trip_id`, which began here, is over (or never began): nobody waits for it."""
        self.waiting.pop(trip_id, None)
        self.owners.pop(trip_id, None)
        self.whereabouts.pop(trip_id, None)

    def end(self, briefcase: Briefcase, principal: str, passport: str = "",
            path: list[Any] | None = None) -> tuple[str, MeetError | None] | None:
        """Deliver a trip's end (a meet of ag_home) for `principal`, under the passport whose
        digest is `passport`, having taken `path`: None if the trip's meet here took it;
        else nobody here waits for it (its caller's deadline passed, the place restarted,
        or it is not that passport's trip), and the trip id and failure (None: `briefcase`
        is its result) are returned for the journal, which checks the passport again. An
        end for another principal's trip is never taken: the two look alike to its sender,
        so that ids cannot be probed either. A trip without a passport ends from any place
        of the cluster, as itself (its agent met as the places that handed it on)."""
        home = briefcase.folder(HOME)
        briefcase.remove(HOME)
        if not home or len(home) not in (1, 4):
            raise MeetError("ag_home takes a trip's end: HOME must hold the trip id")
        if not TRIP_ID.fullmatch(home[0]):
            raise MeetError("ag_home takes a trip's end: its HOME folder is malformed")
        trip_id = home[0].decode("ascii")
        failure = None
        if len(home) == 4:
            kind, message, detail = (part.decode("utf-8", "replace") for part in home[1:])
            failure = error_from_wire(kind, message, detail)
        future = self.waiting.get(trip_id)
        owner = self.owners.get(trip_id)
        if future is None or future.done() or owner is None or owner[1] != passport \
                or (passport and owner[0] != principal):
            return trip_id, failure
        if failure is not None:
            future.set_exception(failure)
        else:
            future.set_result((briefcase, path))
        return None

    # -- hops here, and hops handed on
    def take(self, trip: Trip, meet_id: str, sender: tuple[str, str]) -> None:
        """Note that this place took hop `trip` as meet `meet_id`, from `sender` (the
        principal, and the place it came through). The first to take a hop keeps it."""
        now = time.monotonic()
        if len(self.taken) % 256 == 255:
            self.taken = {key: v for key, v in self.taken.items() if v[2] >= now}
        keep = min(max(0.0, trip.time_left() or 0.0), TAKEN_AT_MOST) + 60.0
        known = self.taken.get(trip.key)
        if known is None or known[2] < now:
            self.taken[trip.key] = (meet_id, sender, now + keep)

    def taken_as(self, trip: Trip, sender: tuple[str, str]) -> str | None:
        """The meet id this place took hop `trip` as, if `sender` handed it over (and sends
        it again because the connection broke before its answer); None if it did not. A
        hop another sender names is not answered from here: it is its own meet."""
        taken = self.taken.get(trip.key)
        if taken is None or taken[2] < time.monotonic() or taken[1] != sender:
            return None
        return taken[0]

    def arrived(self, trip: Trip, meet: object) -> None:
        self.here[trip.key] = meet

    def left(self, trip: Trip, went: str) -> None:
        """The hop `trip` of an agent here is over: it went to `went` ("" if it ended)."""
        self.here.pop(trip.key, None)
        left = trip.time_left()
        if trip.deadline and left is not None:
            self._prune()
            self.passed[trip.key] = (went, time.monotonic() + max(0.0, left) + 60.0)

    def where(self, key: tuple[str, int]) -> str:
        """What this place knows of hop `key`: here, moved, ended or unknown."""
        if key in self.here:
            return "here"
        passed = self.passed.get(key)
        if passed is not None:
            return "moved" if passed[0] else "ended"
        return "unknown"

    def next_places(self, trip_id: str) -> list[str]:
        """Where this place handed trip `trip_id` on to (for a stop to follow it), each once."""
        now = time.monotonic()
        return list(dict.fromkeys(went for (tid, _), (went, until) in self.passed.items()
                                  if tid == trip_id and went and until >= now))

    def mark_stopped(self, trip_id: str) -> bool:
        """Note that trip `trip_id` is being stopped; False if this place already did."""
        now = time.monotonic()
        if self.stopped.get(trip_id, 0.0) >= now:
            return False
        if len(self.stopped) > 1024:
            self.stopped = {t: until for t, until in self.stopped.items() if until >= now}
        self.stopped[trip_id] = now + 3600.0
        return True

    def is_stopped(self, trip_id: str) -> bool:
        return self.stopped.get(trip_id, 0.0) >= time.monotonic()

    def running(self, trip_id: str) -> list[object]:
        return [meet for (tid, _), meet in self.here.items() if tid == trip_id]

    def _prune(self) -> None:
        if len(self.passed) % 256 == 0:
            now = time.monotonic()
            for key in [k for k, (_, until) in self.passed.items() if until < now]:
                del self.passed[key]

    def release(self, key: tuple[str, int]) -> bool:
        """Stop the rear guard watching hop `key` (handed on or ended there)."""
        guard = self.guards.pop(key, None)
        if guard is None:
            return False
        guard.cancel()
        return True

    def close(self) -> None:
        for guard in self.guards.values():
            guard.cancel()
        self.guards.clear()
