"""Moving agents: go, itineraries, trips that come home, with real places on loopback.

Every trip here is started by a sync meet at one place and returns there; the places are
separate processes, and the hops cross real TCP connections between them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import selectors
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import tacoma
from tacoma import Briefcase
from tacoma.place.meets._trips import Trip, Trips

from conftest import (
    RunningPlace,
    SharedPlaces,
    forward,
    release,
    settled,
    wait_until,
    waits_for,
)

#: Each language's roamer: note the place, then go on along ITINERARY; at the end, say so.
ROAMERS = {
    "ag_python": 'bc.append("SEEN", place)\nif not go_next():\n    bc.append("DONE", "python")',
    "ag_tcl": 'bc_append_text SEEN [place]\nif {![go_next]} { bc_append_text DONE tcl }',
    "ag_scheme": '(bc-append "SEEN" (place))\n(unless (go-next) (bc-append "DONE" "scheme"))',
    "ag_c": """#include <tacoma.h>
int main(void) {
    tc_append_text(TC_SELF, "SEEN", tc_place());
    if (tc_go_next() != 0) tc_fail("go_next: %s", tc_error());
    tc_append_text(TC_SELF, "DONE", "c");
    return 0;
}
""",
}

#: A Python roamer that skips places it cannot reach, noting the error's type.
SKIPPER = """
bc.append("SEEN", place)
while True:
    try:
        if not go_next():
            break
    except MeetError as exc:
        bc.append("SKIPPED", type(exc).__name__)
"""


@pytest.fixture
def three(shared_places: SharedPlaces) -> Iterator[list[RunningPlace]]:
    """Three places with default settings, shared with the other tests of this worker (see
    conftest.SharedPlaces): each trip here names its own cabinets and meet ids, and a test
    that stops a place stops one of its own (`two_and_a_stopped_one`)."""
    places = [shared_places[i] for i in range(3)]
    yield places
    for place in places:
        settled(place)


@pytest.fixture
def two_and_a_stopped_one(shared_places: SharedPlaces, start_place) -> Iterator[
        list[RunningPlace]]:
    """Two shared places (as `three`) and a third of the test's own, stopped: a place that
    is down."""
    down = start_place()
    assert down.stop() == 0
    places = [shared_places[0], shared_places[1], down]
    yield places
    for place in places[:2]:
        settled(place)


@pytest.mark.parametrize("language", sorted(ROAMERS))
def test_four_hop_itinerary_comes_home(three: list[RunningPlace], language: str) -> None:
    a, b, c = (p.address for p in three)
    result = tacoma.meet(f"{language}@{a}", {"ITINERARY": [b, c, a, b], "KEEP": [b"\0\xff"]},
                         code=ROAMERS[language], timeout=60)
    assert result.text("SEEN") == [a, b, c, a, b]
    assert result.text("DONE") == [language.removeprefix("ag_")]
    assert result["KEEP"] == [b"\0\xff"]  # folders travel as bytes, untouched
    assert result["ITINERARY"] == []
    assert "HOME" not in result  # the trip's bookkeeping never reaches the agent or caller


def test_mixed_language_itinerary(three: list[RunningPlace]) -> None:
    """A Python agent on a four-hop trip meets an agent in another language at each place,
    with programs it carries in its briefcase."""
    a, b, c = (p.address for p in three)
    guests = Briefcase(
        GUESTS=["ag_tcl", "ag_scheme", "ag_c", "ag_python"],
        ag_tcl=['bc_append_text SIGNED "tcl at [place]"'],
        ag_scheme=['(bc-append "SIGNED" (string-append "scheme at " (place)))'],
        ag_c=['#include <tacoma.h>\nint main(void) { tc_append_textf(TC_SELF, "SIGNED", '
              '"c at %s", tc_place()); return 0; }'],
        ag_python=['bc.append("SIGNED", "python at " + place)'],
        ITINERARY=[b, c, a, b],
    )
    roamer = """
if bc["ITINERARY"] != bc.get("START", []):
    guest = bc["GUESTS"].pop(0).decode()
    signed = meet(guest, Briefcase(CODE=bc[guest]))
    bc.append("SIGNED", signed["SIGNED"][0])
