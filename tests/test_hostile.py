"""Hostile agents: every attack an agent can make on its place, in every language, fails.

Each test is one attack, written natively in Python, Tcl, Scheme (Guile) and C where the
language can express it (Tcl has no fork, syscall or socketpair: it attacks with `exec`, its
`socket` and its file commands; Scheme reaches raw system calls through Guile's FFI). Each
asserts that the attack's *effect* did not happen (no file on the host, no process left, no
byte of a secret in the result, the victim still alive...), that the caller got a clear
error where one is due, and ends with `still_serves`: ag_echo and a trivial agent in the
same language still answer.

All the attacks run at one place with tight limits (`hostile_place`). What contains them is
the sandbox a place applies as root (agent/_sandbox.py): a uid of the agent's own, pids,
memory and CPU cgroups, a mount namespace (the state and trust directories covered, one
private noexec tmpfs of --disk bytes for the working directory, /tmp, /var/tmp and
/dev/shm), a PID namespace and an empty network namespace, Landlock, a seccomp filter, and
no capabilities. Without root most of it is absent, so the whole module needs root.

Agents that must be looked at while they run ("held" agents) publish what the test needs
(their uid, their cgroup, their directory) in a public cabinet named in their CAB folder,
then wait until the test writes GO to it (`Held`). HOSTILE_DEBUG=1 in the environment
prints every attack step's outcome (with -s).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import re
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tacoma
from tacoma import Briefcase
from tacoma.agent._interpreter import discover_interpreters

from conftest import (
    AGENT,
    RunningPlace,
    language_params,
    launch_place,
    pid_alive,
    process_status,
    processes_of_uid,
    wait_until,
    wasm_c_problem,
)

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason=(
        "contained only as root: agent uids, cgroups (pids, memory, CPU) and the mount, PID "
        "and network namespaces are what stop these attacks")),
]

MiB = 2**20
CPU_SECONDS = 2
MEMORY = 256 * MiB
PROCESSES = 32
DISK = 16 * MiB
FILE_SIZE = 1 * MiB
SECRET_NAME = "TACOMA_HOSTILE_SECRET"  # noqa: S105 - bait planted by the test itself
SECRET_VALUE = "hunter2-" + uuid.uuid4().hex

# WebAssembly agents have no processes, files or sockets to attack with: their attacks
# are their own (test_wasm_hostile.py).
LANGUAGES = language_params(leave_out=("wasm",))


@pytest.fixture(scope="module")
def hostile_place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlace]:
    """One place with tight limits for all the attacks, with a secret in its environment."""
    running = launch_place(
        tmp_path_factory.mktemp("hostile"),
        "--cpu-seconds", str(CPU_SECONDS), "--memory", str(MEMORY),
        "--processes", str(PROCESSES), "--disk", str(DISK), "--file-size", str(FILE_SIZE),
        "--open-files", "64", "--meet-seconds", "30",
        env={SECRET_NAME: SECRET_VALUE})
    yield running
    assert running.stop() == 0, running.log()


@pytest.fixture(scope="module")
def memory_place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlace]:
    """Like hostile_place, with more CPU time: a memory cgroup at its limit reclaims, and
    the kernel charges that time to the agent, which must die of its memory, not its CPU."""
    running = launch_place(
        tmp_path_factory.mktemp("hostile-memory"),
        "--cpu-seconds", "20", "--memory", str(MEMORY), "--processes", str(PROCESSES),
        "--disk", str(DISK), "--file-size", str(FILE_SIZE), "--meet-seconds", "30")
    yield running
    assert running.stop() == 0, running.log()


# --------------------------------------------------------------------------- agents' preludes
# Each language's helpers, put before every attack written in it:
#   arg NAME             the first element of folder NAME, as text ("" if none)
#   publish FOLDER V...  replace FOLDER of the cabinet named in CAB with the values
#   hold                 wait (at most 30 s) until the test writes GO to that cabinet
#   attempt LABEL ...    run one attack step, appending "LABEL|ok|what it got" or
#                        "LABEL|err|the error" (strerror's words) to folder R; an error that
#                        is a bug of the agent itself (not the system refusing) is "bug"
#   cgroup CONTROLLER    the agent's own cgroup of that controller (a host path: no cgroup ns)

PRELUDE = {
    "python": r'''
import ctypes, errno, os, shutil, signal, socket, subprocess, sys, time
_libc = ctypes.CDLL(None, use_errno=True)

def arg(name, default=""):
    values = bc.text(name)
    return values[0] if values else default

def publish(folder, *values):
    cabinet_replace(arg("CAB"), folder, [str(v) for v in values])

def hold():
    for _ in range(600):
        if cabinet_read(arg("CAB"), "GO"):
            return
        time.sleep(0.05)

def attempt(label, action):
    try:
        got = action()
    except OSError as exc:
        bc.append("R", f"{label}|err|{exc.strerror or exc}")
    else:
        bc.append("R", f"{label}|ok|{got}"[:400])

def cgroup(controller):
    for line in open("/proc/self/cgroup"):
        _, names, path = line.rstrip("\n").split(":", 2)
        if controller in names.split(","):
            return path

def raw_syscall(number, *args):
    result = _libc.syscall(number, *args)
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result

def run_program(*argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    if done.returncode != 0:
        raise OSError(done.returncode, (done.stderr or done.stdout).strip()
                      or f"status {done.returncode}")
    return done.stdout.strip()

def describe(status):
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit {os.WEXITSTATUS(status)}"
''',
    "tcl": r'''
proc arg {name} { lindex [bc_text $name] 0 }
proc publish {folder args} { cabinet_replace [arg CAB] $folder $args }
proc hold {} {
    for {set i 0} {$i < 600} {incr i} {
        if {[llength [cabinet_read [arg CAB] GO]]} { return }
        after 50
    }
}
proc attempt {label script} {
    if {[catch {uplevel 1 $script} result options]} {
        set code [dict get $options -errorcode]
        switch -glob -- [lindex $code 0] {
            POSIX { set outcome err; set detail [lindex $code 2] }
            CHILD* - NONE { set outcome err; set detail $result }
            default { set outcome bug; set detail "$code: $result" }
        }
        bc_append_text R "$label|$outcome|$detail"
    } else {
        bc_append_text R "$label|ok|[string range $result 0 400]"
    }
}
proc slurp {path} { set f [open $path r]; set text [read $f]; close $f; return $text }
proc my_uid {} { regexp {Uid:\s+(\d+)} [slurp /proc/self/status] -> uid; return $uid }
proc cgroup {controller} {
    regexp -line ":${controller}:(.*)$" [slurp /proc/self/cgroup] -> path
    return $path
}
''',
    "scheme": r'''
(use-modules (ice-9 ftw) (ice-9 rdelim) (ice-9 regex) (ice-9 popen)
             (ice-9 textual-ports) (ice-9 binary-ports) (rnrs bytevectors) (system foreign))
(define (arg name) (let ((values (bc-text name))) (if (null? values) "" (car values))))
(define (publish folder . values)
  (cabinet-replace (arg "CAB") folder
                   (map (lambda (v) (if (string? v) v (object->string v))) values)))
(define (hold)
  (let loop ((i 0))
    (when (and (< i 600) (null? (cabinet-read (arg "CAB") "GO")))
      (usleep 50000)
      (loop (+ i 1)))))
(define (%describe key args)
  (case key
    ((system-error) (list "err" (strerror (system-error-errno (cons key args)))))
    ((program-failed) (list "err" (car args)))
    (else (list "bug" (format #f "~a ~s" key args)))))
(define-syntax-rule (attempt label body ...)
  (catch #t
    (lambda () (let ((got (begin body ...))) (bc-append "R" (format #f "~a|ok|~a" label got))))
    (lambda (key . args)
      (let ((d (%describe key args)))
        (bc-append "R" (format #f "~a|~a|~a" label (car d) (cadr d)))))))
(define (cgroup controller)
  (match:substring
    (string-match (string-append ":" controller ":([^\n]*)")
                  (call-with-input-file "/proc/self/cgroup" get-string-all))
    1))
(define %syscall
  (pointer->procedure long (dynamic-func "syscall" (dynamic-link))
                      (list long long long long long long) #:return-errno? #t))
(define (raw-syscall number . args)
  (call-with-values
      (lambda () (apply %syscall number (append args (make-list (- 5 (length args)) 0))))
    (lambda (result code)
      (if (< result 0)
          (throw 'system-error "syscall" "~A" (list (strerror code)) (list code))
          result))))
(define (run-program . argv)
  ;; stderr joins stdout, so that a refusal's message comes back
  (let* ((port (apply open-pipe* OPEN_READ "/bin/sh" "-c" "exec \"$0\" \"$@\" 2>&1" argv))
         (out (get-string-all port))
         (status (close-pipe port)))
    (if (eqv? (status:exit-val status) 0)
        (string-trim-right out)
        (throw 'program-failed (if (string-null? out) (format #f "status ~a" status)
                                   (string-trim-right out))))))
(define (describe status)
  (if (status:term-sig status)
      (format #f "signal ~a" (status:term-sig status))
      (format #f "exit ~a" (status:exit-val status))))
''',
    "c": r'''
#define _GNU_SOURCE
#include <tacoma.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>

#define UNUSED __attribute__((unused))

static UNUSED const char *arg(const char *name) {
    tc_list values;  /* never freed: the text lives as long as the agent */
    if (tc_text(TC_SELF, name, &values) != 0 || values.count == 0) return "";
    return (const char *)values.items[0].data;
}
static UNUSED tc_list args(const char *name) {
    tc_list values = {0};
    tc_text(TC_SELF, name, &values);
    return values;
}
static UNUSED void publish_list(const char *folder, char **values, size_t count) {
    tc_elem elements[64];
    for (size_t i = 0; i < count && i < 64; i++)
        elements[i] = (tc_elem){(unsigned char *)values[i], strlen(values[i])};
    if (tc_cabinet_replace(arg("CAB"), folder, elements, count, 0) != 0)
        tc_fail("publish %s: %s", folder, tc_error());
}
static UNUSED void publish(const char *folder, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static UNUSED void publish(const char *folder, const char *format, ...) {
    char text[4096];
    char *values[1] = {text};
    va_list ap;
    va_start(ap, format);
    vsnprintf(text, sizeof text, format, ap);
    va_end(ap);
    publish_list(folder, values, 1);
}
static UNUSED void hold(void) {
    for (int i = 0; i < 600; i++) {
        tc_list go;
        if (tc_cabinet_read(arg("CAB"), "GO", &go) == 0) {
            size_t n = go.count;
            tc_list_free(&go);
            if (n) return;
        }
        usleep(50000);
    }
}
static UNUSED void ok(const char *label, const char *got) {
    tc_append_textf(TC_SELF, "R", "%s|ok|%s", label, got);
}
static UNUSED void err(const char *label, int code) {
    tc_append_textf(TC_SELF, "R", "%s|err|%s", label, strerror(code));
}
/* check("label", call()): errno is still the call's when check starts */
static UNUSED void check(const char *label, long result) {
    int code = errno;
    char got[32];
    if (result < 0) { err(label, code); return; }
    snprintf(got, sizeof got, "%ld", result);
    ok(label, got);
}
static UNUSED void cgroup(const char *controller, char *out, size_t size) {
    char line[1024], key[64];
    FILE *f = fopen("/proc/self/cgroup", "r");
    snprintf(key, sizeof key, ":%s:", controller);
    out[0] = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *at = strstr(line, key);
        if (at) {
            snprintf(out, size, "%s", at + strlen(key));
            out[strcspn(out, "\n")] = 0;
        }
    }
    if (f) fclose(f);
}
static UNUSED void describe(int status, char *out, size_t size) {
    if (WIFSIGNALED(status)) snprintf(out, size, "signal %d", WTERMSIG(status));
    else snprintf(out, size, "exit %d", WEXITSTATUS(status));
}
''',
}

#: A trivial agent per language: `still_serves` meets it after every attack.
TRIVIAL = {
    "python": 'bc["OK"] = [b"yes"]\n',
    "tcl": "bc_replace OK [list yes]\n",
    "scheme": '(bc-replace "OK" (list "yes"))\n',
    "c": ('#include <tacoma.h>\n'
          'int main(void) { tc_append_text(TC_SELF, "OK", "yes"); return 0; }\n'),
}


def meet(place: RunningPlace, language: str, body: str, timeout: float = 60,
         **folders: list[str] | list[bytes]) -> Briefcase:
    """Meet `language`'s agent with `body` after the language's prelude."""
    return tacoma.meet(place.target(AGENT[language]), Briefcase(folders),
                       code=PRELUDE[language] + body, timeout=timeout)


def outcomes(result: Briefcase) -> dict[str, tuple[str, str]]:
    """The agent's `attempt`s: label -> ("ok" | "err" | "bug", detail)."""
    if os.environ.get("HOSTILE_DEBUG"):
        print("\nOUTCOMES", *result.text("R"), sep="\n  ")
    found: dict[str, tuple[str, str]] = {}
    for line in result.text("R"):
        label, outcome, detail = line.split("|", 2)
        found[label] = (outcome, detail)
    return found


