"""The tacoma command line, run as a user runs it: a real process against a real place."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import tacoma as api
from tacoma.cli._common import ByteSize, Duration

from conftest import RunningPlace, pid_alive, wait_until

AGENT = 'bc["GREETING"] = [b"hello, " + n for n in bc["NAME"]]\n'

#: The variables the CLI takes defaults from: unset, unless a test sets them.
CLI_ENV = ("TACOMA_PLACE", "TACOMA_STATE_DIR")


def tacoma(*args: str, timeout: float = 60, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tacoma", *args], capture_output=True,
                          text=True, timeout=timeout, env=cli_env(env))


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in CLI_ENV}
    return {**clean, **(extra or {})}


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


def test_a_long_folder_is_cut_to_its_first_elements(place: RunningPlace) -> None:
    """A folder of a thousand elements (a search's matches) prints its first 20, and says
    how many more there are and how to see them."""
    code = 'bc["MATCHES"] = [f"match {i}" for i in range(1000)]\nbc["FEW"] = ["a", "b"]\n'
    out = tacoma("meet", place.target("ag_python"), "-f", f"CODE={code}")
    assert out.returncode == 0, out.stderr
    shown = out.stdout.split("MATCHES (1,000 elements)\n", 1)[1].splitlines()[:21]
    assert shown == [*(f"  match {i}" for i in range(20)),
                     "  ... (980 more elements; --json shows them all)"]
    assert "FEW (2 elements)\n  a\n  b\n" in out.stdout
    whole = tacoma("meet", place.target("ag_python"), "-f", f"CODE={code}", "--json")
    assert len(json.loads(whole.stdout)["folders"]["MATCHES"]) == 1000


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
    (["place", "--silent-after", "0"], "--silent-after"),
    (["place", "--lost-after", "2s", "--rear-guard-every", "5s"],
     "--lost-after (2 s) and --silent-after (30 s) must be at least --rear-guard-every"),
    (["place", "--instances-memory", "1G"], "give it with --instances-in-place"),
    (["place", "--instances-in-place", "--instances-memory", "lots"], "is not a size"),
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
    assert rows["ag_python"]["instances"] is None  # its meets are processes, not instances
    if rows.get("ag_wasm", {}).get("ok"):  # the runtime, and how the place runs instances
        assert rows["ag_wasm"]["version"].startswith("wasmtime ")
        assert rows["ag_wasm"]["instances"] == "workers"


def test_doctor_says_where_instances_run_and_what_that_protects_against() -> None:
    """By default in confined workers, with the sandbox around the runtime; with
    --instances-in-place in the place's process, with the runtime as the only wall."""
    default = tacoma("doctor")
    in_place = tacoma("doctor", "--instances-in-place")
    assert default.returncode == in_place.returncode == 0, default.stderr + in_place.stderr
    rows = {row["agent"]: row for row in
            json.loads(tacoma("doctor", "--json", "--instances-in-place").stdout)["interpreters"]}
    if "ag_wasm" not in rows:
        pytest.skip("ag_wasm is not installed")
    assert rows["ag_wasm"]["instances"] == "place"
    assert rows["ag_python"]["instances"] is None
    said = " ".join(default.stdout.split())
    assert "ag_wasm: each meet in a fresh instance of its runtime, in a confined worker " \
           "process of the meet's principal" in said
    assert "still stand if an agent escapes the runtime" in said
    said = " ".join(in_place.stdout.split())
    assert "ag_wasm: each meet in a fresh instance of its runtime, on a thread of the " \
           "place's own process (--instances-in-place)" in said
    assert "no sandbox layer stands around it" in said


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


# ------------------------------------------------------------------ one error format
def test_usage_errors_are_in_the_one_format() -> None:
    out = tacoma("meet")
    assert out.returncode == 2
    assert out.stderr == ("tacoma: UsageError: Missing argument 'AGENT[@PLACE]'.\n"
                          "Try 'tacoma meet --help' for help.\n")
    assert out.stdout == ""
    out = tacoma("nosuch")
    assert out.returncode == 2
    assert out.stderr.startswith("tacoma: UsageError: No such command 'nosuch'.\n")


def test_under_json_every_failure_is_one_json_object_too(tmp_path: Path) -> None:
    from tacoma.trust import TrustStore, _certs

    _certs.ensure_local(TrustStore())  # an identity to connect as, whichever test ran first
    refused = tacoma("meet", "ag_echo@127.0.0.1:1", "--json")
    assert refused.returncode == 3
    error = json.loads(refused.stdout)["error"]
    assert error["kind"] == "ConnectError" and error["exit_status"] == 3
    assert "cannot connect to place 127.0.0.1:1" in error["message"]
    assert refused.stderr.startswith("tacoma: ConnectError: cannot connect")
    usage = tacoma("meet", "ag_echo@x:1", "-f", "NOEQUALS", "--json")
    assert usage.returncode == 2
    assert json.loads(usage.stdout)["error"]["kind"] == "UsageError"
    assert "'-f'" in usage.stderr  # names the option
    failed = tacoma("meet", "ag_python", "--code", str(_program(tmp_path, "1 / 0\n")),
                    "--json")
    assert failed.returncode == 5
    error = json.loads(failed.stdout)["error"]
    assert error["kind"] == "AgentFailed" and "ZeroDivisionError" in error["detail"]


def _program(tmp_path: Path, text: str, name: str = "agent.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_place_given_as_the_agent_is_a_usage_error_that_says_so() -> None:
    # It meant "no agent '127.0.0.1:7707'" at the embedded place.
    out = tacoma("meet", "127.0.0.1:7707")
    assert out.returncode == 2, out.stderr
    assert ("127.0.0.1:7707 is a place, not an agent: write AGENT@127.0.0.1:7707"
            in out.stderr)
    assert "UnknownAgent" not in out.stderr


# ------------------------------------------------------------------ hints
def test_a_refused_connection_hints_at_starting_a_place() -> None:
    out = tacoma("meet", "ag_echo@127.0.0.1:1")
    assert out.returncode == 3
    assert ("hint: no place listens at 127.0.0.1:1; start one with "
            "`tacoma place --listen 127.0.0.1:1`") in out.stderr


def test_a_port_in_use_is_said_with_a_hint_and_leaves_no_state(place: RunningPlace,
                                                                 tmp_path: Path) -> None:
    state = tmp_path / "second"
    out = tacoma("place", "--listen", place.address, "--state-dir", str(state), "-q")
    assert out.returncode == 1, out
    assert f"tacoma: CannotListen: cannot listen on {place.address}: " in out.stderr
    assert "address already in use" in out.stderr
    assert f"hint: another program listens on port {place.address.rpartition(':')[2]}" \
        in out.stderr
    assert not state.exists()  # made for the start that failed, and removed


def test_an_unknown_agent_is_answered_with_did_you_mean(place: RunningPlace) -> None:
    out = tacoma("meet", place.target("ag_pyhton"))
    assert out.returncode == 4
    assert "no agent 'ag_pyhton'" in out.stderr and "did you mean ag_python?" in out.stderr
    # In the Python API too: the place says it.
    with pytest.raises(api.UnknownAgent, match="did you mean ag_echo"):
        api.meet(place.target("ag_ecko"))
    # A name without ag_ is a resident's: an agent is no guess for it (it was "did you mean
    # ag_echo?" for `tacoma send echo@...` with no echo resident).
    out = tacoma("send", place.target("echo"), "-f", "TEXT=hi")
    assert out.returncode == 4, out.stderr
    assert "no agent or resident 'echo'" in out.stderr and "did you mean" not in out.stderr
    assert "resident agents: none" in out.stderr


def test_a_briefcase_over_the_limit_hints_at_the_option(
        start_place: Callable[..., RunningPlace], tmp_path: Path) -> None:
    small = start_place("--max-briefcase", "64K")  # a human size
    blob = tmp_path / "blob"
    blob.write_bytes(b"x" * 100_000)
    out = tacoma("meet", small.target("ag_echo"), "-f", f"B=@{blob}")
    assert out.returncode == 9, out.stderr
    assert "at most 65,536 bytes" in out.stderr
    assert "hint:" in out.stderr and "--max-briefcase" in out.stderr


# ------------------------------------------------------------------ sizes and durations
@pytest.mark.parametrize(("text", "size"), [
    ("4096", 4096), ("64k", 64 * 2**10), ("64K", 64 * 2**10), ("256M", 256 * 2**20),
    ("2G", 2 * 2**30), ("1.5GiB", 3 * 2**29), ("1T", 2**40), ("512MB", 512 * 2**20),
])
def test_sizes_are_read_as_people_write_them(text: str, size: int) -> None:
    assert ByteSize().convert(text, None, None) == size


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 30), ("30s", 30), ("500ms", 0.5), ("5m", 300), ("2h", 7200), ("1d", 86400),
    ("1h30m", 5400), ("2.5", 2.5),
])
def test_durations_are_read_as_people_write_them(text: str, seconds: float) -> None:
    assert Duration().convert(text, None, None) == seconds