go_next()
"""
    guests["START"] = guests["ITINERARY"]
    # The guests run for its principal at the places it was handed to: its passport names
    # their programs (a program it does not name is refused there).
    programs = [guests[name][0] for name in guests.text("GUESTS")]
    result = tacoma.meet(f"ag_python@{a}", guests, code=roamer, timeout=90,
                         programs=programs)
    assert result.text("SIGNED") == [f"tcl at {b}", f"scheme at {c}", f"c at {a}",
                                     f"python at {b}"]


def test_a_dead_place_on_the_itinerary_is_an_error_the_agent_acts_on(
        two_and_a_stopped_one: list[RunningPlace]) -> None:
    a, b, c = two_and_a_stopped_one  # c is down: go fails at once, the agent skips it
    result = tacoma.meet(a.target("ag_python"),
                         {"ITINERARY": [b.address, c.address, "127.0.0.1:1", b.address]},
                         code=SKIPPER, timeout=60)
    assert result.text("SEEN") == [a.address, b.address, b.address]
    assert result.text("SKIPPED") == ["PlaceUnavailable", "PlaceUnavailable"]


def reset(*ends: socket.socket) -> None:
    """Close each end with linger 0: the peer gets a reset, not a close."""
    for end in ends:
        end.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        end.close()


class Door(threading.Thread):
    """A front door to a place, on a loopback port of its own: it counts the connections
    it accepts and hands each, on a thread of its own, to `serve` (which forwards it)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(daemon=True)
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.accepted = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.stopped = threading.Event()

    def run(self) -> None:
        self.server.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                down, _ = self.server.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            threading.Thread(target=self.serve, args=(down, self.accepted),
                             daemon=True).start()

    def serve(self, down: socket.socket, number: int) -> None:
        forward(down, socket.create_connection(self.upstream))

    def close(self) -> None:
        self.stopped.set()
        self.join(5)
        self.server.close()


class ResettingDoor(Door):
    """A door on a path that loses packets: it resets the first `resets` connections before
    any byte passes (as a place does that waited too long for a Hello), and forwards the
    later ones."""

    def __init__(self, upstream: str, resets: int) -> None:
        super().__init__(upstream)
        self.resets = resets

    def serve(self, down: socket.socket, number: int) -> None:
        if number <= self.resets:
            reset(down)
        else:
            super().serve(down, number)


def test_a_connection_reset_before_the_hellos_is_tried_again(
        three: list[RunningPlace]) -> None:
    """On a path that loses many packets a new connection can break before its Hellos: the
    place handing the agent over connects again (a place that refuses is not retried: see
    the test above)."""
    a, b, _ = three
    door = ResettingDoor(b.address, resets=2)
    door.start()
    try:
        result = tacoma.meet(a.target("ag_python"), {"ITINERARY": [door.address]},
                             code=ROAMERS["ag_python"], timeout=60)
    finally:
        door.close()
    assert result.text("SEEN") == [a.address, b.address]
    assert door.accepted == 3


def test_a_connection_reset_every_time_fails_after_three_tries(
        three: list[RunningPlace]) -> None:
    a, _, c = three
    door = ResettingDoor(c.address, resets=100)
    door.start()
    try:
        result = tacoma.meet(a.target("ag_python"), {"ITINERARY": [door.address]},
                             code=SKIPPER, timeout=60)
    finally:
        door.close()
    assert result.text("SKIPPED") == ["PlaceUnavailable"]
    assert door.accepted == 3


