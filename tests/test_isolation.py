"""Isolation and misbehaving agents: the OS confines each agent, the place survives all.

Each misbehaviour runs at a place with tight limits, and every test ends by meeting ag_echo
at the same place: it must still serve.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import tacoma
from tacoma import Briefcase

from conftest import (
    RunningPlace,
    children_of,
    is_root,
    needs_root,
    pid_alive,
    processes_of_uid,
    wait_until,
)


@pytest.fixture
def tight(start_place: Callable[..., RunningPlace]) -> RunningPlace:
    return start_place("--cpu-seconds", "2", "--memory", str(512 * 2**20),
                       "--file-size", str(2**20), "--processes", "32",
                       "--open-files", "64", "--meet-seconds", "30")


def run(place: RunningPlace, code: str, timeout: float | None = 60) -> Briefcase:
    return tacoma.meet(place.target("ag_python"), code=textwrap.dedent(code), timeout=timeout)


def still_serves(place: RunningPlace) -> None:
    assert tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}
    assert run(place, 'bc["R"] = [b"ok"]')["R"] == [b"ok"]


# --------------------------------------------------------------------------- confinement
@pytest.mark.skipif(not is_root, reason="a mount namespace per worker (the tmpfs that holds "
                    "its directory) is certain only as root")
def test_workers_working_directories_are_in_their_own_tmpfs_not_on_disk(
        tight: RunningPlace) -> None:
    """The directory an agent works in is made in its worker's own tmpfs, mounted on the
    work directory: the place makes none on disk, for a running agent or a ready worker."""
    result = run(tight, 'import os\nbc["CWD"] = [os.getcwd()]')
    assert Path(result.text("CWD")[0]).parent == tight.state_dir / "work"
    # Seen from the host, the work directory holds the workers' output files only (the
    # ready workers of every language among them).
    on_disk = list((tight.state_dir / "work").iterdir())
    assert on_disk and all(path.suffix == ".out" and path.is_file() for path in on_disk), \
        on_disk


def test_each_meet_gets_a_fresh_process_never_the_places(tight: RunningPlace) -> None:
    # A mark left in the interpreter by one meet is not there for another program's: a new
    # address space each time, never the place's (whose pid, as root, an agent cannot even
    # see). (The same program of the same principal may find it: tests/test_warm.py.)
    code = """
        import os, sys
        bc["SEEN"] = [str(hasattr(sys, "tacoma_mark"))]
        sys.tacoma_mark = True
        bc["PID"] = [str(os.getpid())]
        bc["PLACE"] = [str(os.path.exists("/proc/%d" % int(bc.text("PLACE_PID")[0])))]
    """
    for n in range(3):
        result = tacoma.meet(tight.target("ag_python"), {"PLACE_PID": [str(tight.proc.pid)]},
                             code=textwrap.dedent(code) + f"# program {n}\n")
        assert result["SEEN"] == [b"False"]
        assert result["PID"] != [str(tight.proc.pid).encode()]
        if is_root:  # the first process of a PID namespace of its own
            assert result["PID"] == [b"1"]
            assert result["PLACE"] == [b"False"]


def test_agent_process_is_confined(tight: RunningPlace, monkeypatch: pytest.MonkeyPatch
                                   ) -> None:
    result = run(tight, """
        import os, resource
        status = open("/proc/self/status").read()
        bc["NNP"] = [l.split()[1] for l in status.splitlines() if l.startswith("NoNewPrivs")]
        bc["SID"] = [str(os.getsid(0) == os.getpid())]
        bc["CWD"] = [os.getcwd()]
        bc["ENV"] = sorted(os.environ)
        bc["CPU"] = [str(resource.getrlimit(resource.RLIMIT_CPU)[0])]
        bc["AS"] = [str(resource.getrlimit(resource.RLIMIT_AS)[0])]
        bc["FSIZE"] = [str(resource.getrlimit(resource.RLIMIT_FSIZE)[0])]
        bc["NOFILE"] = [str(resource.getrlimit(resource.RLIMIT_NOFILE)[0])]
        bc["CORE"] = [str(resource.getrlimit(resource.RLIMIT_CORE)[0])]
        open("scratch.txt", "w").write("mine")
    """)
    assert result["NNP"] == [b"1"]
    assert result["SID"] == [b"True"]
    workdir = result.text("CWD")[0]
    assert workdir.startswith(str(tight.state_dir / "work"))
    assert set(result.text("ENV")) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TACOMA_DATA"}
    assert 2 <= int(result["CPU"][0]) <= 5  # the limit counts from the worker's start
    assert int(result["AS"][0]) == 512 * 2**20
    assert int(result["FSIZE"][0]) == 2**20
    assert int(result["NOFILE"][0]) == 64
    assert int(result["CORE"][0]) == 0
    wait_until(lambda: not os.path.exists(workdir), what="the working directory's removal")


def test_place_secrets_do_not_reach_agents(start_place, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setenv("TACOMA_TEST_SECRET", "hunter2")
    p = start_place()
    result = run(p, 'import os; bc["E"] = [os.environ.get("TACOMA_TEST_SECRET", "")]')
    assert result["E"] == [b""]


# --------------------------------------------------------------------------- misbehaviour
def test_crash(tight: RunningPlace) -> None:
    with pytest.raises(tacoma.AgentKilled, match="SIGSEGV") as info:
        run(tight, "import ctypes; ctypes.string_at(0)")
    assert "Segmentation fault" in info.value.detail  # faulthandler's report came back
    with pytest.raises(tacoma.AgentKilled, match="status 7"):
        run(tight, "import os; os._exit(7)")
    still_serves(tight)


def test_infinite_loop_hits_the_cpu_limit(tight: RunningPlace) -> None:
    with pytest.raises(tacoma.AgentKilled, match=r"CPU time limit of 2 s"):
        run(tight, "while True: pass")
    still_serves(tight)


@needs_root
def test_timeout_kills_the_agent_and_its_children(tight: RunningPlace) -> None:
    # The agent leaves its uid in a cabinet (the one thing of it that outlives its meet).
    with pytest.raises(tacoma.MeetTimeout):
        run(tight, """
            import os, time
            child = os.fork()
            if child == 0:
                time.sleep(600)
                os._exit(0)
            cabinet_replace("timeout-test", "UID", [str(os.getuid()).encode()])
            time.sleep(600)
        """, timeout=3)
    uid = int(tacoma.meet(tight.target("ag_cabinet"), {
        "OP": [b"read"], "CABINET": [b"timeout-test"], "FOLDER": [b"UID"]})["UID"][0])
    wait_until(lambda: not processes_of_uid(uid), what="the agent's processes to die")
    still_serves(tight)


def test_memory_bomb(tight: RunningPlace) -> None:
    with pytest.raises((tacoma.AgentFailed, tacoma.AgentKilled), match=r"MemoryError|memory"):
        run(tight, """
            hog = []
            while True:
                hog.append(bytearray(16 * 1024 * 1024))
        """)
    still_serves(tight)


def test_huge_output_hits_the_file_size_limit(tight: RunningPlace) -> None:
    with pytest.raises(tacoma.AgentFailed, match="File too large"):
        run(tight, """
            import sys
            chunk = "x" * 65536
            while True:
                sys.stdout.write(chunk)
                sys.stdout.flush()
        """)
    with pytest.raises(tacoma.AgentFailed, match="File too large"):
        run(tight, 'open("big", "wb").write(b"x" * (4 * 1024 * 1024))')
    still_serves(tight)


def test_fork_bomb_is_bounded_and_cleaned_up(tight: RunningPlace) -> None:
    # A bounded bomb: at most 300 forks, each child sleeping; the limit is 32 processes.
    result = run(tight, """
        import os, time
        children, refused = [], 0
        for _ in range(300):
            try:
                pid = os.fork()
            except OSError:
                refused += 1
                break
            if pid == 0:
                time.sleep(600)
                os._exit(0)
            children.append(pid)
        bc["CHILDREN"] = [str(p) for p in children]
        bc["REFUSED"] = [str(refused)]
        bc["UID"] = [str(os.getuid())]
    """)
    children = [int(p) for p in result["CHILDREN"]]
    assert result["REFUSED"] == [b"1"]
    assert 0 < len(children) < 32
    if is_root:  # its children are in its PID namespace: found on the host by its uid
        uid = int(result["UID"][0])
        wait_until(lambda: not processes_of_uid(uid), what="the bomb's children to die")
    else:
        wait_until(lambda: not any(pid_alive(p) for p in children),
                   what="the bomb's children to die")
    still_serves(tight)


def test_processes_that_leave_the_group_are_killed_too(tight: RunningPlace) -> None:
    """A process that left the agent's session and process group dies with the meet all
    the same: as root its PID namespace and cgroups end it; without root its zygote, a
    child subreaper, adopts it when its parent dies and kills it."""
    result = run(tight, """
        import os, time
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()  # a new session: out of the agent's process group
            if os.fork() == 0:
                os.write(w, str(os.getpid()).encode())
                time.sleep(600)
            os._exit(0)
        bc["ESCAPEE"] = [os.read(r, 32)]
        bc["UID"] = [str(os.getuid())]
    """)
    escapee = int(result["ESCAPEE"][0])
    assert escapee > 1
    if is_root:  # in its PID namespace: found on the host by its uid
        uid = int(result["UID"][0])
        wait_until(lambda: not processes_of_uid(uid), what="the escaped process to die")
    else:  # no PID namespace: its pid is the host's
        wait_until(lambda: not pid_alive(escapee), what="the escaped process to die")
    still_serves(tight)


#: A daemon in a session of its own, ignoring SIGHUP and SIGTERM, whose pid comes back.
SETSID_DAEMON = {
    "python": """
