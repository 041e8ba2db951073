"""`tacoma top`: places watched live, against real places, printed once or drawn in a real
terminal (tmux), and the rates it takes from two answers."""

from __future__ import annotations

import functools
import re
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tacoma
from tacoma.client import current_principal
from tacoma.display.top import (
    NO_RATE,
    AgentRow,
    Answer,
    PlaceWatch,
    PoolFigures,
    frame,
    print_frame,
)

from conftest import RunningPlace, identity, meet_as, name_of, tacoma_cli, wait_until

#: The command as a person with no $TACOMA_PLACE of their own runs it.
cli = functools.partial(tacoma_cli, default_place=False)

#: An agent that stays running while `tacoma top` looks (the place's fixture ends it).
ASLEEP = "import time\ntime.sleep(60)\n"


def free_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def row_of(text: str, *first: str) -> list[str]:
    """The words of the line of `text` whose words begin with `first`."""
    for line in text.splitlines():
        words = line.split()
        if words[:len(first)] == list(first):
            return words
    raise AssertionError(f"no line beginning {' '.join(first)!r} in:\n{text}")


# ---------------------------------------------------------------------------- --once
def test_once_shows_the_meets_running_per_principal_and_agent(place: RunningPlace) -> None:
    me = current_principal()
    bob = identity("bob")
    for _ in range(2):
        tacoma.meet(place.target("ag_python"), code=ASLEEP, mode="async", timeout=120)
    meet_as(bob, place.address, "ag_python", code=ASLEEP, mode="async", timeout=120)
    wait_until(lambda: len(place.agents()) == 3, 60, "the three agents running")

    out = cli("top", place.address, "--once")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("tacoma top ") and "1 place, 1 up" in text.splitlines()[0]
    assert row_of(text, place.address)[1:3] == ["tacoma", tacoma.__version__]
    # PRINCIPAL AGENT LANGUAGE RUNNING WARM FRESH RESIDENT ...
    mine = row_of(text, me, "ag_python")
    theirs = row_of(text, name_of(bob), "ag_python")
    assert mine[2:4] == ["python", "2"] and theirs[2:4] == ["python", "1"]
    assert int(mine[4]) + int(mine[5]) == 2  # each in a warm worker or a fresh one
    assert row_of(text, "meets")[1:3] == ["3", "running"]
    # One answer: no rate yet, for the place and for its pools.
    assert f"{NO_RATE} meets/s" in text
    assert row_of(text, "LANGUAGE") == ["LANGUAGE", "AGENT", "READY", "POOL", "MOST", "ENDED",
                                        "MEETS/S", "MISSED", "WARM", "SERVED", "WARM", "FRESH"]
    assert row_of(text, "python", "ag_python")[6] == NO_RATE
    # Not a terminal: plain text, no escape sequence, no padding after a line.
    assert "\x1b" not in text and all(line == line.rstrip() for line in text.splitlines())


def test_a_place_that_cannot_be_reached_is_shown_down(place: RunningPlace) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    out = cli("top", nowhere, place.address, "--once")
    # The status of the first failure, as tacoma status gives it (3: nothing listens).
    assert out.returncode == 3, out.stderr
    text = out.stdout
    assert "2 places, 1 up" in text.splitlines()[0]
    assert row_of(text, nowhere)[1] == "DOWN"
    assert f"ConnectError: cannot connect to place {nowhere}" in text
    assert f"hint: no place listens at {nowhere}; start one with" in text
    assert row_of(text, place.address)[1] == "tacoma"  # the other place is drawn all the same
    assert cli("status", nowhere).returncode == out.returncode


def test_frames_follow_each_other_when_piped(place: RunningPlace) -> None:
    out = cli("top", place.address, "--iterations", "3", "--interval", "0.2")
    assert out.returncode == 0, out.stderr
    frames = out.stdout.split("\n\ntacoma top ")
    assert len(frames) == 3, out.stdout
    rates = [row_of(text, "meets")[-2] for text in frames]
    assert rates[0] == NO_RATE and all(re.fullmatch(r"\d+\.\d", rate) for rate in rates[1:])


@pytest.mark.parametrize(("args", "message"), [
    (["--once", "--iterations", "2"], "--once is --iterations 1"),
    (["127.0.0.1:7707", "127.0.0.1:7708", "--token-file", "t"], "one place's admin token"),
    (["--interval", "0"], "is not at least 0.1s"),
    (["nowhere"], "nowhere"),
])
def test_usage_errors(args: list[str], message: str) -> None:
    out = cli("top", *args)
    assert out.returncode == 2 and message in out.stderr, out.stderr


# ---------------------------------------------------------------------------- rates
def answer(ended: int, uptime: float, *, pid: int = 1, agents: tuple[AgentRow, ...] = ()
           ) -> Answer:
    """What a place running ag_python says, `ended` meets after `uptime` seconds."""
    pool = PoolFigures("python", "ag_python", 2, 2, 16, ended, 0, 0, 0, ended)
    return Answer(version="0", pid=pid, started=1000.0, uptime=uptime, running=len(agents),
                  queued=0, ended=ended, max_meets=256, max_queued=1024,
                  reuse="same-program", reuses=True, warm_idle=0, warm_most=64, load=0.5,
                  cpus=2, pools=(pool,), agents=agents, at=1000.0 + uptime)


