"""A place dying with the agent on it: its rear guard notices, and does what the agent
chose in RECOVERY; with nobody left to notice, the trip ends at its deadline.

Each place that hands an agent on decides how soon the next place is lost by its own
settings (--lost-after, --silent-after); the homes here take 2 s where the default is 6.
"""

from __future__ import annotations

import signal
import textwrap
import threading
import time
from collections.abc import Callable

import pytest
import tacoma

from conftest import RunningPlace, place_fixture

#: How soon the places here take a place that refuses their rear guard's connections (its
#: process killed) as lost: --lost-after (6 s by default).
LOST_AFTER = ("--lost-after", "2s")


#: The place that hands the agent on, shared by the tests whose home survives: each kills
#: a next place of its own.
home = place_fixture(*LOST_AFTER)


class OnArrival(threading.Thread):
    """Do `act` as soon as an agent runs at `place` (its `tacoma ps`), not after a fixed
    time: a build or a loaded machine may keep the agent from getting there for seconds,
    and a place killed before it arrives is a place that cannot be reached, not one that
    died with the agent on it. `cancel` stops waiting."""

    def __init__(self, place: RunningPlace, act: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self.place, self.act, self.cancelled = place, act, threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + 90
        while not self.cancelled.is_set() and time.monotonic() < deadline:
            try:
                there = bool(self.place.agents())
            except (tacoma.TacomaError, OSError):  # busy, or its answer lost: ask again
                there = False
            if there:
                self.act()
                return
            self.cancelled.wait(0.1)

    def cancel(self) -> None:
        self.cancelled.set()
        self.join(15)


def test_a_place_dying_with_the_agent_on_it_is_reported_by_the_rear_guard(
        start_place, home: RunningPlace) -> None:
    """The place that handed the agent on notices within seconds that the next place died
    with it (not at the trip's 60 s deadline), and the caller hears where and why."""
    a, b = home, start_place()
    code = f"import time\nif place == {b.address!r}:\n    time.sleep(60)\ngo_next()"
    killer = OnArrival(b, lambda: b.proc.send_signal(signal.SIGKILL))
    killer.start()
    started = time.monotonic()
    try:
        with pytest.raises(tacoma.PlaceUnavailable,
                           match=f"the agent was lost at place {b.address}"):
            tacoma.meet(a.target("ag_python"), {"ITINERARY": [b.address]}, code=code,
                        timeout=60)
    finally:
        killer.cancel()
    assert time.monotonic() - started < 15


def test_a_place_dying_with_the_agent_on_it_ends_the_trip_at_the_deadline(
        start_place) -> None:
    """A place stopped (SIGSTOP) with the agent on it, and the one that handed it on gone
    too: nobody is left to notice, and the trip ends at the home's bound on meets."""
    # c is stopped with the agent asleep on it: --grace 1 lets it end without waiting.
    a, b, c = start_place("--meet-seconds", "4"), start_place(), start_place("--grace", "1s")
    code = (f"import time\nif place == {c.address!r}:\n    time.sleep(60)\n"
            "go_next()")
    def cut() -> None:
        c.proc.send_signal(signal.SIGSTOP)
        b.proc.send_signal(signal.SIGKILL)

    killer = OnArrival(c, cut)
    killer.start()
    started = time.monotonic()
    try:
        with pytest.raises(tacoma.MeetTimeout, match="did not end by its deadline"):
            tacoma.meet(a.target("ag_python"), {"ITINERARY": [b.address, c.address]},
                        code=code)
    finally:
        killer.cancel()
        c.proc.send_signal(signal.SIGCONT)
    assert time.monotonic() - started < 30  # never hangs past the meet's own bound



#: A roamer in each language that chooses RECOVERY skip, and sleeps at the places in SLOW.
SKIPPERS = {
    "ag_python": textwrap.dedent("""
        bc["RECOVERY"] = ["skip"]
        bc.append("SEEN", place)
        if place in bc.text("SLOW"):
            import time
            time.sleep(30)
        go_next()
    """),
    "ag_tcl": textwrap.dedent("""
        bc_replace RECOVERY [list skip]
        bc_append_text SEEN [place]
        if {[place] in [bc_text SLOW]} { after 30000 }
        go_next
    """),
    "ag_scheme": textwrap.dedent("""
        (bc-replace "RECOVERY" (list "skip"))
        (bc-append "SEEN" (place))
        (when (member (place) (bc-text "SLOW")) (sleep 30))
        (go-next)
    """),
    "ag_c": textwrap.dedent("""
        #include <tacoma.h>
        #include <string.h>
        #include <unistd.h>
        int main(void) {
            tc_list slow;
            tc_append_text(TC_SELF, "RECOVERY", "skip");
            tc_append_text(TC_SELF, "SEEN", tc_place());
            if (tc_text(TC_SELF, "SLOW", &slow) == 0) {
                for (size_t i = 0; i < slow.count; i++)
                    if (strcmp((const char *)slow.items[i].data, tc_place()) == 0) sleep(30);
                tc_list_free(&slow);
            }
            if (tc_go_next() < 0) tc_fail("go_next: %s", tc_error());
            return 0;
        }
    """),
}
SKIPPERS["ag_wasm"] = SKIPPERS["ag_c"]  # the C source, built for WebAssembly


@pytest.mark.parametrize("agent", list(SKIPPERS))
def test_every_language_chooses_what_happens_when_a_place_dies_with_it(
        start_place, home: RunningPlace, shared_place: RunningPlace, agent: str) -> None:
    """RECOVERY skip, set by the agent itself: b is killed with the agent on it; a's rear
    guard hands the agent, as a handed it over, on to c, and notes b in SKIPPED."""
    a, b, c = home, start_place(), shared_place
    killer = OnArrival(b, lambda: b.proc.send_signal(signal.SIGKILL))
    killer.start()
    try:
        result = tacoma.meet(a.target(agent), {"ITINERARY": [b.address, c.address],
                                               "SLOW": [b.address]},
                             code=SKIPPERS[agent], timeout=90)
    finally:
        killer.cancel()
    assert result.text("SKIPPED") == [b.address]
    assert result.text("SEEN") == [a.address, c.address]
