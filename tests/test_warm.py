"""Warm workers: a worker reused only for the same principal and the same program.

A place keeps a worker warm after a meet that ended well and hands it only to a later meet
of the same principal's same program (place.workers._warm), after the worker made itself
clean (agent._reuse). Here an agent in each language tries to leave something behind for
the next meet, through every channel it has: files in its working directory, /tmp,
/var/tmp and /dev/shm, a child process, its environment, its working directory, a held
descriptor and its interpreter's state; then looks for what the last meet left. Met by
two real identities (alice and mallory, certificates of the tests' CA): mallory running
alice's very program, and alice running another program, see nothing of it; alice's own
next meet of the same program is served warm and may see what it left in process memory
(a Python builtin, a Guile binding), and nothing else.

Reuse needs a PID namespace, a tmpfs and cgroups per worker: the module needs root.
"""

from __future__ import annotations

import json
import os
import secrets
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tacoma

from conftest import (
    RunningPlace,
    language_params,
    launch_place,
    meet_as,
    tacoma_cli,
    wait_until,
    wasm_c_problem,
)

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason=(
        "workers are reused only where each has a PID namespace, a tmpfs and cgroups of its "
        "own: as root")),
]

#: Each language's agent: first what the meet before it left (SEEN: file:cwd, file:tmp,
#: file:vartmp, file:shm, process, env, cwd, fd, memory), then it leaves all of it.
PLANTER = {
    "python": textwrap.dedent("""
        import builtins, os, subprocess
        seen = []
        for where, directory in (("cwd", "."), ("tmp", "/tmp"), ("vartmp", "/var/tmp"),
                                 ("shm", "/dev/shm")):
            if any(n.startswith("planted") for n in os.listdir(directory)):
                seen.append("file:" + where)
        if any(p.isdigit() and int(p) != os.getpid() for p in os.listdir("/proc")):
            seen.append("process")
        if "PLANTED" in os.environ:
            seen.append("env")
        if os.getcwd() != os.environ["HOME"]:
            seen.append("cwd")
        for fd in os.listdir("/proc/self/fd"):
            try:
                if "planted" in os.readlink("/proc/self/fd/" + fd):
                    seen.append("fd")
                    break
            except OSError:
                pass
        if hasattr(builtins, "PLANTED"):
            seen.append("memory")
        bc["SEEN"] = seen
        for directory in (".", "/tmp", "/var/tmp", "/dev/shm"):
            with open(directory + "/planted", "w") as f:
                f.write("x")
        subprocess.Popen(["sleep", "60"])
        os.environ["PLANTED"] = "1"
        os.chdir("/tmp")
        os.dup2(os.open("/tmp/planted-fd", os.O_CREAT | os.O_WRONLY), 50)
        builtins.PLANTED = True
    """),
    "tcl": textwrap.dedent("""
        set seen {}
        foreach {where dir} {cwd . tmp /tmp vartmp /var/tmp shm /dev/shm} {
            if {[llength [glob -nocomplain -directory $dir planted*]]} {
                lappend seen file:$where
            }
        }
        foreach p [glob -nocomplain -directory /proc -tails {[0-9]*}] {
            if {$p != [pid]} { lappend seen process; break }
        }
        if {[info exists ::env(PLANTED)]} { lappend seen env }
        if {[pwd] ne $::env(HOME)} { lappend seen cwd }
        foreach f [glob -nocomplain /proc/self/fd/*] {
            if {![catch {file readlink $f} target] && [string match *planted* $target]} {
                lappend seen fd
                break
            }
        }
        if {[llength [info procs ::planted]]} { lappend seen memory }
        foreach s $seen { bc_append_text SEEN $s }
        foreach dir {. /tmp /var/tmp /dev/shm} {
            set f [open $dir/planted w]
            puts $f x
            close $f
        }
        exec sleep 60 &
        set ::env(PLANTED) 1
        cd /tmp
        set ::held [open /tmp/planted-fd w]
        proc ::planted {} {}
    """),
    "scheme": textwrap.dedent("""
        (use-modules (ice-9 ftw))
        (define seen '())
        (define (note! s) (set! seen (cons s seen)))
        (define (planted-in? dir)
          (or-map (lambda (n) (string-prefix? "planted" n)) (or (scandir dir) '())))
        (for-each (lambda (pair)
                    (if (planted-in? (cdr pair)) (note! (string-append "file:" (car pair)))))
                  '(("cwd" . ".") ("tmp" . "/tmp") ("vartmp" . "/var/tmp") ("shm" . "/dev/shm")))
        (if (or-map (lambda (n) (let ((pid (string->number n)))
                                  (and pid (not (= pid (getpid))))))
                    (scandir "/proc"))
            (note! "process"))
        (if (getenv "PLANTED") (note! "env"))
        (if (not (string=? (getcwd) (getenv "HOME"))) (note! "cwd"))
        (if (or-map (lambda (n)
                      (let ((target (false-if-exception
                                     (readlink (string-append "/proc/self/fd/" n)))))
                        (and target (string-contains target "planted"))))
                    (scandir "/proc/self/fd"))
            (note! "fd"))
        (if (module-defined? (resolve-module '(guile)) 'planted-mark) (note! "memory"))
        (for-each (lambda (s) (bc-append "SEEN" s)) (reverse seen))
        (for-each (lambda (dir)
                    (call-with-output-file (string-append dir "/planted")
                      (lambda (port) (display "x" port))))
                  '("." "/tmp" "/var/tmp" "/dev/shm"))
        (module-define! (resolve-module '(guile)) 'planted-pipe
                        ((@ (ice-9 popen) open-pipe*) OPEN_READ "sleep" "60"))
        (setenv "PLANTED" "1")
        (chdir "/tmp")
        (module-define! (resolve-module '(guile)) 'planted-held (open-file "/tmp/planted-fd" "w"))
        (module-define! (resolve-module '(guile)) 'planted-mark #t)
    """),
    "c": textwrap.dedent("""
        #include <tacoma.h>
        #include <dirent.h>
        #include <fcntl.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        #include <unistd.h>

        static int planted_in(const char *dir) {
            DIR *d = opendir(dir);
            struct dirent *e;
            int found = 0;
            if (!d) return 0;
            while ((e = readdir(d)))
                if (!strncmp(e->d_name, "planted", 7)) found = 1;
            closedir(d);
            return found;
        }

        int main(void) {
            const char *dirs[4][2] = {{"cwd", "."}, {"tmp", "/tmp"}, {"vartmp", "/var/tmp"},
                                      {"shm", "/dev/shm"}};
            for (int i = 0; i < 4; i++)
                if (planted_in(dirs[i][1]))
                    tc_append_textf(TC_SELF, "SEEN", "file:%s", dirs[i][0]);
            DIR *proc = opendir("/proc");
            struct dirent *e;
            int others = 0;
            while (proc && (e = readdir(proc))) {
                int pid = atoi(e->d_name);
                if (pid > 0 && pid != getpid() && pid != getppid()) others = 1;
            }
            if (proc) closedir(proc);
            if (others) tc_append_textf(TC_SELF, "SEEN", "process");
            if (getenv("PLANTED")) tc_append_textf(TC_SELF, "SEEN", "env");
            char cwd[4096];
            if (!getcwd(cwd, sizeof cwd) || strcmp(cwd, getenv("HOME")))
                tc_append_textf(TC_SELF, "SEEN", "cwd");
            DIR *fds = opendir("/proc/self/fd");
            int held = 0;
            while (fds && (e = readdir(fds))) {
                char path[300], target[4096];
                snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
                ssize_t n = readlink(path, target, sizeof target - 1);
                if (n > 0) { target[n] = 0; if (strstr(target, "planted")) held = 1; }
            }
            if (fds) closedir(fds);
            if (held) tc_append_textf(TC_SELF, "SEEN", "fd");
            const char *where[4] = {".", "/tmp", "/var/tmp", "/dev/shm"};
            for (int i = 0; i < 4; i++) {
                char path[64];
                snprintf(path, sizeof path, "%s/planted", where[i]);
                FILE *f = fopen(path, "w");
                if (f) { fputs("x", f); fclose(f); }
            }
            if (fork() == 0) { sleep(60); _exit(0); }
            setenv("PLANTED", "1", 1);
            if (chdir("/tmp") != 0) return 1;
            open("/tmp/planted-fd", O_CREAT | O_WRONLY, 0600);
            return 0;
        }
    """),
}
AGENTS = {"python": "ag_python", "tcl": "ag_tcl", "scheme": "ag_scheme", "c": "ag_c"}
#: What the same program of the same principal may find left in a warm worker: what the
#: agent left in its interpreter's memory (Tcl gets a new interpreter each meet; a C agent
#: is a new process each meet), and nothing else.
SAME_PROGRAM_SEES = {"python": ["memory"], "tcl": [], "scheme": ["memory"], "c": []}
#: A comment in each language: another program, the same in every other way.
COMMENT = {"python": "# another program\n", "tcl": "# another program\n",
           "scheme": "; another program\n", "c": "/* another program */\n"}


