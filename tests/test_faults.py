"""Faults across hosts: places on separate network stacks (tacoma.testbed), killed, cut off
and made lossy while agents travel between them.

Four hosts h1..h4, each a network namespace with a place in it (started with nsenter, on a
fixed port so that a killed place comes back at the same address, with an identity of its
own naming that address), and this process as the client on the same bridge: every trip
carries its launcher's passport, and each place's signed line. Every test ends in a state
the caller can name: the result, the failure with the place and the reason, or an outcome
asked for later by the meet's id.
Needs root, ip, nsenter and nft; skipped otherwise.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tacoma
from tacoma.testbed import Testbed

from conftest import RunningPlace, issue_identity, launch_place, settled, wait_until

USABLE, WHY = Testbed.available(loss=True)
pytestmark = [pytest.mark.root, pytest.mark.skipif(not USABLE, reason=WHY)]

PORT = 7707


class Hosts:
    """A place per testbed host, each restartable at its address, shared by the tests of
    the module: a test that kills, stops or restarts a place gets it back (as a new place,
    on a new state directory) when it ends, and so does one that left agents running."""

    def __init__(self, bed: Testbed, root: Path) -> None:
        self.bed = bed
        self.root = root
        self.places: dict[str, RunningPlace] = {}
        self.states: dict[str, Path] = {}
        self.identities: dict[str, Path] = {}
        self.made = 0  # state directories made
        #: The hosts whose places the running test (re)started: its own, to be replaced.
        self.touched: set[str] = set()

    def start(self, host: str, *flags: str, insecure: bool = False) -> RunningPlace:
        """Start the place of `host` (again, on the state directory it had, if any), with
        the host's identity (or `insecure`: in plaintext)."""
        if host not in self.states:
            self._new_state(host)
        if host not in self.identities:
            self.identities[host] = issue_identity(f"place-{host}-{self.bed.tag}", "place",
                                                   addresses=(self.bed.address(host),))
        trust = ("--insecure",) if insecure else ("--identity", str(self.identities[host]))
        self.places[host] = place = launch_place(
            self.states[host], *trust, *flags,
            listen=f"{self.bed.address(host)}:{PORT}", prefix=self.bed.prefix(host))
        self.touched.add(host)
        return place

    def _new_state(self, host: str) -> None:
        (self.root / host).mkdir(exist_ok=True)
        self.made += 1
        self.states[host] = self.root / host / f"state{self.made}"

    def address(self, host: str) -> str:
        return f"{self.bed.address(host)}:{PORT}"

    def kill(self, host: str) -> None:
        self.places[host].stop(signal.SIGKILL)

    def running(self, host: str) -> list[dict[str, object]]:
        return self.places[host].agents()

    def tidy(self) -> None:
        """After a test: a fresh place for each host whose place it killed, stopped or
        started, or that does not settle (agents left running, its connections from this
        process not yet given back); the others as they are."""
        for host in self.bed.hosts:
            if host not in self.touched and self.places[host].proc.poll() is None:
                try:
                    settled(self.places[host], timeout=10)
                    wait_until(lambda h=host: _serves(self.places[h]), 10,
                               f"the place on {host} to serve")
                    continue
                except (AssertionError, tacoma.TacomaError):
                    pass  # replaced below
            self._stop(self.places[host])
            self._new_state(host)
            self.start(host)
        self.touched.clear()

    def stop_all(self) -> None:
        for place in self.places.values():
            self._stop(place)

    @staticmethod
    def _stop(place: RunningPlace) -> None:
        if place.proc.poll() is None:
            place.proc.send_signal(signal.SIGCONT)
            place.stop()


def _serves(place: RunningPlace) -> bool:
    try:
        return tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]}, timeout=10) == \
            {"OK": [b"1"]}
    except tacoma.TacomaError:
        return False


@pytest.fixture(scope="module")
def shared_hosts(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Hosts]:
    started = Hosts(testbed, tmp_path_factory.mktemp("hosts"))
    try:
        for host in testbed.hosts:
            started.start(host)
        started.touched.clear()
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def hosts(shared_hosts: Hosts, testbed: Testbed) -> Iterator[Hosts]:
    tacoma.use_identity()
    try:
        yield shared_hosts
    finally:
        for host in testbed.hosts:
            testbed.restore(host)
            testbed.clear_loss(host)
        try:
            shared_hosts.tidy()
        finally:
            tacoma.use_identity()