@pytest.mark.parametrize(("args", "message"), [
    (["place", "--memory", "lots"], "Invalid value for '--memory': 'lots' is not a size"),
    (["place", "--memory", "10M"], "less than the least allowed, 64M"),
    (["place", "--meet-seconds", "soon"], "Invalid value for '--meet-seconds'"),
    (["place", "--cpu-seconds", "1.5"], "not a whole number of seconds"),
    (["meet", "ag_echo@x:1", "--timeout", "0"], "is not more than 0s"),
])
def test_bad_sizes_and_durations_are_usage_errors_naming_the_option(
        args: list[str], message: str) -> None:
    out = tacoma(*args)
    assert out.returncode == 2
    assert out.stderr.startswith("tacoma: UsageError: ") and message in out.stderr


def test_place_help_shows_defaults_in_human_form() -> None:
    text = " ".join(tacoma("place", "--help").stdout.split())  # unwrapped
    assert "[default: 1G]" in text  # --memory
    assert "[default: 64M]" in text  # --max-briefcase
    assert "[default: 5m]" in text  # --meet-seconds


# ------------------------------------------------------------------ the environment
WHERE = 'bc["WHERE"] = [place.encode()]\n'


def test_tacoma_place_is_the_default_place_of_every_command(place: RunningPlace,
                                                            tmp_path: Path) -> None:
    env = {"TACOMA_PLACE": place.address, "TACOMA_STATE_DIR": str(place.state_dir)}
    code = str(_program(tmp_path, WHERE))
    met = tacoma("meet", "ag_python", "--code", code, "--json", env=env)
    assert met.returncode == 0, met.stderr
    assert json.loads(met.stdout)["folders"]["WHERE"] == [place.address]
    # Without it, a bare agent meets at the embedded place (another address).
    embedded = tacoma("meet", "ag_python", "--code", code, "--json")
    assert json.loads(embedded.stdout)["folders"]["WHERE"] != [place.address]
    # An async meet has a place that outlives the command now.
    meet_id = tacoma("meet", "ag_python", "--code", code, "--async", env=env).stdout.strip()
    done = tacoma("status", "--wait", "30s", "--json", "--", f"{meet_id}@{place.address}")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["folders"]["WHERE"] == [place.address]
    # ps and kill: that place, with the admin token of $TACOMA_STATE_DIR.
    listed = tacoma("ps", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "agents" in json.loads(listed.stdout)
    gone = tacoma("kill", "nosuch", env=env)
    assert gone.returncode == 4 and f"at place {place.address}" in gone.stderr
    sent = tacoma("send", "nobody", "-f", "X=1", env=env)
    assert sent.returncode == 4 and f"at place {place.address}" in sent.stderr


def test_a_bad_tacoma_place_is_a_usage_error() -> None:
    out = tacoma("ps", env={"TACOMA_PLACE": "nowhere"})
    assert out.returncode == 2 and "$TACOMA_PLACE: bad place address 'nowhere'" in out.stderr


# ------------------------------------------------------------------ Ctrl-C
SLEEPER = "import time\ntime.sleep(120)\n"


@pytest.mark.parametrize("where", ["place", "embedded"])
def test_ctrl_c_cancels_the_meet_and_stops_its_agent(place: RunningPlace, tmp_path: Path,
                                                     where: str) -> None:
    code = str(_program(tmp_path, SLEEPER))
    # The embedded place lives in the command's own process: its agent is found below it.
    target = place.target("ag_python") if where == "place" else "ag_python"
    proc = subprocess.Popen([sys.executable, "-m", "tacoma", "meet", target, "--code", code],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env())
    try:
        if where == "place":
            wait_until(lambda: bool(place.agents()), 60, "the agent running")
            [row] = place.agents()
            meet_id, pid = row["meet"], row["pid"]
        else:
            pid = _wait_for_sleeping_agent(proc.pid)
    finally:
        out, err = _interrupt(proc)
    assert proc.returncode == 130, err
    # The embedded place may warn first of the sandbox layers it cannot apply (no root).
    [line] = [line for line in err.splitlines() if line.startswith("tacoma: ")]
    assert line.startswith("tacoma: Cancelled: meet ") and line.endswith(
        " cancelled; the agent was stopped"), err
    assert out == ""
    if where == "place":
        assert meet_id in line
        assert not place.agents()  # the place says so, at once
    assert isinstance(pid, int)
    wait_until(lambda: not pid_alive(pid), 20, "the agent's process gone")


def test_ctrl_c_reaches_a_blocking_call_whichever_thread_gets_the_signal() -> None:
    """A SIGINT the kernel gives to another thread (tacoma's loop thread, here on purpose)
    only sets Python's flag: a main thread asleep in a plain lock wait never ran the handler,
    and `tacoma meet` ignored Ctrl-C for good (one run in two, in CI)."""
    program = textwrap.dedent("""
        import asyncio, signal, threading, time
        from tacoma.client import _runtime

        loop_thread = _runtime.background_loop() and _runtime._thread
        def interrupt():
            time.sleep(0.5)
            signal.pthread_kill(loop_thread.ident, signal.SIGINT)
        threading.Thread(target=interrupt, daemon=True).start()
        started = time.monotonic()
        try:
            _runtime.run_blocking(asyncio.sleep(60))
        except KeyboardInterrupt:
            print(f"interrupted after {time.monotonic() - started:.1f} s")
    """)
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.startswith("interrupted after"), (out.stdout, out.stderr)
    assert float(out.stdout.split()[2]) < 30  # not when the sleep ended by itself


def _interrupt(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Ctrl-C to `proc`, and its output once it ended (killed if it has not within 60 s)."""
    try:
        proc.send_signal(signal.SIGINT)
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_for_sleeping_agent(cli_pid: int) -> int:
    """The pid of the agent running at the command's embedded place: the one process below
    the command asleep in time.sleep (its ready workers wait on their sockets instead)."""
    found: list[int] = []

    def sleeping() -> bool:
        found[:] = [pid for pid in _descendants(cli_pid) if _wchan(pid) == "hrtimer_nanosleep"]
        return bool(found)

    wait_until(sleeping, 60, "the agent asleep at the embedded place")
    return found[0]


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, whichever of their parents' threads started them (the
    embedded place's are its loop thread's children)."""
    below, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            below += children
            todo += children
    return below


def _wchan(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return ""


def test_interrupting_the_python_api_stops_the_agent_too(place: RunningPlace) -> None:
    """A script interrupted in tacoma.meet exits only once the place was told: its meet
    is named by the client, and a place that saw only a lost connection would let it run."""
    script = (f"import tacoma\ntacoma.meet({place.target('ag_python')!r}, "
              f"code={SLEEPER!r})\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE,
                            text=True, env=cli_env())
    try:
        wait_until(lambda: bool(place.agents()), 60, "the agent running")
        [row] = place.agents()
    finally:
        _, err = _interrupt(proc)
    assert "KeyboardInterrupt" in err
    wait_until(lambda: not place.agents(), 20, "the agent stopped")
    assert isinstance(row["pid"], int)
    wait_until(lambda: not pid_alive(row["pid"]), 20, "the agent's process gone")


def test_the_command_list_cuts_no_summary_short() -> None:
    out = tacoma("--help", env={"COLUMNS": "80"})
    commands = out.stdout.split("Commands:")[1].strip().splitlines()
    assert len(commands) >= 12
    assert not [line for line in commands if line.endswith("...")], out.stdout
