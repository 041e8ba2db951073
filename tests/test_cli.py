"""The tacoma command line, run as a user runs it: a real process against a real place."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RunningPlace

AGENT = 'bc["GREETING"] = [b"hello, " + n for n in bc["NAME"]]\n'


def tacoma(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tacoma", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return path


def test_meet_prints_the_result_readably(place: RunningPlace, agent: Path,
                                         tmp_path: Path) -> None:
    blob = tmp_path / "photo.jpg"
    blob.write_bytes(b"\xff\xd8\xff\xe0" + bytes(range(256)))
    out = tacoma("meet", place.target("ag_python"), "--code", str(agent), "-f", "NAME=world",
                 "-f", f"BLOB=@{blob}")
    assert out.returncode == 0, out.stderr
    assert "GREETING (1 element)\n  hello, world" in out.stdout
    assert "BLOB (1 element)\n  <260 bytes of binary: ff d8 ff e0" in out.stdout


def test_meet_json_is_exactly_one_object(place: RunningPlace) -> None:
    out = tacoma("meet", place.target("ag_echo"), "-f", "X=1", "-f", "X=ünï",
                 "-f", "B=@/dev/null", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"folders": {"X": ["1", "ünï"], "B": [""]}}


def test_meet_json_encodes_binary_as_base64(place: RunningPlace, tmp_path: Path) -> None:
    blob = tmp_path / "bin"
    blob.write_bytes(bytes(range(256)))
    out = tacoma("meet", place.target("ag_echo"), "-f", f"B=@{blob}", "--json")
    element = json.loads(out.stdout)["folders"]["B"][0]
    assert base64.b64decode(element["base64"]) == bytes(range(256))


def test_meet_async_prints_the_meet_id(place: RunningPlace, agent: Path) -> None:
    out = tacoma("meet", place.target("ag_python"), "--code", str(agent), "-f", "NAME=x",
                 "--async")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip().splitlines()) == 1
    meet_id = out.stdout.strip()
    status = tacoma("status", f"{meet_id}@{place.address}", "--wait", "30", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["folders"]["GREETING"] == ["hello, x"]


def test_an_async_meet_needs_a_place_that_outlives_the_command(agent: Path) -> None:
    out = tacoma("meet", "ag_python", "--code", str(agent), "--async")
    assert out.returncode == 2 and "outlives this command" in out.stderr


def test_meet_without_a_place_uses_an_embedded_one(agent: Path) -> None:
    out = tacoma("meet", "ag_python", "--code", str(agent), "-f", "NAME=newcomer", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["folders"]["GREETING"] == ["hello, newcomer"]


@pytest.mark.parametrize(("args", "code", "message"), [
    (["ag_nosuch@{place}"], 4, "UnknownAgent: no agent 'ag_nosuch'"),
    (["ag_python@{place}", "--code", "{raise}"], 5, "AgentFailed: ZeroDivisionError"),
    (["ag_python@{place}", "--code", "{crash}"], 6, "AgentKilled: agent process killed by"),
    (["ag_python@{place}", "--code", "{sleep}", "--timeout", "1"], 7, "MeetTimeout"),
    (["ag_echo@127.0.0.1:1"], 3, "ConnectError: cannot connect to place 127.0.0.1:1"),
])
def test_failures_have_a_status_and_one_line(place: RunningPlace, tmp_path: Path,
                                             args: list[str], code: int, message: str) -> None:
    programs = {"raise": "x = 1\n1 / 0\n", "crash": "import os; os.abort()\n",
                "sleep": "import time; time.sleep(60)\n"}
    paths = {}
    for name, text in programs.items():
        paths[name] = tmp_path / f"{name}.py"
        paths[name].write_text(text)
    argv = [a.format(place=place.address, **{k: str(v) for k, v in paths.items()})
            for a in args]
    out = tacoma("meet", *argv)
    assert out.returncode == code, (out.stdout, out.stderr)
    first_line = out.stderr.splitlines()[0]
    assert first_line.startswith("tacoma: ") and message in first_line
    assert out.stdout == ""
    if code == 5:  # the agent's traceback follows the line
        assert "1 / 0" in out.stderr and "Traceback" in out.stderr


def test_protocol_error_status(tmp_path: Path) -> None:
    # A server that is not a place: it answers with an HTTP response.
    script = tmp_path / "http.py"
    script.write_text(
        "import socket\n"
        "s = socket.create_server(('127.0.0.1', 0))\n"
        "print(s.getsockname()[1], flush=True)\n"
        "c, _ = s.accept()\n"
        "c.sendall(b'HTTP/1.1 400 Bad Request\\r\\n\\r\\n')\n"
        "c.recv(100)\n")
    server = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        out = tacoma("meet", f"ag_echo@127.0.0.1:{port}")
        assert out.returncode == 8, out.stderr
        assert out.stderr.startswith("tacoma: ProtocolError: ")
        assert "did not answer as a tacoma place" in out.stderr
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize(("args", "message"), [
    (["meet", "ag_echo@x:1", "-f", "NOEQUALS"], "expected NAME=TEXT or NAME=@PATH"),
    (["meet", "ag_echo@x:1", "-f", "B=@/no/such/file"], "cannot read"),
    (["meet", "ag_echo@"], "AGENT@HOST:PORT"),
    (["place", "--listen", "nonsense"], "HOST:PORT"),
    (["place", "--memory", "10"], "--memory"),
])
def test_usage_errors(args: list[str], message: str) -> None:
    out = tacoma(*args)
    assert out.returncode == 2
    assert message in out.stderr


def test_help_lists_the_commands() -> None:
    out = tacoma("--help")
    assert out.returncode == 0
    for command in ("meet", "place", "install"):
        assert command in out.stdout


def test_install_refuses_unknown_languages(tmp_path: Path) -> None:
    program = tmp_path / "agent.xyz"
    program.write_text("")
    out = tacoma("install", str(program), "--state-dir", str(tmp_path))
    assert out.returncode == 2 and "no interpreter runs .xyz files" in out.stderr


def test_install_refuses_built_in_names(tmp_path: Path) -> None:
    program = tmp_path / "agent.py"
    program.write_text("pass\n")
    out = tacoma("install", str(program), "--name", "ag_echo", "--state-dir", str(tmp_path))
    assert out.returncode == 2
    assert "built-in agent" in out.stderr


def test_doctor_lists_the_languages() -> None:
    out = tacoma("doctor", "--json")
    assert out.returncode == 0, out.stderr
    rows = {row["agent"]: row for row in json.loads(out.stdout)["interpreters"]}
    assert rows["ag_python"]["ok"]
    assert rows["ag_python"]["version"].startswith("CPython 3.")
    assert rows["ag_tcl"]["ok"]
    assert rows["ag_tcl"]["version"].startswith("Tcl 8.")


def test_a_third_party_language_plugs_in_and_doctor_says_why_it_cannot_run(
        tmp_path: Path) -> None:
    # A plugin is any installed distribution with a `tacoma.interpreters` entry point.
    site = tmp_path / "site"
    (site / "ag_cobol_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "ag_cobol_plugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ag-cobol-plugin\nVersion: 0.1\n")
    (site / "ag_cobol_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[tacoma.interpreters]\ncobol = ag_cobol_plugin:interpreter\n")
    (site / "ag_cobol_plugin.py").write_text(
        "from tacoma import Interpreter\n"
        "interpreter = Interpreter(language='cobol', agent='ag_cobol', suffixes=('.cob',),\n"
        "    worker_module='ag_cobol_plugin', check=lambda: 'no COBOL compiler here')\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-m", "tacoma", "doctor"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 1
    assert "ag_cobol" in out.stdout
    assert "no COBOL compiler here" in out.stdout