@pytest.fixture(scope="module")
def warm_place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlace]:
    running = launch_place(tmp_path_factory.mktemp("warm"), "--cpu-seconds", "3")
    yield running
    assert running.stop() == 0, running.log()


def _token(place: RunningPlace) -> str:
    return (place.state_dir / "admin.token").read_text().strip()


def _pool(place: RunningPlace, agent: str) -> Any:
    status = tacoma.place_status(place.address, token=_token(place))
    return next(pool for pool in status.pools if pool.agent == agent)


def _seen(who: Path, place: RunningPlace, agent: str, code: str,
          folders: dict[str, Any] | None = None) -> list[str]:
    result = meet_as(who, place.address, agent, folders, code=code, timeout=60)
    return sorted(result.text("SEEN")) if "SEEN" in result else []


# WebAssembly workers are shared by a principal's programs: their own test is below.
@pytest.mark.parametrize("language", language_params(leave_out=("wasm",)))
def test_nothing_a_meet_leaves_reaches_another_principal_or_program(
        warm_place: RunningPlace, alice: Path, mallory: Path, language: str) -> None:
    agent, code = AGENTS[language], PLANTER[language]
    # A program's worker is kept warm from its second meet on (the first may be its only).
    for _ in range(2):
        first = _seen(alice, warm_place, agent, code)
        assert first == [], f"a fresh worker found {first}"
    warm_before = _pool(warm_place, agent).warm
    # The same program of the same principal: a warm worker, clean but for its memory.
    assert _seen(alice, warm_place, agent, code) == SAME_PROGRAM_SEES[language]
    assert _pool(warm_place, agent).warm == warm_before + 1, "not served warm"
    # Another principal running that very program, and another program of the same
    # principal: a fresh worker each, which finds nothing of alice's program (each met
    # twice: the second of each is kept warm).
    other = COMMENT[language] + code
    for _ in range(2):
        assert _seen(mallory, warm_place, agent, code) == []
        assert _seen(alice, warm_place, agent, other) == []
    # Each of those left its own things too; each program finds only its own.
    assert _seen(alice, warm_place, agent, code) == SAME_PROGRAM_SEES[language]
    assert _seen(mallory, warm_place, agent, code) == SAME_PROGRAM_SEES[language]
    assert _seen(alice, warm_place, agent, other) == SAME_PROGRAM_SEES[language]
    assert _seen(mallory, warm_place, agent, other) == []