def test_a_rate_is_the_meets_ended_between_two_answers_over_the_places_time() -> None:
    watch = PlaceWatch("127.0.0.1:7707")
    watch.observe(answer(10, 100.0), now=0.0)
    assert watch.rate() is None and watch.pool_rate("ag_python") is None
    # The place's own clock counts (2 s), not when the answers came (5 s apart).
    watch.observe(answer(30, 102.0), now=5.0)
    assert watch.rate() == watch.pool_rate("ag_python") == 10.0
    # Another run of the place (a new pid): its counters began again, no rate.
    watch.observe(answer(1, 1.0, pid=2), now=6.0)
    assert watch.rate() is None


def test_what_a_place_says_is_drawn_escaped() -> None:
    import io

    hostile = "\x1b]0;owned\x07[bold]eve\u202e"
    watch = PlaceWatch("127.0.0.1:7707")
    watch.observe(answer(0, 1.0, agents=(AgentRow(hostile, "", "ag_python", "python",
                                                  "fresh", 1.0, 0.0, 0, ""),)), now=0.0)
    out = io.StringIO()
    print_frame(frame([watch], interval=1.0, now=0.0, clock=0.0, keys=False), out)
    text = out.getvalue()
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert "\\x1b]0;owned\\x07[bold]eve\\u202e" in text  # shown, not done nor read as markup


# ---------------------------------------------------------------------------- live, in tmux
class Tmux:
    """A tmux server of the test's own (not the user's), one detached session in it."""

    def __init__(self) -> None:
        self.server = f"tacoma-top-{uuid.uuid4().hex[:8]}"
        self.session = "top"

    def __call__(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.server, *args], capture_output=True,
                              text=True, timeout=30, check=True)
        return done.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", self.session)

    def shows(self, predicate: Callable[[str], bool], what: str, timeout: float = 30) -> str:
        """The screen, once `predicate` holds for it."""
        seen: list[str] = []

        def check() -> bool:
            seen[:] = [self.screen()]
            return predicate(seen[0])

        try:
            wait_until(check, timeout, what)
        except AssertionError:
            raise AssertionError(f"the screen never showed {what}:\n{seen[0]}") from None
        return seen[0]


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed: the live view is drawn in a real terminal")
    server = Tmux()
    try:
        yield server
    finally:
        socket_path = subprocess.run(
            ["tmux", "-L", server.server, "display-message", "-p", "#{socket_path}"],
            capture_output=True, text=True, timeout=30, check=False).stdout.strip()
        subprocess.run(["tmux", "-L", server.server, "kill-server"], capture_output=True,
                       timeout=30, check=False)
        if socket_path:  # tmux leaves it behind
            Path(socket_path).unlink(missing_ok=True)


def pool_ended(screen: str) -> int:
    return int(row_of(screen, "python", "ag_python")[5].replace(",", ""))


def test_the_live_view_follows_a_place_down_and_quits_on_q(
        start_place: Callable[..., RunningPlace], tmux: Tmux, tmp_path: Path) -> None:
    place = start_place()
    # The shell tmux runs the view with writes its exit status down: tmux itself is slow
    # to tell it (its pane_dead_status stays empty for seconds at times).
    status = tmp_path / "status"
    command = (f"{sys.executable} -m tacoma top {place.address} --interval 0.5; "
               f"echo $? > {status}")
    # The pane stays after its command ends, so that its screen can be read.
    tmux("new-session", "-d", "-s", tmux.session, "-x", "120", "-y", "40", command, ";",
         "set-option", "-t", tmux.session, "remain-on-exit", "on")
    screen = tmux.shows(lambda s: f"{place.address}  tacoma" in s, "the place's section")
    assert "(q quits)" in screen.splitlines()[0]
    before = pool_ended(screen)

    for _ in range(2):
        tacoma.meet(place.target("ag_python"), code="pass", timeout=60)
    tmux.shows(lambda s: pool_ended(s) >= before + 2, "the two meets ended")
    tacoma.meet(place.target("ag_python"), code="import time\ntime.sleep(2)\n",
                mode="async", timeout=60)
    me = current_principal()
    screen = tmux.shows(lambda s: f"{me}  " in s and "ag_python" in s, "the meet running")
    assert row_of(screen, me, "ag_python")[3] == "1"

    place.stop()
    screen = tmux.shows(lambda s: f"{place.address}  DOWN" in s, "the place down")
    assert "0 up" in screen.splitlines()[0]

    tmux("send-keys", "-t", tmux.session, "q")
    wait_until(lambda: status.exists() and status.read_text().endswith("\n"), 30,
               "the view to end")
    assert status.read_text() == "0\n"
    # The screen it took is given back: the view is not left on it.
    assert "tacoma top" not in tmux.screen()


def test_an_unreachable_place_is_asked_again_until_it_comes(
        start_place: Callable[..., RunningPlace], tmux: Tmux) -> None:
    address = f"127.0.0.1:{free_port()}"
    command = f"{sys.executable} -m tacoma top {address} --interval 0.5"
    tmux("new-session", "-d", "-s", tmux.session, "-x", "120", "-y", "40", command)
    screen = tmux.shows(lambda s: f"{address}  DOWN" in s, "the place down")
    assert "ConnectError" in screen
    start_place(listen=address)
    tmux.shows(lambda s: f"{address}  tacoma" in s, "the place up")