def refused(found: dict[str, tuple[str, str]], label: str, *words: str) -> str:
    """Assert that attack step `label` was refused (with one of `words` in its error, if
    any are given); return the error."""
    assert label in found, f"{label} was not attempted: {found}"
    outcome, detail = found[label]
    assert outcome == "err", f"{label}: {outcome} {detail!r} (all: {found})"
    if words:
        assert any(w in detail.lower() for w in words), f"{label}: {detail!r}"
    return detail


def still_serves(place: RunningPlace, language: str) -> None:
    assert place.proc.poll() is None, place.log()
    assert tacoma.meet(place.target("ag_echo"), {"PING": [b"1"]}, timeout=30)["PING"] == [b"1"]
    assert tacoma.meet(place.target(AGENT[language]), code=TRIVIAL[language],
                       timeout=60)["OK"] == [b"yes"]


# --------------------------------------------------------------------------- host-side views
def agent_uids(place: RunningPlace) -> range:
    """The uids of `place`'s agents: the block it recorded under /run/tacoma/uids."""
    for record in Path("/run/tacoma/uids").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if int(record.read_text().split()[0]) == place.proc.pid:
                low = 0x70000000 + int(record.name) * 65536
                return range(low, low + 65536)
    raise AssertionError(f"no uid block of place {place.proc.pid} under /run/tacoma/uids")


def host_pid(uid: int, ns_pid: int) -> int | None:
    """The host pid of the process of `uid` that is `ns_pid` in its own PID namespace."""
    for pid in processes_of_uid(uid):
        with contextlib.suppress(OSError):
            if process_status(pid).get("NSpid", "").split()[-1:] == [str(ns_pid)]:
                return pid
    return None


def session_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[3])


class Held:
    """An agent met in a thread, which publishes folders to a cabinet and waits for GO."""

    def __init__(self, place: RunningPlace, language: str, body: str,
                 **folders: list[str]) -> None:
        self.place = place
        self.cabinet = f"hostile-{uuid.uuid4().hex}"
        self.outcome: Briefcase | None = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.outcome = meet(place, language, body, CAB=[self.cabinet], **folders)
            except BaseException as exc:  # noqa: BLE001 - reported by result()
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc_info: object) -> None:
        with contextlib.suppress(Exception):
            self.release()
        self.thread.join(60)
        with contextlib.suppress(Exception):
            tacoma.meet(self.place.target("ag_cabinet"),
                        {"OP": ["remove"], "CABINET": [self.cabinet]}, timeout=10)

    def _cabinet(self, **request: list[str]) -> Briefcase:
        return tacoma.meet(self.place.target("ag_cabinet"),
                           {"CABINET": [self.cabinet], **request}, timeout=10)

    def read(self, folder: str) -> list[str]:
        try:
            got = self._cabinet(OP=["read"], FOLDER=[folder])
        except tacoma.CabinetError:  # the agent has not made the cabinet yet
            return []
        return got.text(folder) if folder in got else []

    def wait_for(self, folder: str, timeout: float = 30,
                 poll: Callable[[], None] | None = None) -> list[str]:
        """What the agent published in `folder`, once it has; raises the meet's error if
        the agent ended first."""
        deadline = time.monotonic() + timeout
        while True:
            if poll is not None:
                poll()
            values = self.read(folder)
            if values:
                return values
            if not self.thread.is_alive():
                self.thread.join()
                if self.error is not None:
                    raise self.error
                raise AssertionError(f"the agent ended without publishing {folder}")
            assert time.monotonic() < deadline, f"the agent did not publish {folder}"
            time.sleep(0.02)

    def release(self) -> None:
        self._cabinet(OP=["replace"], GO=["1"])

    def result(self, timeout: float = 60) -> Briefcase:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the held meet did not end"
        if self.error is not None:
            raise self.error
        assert self.outcome is not None
        return self.outcome


def no_process_left(uid: int) -> None:
    wait_until(lambda: not processes_of_uid(uid), timeout=20,
               what=f"every process of agent uid {uid} to die")