#: A WebAssembly agent (C built for it) that says what it finds of an earlier meet: a global
#: and a heap block it leaves behind, marked.
WASM_PLANTER = textwrap.dedent("""
    #include <tacoma.h>
    static int planted;
    static char *left;
    int main(void) {
        if (planted || left) tc_append_text(TC_SELF, "SEEN", "memory");
        planted = 1;
        left = malloc(4096);
        if (left) memcpy(left, "planted", 8);
        return 0;
    }
""")


def test_a_webassembly_worker_serves_its_principals_programs_each_in_a_new_instance(
        warm_place: RunningPlace, alice: Path, mallory: Path) -> None:
    """A warm ag_wasm worker serves later meets of its principal, whatever their program;
    each finds nothing of the meets before; another principal never gets it."""
    if (problem := wasm_c_problem()) is not None:
        pytest.skip(problem)
    other = "/* another program */\n" + WASM_PLANTER
    for _ in range(2):
        assert _seen(alice, warm_place, "ag_wasm", WASM_PLANTER) == []
    before = _pool(warm_place, "ag_wasm")
    assert _seen(alice, warm_place, "ag_wasm", WASM_PLANTER) == []
    assert _seen(alice, warm_place, "ag_wasm", other) == []  # another program: same worker
    after = _pool(warm_place, "ag_wasm")
    assert after.warm == before.warm + 2, "not served warm"
    assert _seen(mallory, warm_place, "ag_wasm", WASM_PLANTER) == []
    assert _pool(warm_place, "ag_wasm").fresh == after.fresh + 1, "another principal's worker"


def test_a_fresh_meet_never_gets_a_warm_worker(warm_place: RunningPlace, alice: Path) -> None:
    code = PLANTER["python"]
    _seen(alice, warm_place, "ag_python", code)
    _seen(alice, warm_place, "ag_python", code)
    # A FRESH folder (tacoma.meet(fresh=True), tacoma meet --fresh) asks for a new process.
    assert _seen(alice, warm_place, "ag_python", code, {"FRESH": [b""]}) == []