import os, signal, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for sig in (signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        os.write(w, str(os.getpid()).encode())
        time.sleep(600)
    os._exit(0)
os.close(w)
bc["DAEMON"] = [os.read(r, 32)]
""",
    "tcl": """
exec setsid -f /bin/sh -c {trap "" HUP TERM; echo $$ > daemon.pid; exec sleep 600} &
set daemon ""
for {set i 0} {$i < 400 && $daemon eq ""} {incr i} {
    if {[file exists daemon.pid]} {
        set f [open daemon.pid]; set daemon [string trim [read $f]]; close $f
    }
    if {$daemon eq ""} { after 25 }
}
bc_append_text DAEMON $daemon
""",
    "scheme": """
(use-modules (ice-9 rdelim))
(define channel (pipe))
(define child (primitive-fork))
(when (= child 0)
  (setsid)
  (when (= (primitive-fork) 0)
    (sigaction SIGHUP SIG_IGN) (sigaction SIGTERM SIG_IGN)
    (display (getpid) (cdr channel)) (newline (cdr channel)) (force-output (cdr channel))
    (sleep 600))
  (primitive-exit 0))
(waitpid child)
(bc-append "DAEMON" (read-line (car channel)))
""",
    "c": """
#include <tacoma.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    int fds[2];
    char daemon[32] = {0};
    if (pipe(fds) != 0) tc_fail("pipe");
    pid_t child = fork();
    if (child == 0) {
        setsid();
        if (fork() == 0) {
            signal(SIGHUP, SIG_IGN); signal(SIGTERM, SIG_IGN);
            dprintf(fds[1], "%d", (int)getpid());
            for (;;) pause();
        }
        _exit(0);
    }
    close(fds[1]);
    waitpid(child, NULL, 0);
    if (read(fds[0], daemon, sizeof daemon - 1) <= 0) tc_fail("no daemon");
    if (tc_append_textf(TC_SELF, "DAEMON", "%s", daemon) != 0) tc_fail("%s", tc_error());
    return 0;
}
""",
}


@pytest.mark.skipif(is_root, reason="as root an agent's PID namespace and cgroups end its "
                    "processes: test_hostile tries this daemon in every language")
@pytest.mark.parametrize("language", sorted(SETSID_DAEMON))
def test_a_setsid_daemon_dies_with_the_meet_without_root(tight: RunningPlace,
                                                         language: str) -> None:
    """Without root no PID namespace or cgroup holds an agent's processes: its zygote, a
    child subreaper, adopts the daemon when the daemon's parent exits, and kills it."""
    result = tacoma.meet(tight.target(f"ag_{language}"), code=SETSID_DAEMON[language],
                         timeout=60)
    daemon = int(result["DAEMON"][0])
    assert daemon > 1
    wait_until(lambda: not pid_alive(daemon), what=f"the {language} agent's daemon to die")
    still_serves(tight)


