"""Trusted agents (`tacoma install --trusted`): run in the place's own process.

A trusted agent keeps its state between meets and costs no worker; whatever it does wrong
is its meet's error, and the place goes on serving. Only the place's own language can be
trusted; every other agent runs isolated, as before. That an isolated agent cannot plant a
trusted one is in test_hostile (the write to STATE/trusted is refused in every language).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tacoma
from tacoma.agent._interpreter import discover_interpreters
from tacoma.client import current_principal

from conftest import RunningPlace, launch_place, wait_until

#: A trusted agent that counts its meets, and does what its OP folder says.
COUNTER = textwrap.dedent('''
    import asyncio
    COUNT = 0

    def meet(bc, principal):
        global COUNT
        COUNT += 1
        op = bc.text("OP")[0] if "OP" in bc else ""
        if op == "raise":
            raise ValueError("asked to fail")
        if op == "refuse":
            raise NotAllowed("not for you")
        if op == "number":
            return 42
        if op == "exit":
            raise SystemExit(3)
        if op == "unsendable":
            bc["X"].append(5)
            return bc
        if op == "huge":
            return Briefcase(BIG=[b"x" * 100_000])
        bc["COUNT"] = [str(COUNT)]
        bc["PRINCIPAL"] = [principal]
        bc["PLACE"] = [place]
''')

SLEEPER = textwrap.dedent('''
    import asyncio
    import functools

    def logged(function):
        @functools.wraps(function)
        def wrapper(bc, principal):  # not an async def itself: it returns the coroutine
            return function(bc, principal)
        return wrapper

    @logged
    async def meet(bc, principal):
        if "OWN_TIMEOUT" in bc:
            await asyncio.wait_for(asyncio.sleep(5), 0.01)
        await asyncio.sleep(float(bc.text("SLEEP")[0]))
        return Briefcase(SLEPT=bc["SLEEP"])
''')


def install(state_dir: Path, program: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tacoma", "install", str(program),
                           "--state-dir", str(state_dir), *flags],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlace]:
    """A place shared by the module's tests: each installs its trusted agents under names
    of its own (`unique`), so each starts with its own agent's state."""
    running = launch_place(tmp_path_factory.mktemp("trusted"), "--max-briefcase", "64KiB")
    yield running
    assert running.stop() == 0, running.log()


def unique(base: str) -> str:
    """An agent name no other test here installs."""
    return f"{base}{uuid.uuid4().hex[:8]}"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_trusted_agent_keeps_its_state_and_knows_its_caller(place: RunningPlace,
                                                              tmp_path: Path) -> None:
    counter = unique("counter")
    done = install(place.state_dir, write(tmp_path, f"{counter}.py", COUNTER), "--trusted")
    assert done.returncode == 0, done.stderr
    assert "trusted" in done.stdout
    first = tacoma.meet(place.target(counter), {"KEEP": [b"\0\xff"]})
    second = tacoma.meet(place.target(counter), {})
    assert first.text("COUNT") == ["1"] and second.text("COUNT") == ["2"]
    assert first["KEEP"] == [b"\0\xff"]
    assert first.text("PRINCIPAL") == [current_principal()]
    assert first.text("PLACE") == [place.address]
    # An async meet takes the place's general path (journaled): the same agent, same state.
    meet_id = tacoma.meet(place.target(counter), {}, mode="async")
    assert tacoma.result(f"{meet_id}@{place.address}", timeout=30).text("COUNT") == ["3"]
    # An isolated agent at the place meets it like any other agent.
    asked = tacoma.meet(place.target("ag_python"), {},
                        code=f'bc["COUNT"] = meet("{counter}", {{}})["COUNT"]', timeout=30)
    assert asked.text("COUNT") == ["4"]
    status = tacoma.place_status(place.address,
                                 token=(place.state_dir / "admin.token").read_text().strip())
    assert (counter, 4, "") in status.trusted and counter in status.installed


def test_what_a_trusted_agent_does_wrong_is_its_meets_error_only(place: RunningPlace,
                                                                  tmp_path: Path) -> None:
    counter = unique("counter")
    assert install(place.state_dir, write(tmp_path, f"{counter}.py", COUNTER),
                   "--trusted").returncode == 0
    with pytest.raises(tacoma.AgentFailed, match="ValueError: asked to fail") as failed:
        tacoma.meet(place.target(counter), {"OP": ["raise"]})
    assert f"{counter}.py" in failed.value.detail and "raise ValueError" in failed.value.detail
    with pytest.raises(tacoma.NotAllowed, match="not for you"):
        tacoma.meet(place.target(counter), {"OP": ["refuse"]})
    with pytest.raises(tacoma.AgentFailed, match="returned a int, not a Briefcase"):
        tacoma.meet(place.target(counter), {"OP": ["number"]})
    with pytest.raises(tacoma.AgentFailed, match="SystemExit: 3"):
        tacoma.meet(place.target(counter), {"OP": ["exit"]})
    with pytest.raises(tacoma.AgentFailed, match="cannot be sent: folder 'X' element 1"):
        tacoma.meet(place.target(counter), {"OP": ["unsendable"], "X": [b"1"]})
    meet_id = tacoma.meet(place.target(counter), {"OP": ["unsendable"], "X": [b"1"]},
                          mode="async")  # its outcome is recorded, not lost
    with pytest.raises(tacoma.AgentFailed, match="cannot be sent"):
        tacoma.result(f"{meet_id}@{place.address}", timeout=30)
    with pytest.raises(tacoma.LimitExceeded, match="returned 100,000 bytes, more than"):
        tacoma.meet(place.target(counter), {"OP": ["huge"]})
    assert tacoma.meet(place.target("ag_echo"), {"A": [b"1"]})["A"] == [b"1"]
    assert tacoma.meet(place.target(counter), {}).text("COUNT") == ["8"]