def test_a_failed_meet_ends_its_worker(warm_place: RunningPlace, alice: Path) -> None:
    code = textwrap.dedent("""
        import builtins
        bc["SEEN"] = ["memory"] if hasattr(builtins, "FAILED_MARK") else []
        builtins.FAILED_MARK = True
        if "FAIL" in bc:
            fail("as asked")
    """)
    assert _seen(alice, warm_place, "ag_python", code) == []
    assert _seen(alice, warm_place, "ag_python", code) == []  # kept from the second meet
    assert _seen(alice, warm_place, "ag_python", code) == ["memory"]  # warm
    with pytest.raises(tacoma.AgentFailed, match="as asked"):
        meet_as(alice, warm_place.address, "ag_python", {"FAIL": [b""]}, code=code)
    assert _seen(alice, warm_place, "ag_python", code) == []  # its worker was not kept


def test_each_warm_meet_has_its_own_cpu_time_and_output(warm_place: RunningPlace,
                                                        alice: Path) -> None:
    # The place allows 3 s of CPU time a meet: three meets of 1.5 s each in one warm
    # worker all end well, and one that goes on is killed at its own limit.
    code = textwrap.dedent("""
        import os, time
        print("output of meet", bc.text("N")[0], flush=True)
        end = time.process_time() + float(bc.text("BURN")[0])
        while time.process_time() < end:
            pass
        if "EXIT" in bc:
            os._exit(3)
    """)
    warm = _pool(warm_place, "ag_python").warm
    for n in range(4):
        meet_as(alice, warm_place.address, "ag_python", {"N": [str(n)], "BURN": ["1.5"]},
                code=code)
    assert _pool(warm_place, "ag_python").warm >= warm + 2
    with pytest.raises(tacoma.AgentKilled, match="CPU time limit"):
        meet_as(alice, warm_place.address, "ag_python", {"N": ["3"], "BURN": ["30"]},
                code=code)
    # What an agent writes is its meet's own: the output shown with its failure.
    meet_as(alice, warm_place.address, "ag_python", {"N": ["4"], "BURN": ["0"]}, code=code)
    with pytest.raises(tacoma.AgentKilled) as killed:
        meet_as(alice, warm_place.address, "ag_python",
                {"N": ["5"], "BURN": ["0"], "EXIT": [b""]}, code=code)
    assert "output of meet 5" in killed.value.detail
    assert "output of meet 4" not in killed.value.detail


def test_ps_and_status_tell_warm_from_fresh(warm_place: RunningPlace, alice: Path) -> None:
    status = tacoma.place_status(warm_place.address, token=_token(warm_place))
    assert "reused for later meets of the same principal and program" in str(status)
    python = next(pool for pool in status.pools if pool.agent == "ag_python")
    assert python.warm > 0 and python.fresh > 0
    assert python.warm + python.fresh == python.ended


def test_an_idle_warm_worker_goes(warm_place: RunningPlace, alice: Path) -> None:
    code = 'import builtins\nbc["SEEN"] = ["memory"] if hasattr(builtins, "IDLE") else []\n' \
           'builtins.IDLE = True\n'
    assert _seen(alice, warm_place, "ag_python", code) == []
    assert _seen(alice, warm_place, "ag_python", code) == []
    wait_until(lambda: _pool(warm_place, "ag_python").idle_warm == 0, 30,
               "the idle warm workers to be destroyed")
    assert _seen(alice, warm_place, "ag_python", code) == []


def test_a_place_that_never_reuses(start_place: Any, alice: Path) -> None:
    place = start_place("--reuse", "never")
    code = PLANTER["python"]
    for _ in range(3):
        assert _seen(alice, place, "ag_python", code) == []
    assert _pool(place, "ag_python").warm == 0
    status = tacoma.place_status(place.address, token=_token(place))
    assert "a fresh process for every meet (--reuse never)" in str(status)


def test_a_warm_worker_serves_at_most_its_meets(start_place: Any, alice: Path) -> None:
    place = start_place("--warm-meets", "2")
    code = 'import builtins\nbuiltins.N = getattr(builtins, "N", 0) + 1\nbc["N"] = [str(N)]\n'
    counts = [meet_as(alice, place.address, "ag_python", code=code).text("N")[0]
              for _ in range(5)]
    # The first meet's worker is not kept (a program met once); the second's serves the
    # third, and goes after it: its two meets.
    assert counts == ["1", "1", "2", "1", "2"]