@pytest.mark.skipif(is_root, reason="as root the pids cgroup, not RLIMIT_NPROC, bounds processes")
def test_rlimit_nproc_bounds_processes_when_not_root(tight: RunningPlace) -> None:
    result = run(tight, """
        import resource
        bc["NPROC"] = [str(resource.getrlimit(resource.RLIMIT_NPROC)[0])]
    """)
    assert int(result["NPROC"][0]) != resource.RLIM_INFINITY


def test_the_nproc_allowance_counts_the_users_threads() -> None:
    """RLIMIT_NPROC is checked against the user's tasks, threads included: a limit set
    from a count of processes alone left agents of a user with a browser open unable to
    start at all (their limit was below what the user already ran)."""
    import threading

    from tacoma.place.workers._containment import _user_process_count

    before = _user_process_count()
    release = threading.Event()
    threads = [threading.Thread(target=release.wait, daemon=True) for _ in range(40)]
    for thread in threads:
        thread.start()
    try:
        assert _user_process_count() >= before + 40 - 5  # other tasks of the user come and go
    finally:
        release.set()
        for thread in threads:
            thread.join()


# --------------------------------------------------------------------------- who agents are
@needs_root
def test_agents_run_under_uids_of_their_own(tight: RunningPlace) -> None:
    secret = tight.state_dir / "data" / "root-only"  # where agents may read, but for this
    secret.write_text("hunter2")
    secret.chmod(0o600)
    code = f"""
        import os, tempfile
        bc["UID"] = [str(os.getuid())]
        bc["GID"] = [str(os.getgid())]
        bc["GROUPS"] = [str(g) for g in os.getgroups()]
        try:
            os.kill({tight.proc.pid}, 0)
            bc["SIGNAL"] = [b"allowed"]
        except (PermissionError, ProcessLookupError):  # not its PID namespace, nor its uid
            bc["SIGNAL"] = [b"denied"]
        try:
            open({str(secret)!r}).read()
            bc["SECRET"] = [b"read"]
        except PermissionError:
            bc["SECRET"] = [b"denied"]
        with tempfile.NamedTemporaryFile() as f:  # TMPDIR is the agent's own directory
            f.write(b"scratch")
        open("here.txt", "w").write("the working directory is the agent's")
    """
    first, second = run(tight, code), run(tight, textwrap.dedent(code) + "# another one\n")
    assert int(first["UID"][0]) >= 0x70000000
    assert first["UID"] == first["GID"]
    assert first["GROUPS"] == []
    assert first["UID"] != second["UID"]  # agents cannot signal each other either
    assert first["SIGNAL"] == [b"denied"]
    assert first["SECRET"] == [b"denied"]
    still_serves(tight)