def test_an_async_trusted_agent_is_bounded_by_the_meets_timeout(place: RunningPlace,
                                                               tmp_path: Path) -> None:
    sleeper = unique("sleeper")
    assert install(place.state_dir, write(tmp_path, f"{sleeper}.py", SLEEPER),
                   "--trusted").returncode == 0
    assert tacoma.meet(place.target(sleeper), {"SLEEP": ["0.01"]}).text("SLEPT") == ["0.01"]
    with pytest.raises(tacoma.MeetTimeout):
        tacoma.meet(place.target(sleeper), {"SLEEP": ["30"]}, timeout=1)
    # Its own timeout is its failure, not the meet's.
    with pytest.raises(tacoma.AgentFailed, match="TimeoutError"):
        tacoma.meet(place.target(sleeper), {"SLEEP": ["0"], "OWN_TIMEOUT": []})
    assert tacoma.meet(place.target(sleeper), {"SLEEP": ["0"]}).text("SLEPT") == ["0"]


def test_a_trusted_agent_cannot_take_a_name_of_the_places_and_exiting_stops_nothing(
        start_place: Callable[..., RunningPlace]) -> None:
    """A file put into STATE/trusted by hand under an agent's name of the place is ignored
    (install refuses those names); a module that exits as it loads is reported, no more.
    (A place of its own: a place reads the directory for a new name at most every 50 ms,
    and a shared one may just have read it for the test before.)"""
    place = start_place("--max-briefcase", "64KiB")
    trusted = place.state_dir / "trusted"
    (trusted / "ag_echo.py").write_text("def meet(bc, principal):\n    return Briefcase()\n")
    (trusted / "not-a-name.py").write_text("def meet(bc, principal):\n    pass\n")
    (trusted / "quitter.py").write_text("raise SystemExit(1)\ndef meet(bc, principal):\n    pass\n")
    with pytest.raises(tacoma.PlaceUnavailable, match="SystemExit"):
        tacoma.meet(place.target("quitter"), {})
    assert tacoma.meet(place.target("ag_echo"), {"A": [b"1"]})["A"] == [b"1"]
    with pytest.raises(tacoma.UnknownAgent):
        tacoma.meet(place.target("not-a-name"), {})


def test_a_changed_trusted_agent_is_loaded_again_and_a_broken_one_says_why(
        place: RunningPlace, tmp_path: Path) -> None:
    counter = unique("counter")
    program = write(tmp_path, f"{counter}.py", COUNTER)
    assert install(place.state_dir, program, "--trusted").returncode == 0
    assert tacoma.meet(place.target(counter), {}).text("COUNT") == ["1"]
    program.write_text(COUNTER.replace("COUNT += 1", "COUNT += 10"))
    assert install(place.state_dir, program, "--trusted").returncode == 0
    wait_until(lambda: tacoma.meet(place.target(counter), {}).text("COUNT") == ["10"], 10,
               "the new version to be loaded")
    # Its top level fails when the place runs it (install only parses it): the place says
    # so at each meet, and goes on.
    program.write_text("import no_such_module\n\ndef meet(bc, principal):\n    pass\n")
    assert install(place.state_dir, program, "--trusted").returncode == 0

    def broken() -> bool:
        try:
            tacoma.meet(place.target(counter), {})
        except tacoma.PlaceUnavailable as exc:
            return "No module named 'no_such_module'" in str(exc)
        return False
    wait_until(broken, 10, "the broken version to be reported")
    assert tacoma.meet(place.target("ag_echo"), {"A": [b"1"]})["A"] == [b"1"]


def test_installing_it_untrusted_runs_it_isolated_and_ends_the_trusted_one(
        place: RunningPlace, tmp_path: Path) -> None:
    counter = unique("counter")
    assert install(place.state_dir, write(tmp_path, f"{counter}.py", COUNTER),
                   "--trusted").returncode == 0
    assert tacoma.meet(place.target(counter), {}).text("COUNT") == ["1"]
    isolated = write(tmp_path / "x", f"{counter}.py",
                     'bc["WHERE"] = [str(__import__("os").getpid())]')
    assert install(place.state_dir, isolated).returncode == 0
    assert not (place.state_dir / "trusted" / f"{counter}.py").exists()
    wait_until(lambda: "WHERE" in tacoma.meet(place.target(counter), {}), 10,
               "the isolated version to answer")


@pytest.mark.parametrize("language", ["tcl", "scheme", "c"])
def test_only_the_places_own_language_can_be_trusted(tmp_path: Path, language: str) -> None:
    interpreter = next((i for i in discover_interpreters().values()
                        if i.language == language), None)
    if interpreter is None:
        pytest.skip(f"{language} is not installed")
    program = write(tmp_path, f"svc{interpreter.suffixes[0]}", "")
    done = install(tmp_path / "state", program, "--trusted")
    assert done.returncode == 2
    assert f"a {language} agent cannot be trusted: only python agents run in the place's " \
           "own process" in done.stderr
    assert not (tmp_path / "state" / "trusted").exists()


@pytest.mark.parametrize(("text", "why"), [
    ("def meet(bc, principal)\n    pass\n", "line 1: SyntaxError"),
    ("def serve(bc, principal):\n    pass\n", "this file has no such function"),
    ("def meet(bc):\n    pass\n", "meet must take two arguments"),
])
def test_install_refuses_what_cannot_be_a_trusted_agent(tmp_path: Path, text: str,
                                                       why: str) -> None:
    done = install(tmp_path / "state", write(tmp_path, "svc.py", text), "--trusted")
    assert done.returncode == 2 and why in done.stderr, done.stderr