class CuttingDoor(Door):
    """A door that breaks the first connection after the place has taken a meet of over
    `past` bytes: the place's answer is dropped and both ends are reset (as when a path
    losing packets breaks a connection mid-meet). Later connections pass."""

    def __init__(self, upstream: str, past: int, silent: bool = False) -> None:
        super().__init__(upstream)
        self.past = past
        #: Instead of resetting, pass nothing more either way (a half-open connection).
        self.silent = silent
        self.cut = threading.Event()

    def serve(self, down: socket.socket, number: int) -> None:
        if number > 1:
            super().serve(down, number)
            return
        up = socket.create_connection(self.upstream)
        sent = 0
        selector = selectors.DefaultSelector()
        selector.register(down, selectors.EVENT_READ)
        selector.register(up, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select(30):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                data = sock.recv(65536)
                if sock is down:
                    sent += len(data)
                elif sent > self.past:  # the place's answer to the big meet: dropped
                    self.cut.set()
                    if self.silent:
                        self._swallow(selector, down, up)
                    else:
                        reset(down, up)
                    return
                if not data:
                    return
                (up if sock is down else down).sendall(data)

    def _swallow(self, selector: selectors.BaseSelector, *ends: socket.socket) -> None:
        """Read and drop whatever comes, until an end closes or the door does."""
        with contextlib.ExitStack() as stack:
            for end in ends:
                stack.enter_context(end)
            while not self.stopped.is_set():
                for key, _ in selector.select(0.2):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        if not sock.recv(65536):
                            return
                    except OSError:
                        return


def _hand_over_through_a_cutting_door(a: RunningPlace, b: RunningPlace, silent: bool,
                                      timeout: float) -> None:
    """Send a roamer from place a to place b through a CuttingDoor: the trip must
    complete, through a second connection, and the agent run at b once."""
    cabinet = f"visits-{uuid.uuid4().hex[:8]}"  # b may be shared: this trip's own
    door = CuttingDoor(b.address, past=200_000, silent=silent)
    door.start()
    try:
        result = tacoma.meet(a.target("ag_python"),
                             {"ITINERARY": [door.address], "BIG": [b"b" * 300_000]},
                             code=f'cabinet_append("{cabinet}", "V", b"x")\n'
                                  + ROAMERS["ag_python"],
                             timeout=timeout)
    finally:
        door.close()
    assert door.cut.is_set() and door.accepted >= 2
    assert result.text("SEEN") == [a.address, b.address]
    visits = tacoma.meet(b.target("ag_cabinet"), {"OP": ["read"], "CABINET": [cabinet],
                                                   "FOLDER": ["V"]}, timeout=30)
    assert visits["V"] == [b"x"]


def test_a_hand_over_left_unanswered_goes_again_on_a_new_connection(
        start_place, three: list[RunningPlace]) -> None:
    """A connection that goes silent after the next place took the agent (half open) is
    given up after --hand-over-wait (30 s by default; 5 s here); the hand-over goes again,
    and is taken once. (The setting is the handing place's: the next one may be shared.)"""
    wait = 5.0
    a = start_place("--hand-over-wait", f"{wait:g}s")
    _hand_over_through_a_cutting_door(a, three[1], silent=True, timeout=wait + 40)


def test_a_hand_over_whose_connection_breaks_before_the_answer_runs_the_agent_once(
        three: list[RunningPlace]) -> None:
    """The place handing the agent over cannot know whether the next took it: it sends the
    hand-over again on a new connection, and the next place, which took the hop (and here
    has ended it already), answers with the same meet instead of running the agent twice."""
    _hand_over_through_a_cutting_door(three[0], three[1], silent=False, timeout=60)


def test_a_callers_meet_with_time_to_spare_connects_again_and_without_a_deadline_once(
        three: list[RunningPlace]) -> None:
    """The client API retries like a place does, while the meet's timeout leaves room
    for another whole attempt; a meet with no timeout (or too little) is told at once."""
    patient, hurried = ResettingDoor(three[0].address, 2), ResettingDoor(three[0].address, 1)
    patient.start()
    hurried.start()
    try:
        echoed = tacoma.meet(f"ag_echo@{patient.address}", {"A": [b"1"]}, timeout=60)
        assert echoed["A"] == [b"1"] and patient.accepted == 3
        with pytest.raises(tacoma.ConnectError, match="reset"):
            tacoma.meet(f"ag_echo@{hurried.address}", {})
        assert hurried.accepted == 1
    finally:
        patient.close()
        hurried.close()


def test_a_refused_connection_is_transient_no_more_than_a_reset_is_not(
        three: list[RunningPlace]) -> None:
    """What the retry rests on: the error of a connection reset before the Hellos says
    it may be the path's doing; a refused connection's does not."""
    door = ResettingDoor(three[0].address, resets=1)
    door.start()
    try:
        with pytest.raises(tacoma.ConnectError) as reset:
            tacoma.meet(f"ag_echo@{door.address}", {}, timeout=10)
    finally:
        door.close()
    assert reset.value.transient and "reset" in str(reset.value)
    with pytest.raises(tacoma.ConnectError) as refused:
        tacoma.meet("ag_echo@127.0.0.1:1", {}, timeout=10)
    assert not refused.value.transient


def test_a_roamer_that_does_not_catch_the_error_fails_where_it_is(
        two_and_a_stopped_one: list[RunningPlace]) -> None:
    a, b, c = two_and_a_stopped_one
    with pytest.raises(tacoma.AgentFailed) as info:
        tacoma.meet(a.target("ag_python"), {"ITINERARY": [b.address, c.address]},
                    code=ROAMERS["ag_python"], timeout=60)
    assert info.value.message.startswith(f"at {b.address}: ")
    assert "PlaceUnavailable" in info.value.message


def test_a_failure_on_the_way_reaches_the_caller_with_where(
        three: list[RunningPlace]) -> None:
    a, b, c = (p.address for p in three)
    code = f"if place == {c!r}:\n    raise ValueError('no data here')\ngo_next()"
    with pytest.raises(tacoma.AgentFailed) as info:
        tacoma.meet(f"ag_python@{a}", {"ITINERARY": [b, c, a]}, code=code, timeout=60)
    assert info.value.message == f"at {c}: ValueError: no data here"
    assert "no data here" in info.value.detail  # the agent's traceback, from place c


def test_the_place_left_holds_no_worker_for_the_trip(three: list[RunningPlace]) -> None:
    a, b, _ = three
    gate = f"gate-{uuid.uuid4().hex[:8]}"  # the agent stays at b until it opens there
    code = ("def stay():\n" + textwrap.indent(waits_for(gate), "    ")
            + f"\nif place == {b.address!r}:\n    stay()\ngo_next()")
    trip = threading.Thread(target=tacoma.meet, args=(a.target("ag_python"),),
                            kwargs={"briefcase": {"ITINERARY": [b.address]}, "code": code,
                                    "timeout": 60})
    trip.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _ps(b):
            time.sleep(0.1)
        assert [row["language"] for row in _ps(b)] == ["python"]  # the agent is at b
        assert _ps(a) == []  # and nothing of it at a, where the sync meet waits
    finally:
        release(b, gate)
        trip.join(60)


def test_a_long_trip_does_not_pile_up(start_place) -> None:
    """60 hops between two places that may run only 3 meets at once: each hop releases
    its place as it leaves."""
    a, b = start_place("--max-meets", "3"), start_place("--max-meets", "3")
    code = "bc.append('N', b'.')\ngo_next()"
    result = tacoma.meet(a.target("ag_python"),
                         {"ITINERARY": [b.address, a.address] * 30}, code=code, timeout=120)
    assert len(result["N"]) == 61


def test_go_without_an_itinerary_and_go_errors(three: list[RunningPlace]) -> None:
    a, b, _ = three
    code = f"""
if place == {a.address!r}:
    try:
        go("127.0.0.1:1")
    except PlaceUnavailable as exc:
        bc["ERROR"] = [str(exc)]
    go({b.address!r})
bc["AT"] = [place]
"""
    result = tacoma.meet(a.target("ag_python"), code=code, timeout=30)
    assert result.text("AT") == [b.address]
    assert "127.0.0.1:1" in result.text("ERROR")[0]


def test_go_to_the_same_place_and_in_an_async_meet(three: list[RunningPlace]) -> None:
    a, _, _ = three
    result = tacoma.meet(a.target("ag_python"), {"ITINERARY": [a.address] * 3},
                         code=ROAMERS["ag_python"], timeout=30)
    assert result.text("SEEN") == [a.address] * 4
    meet_id = tacoma.meet(a.target("ag_python"), {"ITINERARY": [a.address]},
                          code=ROAMERS["ag_python"], mode="async", timeout=30)
    assert meet_id


def test_hops_come_from_places_and_need_a_trip(three: list[RunningPlace]) -> None:
    """The go mode is for places handing agents on: a client may not use it at all, and a
    place's hop without a trip is refused; both typed."""
    from tacoma.client._client import PlaceClient
    from tacoma.client._identity import Credentials
    from tacoma.client._runtime import run_blocking
    from tacoma.trust import LOCAL_PLACE

    async def bare_hop(credentials: Credentials | None) -> object:
        client = await PlaceClient.connect(three[0].address, credentials=credentials)
        try:
            return await client.meet("ag_python", Briefcase(CODE=["pass"]), "go", 5)
        finally:
            client.close()

    with pytest.raises(tacoma.NotAuthorized, match="only a place may move an agent"):
        run_blocking(bare_hop(None))
    with pytest.raises(tacoma.MeetError, match="HOME"):
        run_blocking(bare_hop(Credentials(LOCAL_PLACE)))


def _ps(place: RunningPlace) -> list[dict[str, object]]:
    import json

    out = subprocess.run([sys.executable, "-m", "tacoma", "ps", place.address, "--state-dir",
                          str(place.state_dir), "--json"], capture_output=True, text=True,
                         check=True)
    agents: list[dict[str, object]] = json.loads(out.stdout)["agents"]
    return agents


def test_an_agent_cannot_go_twice_at_once(three: list[RunningPlace]) -> None:
    """Two go requests written at once (past the API, on the raw channel): one copy of the
    agent arrives; the other request is refused (and the agent ends here as it went)."""
    a, b, _ = three
    cabinet = f"arrivals-{uuid.uuid4().hex[:8]}"  # b is shared: this test's own
    code = f"""
if place == {a.address!r}:
    channel = next(c.cell_contents for c in go.__closure__
                   if hasattr(c.cell_contents, "conn"))
    first = channel._request({b.address!r}, bc, "go", None)
    second = channel._request({b.address!r}, bc, "go", None)
    channel._answer(first)
    channel._answer(second)
else:
    cabinet_append({cabinet!r}, "AT", place)
"""
    tacoma.meet(a.target("ag_python"), code=code, timeout=30)
    time.sleep(1)  # a second copy, had one gone, would have arrived by now
    arrived = tacoma.meet(b.target("ag_cabinet"), {"OP": ["read"], "CABINET": [cabinet],
                                                   "FOLDER": ["AT"]})
    assert arrived.text("AT") == [b.address]


def test_an_installed_agent_that_moves_keeps_its_program_to_itself(
        three: list[RunningPlace], tmp_path) -> None:
    a, b, _ = three
    name = f"roamer{uuid.uuid4().hex[:8]}"  # a is shared: an agent of this test's own
    program = tmp_path / f"{name}.py"
    program.write_text("SECRET = 'hunter2'\nbc.append('SEEN', place)\ngo_next()\n")
    subprocess.run([sys.executable, "-m", "tacoma", "install", str(program), "--state-dir",
                    str(a.state_dir)], check=True, capture_output=True)
    result = tacoma.meet(a.target(name), {"ITINERARY": [b.address]}, timeout=30)
    assert result.text("SEEN") == [a.address, b.address]
    assert "CODE" not in result


def test_a_cancelled_trip_that_passed_places_twice_is_stopped_once(start_place) -> None:
    """A stop follows the trip's path; a trip that passed a place several times must not
    make the stop bounce between places (each place handles a trip's stop once)."""
    a, b = start_place(), start_place()
    code = textwrap.dedent("""
        bc.append("SEEN", place)
        if len(bc["SEEN"]) >= 5:
            import time
            time.sleep(60)
        go_next()
    """)
    with pytest.raises(tacoma.MeetTimeout):
        tacoma.meet(a.target("ag_python"), {"ITINERARY": [b.address, a.address, b.address,
                                                          a.address, b.address]},
                    code=code, timeout=4)
    wait_until(lambda: not b.agents(), 15, "the agent at b to be stopped")
    started = time.monotonic()
    assert a.stop() == 0 and b.stop() == 0
    assert time.monotonic() - started < 20


# --------------------------------------------------------------------------- where a trip is
#: A slow roamer: a third of a second at each place, so that a trip of eight hops lasts
#: long enough for its places to report where it is (at most once a second of the trip).
SLOW_ROAMER = 'import time\ntime.sleep(0.3)\nbc.append("SEEN", place)\ngo_next()'


def test_the_home_knows_where_its_trip_is(three: list[RunningPlace]) -> None:
    """The home says, by the meet's id, how many hops a trip has made and where it is:
    the hand-overs it makes itself at once, the other places' at most once a second."""
    a, b, c = (p.address for p in three)
    itinerary = [b, c] * 4
    meet_id = f"trip-whereabouts-{uuid.uuid4().hex[:8]}"
    seen: list[tuple[int, str]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            status = tacoma.status(f"{meet_id}@{a}")
            if status.hops is not None and (not seen or seen[-1] != (status.hops, status.at)):
                seen.append((status.hops, status.at))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = tacoma.meet(f"ag_python@{a}", {"ITINERARY": itinerary}, code=SLOW_ROAMER,
                             timeout=60, meet_id=meet_id, progress=False)
    finally:
        done.set()
        watcher.join()
    assert result.text("SEEN") == [a, *itinerary]
    assert seen and seen[0] == (1, b), seen  # the home's own hand-over, known at once
    hops = [hop for hop, _ in seen]
    assert hops == sorted(hops) and max(hops) >= 3, seen  # reported by b and c on the way
    assert all(at == itinerary[hop - 1] for hop, at in seen), seen
    assert tacoma.status(f"{meet_id}@{a}").hops is None  # over: no whereabouts


def test_a_trip_shows_its_progress(three: list[RunningPlace]) -> None:
    """`tacoma meet --progress` prints a trip's hops as it goes (as lines, to a pipe)."""
    a, b, c = (p.address for p in three)
    args = [sys.executable, "-m", "tacoma", "meet", f"ag_python@{a}", "--progress",
            "-f", "CODE=" + SLOW_ROAMER, "--timeout", "60"]
    for place in [b, c] * 4:
        args += ["-f", f"ITINERARY={place}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("trip: hop ")]
    assert lines and lines[0] == f"trip: hop 1, at {b}", out.stderr
    assert len(lines) >= 2, out.stderr
    # The last line: the trip home, and its time counted from the meet's start (the bar
    # shows only from a second in): at least the 9 stops' 0.3 s each.
    last = out.stderr.splitlines()[-1]
    assert last.startswith("trip: home after 8 hops, "), out.stderr
    assert float(last.rsplit(", ", 1)[1].rstrip("s")) >= 9 * 0.3, last
    assert "SEEN (9 elements)" in out.stdout


def test_a_meet_that_does_not_move_shows_its_progress_when_asked(
        three: list[RunningPlace]) -> None:
    """`--progress` shows any sync meet: one that stays shows where it runs, then its end."""
    a = three[0].address
    out = subprocess.run([sys.executable, "-m", "tacoma", "meet", f"ag_python@{a}",
                          "--progress", "-f", "CODE=import time\ntime.sleep(2.5)",
                          "--timeout", "60"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert f"meet: running at {a}" in lines, out.stderr
    assert lines[-1].startswith("meet: ended, "), out.stderr
    assert float(lines[-1].rsplit(", ", 1)[1].rstrip("s")) >= 2.5, lines[-1]


def test_a_trips_bar_is_full_only_once_it_is_home(capsys: pytest.CaptureFixture[str]) -> None:
    """At the last place of its ITINERARY the trip still has its work there and the way
    home before it: its bar is not shown done until the result is in."""
    from tacoma.client._trip_progress import TripBar

    bar = TripBar(Briefcase(ITINERARY=["b", "c"]), show=True)
    bar.hop(1, "b")
    bar.hop(2, "c")
    assert bar.bar is not None and bar.bar.completed < bar.bar.total  # type: ignore[operator]
    bar.hop(3, "d")  # further than planned
    assert bar.bar.completed < bar.bar.total  # type: ignore[operator]
    bar.close(ended=True)
    assert bar.bar.completed == bar.bar.total
    assert capsys.readouterr().err.splitlines()[-1].startswith("trip: home after 3 hops, ")


def test_a_hop_taken_here_is_known_to_its_sender_only() -> None:
    """What the once-only hand-over rests on: a place knows each hop it took, by trip and
    hop, and answers only the sender that handed it over (principal and place) from that;
    another's hand-over of the same hop is a meet of its own, and changes nothing."""
    trips = Trips("127.0.0.1:1")
    trip = Trip("127.0.0.1:2", "t" * 32, time.time() + 60, 1, "127.0.0.1:2")
    alice = ("alice", "place-a")
    assert trips.taken_as(trip, alice) is None
    trips.take(trip, "m1", alice)
    assert trips.taken_as(trip, alice) == "m1"
    for other in (("mallory", "place-a"), ("alice", "place-m")):
        assert trips.taken_as(trip, other) is None
        trips.take(trip, "m2", other)
    assert trips.taken_as(trip, alice) == "m1"
    assert trips.taken_as(dataclasses.replace(trip, hop=2), alice) is None