@needs_root
def test_same_uid_runs_agents_as_root(start_place: Callable[..., RunningPlace]) -> None:
    p = start_place("--same-uid")
    assert run(p, 'import os; bc["UID"] = [str(os.getuid())]')["UID"] == [b"0"]


def python_zygote(place: RunningPlace) -> int:
    """The Python zygote: the place's child that forks its Python workers."""
    for child in children_of(place.proc.pid):
        with contextlib.suppress(OSError):
            if b"interpreters.python" in Path(f"/proc/{child}/cmdline").read_bytes():
                return child
    raise AssertionError("the place has no Python zygote")


def test_a_killed_zygote_is_replaced(tight: RunningPlace) -> None:
    # Workers are forked by a zygote per language, a child of the place.
    run(tight, "pass")
    zygote = python_zygote(tight)
    os.kill(zygote, signal.SIGKILL)
    wait_until(lambda: not pid_alive(zygote), what="the zygote to die")
    run(tight, 'bc["R"] = [b"ok"]')
    assert python_zygote(tight) != zygote
    still_serves(tight)


def test_cover_plan_reveals_what_lies_below_a_closed_directory(tmp_path: Path) -> None:
    from tacoma.place.workers._containment import cover_plan

    closed = tmp_path / "checkout"
    needed = closed / "interpreters" / "c"
    needed.mkdir(parents=True)
    closed.chmod(0o700)
    # The closed directory itself (a cwd on sys.path) must not hide what is needed below it.
    revealed = [path for _, paths in cover_plan([str(closed), str(needed)])
                for path in paths]
    assert revealed == [str(needed)]


def test_cover_plan_reveals_a_path_below_a_closed_directory_below_a_needed_one(
        tmp_path: Path) -> None:
    # The place's cwd (on sys.path) holds a 0700 directory holding the state directory:
    # the state directory must be revealed on its own, or agents could not reach it.
    from tacoma.place.workers._containment import cover_plan

    cwd = tmp_path / "cwd"
    state = cwd / "private" / "state"
    state.mkdir(parents=True)
    (cwd / "private").chmod(0o700)
    revealed = [path for _, paths in cover_plan([str(cwd), str(state)]) for path in paths]
    assert str(state) in revealed