# =========================================================================== processes
FORK_BOMB = {
    "python": """
publish("UID", os.getuid())
publish("CGROUP", cgroup("pids"))
children, error = 0, ""
for _ in range(300):
    try:
        pid = os.fork()
    except OSError as exc:
        error = exc.strerror
        break
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    children += 1
publish("CHILDREN", children)
publish("REFUSED", error or "never")
hold()
""",
    "tcl": """
publish UID [my_uid]
publish CGROUP [cgroup pids]
set children 0
set error never
for {set i 0} {$i < 300} {incr i} {
    if {[catch {exec sleep 600 &} message]} { set error $message; break }
    incr children
}
publish CHILDREN $children
publish REFUSED $error
hold
""",
    "scheme": """
(publish "UID" (getuid))
(publish "CGROUP" (cgroup "pids"))
(define children 0)
(define error "never")
(let loop ((i 0))
  (when (< i 300)
    (let ((pid (catch 'system-error
                 (lambda () (primitive-fork))
                 (lambda args (set! error (strerror (system-error-errno args))) #f))))
      (cond ((not pid) #t)
            ((= pid 0) (sleep 600) (primitive-exit 0))
            (else (set! children (+ children 1)) (loop (+ i 1)))))))
(publish "CHILDREN" children)
(publish "REFUSED" error)
(hold)
""",
    "c": """
int main(void) {
    char path[512];
    const char *error = "never";
    int children = 0;
    publish("UID", "%d", (int)getuid());
    cgroup("pids", path, sizeof path);
    publish("CGROUP", "%s", path);
    for (int i = 0; i < 300; i++) {
        pid_t pid = fork();
        if (pid < 0) { error = strerror(errno); break; }
        if (pid == 0) { sleep(600); _exit(0); }
        children++;
    }
    publish("CHILDREN", "%d", children);
    publish("REFUSED", "%s", error);
    hold();
    return 0;
}
""",
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_fork_bomb_is_bounded_and_nothing_of_it_survives(
        hostile_place: RunningPlace, language: str) -> None:
    """Forking until refused stops at --processes (the pids cgroup), as the host sees it,
    and the meet's end kills every process of the bomb."""
    with Held(hostile_place, language, FORK_BOMB[language]) as held:
        uid = int(held.wait_for("UID")[0])
        assert uid in agent_uids(hostile_place)
        refusal = held.wait_for("REFUSED")[0]  # published last
        assert "resource temporarily unavailable" in refusal.lower(), refusal
        children = int(held.read("CHILDREN")[0])
        assert 0 < children < PROCESSES
        group = Path("/sys/fs/cgroup/pids") / held.read("CGROUP")[0].lstrip("/")
        assert (group / "pids.max").read_text().strip() == str(PROCESSES)
        assert int((group / "pids.current").read_text()) <= PROCESSES
        bomb = processes_of_uid(uid)  # the bomb really runs, and no more of it than allowed
        assert children <= len(bomb) <= PROCESSES
        held.release()
        held.result()
    no_process_left(uid)
    still_serves(hostile_place, language)


ESCAPE = {
    "python": """
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        os.write(w, str(os.getpid()).encode())
        time.sleep(600)
    os._exit(0)
os.close(w)
daemon = os.read(r, 32).decode()
publish("UID", os.getuid())
publish("DAEMON", daemon)
hold()
""",
    "tcl": """
publish UID [my_uid]
exec setsid -f /bin/sh -c {trap "" HUP TERM INT; echo $$ > daemon.pid; exec sleep 600} &
set daemon ""
for {set i 0} {$i < 400 && $daemon eq ""} {incr i} {
    if {[file exists daemon.pid]} { set daemon [string trim [slurp daemon.pid]] }
    if {$daemon eq ""} { after 25 }
}
publish DAEMON $daemon
hold
""",
    "scheme": """
(publish "UID" (getuid))
(define channel (pipe))
(define child (primitive-fork))
(when (= child 0)
  (setsid)
  (when (= (primitive-fork) 0)
    (sigaction SIGHUP SIG_IGN) (sigaction SIGTERM SIG_IGN) (sigaction SIGINT SIG_IGN)
    (display (getpid) (cdr channel))
    (newline (cdr channel))
    (force-output (cdr channel))
    (sleep 600))
  (primitive-exit 0))
(waitpid child)
(publish "DAEMON" (read-line (car channel)))
(hold)
""",
    "c": """
int main(void) {
    int fds[2];
    char daemon[32] = {0};
    if (pipe(fds) != 0) tc_fail("pipe: %s", strerror(errno));
    pid_t child = fork();
    if (child == 0) {
        setsid();
        if (fork() == 0) {
            signal(SIGHUP, SIG_IGN); signal(SIGTERM, SIG_IGN); signal(SIGINT, SIG_IGN);
            dprintf(fds[1], "%d", (int)getpid());
            close(fds[1]);
            for (;;) pause();
        }
        _exit(0);
    }
    close(fds[1]);
    waitpid(child, NULL, 0);
    if (read(fds[0], daemon, sizeof daemon - 1) <= 0) tc_fail("no daemon");
    publish("UID", "%d", (int)getuid());
    publish("DAEMON", "%s", daemon);
    hold();
    return 0;
}
""",
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_double_forked_setsid_daemon_does_not_survive_the_meet(
        hostile_place: RunningPlace, language: str) -> None:
    """A daemon in a session of its own, ignoring SIGHUP and SIGTERM, dies with the meet:
    no process of the agent's uid is left."""
    with Held(hostile_place, language, ESCAPE[language]) as held:
        uid = int(held.wait_for("UID")[0])
        assert uid in agent_uids(hostile_place)
        daemon = host_pid(uid, int(held.wait_for("DAEMON")[0]))
        assert daemon is not None, "the daemon is not running"
        first = host_pid(uid, 1)  # the agent's (or, for C, its worker's) first process
        assert first is not None and session_of(daemon) != session_of(first)  # it escaped
        held.release()
        held.result()
    wait_until(lambda: not pid_alive(daemon), what="the daemon to die")
    no_process_left(uid)
    still_serves(hostile_place, language)


MEMORY_BOMB = {
    # Six children each hold 64 MiB at once (384 MiB > the 256 MiB the agent may have);
    # the parent waits for them and says how each ended.
    "python": """
publish("UID", os.getuid())
publish("CGROUP", cgroup("memory"))
kids = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        try:
            hog = bytearray(64 * 2**20)
            for i in range(0, len(hog), 4096):
                hog[i] = 1
            time.sleep(1)
        except MemoryError:
            os._exit(3)
        os._exit(0)
    kids.append(pid)
publish("STATUS", *[describe(os.waitpid(pid, 0)[1]) for pid in kids])
hold()
""",
    # Tcl has no fork: its children are awk programs that build a 64 MiB string each.
    "tcl": """
publish UID [my_uid]
publish CGROUP [cgroup memory]
set hog {BEGIN { s = "x"; for (i = 0; i < 26; i++) s = s s; system("sleep 1") }}
set hogs {}
for {set i 0} {$i < 6} {incr i} {
    lappend hogs [open "|awk {$hog}" r]
}
set statuses {}
foreach hog $hogs {
    read $hog
    if {[catch {close $hog} message options]} {
        set code [dict get $options -errorcode]
        switch [lindex $code 0] {
            CHILDKILLED { lappend statuses "signal [lindex $code 2]" }
            CHILDSTATUS { lappend statuses "exit [lindex $code 2]" }
            default { lappend statuses "error $message" }
        }
    } else {
        lappend statuses "exit 0"
    }
}
publish STATUS {*}$statuses
hold
""",
    "scheme": """
(publish "UID" (getuid))
(publish "CGROUP" (cgroup "memory"))
(define kids
  (map (lambda (i)
         (let ((pid (primitive-fork)))
           (when (= pid 0)
             (catch #t
               (lambda ()
                 (let ((hog (make-bytevector (* 64 1024 1024) 1)))
                   (sleep 1)
                   (primitive-exit (if (= (bytevector-u8-ref hog 12345) 1) 0 1))))
               (lambda args (primitive-exit 3))))
           pid))
       (iota 6)))
(apply publish "STATUS" (map (lambda (pid) (describe (cdr (waitpid pid)))) kids))
(hold)
""",
    "c": """
int main(void) {
    char path[512], texts[6][32];
    char *statuses[6];
    pid_t kids[6];
    publish("UID", "%d", (int)getuid());
    cgroup("memory", path, sizeof path);
    publish("CGROUP", "%s", path);
    for (int i = 0; i < 6; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            char *hog = malloc(64 << 20);
            if (hog == NULL) _exit(3);
            for (size_t at = 0; at < (64 << 20); at += 4096)
                ((volatile char *)hog)[at] = 1;  /* volatile: the compiler keeps it all */
            sleep(1);
            _exit(((volatile char *)hog)[12288] == 1 ? 0 : 1);
        }
    }
    for (int i = 0; i < 6; i++) {
        int status = 0;
        if (kids[i] < 0) snprintf(texts[i], sizeof texts[i], "fork failed");
        else { waitpid(kids[i], &status, 0); describe(status, texts[i], sizeof texts[i]); }
        statuses[i] = texts[i];
    }
    publish_list("STATUS", statuses, 6);
    hold();
    return 0;
}
""",
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_memory_bomb_across_processes_stays_within_the_memory_limit(
        memory_place: RunningPlace, language: str) -> None:
    """Many processes together cannot have more than --memory: the memory cgroup kills
    children (or the agent, AgentKilled "memory limit"); its peak never passes the limit."""
    seen: dict[str, int] = {"peak": 0, "limit": 0}

    def sample(group: Path) -> None:
        with contextlib.suppress(OSError, ValueError):
            seen["limit"] = int((group / "memory.limit_in_bytes").read_text())
            seen["peak"] = max(seen["peak"],
                               int((group / "memory.max_usage_in_bytes").read_text()))

    with Held(memory_place, language, MEMORY_BOMB[language]) as held:
        uid = int(held.wait_for("UID")[0])
        group = Path("/sys/fs/cgroup/memory") / held.wait_for("CGROUP")[0].lstrip("/")
        killed = ""
        try:
            statuses = held.wait_for("STATUS", poll=lambda: sample(group))
        except tacoma.AgentKilled as exc:  # the OOM killer chose the agent itself
            killed, statuses = str(exc), None
        else:
            sample(group)  # held: its cgroup is still there
            held.release()
            held.result()
    assert seen["limit"] == MEMORY
    # The bomb did reach the limit (the cgroup's high-water mark is capped by it).
    assert MEMORY - 8 * MiB <= seen["peak"] <= MEMORY, seen
    if statuses is None:
        assert "memory limit" in killed, killed
    else:
        assert len(statuses) == 6, statuses
        # The memory cgroup's OOM killer, not a per-process limit, ended some of them.
        assert any(s in ("signal 9", "signal SIGKILL") for s in statuses), statuses
        # 64 MiB each: at most three could have held theirs at once under 256 MiB.
        assert statuses.count("exit 0") <= 3, statuses
    no_process_left(uid)
    still_serves(memory_place, language)


CPU_BURN = {
    "python": """
publish("UID", os.getuid())
for _ in range(4):
    if os.fork() == 0:
        while True:
            pass
for _ in range(120):
    time.sleep(0.5)
bc["SURVIVED"] = [b"yes"]
""",
    "tcl": """
publish UID [my_uid]
for {set i 0} {$i < 4} {incr i} { exec /bin/sh -c {while :; do :; done} & }
after 60000
bc_replace SURVIVED [list yes]
""",
    "scheme": """
(publish "UID" (getuid))
(for-each (lambda (i) (when (= (primitive-fork) 0) (let spin () (spin)))) (iota 4))
(sleep 60)
(bc-replace "SURVIVED" (list "yes"))
""",
    "c": """
int main(void) {
    publish("UID", "%d", (int)getuid());
    for (int i = 0; i < 4; i++)
        if (fork() == 0) { volatile unsigned long n = 0; for (;;) n++; }
    sleep(60);
    tc_append_text(TC_SELF, "SURVIVED", "yes");
    return 0;
}
""",
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_cpu_burn_across_processes_hits_the_cpu_limit(hostile_place: RunningPlace,
                                                      language: str) -> None:
    """Four spinning children, each under the per-process RLIMIT_CPU, still reach the
    agent's total CPU time: the agent is killed (AgentKilled), long before --meet-seconds,
    and every spinner with it."""
    started = time.monotonic()
    with Held(hostile_place, language, CPU_BURN[language]) as held:
        uid = int(held.wait_for("UID")[0])
        with pytest.raises(tacoma.AgentKilled, match=rf"CPU time limit of {CPU_SECONDS} s"):
            held.result()
    assert time.monotonic() - started < 20
    no_process_left(uid)
    still_serves(hostile_place, language)


# =========================================================================== disk and output
DISK_FILL = {
    # 512 KiB files in turn in the working directory, /tmp, /dev/shm and /var/tmp, until a
    # write fails; then the sizes of all of them together.
    "python": """
token = arg("TOKEN")
dirs = [os.getcwd(), *bc.text("DIRS")]
chunk = b"x" * 65536
error = ""
for i in range(64):
    try:
        fd = os.open(f"{dirs[i % len(dirs)]}/{token}-{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            for _ in range(8):
                os.write(fd, chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        error = exc.strerror
        break
total = 0
for d in dirs:
    names = [n for n in os.listdir(d) if n.startswith(token)]
    bc.append("FILES", f"{d} {len(names)}")
    total += sum(os.stat(f"{d}/{n}").st_size for n in names)
bc["TOTAL"] = [str(total)]
bc["ERROR"] = [error]
""",
    "tcl": """
set token [arg TOKEN]
set dirs [list [pwd] {*}[bc_text DIRS]]
set chunk [string repeat x 65536]
set error ""
for {set i 0} {$i < 64 && $error eq ""} {incr i} {
    if {[catch {
        set f [open [lindex $dirs [expr {$i % [llength $dirs]}]]/$token-$i w]
        fconfigure $f -translation binary -buffering none
        try {
            for {set j 0} {$j < 8} {incr j} { puts -nonewline $f $chunk }
        } finally {
            catch {close $f}
        }
    } message options]} {
        set code [dict get $options -errorcode]
        set error [expr {[lindex $code 0] eq "POSIX" ? [lindex $code 2] : $message}]
    }
}
set total 0
foreach d $dirs {
    set names [glob -nocomplain -tails -directory $d $token-*]
    bc_append_text FILES "$d [llength $names]"
    foreach n $names { incr total [file size $d/$n] }
}
bc_replace TOTAL [list $total]
bc_replace ERROR [list $error]
""",
    "scheme": """
(define token (arg "TOKEN"))
(define dirs (cons (getcwd) (bc-text "DIRS")))
(define chunk (make-bytevector 65536 120))
(define error "")
(let loop ((i 0))
  (when (and (< i 64) (string-null? error))
    (catch 'system-error
      (lambda ()
        (let ((port (open-file (format #f "~a/~a-~a"
                                       (list-ref dirs (modulo i (length dirs))) token i)
                               "wb")))
          (setvbuf port 'none)
          (dynamic-wind
            (lambda () #t)
            (lambda () (do ((j 0 (+ j 1))) ((= j 8)) (put-bytevector port chunk)))
            (lambda () (catch #t (lambda () (close-port port)) (lambda _ #f))))))
      (lambda args (set! error (strerror (system-error-errno args)))))
    (loop (+ i 1))))
(define total 0)
(for-each
  (lambda (d)
    (let ((names (scandir d (lambda (n) (string-prefix? token n)))))
      (bc-append "FILES" (format #f "~a ~a" d (length names)))
      (for-each (lambda (n) (set! total (+ total (stat:size (stat (string-append d "/" n))))))
                names)))
  dirs)
(bc-replace "TOTAL" (list (number->string total)))
(bc-replace "ERROR" (list error))
""",
    "c": """
int main(void) {
    const char *token = arg("TOKEN");
    char cwd[1024], path[2048];
    static char chunk[65536];
    const char *error = "";
    long long total = 0;
    if (!getcwd(cwd, sizeof cwd)) tc_fail("getcwd: %s", strerror(errno));
    tc_list extra = args("DIRS");
    const char *dirs[4] = {cwd};
    int n = 1;
    for (size_t k = 0; k < extra.count && n < 4; k++)
        dirs[n++] = (const char *)extra.items[k].data;
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 64 && !*error; i++) {
        snprintf(path, sizeof path, "%s/%s-%d", dirs[i % n], token, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0) { error = strerror(errno); break; }
        for (int j = 0; j < 8; j++)
            if (write(fd, chunk, sizeof chunk) < 0) { error = strerror(errno); break; }
        close(fd);
    }
    for (int d = 0; d < n; d++) {
        DIR *dir = opendir(dirs[d]);
        struct dirent *e;
        int count = 0;
        while (dir && (e = readdir(dir))) {
            struct stat st;
            if (strncmp(e->d_name, token, strlen(token)) != 0) continue;
            snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
            if (stat(path, &st) == 0) total += st.st_size;
            count++;
        }
        if (dir) closedir(dir);
        tc_append_textf(TC_SELF, "FILES", "%s %d", dirs[d], count);
    }
    tc_append_textf(TC_SELF, "TOTAL", "%lld", total);
    tc_append_text(TC_SELF, "ERROR", error);
    return 0;
}
""",
}

#: What an agent finds in its scratch directories: "DIR NAME KIND" for every entry.
LOOK = {
    "python": """
for d in [os.getcwd(), "/tmp", "/dev/shm", "/var/tmp"]:
    for entry in os.scandir(d):
        kind = "dir" if entry.is_dir(follow_symlinks=False) else "file"
        bc.append("ENTRY", f"{d} {entry.name} {kind}")
""",
    "tcl": """
foreach d [list [pwd] /tmp /dev/shm /var/tmp] {
    foreach name [glob -nocomplain -tails -directory $d * .*] {
        if {$name in {. ..}} continue
        set kind [expr {[file type $d/$name] eq {directory} ? {dir} : {file}}]
        bc_append_text ENTRY "$d $name $kind"
    }
}
""",
    "scheme": """
(for-each
  (lambda (d)
    (for-each
      (lambda (name)
        (unless (member name '("." ".."))
          (bc-append "ENTRY"
                     (format #f "~a ~a ~a" d name
                             (if (eq? (stat:type (lstat (string-append d "/" name)))
                                      'directory) "dir" "file")))))
      (scandir d)))
  (list (getcwd) "/tmp" "/dev/shm" "/var/tmp"))
""",
    "c": """
int main(void) {
    char cwd[1024], path[2048];
    if (!getcwd(cwd, sizeof cwd)) tc_fail("getcwd: %s", strerror(errno));
    const char *dirs[4] = {cwd, "/tmp", "/dev/shm", "/var/tmp"};
    for (int d = 0; d < 4; d++) {
        DIR *dir = opendir(dirs[d]);
        struct dirent *e;
        while (dir && (e = readdir(dir))) {
            struct stat st;
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(path, sizeof path, "%s/%s", dirs[d], e->d_name);
            lstat(path, &st);
            tc_append_textf(TC_SELF, "ENTRY", "%s %s %s", dirs[d], e->d_name,
                            S_ISDIR(st.st_mode) ? "dir" : "file");
        }
        if (dir) closedir(dir);
    }
    return 0;
}
""",
}


def scratch_entries(place: RunningPlace, language: str) -> dict[str, list[tuple[str, str]]]:
    """What a fresh agent of `language` finds in its working directory, /tmp, /dev/shm and
    /var/tmp: {"cwd"|"/tmp"|...: [(name, "dir"|"file")]}."""
    result = meet(place, language, LOOK[language])
    found: dict[str, list[tuple[str, str]]] = {"cwd": [], "/tmp": [], "/dev/shm": [],
                                                "/var/tmp": []}
    for line in result.text("ENTRY"):
        directory, name, kind = line.rsplit(" ", 2)
        key = directory if directory in found else "cwd"
        found[key].append((name, kind))
    return {key: sorted(entries) for key, entries in found.items()}


def host_files_named(token: str) -> list[Path]:
    """Files on the host whose name holds `token`, where an escaped write could land."""
    return [path for d in ("/tmp", "/var/tmp", "/dev/shm")
            for path in Path(d).glob(f"*{token}*")]


def writable_scratch(place: RunningPlace) -> list[str]:
    """The scratch directories the place lets agents write: all of them, wherever the
    place's state directory and installation lie (see `test_tmp_is_the_agents_own...`)."""
    return ["/tmp", "/dev/shm", "/var/tmp"]


@pytest.mark.parametrize("language", LANGUAGES)
def test_filling_the_disk_stops_at_the_quota_for_all_scratch_directories_together(
        hostile_place: RunningPlace, language: str) -> None:
    """The working directory, /tmp, /dev/shm and /var/tmp are one private tmpfs of --disk
    bytes: filling them in turn ends in ENOSPC once all together hold --disk; nothing of it
    reaches the host, and the next meet finds them empty."""
    token = f"hostile-fill-{uuid.uuid4().hex[:12]}"
    before = scratch_entries(hostile_place, language)
    writable = writable_scratch(hostile_place)
    result = meet(hostile_place, language, DISK_FILL[language], TOKEN=[token],
                  DIRS=writable)
    assert "no space left on device" in result.text("ERROR")[0].lower(), result.text("ERROR")
    total = int(result.text("TOTAL")[0])
    assert DISK // 2 < total <= DISK, total
    files = dict(line.rsplit(" ", 1) for line in result.text("FILES"))
    assert len(files) == 1 + len(writable) and all(int(n) > 0 for n in files.values()), files
    assert not host_files_named(token)
    after = scratch_entries(hostile_place, language)
    assert after == before  # nothing of the first meet survived it
    assert after["cwd"] == after["/dev/shm"] == after["/var/tmp"] == [], after
    # /tmp holds only the directories leading to what is mounted below it (the place's
    # state directory, say): no file.
    assert all(kind == "dir" for _, kind in after["/tmp"]), after["/tmp"]
    still_serves(hostile_place, language)


#: Write a file of the agent's in /tmp and read it back, then try to write into the state
#: directory shown below /tmp (STATE) and into its working directory's parent.
TMP_BELOW = {
    "python": """
token, state = arg("TOKEN"), arg("STATE")
def write_and_read(path):
    with open(path, "w") as f:
        f.write(token)
    with open(path) as f:
        return f.read()
attempt("tmp", lambda: write_and_read(f"/tmp/{token}"))
attempt("cwd", lambda: write_and_read(f"{token}-here"))
attempt("state", lambda: write_and_read(f"{state}/{token}"))
attempt("data", lambda: write_and_read(f"{state}/data/{token}"))
""",
    "tcl": """
set token [arg TOKEN]; set state [arg STATE]
proc write_and_read {path} {
    set f [open $path w]; puts -nonewline $f $::token; close $f
    return [slurp $path]
}
attempt tmp { write_and_read /tmp/$token }
attempt cwd { write_and_read $token-here }
attempt state { write_and_read $state/$token }
attempt data { write_and_read $state/data/$token }
""",
    "scheme": """
(define token (arg "TOKEN"))
(define state (arg "STATE"))
(define (write-and-read path)
  (call-with-output-file path (lambda (port) (display token port)))
  (call-with-input-file path get-string-all))
(attempt "tmp" (write-and-read (string-append "/tmp/" token)))
(attempt "cwd" (write-and-read (string-append token "-here")))
(attempt "state" (write-and-read (string-append state "/" token)))
(attempt "data" (write-and-read (string-append state "/data/" token)))
""",
    "c": """
static void write_and_read(const char *label, const char *path, const char *token) {
    char got[256] = {0};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, token, strlen(token)) < 0) { err(label, errno); return; }
    close(fd);
    fd = open(path, O_RDONLY);
    if (fd < 0 || read(fd, got, sizeof got - 1) < 0) { err(label, errno); return; }
    close(fd);
    ok(label, got);
}
int main(void) {
    const char *token = arg("TOKEN"), *state = arg("STATE");
    char path[4096];
    snprintf(path, sizeof path, "/tmp/%s", token);
    write_and_read("tmp", path, token);
    snprintf(path, sizeof path, "%s-here", token);
    write_and_read("cwd", path, token);
    snprintf(path, sizeof path, "%s/%s", state, token);
    write_and_read("state", path, token);
    snprintf(path, sizeof path, "%s/data/%s", state, token);
    write_and_read("data", path, token);
    return 0;
}
""",
}


@pytest.fixture(scope="module")
def place_below_tmp() -> Iterator[RunningPlace]:
    """A place whose state directory lies below the host's /tmp (a clone, a venv or a
    state directory there): what an agent needs from it is shown in the agent's /tmp."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="tacoma-below-tmp-", dir="/tmp"))
    try:
        running = launch_place(root / "state", "--disk", str(DISK), "--meet-seconds", "30")
        yield running
        assert running.stop() == 0, running.log()
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)


@pytest.mark.parametrize("language", LANGUAGES)
def test_tmp_is_the_agents_own_even_where_the_place_lies_below_it(
        place_below_tmp: RunningPlace, language: str) -> None:
    """With the state directory below /tmp, an agent still writes and reads its own /tmp
    (bubblewrap's way: a fresh tmpfs there, what the agent needs bound into it read-only),
    while the state directory shown there, its data directory included, stays read-only;
    and the place warns of nothing."""
    token = f"below-tmp-{uuid.uuid4().hex[:12]}"
    state = str(place_below_tmp.state_dir)
    result = outcomes(meet(place_below_tmp, language, TMP_BELOW[language], TOKEN=[token],
                           STATE=[state]))
    assert result["tmp"] == ("ok", token), result
    assert result["cwd"] == ("ok", token), result
    assert result["state"][0] == "err", result
    assert result["data"][0] == "err", result
    assert not host_files_named(token)
    assert not list(place_below_tmp.state_dir.rglob(f"{token}*"))
    assert "may not write" not in place_below_tmp.log()
    still_serves(place_below_tmp, language)


def test_a_c_agent_builds_for_webassembly_where_the_place_lies_below_tmp(
        place_below_tmp: RunningPlace) -> None:
    """The build's directory, by its path, is the host's there, shown read-only (the build
    writes through the descriptor it started in); clang, unlike gcc, does not fall back
    from an unwritable TMPDIR, and must be given the build's own /tmp."""
    if (problem := wasm_c_problem()) is not None:
        pytest.skip(problem)
    hello = (Path(__file__).parent.parent / "examples" / "hello" / "hello.c").read_text()
    code = f"/* {uuid.uuid4().hex}: a build of its own */\n{hello}"
    result = tacoma.meet(place_below_tmp.target("ag_wasm"), {"NAME": ["tmp"]}, code=code,
                         timeout=120)
    assert result.text("GREETING") == ["hello, tmp from wasm"]


HUGE_OUTPUT = {
    # Write to stdout until refused; then fail with the error and the size stdout reached.
    "python": """
chunk = "x" * 65536
try:
    for _ in range(4096):
        sys.stdout.write(chunk)
        sys.stdout.flush()
except OSError as exc:
    size = os.fstat(1).st_size
    sys.stdout = open(os.devnull, "w")  # what is still buffered cannot be written either
    fail(f"stdout refused more: {exc.strerror}; size {size}")
fail("stdout took 256 MiB")
""",
    "tcl": """
set chunk [string repeat x 65536]
if {[catch {
    for {set i 0} {$i < 4096} {incr i} { puts -nonewline stdout $chunk; flush stdout }
} message options]} {
    set code [dict get $options -errorcode]
    set error [expr {[lindex $code 0] eq "POSIX" ? [lindex $code 2] : $message}]
    file stat /proc/self/fd/1 st
    fail "stdout refused more: $error; size $st(size)"
}
fail "stdout took 256 MiB"
""",
    "scheme": """
(define chunk (make-string 65536 #\\x))
(catch 'system-error
  (lambda ()
    (do ((i 0 (+ i 1))) ((= i 4096)) (display chunk) (force-output)))
  (lambda args
    (let ((size (stat:size (stat "/proc/self/fd/1"))))
      (set-current-output-port (%make-void-port "w"))
      (fail (format #f "stdout refused more: ~a; size ~a"
                    (strerror (system-error-errno args)) size)))))
(fail "stdout took 256 MiB")
""",
    "c": """
int main(void) {
    static char chunk[65536];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 4096; i++)
        if (write(1, chunk, sizeof chunk) < 0) {
            int code = errno;
            struct stat st;
            fstat(1, &st);
            tc_fail("stdout refused more: %s; size %lld", strerror(code), (long long)st.st_size);
        }
    tc_fail("stdout took 256 MiB");
}
""",
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_huge_output_is_bounded_by_the_file_size_limit(hostile_place: RunningPlace,
                                                       language: str) -> None:
    """Stdout goes to a file on the host's disk: it stops at --file-size (EFBIG), the
    caller gets AgentFailed saying "File too large", and no output file grows past it."""
    with pytest.raises(tacoma.AgentFailed,
                       match=r"(?i)stdout refused more: file too large; size \d+") as info:
        meet(hostile_place, language, HUGE_OUTPUT[language])
    size = int(re.search(r"size (\d+)", str(info.value)).group(1))
    assert 0 < size <= FILE_SIZE
    work = hostile_place.state_dir / "work"
    for path in work.glob("*.out"):
        with contextlib.suppress(FileNotFoundError):  # a worker that ended meanwhile
            assert path.stat().st_size <= FILE_SIZE
    still_serves(hostile_place, language)


# =========================================================================== the file system
PLANT = {
    # Open each TARGETS path (LABEL=PATH) to append "planted", creating it.
    "python": """
for item in bc.text("TARGETS"):
    label, path = item.split("=", 1)
    def plant(path=path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            return os.write(fd, b"planted")
        finally:
            os.close(fd)
    attempt(label, plant)
""",
    "tcl": """
foreach item [bc_text TARGETS] {
    set at [string first = $item]
    set label [string range $item 0 [expr {$at - 1}]]
    set path [string range $item [expr {$at + 1}] end]
    attempt $label { set f [open $path a]; puts -nonewline $f planted; close $f; set f planted }
}
""",
    "scheme": """
(for-each
  (lambda (item)
    (let* ((at (string-index item #\\=))
           (label (substring item 0 at))
           (path (substring item (+ at 1))))
      (attempt label
        (let ((port (open-file path "a")))
          (display "planted" port)
          (close-port port)
          "planted"))))
  (bc-text "TARGETS"))
""",
    "c": """
int main(void) {
    tc_list targets = args("TARGETS");
    for (size_t i = 0; i < targets.count; i++) {
        char *label = (char *)targets.items[i].data;
        char *at = strchr(label, '=');
        if (!at) continue;
        *at = 0;
        int fd = open(at + 1, O_WRONLY | O_APPEND | O_CREAT, 0644);
        if (fd < 0) { err(label, errno); continue; }
        ssize_t n = write(fd, "planted", 7);
        int code = errno;
        close(fd);
        if (n < 0) err(label, code); else ok(label, "planted");
    }
    return 0;
}
""",
}


def _trust_dir() -> Path:
    return Path(os.environ["TACOMA_TRUST_DIR"])


def _cached_binary(place: RunningPlace) -> Path | None:
    """A program in the place's compile cache (compiling the trivial C agent if need be),
    or None where C agents cannot run."""
    interpreter = next((i for i in discover_interpreters().values() if i.language == "c"),
                       None)
    if interpreter is None or interpreter.check() is not None:
        return None
    cache = place.state_dir / "cache" / "c"
    if not any(cache.glob("*")):
        still_serves(place, "c")
    binaries = sorted(p for p in cache.glob("*") if p.is_file())
    assert binaries, f"nothing in {cache}"
    return binaries[0]


@pytest.mark.parametrize("language", LANGUAGES)
def test_writes_outside_the_working_directory_are_refused_or_vanish(
        hostile_place: RunningPlace, language: str) -> None:
    """The state directory, the work directory's parent, the compile cache (a program in
    it too), installed agents (trusted ones too), the data directory, the trust directory,
    /root, /etc, /usr and the place's own directory refuse the write; /tmp, /var/tmp and
    /dev/shm are the agent's private tmpfs: the write lands there, never on the host's, and
    is gone after."""
    state = hostile_place.state_dir
    token = uuid.uuid4().hex[:12]
    name = f"planted-{token}"
    binary = _cached_binary(hostile_place)
    binary_hash = hashlib.sha256(binary.read_bytes()).hexdigest() if binary else ""
    refused_targets: dict[str, Path] = {
        "state": state / name,
        "work": state / "work" / name,
        "cache": state / "cache" / name,
        "cache-c": state / "cache" / "c" / name,
        "agents": state / "agents" / f"ag_{token}.py",
        "trusted": state / "trusted" / f"t{token}.py",  # would run in the place's process
        "data": state / "data" / name,
        "trust": _trust_dir() / name,
        "identities": _trust_dir() / "identities" / f"{name}.pem",
        "root": Path("/root") / name,
        "etc": Path("/etc") / name,
        "usr": Path("/usr/local/bin") / name,
        "place-cwd": Path(os.getcwd()) / name,
    }
    if binary is not None:
        refused_targets["cached-program"] = binary
    private_targets = {"tmp": Path("/tmp") / name, "var-tmp": Path("/var/tmp") / name,
                       "dev-shm": Path("/dev/shm") / name}
    targets = {**refused_targets, **private_targets}
    try:
        found = outcomes(meet(hostile_place, language, PLANT[language],
                              TARGETS=[f"{label}={path}" for label, path in targets.items()]))
        for label, path in refused_targets.items():
            refused(found, label, "permission denied", "read-only file system",
                    "no such file or directory", "operation not permitted")
            if label != "cached-program":
                assert not path.exists(), path
        if binary is not None:
            assert hashlib.sha256(binary.read_bytes()).hexdigest() == binary_hash
        for label, path in private_targets.items():
            assert found[label][0] in ("ok", "err"), found[label]
            assert not path.exists(), f"{label}: the write reached the host's {path}"
        after = scratch_entries(hostile_place, language)
        assert not any(token in n for entries in after.values() for n, _ in entries), after
    finally:  # should a write have escaped, leave nothing behind
        for path in targets.values():
            if name in path.name:
                with contextlib.suppress(OSError):
                    path.unlink()
    still_serves(hostile_place, language)


READ_PATHS = {
    # For each TARGETS item LABEL=PATH: list the directory (a label starting "ls-") or
    # read the file's first bytes.
    "python": """
for item in bc.text("TARGETS"):
    label, path = item.split("=", 1)
    if label.startswith("ls-"):
        attempt(label, lambda: " ".join(sorted(os.listdir(path))))
    else:
        attempt(label, lambda: open(path, "rb").read(64).hex())
""",
    "tcl": """
foreach item [bc_text TARGETS] {
    set at [string first = $item]
    set label [string range $item 0 [expr {$at - 1}]]
    set path [string range $item [expr {$at + 1}] end]
    if {[string match ls-* $label]} {
        # Tcl's glob says nothing of why a directory cannot be read: ask ls.
        attempt $label { exec ls -A $path }
    } else {
        attempt $label {
            set f [open $path r]; fconfigure $f -translation binary
            set data [read $f 64]; close $f; binary encode hex $data
        }
    }
}
""",
    "scheme": """
(define (list-directory path)
  (let ((dir (opendir path)))
    (let loop ((names '()))
      (let ((name (readdir dir)))
        (if (eof-object? name)
            (begin (closedir dir) (string-join (sort names string<?) " "))
            (loop (if (member name '("." "..")) names (cons name names))))))))
(for-each
  (lambda (item)
    (let* ((at (string-index item #\\=))
           (label (substring item 0 at))
           (path (substring item (+ at 1))))
      (if (string-prefix? "ls-" label)
          (attempt label (list-directory path))
          (attempt label
            (let* ((port (open-file path "rb"))
                   (data (get-bytevector-n port 64)))
              (close-port port)
              (if (eof-object? data) "" (bytevector->u8-list data)))))))
  (bc-text "TARGETS"))
""",
    "c": """
int main(void) {
    tc_list targets = args("TARGETS");
    for (size_t i = 0; i < targets.count; i++) {
        char *label = (char *)targets.items[i].data;
        char *at = strchr(label, '=');
        char got[256] = "";
        if (!at) continue;
        *at = 0;
        if (!strncmp(label, "ls-", 3)) {
            DIR *dir = opendir(at + 1);
            struct dirent *e;
            if (!dir) { err(label, errno); continue; }
            while ((e = readdir(dir)))
                if (strlen(got) + strlen(e->d_name) + 2 < sizeof got) {
                    strcat(got, e->d_name);
                    strcat(got, " ");
                }
            closedir(dir);
            ok(label, got);
        } else {
            unsigned char data[64];
            int fd = open(at + 1, O_RDONLY);
            if (fd < 0) { err(label, errno); continue; }
            ssize_t n = read(fd, data, sizeof data);
            int code = errno;
            close(fd);
            if (n < 0) { err(label, code); continue; }
            for (ssize_t j = 0; j < n; j++) sprintf(got + 2 * j, "%02x", data[j]);
            ok(label, got);
        }
    }
    return 0;
}
""",
}

NOT_THERE = ("no such file or directory", "permission denied")


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_cabinets_keys_and_admin_token_cannot_be_read(hostile_place: RunningPlace,
                                                         language: str) -> None:
    """The cabinets database (and its WAL), the admin token and the trust directory (the
    CA's key, the place's and the user's identities) are not found or not readable."""
    state, trust = hostile_place.state_dir, _trust_dir()
    tacoma.meet(hostile_place.target("ag_cabinet"),  # the database holds something
                {"OP": ["replace"], "CABINET": ["hostile-secrets"], "S": [SECRET_VALUE]})
    from tacoma.client import current_principal

    files = {
        "cabinets": state / "cabinets.sqlite3",
        "cabinets-wal": state / "cabinets.sqlite3-wal",
        "admin-token": state / "admin.token",
        "ca-key": trust / "ca.key",
        "place-identity": trust / "identities" / "local-place.pem",
        "user-identity": trust / "identities" / f"{current_principal()}.pem",
    }
    directories = {"ls-trust": trust, "ls-identities": trust / "identities",
                   "ls-agents": state / "agents", "ls-cache": state / "cache" / "c"}
    for path in [*files.values(), *directories.values()]:
        assert path.exists(), path  # what the agent is refused is really there
    result = meet(hostile_place, language, READ_PATHS[language],
                  TARGETS=[f"{label}={path}" for label, path in {**files, **directories}.items()])
    found = outcomes(result)
    for label in [*files, *directories]:
        refused(found, label, *NOT_THERE)
    token = (state / "admin.token").read_text().strip()
    everything = b"".join(e for f in result.folders() if f != "CODE" for e in result[f])
    assert token.encode() not in everything
    assert SECRET_VALUE.encode() not in everything
    still_serves(hostile_place, language)


# =========================================================================== other agents
VICTIM = """
secret = arg("SECRET")
open("victim-secret.txt", "w").write(secret)
publish("CWD", os.getcwd())
publish("UID", os.getuid())
hold()
bc["INTACT"] = [str(open("victim-secret.txt").read() == secret)]
"""


@contextlib.contextmanager
def victim(place: RunningPlace) -> Iterator[tuple[Path, int, str]]:
    """A Python agent running at `place` with a secret in a file of its working directory:
    yields (its directory, its host pid, the secret); checks at the end that it finished
    normally, its file intact."""
    secret = uuid.uuid4().hex
    with Held(place, "python", VICTIM, SECRET=[secret]) as held:
        workdir = Path(held.wait_for("CWD")[0])
        uid = int(held.wait_for("UID")[0])
        pids = processes_of_uid(uid)
        assert len(pids) == 1, pids
        yield workdir, pids[0], secret
        assert pid_alive(pids[0]), "the victim was killed"
        held.release()
        assert held.result()["INTACT"] == [b"True"]


@pytest.mark.parametrize("language", LANGUAGES)
def test_another_agents_working_directory_is_out_of_reach(hostile_place: RunningPlace,
                                                          language: str) -> None:
    """An agent sees only its own working directory under the place's work directory: the
    directory of another running agent, and the file in it, are not there."""
    with victim(hostile_place) as (workdir, pid, secret):
        assert workdir.parent == hostile_place.state_dir / "work"
        targets = {"ls-victim-dir": workdir, "victim-file": workdir / "victim-secret.txt",
                   "ls-work": workdir.parent,
                   "victim-via-proc": Path(f"/proc/{pid}/cwd/victim-secret.txt")}
        result = meet(hostile_place, language, READ_PATHS[language],
                      TARGETS=[f"{label}={path}" for label, path in targets.items()])
        found = outcomes(result)
        refused(found, "ls-victim-dir", *NOT_THERE)
        refused(found, "victim-file", *NOT_THERE)
        refused(found, "victim-via-proc", *NOT_THERE)
        # Its own work directory's parent lists (at most) itself, never the victim.
        assert found["ls-work"][0] in ("ok", "err"), found["ls-work"]
        assert workdir.name not in found["ls-work"][1]
        everything = b"".join(e for f in result.folders() if f != "CODE" for e in result[f])
        assert secret.encode() not in everything
    still_serves(hostile_place, language)


REACH_PROCESSES = {
    # VPID: another agent's host pid; PLACEPID: the place's. /proc, its files, signals
    # and ptrace, against both.
    "python": """
targets = {"victim": int(arg("VPID")), "place": int(arg("PLACEPID"))}
attempt("proc-list", lambda: " ".join(p for p in os.listdir("/proc") if p.isdigit()))
for who, pid in targets.items():
    attempt(f"{who}-environ", lambda: open(f"/proc/{pid}/environ", "rb").read().hex())
    attempt(f"{who}-mem", lambda: open(f"/proc/{pid}/mem", "rb").read(16).hex())
    attempt(f"{who}-ptrace", lambda: raw_syscall(101, 16, pid, 0, 0))  # PTRACE_ATTACH
    attempt(f"{who}-vm-read", lambda: raw_syscall(310, pid, 0, 0, 0, 0, 0))
    attempt(f"{who}-kill", lambda: os.kill(pid, signal.SIGKILL))
attempt("kill-everyone", lambda: os.kill(-1, signal.SIGKILL))
attempt("ptrace-traceme", lambda: raw_syscall(101, 0, 0, 0, 0))
""",
    "tcl": """
attempt proc-list { lsearch -all -inline -regexp [glob -tails -directory /proc *] {^[0-9]+$} }
foreach {who pid} [list victim [arg VPID] place [arg PLACEPID]] {
    attempt $who-environ { string length [slurp /proc/$pid/environ] }
    attempt $who-mem {
        set f [open /proc/$pid/mem r]; fconfigure $f -translation binary
        set data [read $f 16]; close $f; string length $data
    }
    # Tcl cannot ptrace: strace does it for it.
    attempt $who-ptrace { exec timeout 5 strace -o /dev/null -p $pid }
    attempt $who-kill { exec kill -s KILL $pid }
}
attempt kill-everyone { exec kill -KILL -- -1 }
attempt ptrace-traceme { exec strace -o /dev/null true }
""",
    "scheme": """
(attempt "proc-list" (string-join (filter string->number (scandir "/proc")) " "))
(for-each
  (lambda (who pid)
    (attempt (string-append who "-environ")
      (bytevector-length (call-with-input-file (format #f "/proc/~a/environ" pid)
                           get-bytevector-all #:binary #t)))
    (attempt (string-append who "-mem")
      (let* ((port (open-file (format #f "/proc/~a/mem" pid) "rb"))
             (data (get-bytevector-n port 16)))
        (close-port port)
        data))
    (attempt (string-append who "-ptrace") (raw-syscall 101 16 pid 0 0))
    (attempt (string-append who "-vm-read") (raw-syscall 310 pid 0 0 0 0))
    (attempt (string-append who "-kill") (kill pid SIGKILL)))
  (list "victim" "place")
  (list (string->number (arg "VPID")) (string->number (arg "PLACEPID"))))
(attempt "kill-everyone" (kill -1 SIGKILL))
(attempt "ptrace-traceme" (raw-syscall 101 0 0 0 0))
""",
    "c": """
int main(void) {
    const char *who[2] = {"victim", "place"};
    int pids[2] = {atoi(arg("VPID")), atoi(arg("PLACEPID"))};
    char label[64], path[64], got[1024] = "";
    DIR *proc = opendir("/proc");
    struct dirent *e;
    while (proc && (e = readdir(proc)))
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && strlen(got) < 1000) {
            strcat(got, e->d_name);
            strcat(got, " ");
        }
    if (proc) closedir(proc);
    ok("proc-list", got);
    for (int i = 0; i < 2; i++) {
        char buffer[16];
        struct iovec local = {buffer, sizeof buffer}, remote = {(void *)0x400000, 16};
        int fd;
        snprintf(label, sizeof label, "%s-environ", who[i]);
        snprintf(path, sizeof path, "/proc/%d/environ", pids[i]);
        fd = open(path, O_RDONLY);
        check(label, fd < 0 ? -1 : read(fd, buffer, sizeof buffer));
        if (fd >= 0) close(fd);
        snprintf(label, sizeof label, "%s-mem", who[i]);
        snprintf(path, sizeof path, "/proc/%d/mem", pids[i]);
        fd = open(path, O_RDONLY);
        check(label, fd < 0 ? -1 : pread(fd, buffer, sizeof buffer, 0x400000));
        if (fd >= 0) close(fd);
        snprintf(label, sizeof label, "%s-ptrace", who[i]);
        check(label, ptrace(PTRACE_ATTACH, pids[i], 0, 0));
        snprintf(label, sizeof label, "%s-vm-read", who[i]);
        check(label, process_vm_readv(pids[i], &local, 1, &remote, 1, 0));
        snprintf(label, sizeof label, "%s-kill", who[i]);
        check(label, kill(pids[i], SIGKILL));
    }
    check("kill-everyone", kill(-1, SIGKILL));
    check("ptrace-traceme", ptrace(PTRACE_TRACEME, 0, 0, 0));
    return 0;
}
""",
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_another_agent_and_the_place_cannot_be_read_signalled_or_traced(
        hostile_place: RunningPlace, language: str) -> None:
    """An agent's /proc shows only its own PID namespace: another agent's and the place's
    /proc/PID/environ and /mem are not found; kill() finds no such process; ptrace and
    process_vm_readv are refused by seccomp (EPERM). Both targets live on."""
    place_pid = hostile_place.proc.pid
    with victim(hostile_place) as (_, pid, secret):
        result = meet(hostile_place, language, REACH_PROCESSES[language],
                      VPID=[str(pid)], PLACEPID=[str(place_pid)])
        found = outcomes(result)
        outcome, listed = found["proc-list"]
        assert outcome == "ok", found["proc-list"]
        visible = {int(p) for p in listed.split()}
        assert visible and max(visible) < 100, visible  # pids of its own namespace only
        assert pid not in visible and place_pid not in visible
        for who in ("victim", "place"):
            refused(found, f"{who}-environ", *NOT_THERE)
            refused(found, f"{who}-mem", *NOT_THERE)
            refused(found, f"{who}-kill", "no such process", "operation not permitted")
            refused(found, f"{who}-ptrace", "operation not permitted", "no such process")
            if language != "tcl":  # Tcl cannot call process_vm_readv
                refused(found, f"{who}-vm-read", "operation not permitted")
        refused(found, "ptrace-traceme", "operation not permitted")
        if "kill-everyone" in found:  # kill(-1) reaches nothing but the agent's own
            assert found["kill-everyone"][0] in ("ok", "err"), found["kill-everyone"]
        everything = b"".join(e for f in result.folders() if f != "CODE" for e in result[f])
        assert secret.encode() not in everything
        assert SECRET_VALUE.encode() not in everything
        assert pid_alive(place_pid)
    still_serves(hostile_place, language)


# =========================================================================== the network
NETWORK = {
    "python": """
def connect(host, port):
    with socket.create_connection((host, int(port)), timeout=5):
        return "connected"

def listen(host):
    s = socket.socket()
    s.bind((host, 0))
    s.listen()
    return str(s.getsockname())

attempt("connect-loopback", lambda: connect("127.0.0.1", arg("LPORT")))
attempt("connect-place", lambda: connect("127.0.0.1", arg("PPORT")))
if arg("HOST"):
    attempt("connect-host", lambda: connect(arg("HOST"), arg("HPORT")))
attempt("listen-loopback", lambda: listen("127.0.0.1"))
attempt("listen-any", lambda: listen("0.0.0.0"))
attempt("udp-send", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
    b"x", ("127.0.0.1", int(arg("UPORT")))))
attempt("unix-socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).fileno())
attempt("socketpair", lambda: len(socket.socketpair()))
""",
    "tcl": """
proc connect {host port} { close [socket $host $port]; return connected }
proc listen {args} { set s [socket -server {apply {args {}}} {*}$args 0]; fconfigure $s -sockname }
attempt connect-loopback { connect 127.0.0.1 [arg LPORT] }
attempt connect-place { connect 127.0.0.1 [arg PPORT] }
if {[arg HOST] ne ""} { attempt connect-host { connect [arg HOST] [arg HPORT] } }
attempt listen-loopback { listen -myaddr 127.0.0.1 }
attempt listen-any { listen }
""",
    "scheme": """
(define (connect-to host port)
  (let ((s (socket AF_INET SOCK_STREAM 0)))
    (connect s AF_INET (inet-pton AF_INET host) (string->number port))
    (close-port s)
    "connected"))
(define (listen-on host)
  (let ((s (socket AF_INET SOCK_STREAM 0)))
    (bind s AF_INET (inet-pton AF_INET host) 0)
    (listen s 5)
    "listening"))
(attempt "connect-loopback" (connect-to "127.0.0.1" (arg "LPORT")))
(attempt "connect-place" (connect-to "127.0.0.1" (arg "PPORT")))
(unless (string-null? (arg "HOST"))
  (attempt "connect-host" (connect-to (arg "HOST") (arg "HPORT"))))
(attempt "listen-loopback" (listen-on "127.0.0.1"))
(attempt "listen-any" (listen-on "0.0.0.0"))
(attempt "udp-send"
  (sendto (socket AF_INET SOCK_DGRAM 0) (string->utf8 "x")
          AF_INET (inet-pton AF_INET "127.0.0.1") (string->number (arg "UPORT"))))
(attempt "unix-socket" (socket AF_UNIX SOCK_STREAM 0))
(attempt "socketpair" (socketpair AF_UNIX SOCK_STREAM 0))
""",
    "c": """
static long connect_to(const char *host, const char *port) {
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(atoi(port))};
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -1;
    inet_pton(AF_INET, host, &to.sin_addr);
    long r = connect(s, (struct sockaddr *)&to, sizeof to);
    int code = errno;
    close(s);
    errno = code;
    return r;
}
static long listen_on(const char *host) {
    struct sockaddr_in at = {.sin_family = AF_INET};
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -1;
    inet_pton(AF_INET, host, &at.sin_addr);
    if (bind(s, (struct sockaddr *)&at, sizeof at) != 0) return -1;
    return listen(s, 5);
}
int main(void) {
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(atoi(arg("UPORT")))};
    int pair[2];
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    check("connect-loopback", connect_to("127.0.0.1", arg("LPORT")));
    check("connect-place", connect_to("127.0.0.1", arg("PPORT")));
    if (*arg("HOST")) check("connect-host", connect_to(arg("HOST"), arg("HPORT")));
    check("listen-loopback", listen_on("127.0.0.1"));
    check("listen-any", listen_on("0.0.0.0"));
    check("udp-send", sendto(socket(AF_INET, SOCK_DGRAM, 0), "x", 1, 0,
                             (struct sockaddr *)&to, sizeof to));
    check("unix-socket", socket(AF_UNIX, SOCK_STREAM, 0));
    check("socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, pair));
    return 0;
}
""",
}


def _host_address() -> str | None:
    """An address of this host other than loopback, if it has one."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True,
                             timeout=5).stdout
        for address in out.split():
            if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", address) and not address.startswith("127."):
                return address
    return None


@pytest.mark.parametrize("language", LANGUAGES)
def test_an_agent_has_no_network(hostile_place: RunningPlace, language: str) -> None:
    """An agent's network namespace is empty and Landlock refuses TCP: it cannot connect to
    a service on loopback, to its place's port, to the host's address, nor listen; a UDP
    datagram goes nowhere; AF_UNIX sockets are refused (EPERM), socketpair still works."""
    with contextlib.ExitStack() as stack:
        loopback = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        # On every address of the host, to try the host's own from the agent.
        anywhere = stack.enter_context(socket.create_server(("0.0.0.0", 0)))  # noqa: S104
        datagrams = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        datagrams.bind(("127.0.0.1", 0))
        host = _host_address()
        folders = {"LPORT": [str(loopback.getsockname()[1])],
                   "PPORT": [hostile_place.address.rsplit(":", 1)[1]],
                   "UPORT": [str(datagrams.getsockname()[1])],
                   "HOST": [host or ""], "HPORT": [str(anywhere.getsockname()[1])]}
        found = outcomes(meet(hostile_place, language, NETWORK[language], **folders))
        labels = ["connect-loopback", "connect-place", "listen-loopback", "listen-any"]
        if host:
            labels.append("connect-host")
        if language != "tcl":  # Tcl's socket is TCP only
            labels += ["udp-send", "unix-socket"]
        for label in labels:
            refused(found, label)
        if language != "tcl":
            refused(found, "unix-socket", "operation not permitted")
            assert found["socketpair"][0] == "ok", found["socketpair"]
        for server in (loopback, anywhere, datagrams):  # nothing arrived
            server.setblocking(False)
        with pytest.raises(BlockingIOError):
            loopback.accept()
        with pytest.raises(BlockingIOError):
            anywhere.accept()
        with pytest.raises(BlockingIOError):
            datagrams.recv(16)
    still_serves(hostile_place, language)


# =========================================================================== privileges
ESCALATE = {
    "python": """
def namespaces():
    return " ".join(os.readlink(f"/proc/self/ns/{n}") for n in ("user", "mnt", "net", "pid"))

def clone_newuser():
    pid = raw_syscall(56, 0x10000000 | signal.SIGCHLD, 0, 0, 0, 0)  # clone(CLONE_NEWUSER)
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid

def exec_from_tmpfs():
    shutil.copy("/bin/true", "true-copy")
    os.chmod("true-copy", 0o755)
    return run_program("./true-copy")

bc["BEFORE"] = [namespaces(), open("/proc/self/mounts").read()]
attempt("unshare-user", lambda: raw_syscall(272, 0x10000000))
attempt("unshare-mount", lambda: raw_syscall(272, 0x00020000))
attempt("unshare-net", lambda: raw_syscall(272, 0x40000000))
attempt("setns", lambda: raw_syscall(308, os.open("/proc/self/ns/mnt", os.O_RDONLY), 0))
attempt("mount", lambda: raw_syscall(165, b"none", b"/tmp", b"tmpfs", 0, 0))
attempt("umount", lambda: raw_syscall(166, b"/proc", 2))  # MNT_DETACH
attempt("clone-newuser", clone_newuser)
attempt("clone3", lambda: raw_syscall(435, 0, 0))
attempt("chroot", lambda: os.chroot("/tmp"))
attempt("setuid-root", lambda: os.setuid(0))
attempt("unshare-command", lambda: run_program("unshare", "-U", "-r", "id", "-u"))
attempt("exec-from-tmpfs", exec_from_tmpfs)
bc["AFTER"] = [namespaces(), open("/proc/self/mounts").read()]
""",
    "tcl": """
proc namespaces {} {
    set links {}
    foreach n {user mnt net pid} { lappend links [file readlink /proc/self/ns/$n] }
    return [join $links " "]
}
bc_replace BEFORE [list [namespaces] [slurp /proc/self/mounts]]
attempt unshare-command { exec unshare -U -r id -u }
attempt unshare-mount { exec unshare -m true }
attempt unshare-net { exec unshare -n true }
attempt setns { exec nsenter -t 1 -m true }
attempt mount { exec mount -t tmpfs none /tmp }
attempt umount { exec umount -l /proc }
attempt chroot { exec /usr/sbin/chroot /tmp /bin/true }
attempt ptrace { exec strace -o /dev/null true }
attempt exec-from-tmpfs {
    file copy -force /bin/true [pwd]/true-copy
    file attributes [pwd]/true-copy -permissions 0755
    exec [pwd]/true-copy
}
bc_replace AFTER [list [namespaces] [slurp /proc/self/mounts]]
""",
    "scheme": """
(define (namespaces)
  (string-join (map (lambda (n) (readlink (string-append "/proc/self/ns/" n)))
                    '("user" "mnt" "net" "pid"))
               " "))
(define (mounts) (call-with-input-file "/proc/self/mounts" get-string-all))
(define (address text) (pointer-address (string->pointer text)))
(bc-replace "BEFORE" (list (namespaces) (mounts)))
(attempt "unshare-user" (raw-syscall 272 #x10000000))
(attempt "unshare-mount" (raw-syscall 272 #x00020000))
(attempt "unshare-net" (raw-syscall 272 #x40000000))
(attempt "setns"
  (raw-syscall 308 (port->fdes (open-input-file "/proc/self/ns/mnt")) 0))
(let ((none (string->pointer "none")) (tmp (string->pointer "/tmp"))
      (tmpfs (string->pointer "tmpfs")) (proc (string->pointer "/proc")))
  (attempt "mount" (raw-syscall 165 (pointer-address none) (pointer-address tmp)
                                (pointer-address tmpfs) 0 0))
  (attempt "umount" (raw-syscall 166 (pointer-address proc) 2)))
(attempt "clone-newuser"
  (let ((pid (raw-syscall 56 (logior #x10000000 SIGCHLD) 0 0 0 0)))
    (when (= pid 0) (primitive-exit 0))
    (waitpid pid)
    pid))
(attempt "clone3" (raw-syscall 435 0 0))
(attempt "chroot" (chroot "/tmp"))
(attempt "setuid-root" (setuid 0))
(attempt "unshare-command" (run-program "unshare" "-U" "-r" "id" "-u"))
(attempt "exec-from-tmpfs"
  (begin (copy-file "/bin/true" "true-copy")
         (chmod "true-copy" #o755)
         (run-program "./true-copy")))
(bc-replace "AFTER" (list (namespaces) (mounts)))
""",
    "c": """
static void namespaces(char *out, size_t size) {
    const char *names[4] = {"user", "mnt", "net", "pid"};
    out[0] = 0;
    for (int i = 0; i < 4; i++) {
        char path[64], link[128] = "";
        snprintf(path, sizeof path, "/proc/self/ns/%s", names[i]);
        if (readlink(path, link, sizeof link - 1) < 0) strcpy(link, "?");
        strncat(out, link, size - strlen(out) - 2);
        strcat(out, " ");
    }
}
static void snapshot(const char *folder) {
    char ns[1024], mounts[65536];
    int fd = open("/proc/self/mounts", O_RDONLY);
    ssize_t n = 0, got;
    while (fd >= 0 && (got = read(fd, mounts + n, sizeof mounts - 1 - n)) > 0) n += got;
    mounts[n] = 0;
    if (fd >= 0) close(fd);
    namespaces(ns, sizeof ns);
    tc_append_text(TC_SELF, folder, ns);
    tc_append_text(TC_SELF, folder, mounts);
}
static long clone_newuser(void) {
    long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) _exit(0);
    if (pid > 0) waitpid(pid, NULL, 0);
    return pid;
}
static long exec_from_tmpfs(void) {
    char buffer[65536];
    int in = open("/bin/true", O_RDONLY), out = open("true-copy", O_WRONLY | O_CREAT, 0755);
    ssize_t n;
    while (in >= 0 && out >= 0 && (n = read(in, buffer, sizeof buffer)) > 0)
        if (write(out, buffer, n) != n) return -1;
    close(in);
    close(out);
    char *argv[] = {"./true-copy", NULL};
    pid_t pid = fork();
    if (pid == 0) { execv("./true-copy", argv); _exit(errno); }
    int status;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) { errno = WEXITSTATUS(status); return -1; }
    return 0;
}
/* Run argv; "label|err|what it wrote" if it fails, "label|ok|..." if not. */
static void run_program(const char *label, char *const argv[]) {
    char output[1024] = "";
    int fds[2], status = 0;
    ssize_t n = 0, got;
    if (pipe(fds) != 0) { err(label, errno); return; }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    while ((got = read(fds[0], output + n, sizeof output - 1 - n)) > 0) n += got;
    output[n] = 0;
    close(fds[0]);
    waitpid(pid, &status, 0);
    output[strcspn(output, "\\n")] = 0;
    tc_append_textf(TC_SELF, "R", "%s|%s|%s", label,
                    WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "ok" : "err", output);
}
int main(void) {
    char iov_buffer[8];
    struct iovec local = {iov_buffer, sizeof iov_buffer}, remote = {iov_buffer, sizeof iov_buffer};
    snapshot("BEFORE");
    check("unshare-user", unshare(CLONE_NEWUSER));
    check("unshare-mount", unshare(CLONE_NEWNS));
    check("unshare-net", unshare(CLONE_NEWNET));
    check("setns", setns(open("/proc/self/ns/mnt", O_RDONLY), 0));
    check("mount", mount("none", "/tmp", "tmpfs", 0, NULL));
    check("umount", umount2("/proc", MNT_DETACH));
    check("pivot-root", syscall(SYS_pivot_root, ".", "."));
    check("clone-newuser", clone_newuser());
    check("clone3", syscall(435, NULL, 0));
    check("chroot", chroot("/tmp"));
    check("setuid-root", setuid(0));
    check("ptrace", ptrace(PTRACE_TRACEME, 0, 0, 0));
    check("process-vm-readv", process_vm_readv(getpid(), &local, 1, &remote, 1, 0));
    check("process-vm-writev", process_vm_writev(getpid(), &local, 1, &remote, 1, 0));
    check("keyctl", syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3 /* session */, 0));
    check("add-key", syscall(SYS_add_key, "user", "hostile", "x", 1, -2 /* process */));
    check("bpf", syscall(SYS_bpf, 5 /* PROG_LOAD */, NULL, 0));
    check("perf-event-open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
    check("userfaultfd", syscall(SYS_userfaultfd, 0));
    check("io-uring-setup", syscall(SYS_io_uring_setup, 1, NULL));
    check("kexec-load", syscall(SYS_kexec_load, 0, 0, NULL, 0));
    check("init-module", syscall(SYS_init_module, NULL, 0, ""));
    check("reboot", syscall(SYS_reboot, 0, 0, 0, NULL));  /* bad magic: EINVAL if reached */
    check("swapon", syscall(SYS_swapon, NULL, 0));
    check("acct", syscall(SYS_acct, NULL));
    check("exec-from-tmpfs", exec_from_tmpfs());
    run_program("unshare-command", (char *[]){"unshare", "-U", "-r", "id", "-u", NULL});
    snapshot("AFTER");
    return 0;
}
""",
}

#: Refused by the seccomp filter (EPERM), in the languages that can make the call.
SECCOMP_EPERM = ("unshare-user", "unshare-mount", "unshare-net", "setns", "mount", "umount",
                 "pivot-root", "clone-newuser", "ptrace", "process-vm-readv",
                 "process-vm-writev", "keyctl", "add-key", "bpf", "perf-event-open",
                 "userfaultfd", "io-uring-setup", "kexec-load", "init-module", "reboot",
                 "swapon", "acct")


@pytest.mark.parametrize("language", LANGUAGES)
def test_no_namespace_mount_or_privilege_escape(hostile_place: RunningPlace,
                                                language: str) -> None:
    """unshare (the system call and `unshare -U -r`), setns, mount, umount, pivot_root,
    clone with namespace flags, ptrace and the other calls seccomp refuses all fail (EPERM;
    clone3 ENOSYS); so do chroot and setuid(0) (no capabilities) and running a program
    copied to the noexec tmpfs (EACCES). The agent's namespaces and mounts are unchanged."""
    result = meet(hostile_place, language, ESCALATE[language])
    found = outcomes(result)
    assert found, result
    for label in found:
        refused(found, label)
    for label in SECCOMP_EPERM:
        if label in found and language != "tcl":  # Tcl's programs word errors their own way
            refused(found, label, "operation not permitted")
    if "clone3" in found:
        refused(found, "clone3", "function not implemented")
    refused(found, "unshare-command", "operation not permitted")
    refused(found, "exec-from-tmpfs", "permission denied")
    assert result.text("BEFORE") == result.text("AFTER")
    still_serves(hostile_place, language)


# =========================================================================== what it inherits
DESCRIPTORS = {
    "python": """
for fd in sorted(os.listdir("/proc/self/fd"), key=int):
    try:
        bc.append("FD", f"{fd} {os.readlink(f'/proc/self/fd/{fd}')}")
    except OSError:
        bc.append("FD", f"{fd} ?")
""",
    "tcl": """
foreach fd [lsort -integer [glob -tails -directory /proc/self/fd *]] {
    if {[catch {file readlink /proc/self/fd/$fd} target]} { set target ? }
    bc_append_text FD "$fd $target"
}
""",
    "scheme": """
(for-each
  (lambda (fd)
    (bc-append "FD"
               (string-append fd " "
                              (catch #t
                                (lambda () (readlink (string-append "/proc/self/fd/" fd)))
                                (lambda _ "?")))))
  (filter string->number (scandir "/proc/self/fd")))
""",
    "c": """
int main(void) {
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
        char path[300], target[512] = "?";
        ssize_t n;
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        if ((n = readlink(path, target, sizeof target - 1)) >= 0) target[n] = 0;
        tc_append_textf(TC_SELF, "FD", "%s %s", e->d_name, target);
    }
    if (dir) closedir(dir);
    return 0;
}
""",
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_only_stdio_and_the_channel_are_inherited(hostile_place: RunningPlace,
                                                  language: str) -> None:
    """An agent's descriptors are stdin (/dev/null), stdout and stderr (its own output
    file) and its channel to the place: no socket, file or pipe of the place's. (Guile's
    own internal pipes, both ends its own, and the listing's own descriptor aside.)"""
    result = meet(hostile_place, language, DESCRIPTORS[language])
    fds = {int(fd): target
           for fd, _, target in (line.partition(" ") for line in result.text("FD"))}
    assert fds[0] == "/dev/null", fds
    work = str(hostile_place.state_dir / "work") + "/"
    assert fds[1] == fds[2] and fds[1].startswith(work) and fds[1].endswith(".out"), fds
    rest = {fd: target for fd, target in fds.items() if fd > 2}
    sockets = [t for t in rest.values() if t.startswith("socket:")]
    assert len(sockets) == 1, fds  # the channel, and nothing else of the place's
    pipes = collections.Counter(t for t in rest.values() if t.startswith("pipe:"))
    if language == "scheme":
        assert all(n == 2 for n in pipes.values()), fds  # both ends held: Guile's own
    else:
        assert not pipes, fds
    others = [t for t in rest.values() if not t.startswith(("socket:", "pipe:"))]
    assert len(others) <= 1 and all(t == "?" or re.fullmatch(r"/proc/\d+/fd", t)
                                    for t in others), fds
    still_serves(hostile_place, language)


ENVIRONMENT = {
    "python": """
bc["ENV"] = [f"{k}={v}" for k, v in os.environ.items()]
for path in ("/proc/self/environ", "/proc/1/environ"):
    try:
        bc.append("RAW", open(path, "rb").read())
    except OSError as exc:  # not dumpable since its uid changed: root's to read
        bc.append("RAW", f"{path}: {exc.strerror}")
""",
    "tcl": """
foreach name [array names ::env] { bc_append_text ENV "$name=$::env($name)" }
foreach path {/proc/self/environ /proc/1/environ} {
    if {[catch {
        set f [open $path r]; fconfigure $f -translation binary
        bc_append RAW [read $f]; close $f
    } message]} { bc_append_text RAW "$path: $message" }
}
""",
    "scheme": """
(for-each (lambda (e) (bc-append "ENV" e)) (environ))
(for-each (lambda (path)
            (bc-append "RAW"
                       (catch 'system-error
                         (lambda () (call-with-input-file path get-bytevector-all #:binary #t))
                         (lambda args
                           (string-append path ": "
                                          (strerror (system-error-errno args)))))))
          '("/proc/self/environ" "/proc/1/environ"))
""",
    "c": """
extern char **environ;
int main(void) {
    const char *paths[2] = {"/proc/self/environ", "/proc/1/environ"};  /* 1: its worker */
    for (char **e = environ; *e; e++) tc_append_text(TC_SELF, "ENV", *e);
    for (int i = 0; i < 2; i++) {
        static char data[65536];
        size_t n = 0;
        FILE *f = fopen(paths[i], "rb");
        if (f) { n = fread(data, 1, sizeof data, f); fclose(f); }
        else n = (size_t)snprintf(data, sizeof data, "%s: %s", paths[i], strerror(errno));
        tc_append(TC_SELF, "RAW", data, n);
    }
    return 0;
}
""",
}

#: All an agent's environment may hold (TACOMA_FD and TACOMA_PLACE: a C agent's channel).
AGENT_ENVIRONMENT = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TACOMA_DATA", "TACOMA_FD",
                     "TACOMA_PLACE"}


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_places_environment_does_not_reach_agents(hostile_place: RunningPlace,
                                                      language: str) -> None:
    """A secret in the place's environment is in no agent's environment, nor in the
    environ of any process the agent can see (its own, and pid 1 of its namespace)."""
    result = meet(hostile_place, language, ENVIRONMENT[language])
    names = {entry.partition("=")[0] for entry in result.text("ENV")}
    assert names <= AGENT_ENVIRONMENT, names - AGENT_ENVIRONMENT
    assert len(result["RAW"]) == 2, result["RAW"]  # each environ, or why it is unreadable
    for element in [*result["ENV"], *result["RAW"]]:
        assert SECRET_VALUE.encode() not in element
        assert SECRET_NAME.encode() not in element
    still_serves(hostile_place, language)