def test_the_meet_cli_and_api_take_fresh(warm_place: RunningPlace, tmp_path: Path) -> None:
    code = 'import builtins\nbc["SEEN"] = ["memory"] if hasattr(builtins, "API") else []\n' \
           'builtins.API = True\n'
    target = warm_place.target("ag_python")
    tacoma.meet(target, code=code)
    tacoma.meet(target, code=code)
    assert tacoma.meet(target, code=code).text("SEEN") == ["memory"]
    assert tacoma.meet(target, code=code, fresh=True).text("SEEN") == []
    program = tmp_path / "mark.py"
    program.write_text(code)
    for flags, seen in (([], ["memory"]), (["--fresh"], [])):
        tacoma_cli("meet", target, "--code", str(program), "--json")  # warm for the CLI's
        out = tacoma_cli("meet", target, "--code", str(program), "--json", *flags)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["folders"].get("SEEN", []) == seen, (flags, out.stdout)


#: An agent that makes a System V shared memory segment anyone may attach (mode 0666) under
#: KEY, and reports the keys of the segments it can see.
SYSV = {
    "python": textwrap.dedent("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if "MAKE" in bc:
            shmid = libc.shmget(int(bc.text("KEY")[0]), 4096, 0o1000 | 0o666)  # IPC_CREAT
            bc["MADE"] = [str(shmid)]
        lines = open("/proc/sysvipc/shm").read().splitlines()[1:]
        bc["SEEN"] = [line.split()[0] for line in lines]
    """),
    "c": textwrap.dedent("""
        #include <tacoma.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <sys/shm.h>

        int main(void) {
            tc_list key, make;
            if (tc_folder(TC_SELF, "KEY", &key) == 0 && key.count > 0 &&
                    tc_folder(TC_SELF, "MAKE", &make) == 0 && make.count > 0) {
                int id = shmget((key_t)atol((const char *)key.items[0].data), 4096,
                                IPC_CREAT | 0666);
                tc_append_textf(TC_SELF, "MADE", "%d", id);
            }
            FILE *f = fopen("/proc/sysvipc/shm", "r");
            char line[512];
            if (f && fgets(line, sizeof line, f))
                while (fgets(line, sizeof line, f)) {
                    long k;
                    if (sscanf(line, "%ld", &k) == 1)
                        tc_append_textf(TC_SELF, "SEEN", "%ld", k);
                }
            if (f) fclose(f);
            return 0;
        }
    """),
}


@pytest.mark.parametrize("language", ["python", "c"])
def test_shared_memory_stays_with_its_worker(warm_place: RunningPlace, alice: Path,
                                             mallory: Path, language: str) -> None:
    """System V IPC lives in a namespace of each worker's own: a segment an agent makes
    (even one anyone may attach) is seen by no other principal's agent, and not by the
    host, and goes with the worker."""
    key = str(0x7AC0 + secrets.randbelow(1 << 20))
    agent, code = AGENTS[language], SYSV[language]
    made = meet_as(alice, warm_place.address, agent, {"KEY": [key], "MAKE": [b"1"]},
                   code=code)
    assert int(made.text("MADE")[0]) >= 0, made
    assert key in made.text("SEEN")  # its own, in its own namespace
    theirs = meet_as(mallory, warm_place.address, agent, {"KEY": [key]}, code=code)
    assert key not in (theirs.text("SEEN") if "SEEN" in theirs else [])
    host = Path("/proc/sysvipc/shm").read_text().split("\n")[1:]
    assert not any(line.split() and line.split()[0] == key for line in host)


def test_a_worker_that_subverts_its_cleaning_is_not_kept(warm_place: RunningPlace,
                                                         alice: Path) -> None:
    """A Python agent can replace its own worker's cleaning, which then says Ready with a
    child still running: the place sees the child in the worker's cgroup and does not keep
    it, so even the next meet of the same program gets a fresh worker."""
    code = PLANTER["python"] + textwrap.dedent("""
        import tacoma.agent._reuse as reuse
        reuse.Baseline.clean = lambda self: None
    """)
    warm = _pool(warm_place, "ag_python").warm
    for _ in range(3):
        assert _seen(alice, warm_place, "ag_python", code) == []
    assert _pool(warm_place, "ag_python").warm == warm


def test_an_insecure_place_never_reuses(start_place: Any) -> None:
    """An --insecure place authenticates nobody: its meets have no principal to keep a
    worker for, so each gets a fresh process."""
    from tacoma.client._identity import register_place

    place = start_place("--insecure")
    register_place(place.address, None)
    code = 'import builtins\nbc["SEEN"] = ["memory"] if hasattr(builtins, "M") else []\n' \
           'builtins.M = True\n'
    for _ in range(3):
        assert tacoma.meet(place.target("ag_python"), code=code).text("SEEN") == []
