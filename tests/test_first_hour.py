"""The faults a newcomer met in the first hour (issue 14): each fails without its fix.

Two places on one state directory, state directories that cannot be one, a peer that is not
a tacoma place, programs installed with a syntax error, and agents' errors that did not
name the agent's own file.
"""

from __future__ import annotations

import http.server
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import tacoma

from conftest import RunningPlace


def tacoma_cli(*args: str, cwd: Path | None = None, timeout: float = 60
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tacoma", *args], capture_output=True,
                          text=True, timeout=timeout, check=False, cwd=cwd)


# ------------------------------------------------------------------ the state directory
def test_a_second_place_on_a_state_directory_is_refused_and_harms_nothing(
        start_place, tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = start_place(state_dir=state)
    code = 'bc["X"] = [b"ran"]'
    assert tacoma.meet(first.target("ag_python"), code=code).text("X") == ["ran"]
    token = (state / "admin.token").read_text()
    for listen in ("127.0.0.1:0", first.address):  # a free port, and one that cannot bind
        second = tacoma_cli("place", "--listen", listen, "--state-dir", str(state))
        assert second.returncode != 0
        assert "sandbox layers" not in second.stderr  # refused first, before any report
        assert (f"state directory {state} is in use by the place at {first.address} "
                f"(pid {first.proc.pid})") in second.stderr, second.stderr
    # Nothing of the first place's was touched: its token, its workers' directories.
    assert (state / "admin.token").read_text() == token
    ps = tacoma_cli("ps", first.address, "--state-dir", str(state))
    assert ps.returncode == 0, ps.stderr
    for _ in range(4):  # more than the pool's ready workers
        assert tacoma.meet(first.target("ag_python"), code=code).text("X") == ["ran"]
    assert first.stop() == 0
    # Once the first has stopped, the directory is free again.
    again = start_place(state_dir=state)
    assert tacoma.meet(again.target("ag_echo"), {"A": [b"1"]}) == {"A": [b"1"]}


def test_a_file_is_not_a_state_directory() -> None:
    out = tacoma_cli("place", "--listen", "127.0.0.1:0", "--state-dir", "/dev/null")
    assert out.returncode != 0
    assert "the state directory /dev/null is not a directory" in out.stderr, out.stderr
    assert "File exists" not in out.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_read_only_state_directory_is_refused_not_changed(tmp_path: Path) -> None:
    state = tmp_path / "readonly"
    state.mkdir(mode=0o555)
    state.chmod(0o555)
    out = tacoma_cli("place", "--listen", "127.0.0.1:0", "--state-dir", str(state))
    assert out.returncode != 0
    assert f"the state directory {state} is read-only (mode 0555)" in out.stderr, out.stderr
    assert stat.S_IMODE(state.stat().st_mode) == 0o555
    assert list(state.iterdir()) == []


def test_a_state_directory_whose_mode_changes_says_so(start_place, tmp_path: Path) -> None:
    state = tmp_path / "open"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    place = start_place(state_dir=state, quiet=False)
    assert stat.S_IMODE(state.stat().st_mode) in (0o700, 0o711)
    assert f"state directory {state}: mode 0755 changed to" in place.log()


# ------------------------------------------------------------ a peer that is not a place
@pytest.fixture
def web_server() -> Iterator[str]:
    """A real HTTP server (the standard library's) on a free loopback port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_web_server_is_not_a_tacoma_place(web_server: str) -> None:
    out = tacoma_cli("meet", f"ag_echo@{web_server}", timeout=30)
    assert out.returncode == 8, out.stderr
    assert "did not answer as a tacoma place" in out.stderr


def test_a_web_server_met_in_plaintext_is_not_a_tacoma_place(web_server: str) -> None:
    # In plaintext the web server waits for a line that never comes: silence after the
    # connection is made is not a place either (not a ConnectError, exit 3).
    tacoma.use_identity(insecure=True)
    try:
        with pytest.raises(tacoma.RemoteProtocolError, match="accepted the connection but "
                           "did not answer as a tacoma place"):
            tacoma.meet(f"ag_echo@{web_server}", {}, connect_timeout=1)
    finally:
        tacoma.use_identity()


# ------------------------------------------------------------ installing what cannot run
BROKEN = {
    ".py": ("x = (\n", "broken.py, line 1"),
    ".tcl": ("set a 1\nproc f {} {\n  set b 2\n", "broken.tcl, line 2"),
    ".scm": ("(define x 1)\n(display \"hi\"\n", "broken.scm:"),
    ".c": ("#include <tacoma.h>\nint main(void) {\n  int x = ;\n  return 0;\n}\n",
           "broken.c:3:"),
}


@pytest.mark.parametrize("suffix", sorted(BROKEN))
def test_install_refuses_a_program_that_cannot_run(tmp_path: Path, suffix: str) -> None:
    source, where = BROKEN[suffix]
    program = tmp_path / f"broken{suffix}"
    program.write_text(source)
    state = tmp_path / "state"
    out = tacoma_cli("install", str(program), "--state-dir", str(state))
    assert out.returncode == 2, out.stderr
    assert "is not installed" in out.stderr and where in out.stderr, out.stderr
    assert not list((state / "agents").glob("broken*")) if (state / "agents").exists() \
        else True


# --------------------------------------------------- agents' errors name their own file
FAILING = {
    "ag_python": ("x = 1\ndef f(y):\n    return y / 0\nf(x)\n", "hello.py",
                  'File "hello.py", line 3'),
    "ag_tcl": ("set a 1\nproc f {x} {\n    expr {$x / 0}\n}\nf $a\n", "hello.tcl",
               '(file "hello.tcl" line 5)'),
    "ag_scheme": ("(define (f x) (car x))\n\n(f 2)\n", "hello.scm", "(hello.scm, line 3)"),
    "ag_c": ("#include <tacoma.h>\nint main(void) {\n  int x = ;\n}\n", "hello.c",
             "hello.c:3:"),
}


@pytest.mark.parametrize("agent", sorted(FAILING))
def test_an_agents_error_names_its_own_file(place: RunningPlace, agent: str) -> None:
    source, name, where = FAILING[agent]
    with pytest.raises(tacoma.AgentFailed) as failed:
        tacoma.meet(place.target(agent), {"CODE_NAME": [name]}, code=source)
    text = f"{failed.value}\n{failed.value.detail}"
    assert where in text, text
    assert "<agent>" not in text


def test_an_installed_agents_error_names_its_installed_file(place: RunningPlace,
                                                             tmp_path: Path) -> None:
    program = tmp_path / "ag_oops.py"
    program.write_text("def oops():\n    raise RuntimeError('oops')\noops()\n")
    assert tacoma_cli("install", str(program), "--state-dir",
                      str(place.state_dir)).returncode == 0
    with pytest.raises(tacoma.AgentFailed) as failed:
        tacoma.meet(place.target("ag_oops"), {})
    assert 'File "ag_oops.py", line 2' in failed.value.detail


def test_a_scheme_error_shows_no_frames_of_guiles_own(place: RunningPlace) -> None:
    with pytest.raises(tacoma.AgentFailed) as failed:
        tacoma.meet(place.target("ag_scheme"), code="(define (f x) (car x))\n(f 2)\n")
    assert "ice-9/" not in failed.value.detail
    assert "eval.scm" not in failed.value.detail
    assert "line 2" in str(failed.value)


def test_tacoma_meet_code_sends_the_files_name(tmp_path: Path) -> None:
    program = tmp_path / "oops.py"
    program.write_text("x = 1\nraise ValueError('oops')\n")
    out = tacoma_cli("meet", "ag_python", "--code", str(program))
    assert out.returncode == 5, out.stderr
    assert 'File "oops.py", line 2' in out.stderr, out.stderr