def later(seconds: float, action: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


#: Works at each place: marks where it ran (in that place's cabinet) and goes on.
ROAMER = textwrap.dedent("""
    import time
    bc.append("SEEN", place)
    cabinet_append("visits", "V", bc["TAG"][0])
    if place in [p.decode() for p in bc.get("SLOW", [])]:
        time.sleep(float(bc["SLEEP"][0]))
    go_next()
""")


def visits(place: RunningPlace, tag: bytes) -> int:
    read = {"OP": ["read"], "CABINET": ["visits"], "FOLDER": ["V"]}
    for attempt in range(3):  # a read may be asked again: on a lossy path a TLS handshake
        try:                  # can outlast the place's deadline for it, and the place hangs up
            found = tacoma.meet(place.target("ag_cabinet"), read, timeout=60)
            break
        except tacoma.CabinetError:
            return 0
        except tacoma.ConnectionLost:
            if attempt == 2:
                raise
    return found.get("V", []).count(tag)


def trip(hosts: Hosts, route: list[str], *, slow: str = "", sleep: float = 6,
         recovery: str = "", timeout: float = 60, tag: bytes = b"t",
         meet_id: str | None = None) -> tacoma.Briefcase:
    bc = {"ITINERARY": [hosts.address(h) for h in route[1:]], "TAG": [tag],
          "SLOW": [hosts.address(slow)] if slow else [], "SLEEP": [str(sleep)]}
    if recovery:
        bc["RECOVERY"] = [recovery]
    return tacoma.meet(hosts.places[route[0]].target("ag_python"), bc, code=ROAMER,
                       timeout=timeout, meet_id=meet_id)


def path_of(hosts: Hosts, meet_id: str, home: str = "h1") -> list[tuple[str, str, bool]]:
    """The path the trip's result took, as its home checked the places' signed lines:
    (from, to, ended) each, with nothing that does not add up."""
    # Recorded in the home's journal as the result is answered: wait for that.
    steps = tacoma.status(f"{meet_id}@{hosts.address(home)}", wait=30).path
    assert all(not step.note for step in steps), steps
    return [(step.came, step.went, step.ended) for step in steps]


def test_a_trip_across_four_hosts(hosts: Hosts) -> None:
    meet_id = f"four-{uuid.uuid4().hex[:8]}"
    result = trip(hosts, ["h1", "h2", "h3", "h4", "h1"], meet_id=meet_id)
    route = [hosts.address(h) for h in ["h1", "h2", "h3", "h4", "h1"]]
    assert result.text("SEEN") == route
    # Each place's own line, signed with its identity: the home names every hand-over.
    assert path_of(hosts, meet_id) == [(route[0], route[1], False), (route[1], route[2], False),
                                       (route[2], route[3], False), (route[3], route[4], False),
                                       (route[4], route[4], True)]
    assert {step.place for step in tacoma.status(f"{meet_id}@{route[0]}", wait=30).path} == \
        {f"place-{h}-{hosts.bed.tag}" for h in ["h1", "h2", "h3", "h4"]}


def test_kill_9_mid_trip_with_fail_reports_the_place_within_seconds(hosts: Hosts) -> None:
    killer = later(2, lambda: hosts.kill("h2"))
    started = time.monotonic()
    with pytest.raises(tacoma.PlaceUnavailable,
                       match=f"lost at place {hosts.address('h2')}"):
        trip(hosts, ["h1", "h2", "h3", "h1"], slow="h2", sleep=30)
    killer.join()
    assert time.monotonic() - started < 15  # seconds, not the trip's 60 s deadline


def test_kill_9_mid_trip_with_skip_goes_on_without_that_place(hosts: Hosts) -> None:
    killer = later(2, lambda: hosts.kill("h2"))
    meet_id = f"skip-{uuid.uuid4().hex[:8]}"
    result = trip(hosts, ["h1", "h2", "h3", "h1"], slow="h2", sleep=30, recovery="skip",
                  tag=b"skip", meet_id=meet_id)
    killer.join()
    assert result.text("SKIPPED") == [hosts.address("h2")]
    # The home's rear guard handed the agent to h3 again, with a line of its own.
    h1, h3 = hosts.address("h1"), hosts.address("h3")
    assert path_of(hosts, meet_id) == [(h1, h3, False), (h3, h1, False), (h1, h1, True)]
    # Relaunched from the state h1 handed over: h2's visit never reached the briefcase.
    assert result.text("SEEN") == [hosts.address(h) for h in ["h1", "h3", "h1"]]
    assert visits(hosts.places["h3"], b"skip") == 1


@pytest.mark.slow
def test_kill_9_mid_trip_with_retry_runs_it_there_again(hosts: Hosts) -> None:
    def kill_and_restart() -> None:
        hosts.kill("h2")
        hosts.start("h2")

    killer = later(2, kill_and_restart)
    # The first run at h2 sleeps; the retried one finds SLOW gone and goes on at once.
    code = ROAMER.replace('bc.append("SEEN", place)', 'bc.append("SEEN", place)\n'
                          'if bc.get("SLOW") and place == bc["SLOW"][0].decode():\n'
                          '    bc["SLOW_ONCE"] = [b"1"]')
    bc = {"ITINERARY": [hosts.address("h2"), hosts.address("h1")], "TAG": [b"retry"],
          "SLOW": [hosts.address("h2")], "SLEEP": ["30"], "RECOVERY": ["retry"]}
    started = time.monotonic()
    with pytest.raises(tacoma.MeetTimeout):  # retried, it sleeps at h2 again: deadline
        tacoma.meet(hosts.places["h1"].target("ag_python"), bc, code=code, timeout=12)
    killer.join()
    assert time.monotonic() - started < 25
    # It was handed to the restarted h2 again: the new h2 saw it arrive.
    assert visits(hosts.places["h2"], b"retry") >= 1


def test_a_short_cut_of_the_link_does_not_lose_the_trip(hosts: Hosts,
                                                        testbed: Testbed) -> None:
    cut = later(1.5, lambda: testbed.cut("h2"))
    restore = later(2.5, lambda: testbed.restore("h2"))
    result = trip(hosts, ["h1", "h2", "h3", "h1"], slow="h2", sleep=5, tag=b"cut")
    cut.join()
    restore.join()
    assert result.text("SEEN") == [hosts.address(h) for h in ["h1", "h2", "h3", "h1"]]
    assert visits(hosts.places["h2"], b"cut") == 1 and visits(hosts.places["h3"], b"cut") == 1


def test_a_long_cut_is_reported_and_the_late_end_is_recorded(hosts: Hosts,
                                                             testbed: Testbed) -> None:
    """The caller hears within seconds that h2 was lost (--silent-after, 30 s by default
    and 8 s here: h2 is silent, not refusing); when the link comes back the agent (which
    went on at h2, and wakes after that) ends, and its end is recorded under the meet's
    id, not dropped."""
    silent_after = 8.0
    hosts.places["h1"].stop()
    home = hosts.start("h1", "--silent-after", f"{silent_after:g}s")
    cut = later(1.5, lambda: testbed.cut("h2"))
    meet_id = ""

    def go() -> None:
        nonlocal meet_id
        meet_id = tacoma.meet(home.target("ag_python"), {
            "ITINERARY": [hosts.address("h2"), hosts.address("h1")], "TAG": [b"late"],
            "SLOW": [hosts.address("h2")], "SLEEP": [str(silent_after + 4)]}, code=ROAMER,
            mode="async",
            timeout=60)

    go()
    cut.join()
    status = tacoma.status(f"{meet_id}@{home.address}", wait=silent_after + 10)
    assert status.state == "failed" and "lost at place" in str(status.error)
    testbed.restore("h2")
    wait_until(lambda: tacoma.status(f"{meet_id}@{home.address}").state == "done", 60,
               "the late end to be recorded")
    result = tacoma.result(f"{meet_id}@{home.address}")
    assert result.text("SEEN")[-1] == hosts.address("h1")


@pytest.mark.slow
def test_thirty_percent_loss_on_the_path(hosts: Hosts, testbed: Testbed) -> None:
    testbed.lossy("h2", 30)
    testbed.lossy("h3", 30)
    results = [trip(hosts, ["h1", "h2", "h3", "h1"], tag=f"loss{i}".encode(), timeout=90)
               for i in range(3)]
    for i, result in enumerate(results):
        assert result.text("SEEN") == [hosts.address(h) for h in ["h1", "h2", "h3", "h1"]]
        assert visits(hosts.places["h2"], f"loss{i}".encode()) == 1


def test_the_home_killed_and_restarted_during_a_trip(hosts: Hosts) -> None:
    """The caller loses its connection and is told the meet's id; the restarted home
    takes the trip's end, and the caller gets the result by id."""
    def kill_and_restart() -> None:
        hosts.kill("h1")
        time.sleep(0.5)
        hosts.start("h1")

    killer = later(1.5, kill_and_restart)
    with pytest.raises(tacoma.ConnectionLost) as lost:
        # h2 holds the agent until the home is back (its restart starts 2 s in and takes
        # seconds on a busy machine): the last hand-over, to the home, must find it up.
        trip(hosts, ["h1", "h2", "h3", "h1"], slow="h2", sleep=8, tag=b"home")
    killer.join()
    meet_id = lost.value.meet_id
    assert meet_id and f"tacoma status {meet_id}@" in str(lost.value)
    result = tacoma.result(f"{meet_id}@{hosts.address('h1')}", timeout=60)
    route = [hosts.address(h) for h in ["h1", "h2", "h3", "h1"]]
    assert result.text("SEEN") == route
    assert visits(hosts.places["h3"], b"home") == 1
    # The restarted home checked the trip's passport and lines from its journal.
    assert [step[:2] for step in path_of(hosts, meet_id)] == [
        (route[0], route[1]), (route[1], route[2]), (route[2], route[3]), (route[3], route[3])]


def test_a_callers_deadline_stops_the_agent_wherever_it_is(hosts: Hosts) -> None:
    started = time.monotonic()
    with pytest.raises(tacoma.MeetTimeout):
        trip(hosts, ["h1", "h2", "h3", "h1"], slow="h3", sleep=60, timeout=4, tag=b"dl")
    assert time.monotonic() - started < 10
    wait_until(lambda: not hosts.running("h3"), 10, "the agent at h3 to be stopped")
    assert visits(hosts.places["h3"], b"dl") == 1


def test_a_cancelled_trip_is_stopped_down_its_path(hosts: Hosts) -> None:
    """Ctrl-C of the caller (a Cancel of the sync meet): the home stops the agent at h3."""
    script = textwrap.dedent(f"""
        import tacoma
        tacoma.meet("ag_python@{hosts.address('h1')}", {{
            "ITINERARY": ["{hosts.address('h2')}", "{hosts.address('h3')}"], "TAG": [b"c"],
            "SLOW": ["{hosts.address('h3')}"], "SLEEP": ["60"]}}, code={ROAMER!r},
            timeout=120)
    """)
    client = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_until(lambda: bool(hosts.running("h3")), 30, "the agent to reach h3")
        client.send_signal(signal.SIGINT)  # the client cancels its meet
        client.wait(20)
        wait_until(lambda: not hosts.running("h3"), 15, "the agent at h3 to be stopped")
    finally:
        client.kill()


def test_an_idle_connection_flood_from_one_source_does_not_lock_others_out(
        hosts: Hosts, testbed: Testbed) -> None:
    """Connections that say Hello and then idle, as many as one source may hold: the next
    from that source is refused, and a client on another host still meets."""
    from tacoma.testing import hello_from
    from tacoma.wire._protocol import Role

    hosts.places["h1"].stop()  # an --insecure place's per-source share (h1's own again after)
    target = hosts.start("h1", insecure=True)
    host, port = target.address.rsplit(":", 1)
    hello = hello_from(Role.CLIENT)
    socks: list[socket.socket] = []
    try:
        for _ in range(256):  # --share 0.25 of --max-connections 1024
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(hello)
            socks.append(sock)
        time.sleep(0.5)
        extra = socket.create_connection((host, int(port)), timeout=10)
        extra.sendall(hello)
        extra.settimeout(10)
        data = b""
        try:
            while chunk := extra.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass  # refused: the place closed it (its Bye may be in flight still)
        extra.close()
        wait_until(lambda: "holds its share of 256 connections" in target.log()
                   or b"holds its share of 256 connections" in data, 10, "the refusal")
        # Another host is another source: its meet is served.
        other = subprocess.run([*testbed.prefix("h2"), sys.executable, "-c", textwrap.dedent(f"""
            import tacoma
            tacoma.use_identity(insecure=True)
            print(tacoma.meet("ag_echo@{target.address}", {{"OK": [b"1"]}}, timeout=20))
        """)], capture_output=True, text=True, timeout=60)
        assert "OK" in other.stdout, other.stderr
    finally:
        for sock in socks:
            sock.close()
        tacoma.use_identity()
