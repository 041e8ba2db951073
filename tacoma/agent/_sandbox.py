"""Entering the sandbox: the one place where an agent process is confined.

Every worker process, whatever its language, calls `enter(plan)` first thing, before it says
Hello to its place and long before any agent code runs (so none of this is on a meet's
critical path: the pool pre-starts workers). The plan is made by the place
(`place._containment.Containment.plan`, the outside of confinement) and passed as JSON on the
command line. Later kernel layers (namespaces, Landlock, seccomp) belong here too, so there
is exactly one place to read to know what confines an agent.

What is applied, in order:
1. join the pids cgroup the place made for this worker (as root): caps its process count and
   lets the place kill every process it made, even ones that left the process group;
2. resource limits: no core dumps, open files, file size, address space, processes, and CPU
   time counted from now (start-up costs are not charged to the agent);
3. SIGXFSZ ignored, so writing past the file-size limit is an OSError the agent can report
   rather than a silent death;
4. as root, a uid and gid of the agent's own (no supplementary groups): the agent cannot
   signal the place or other agents, nor read what only root may. Where the interpreter is
   installed below a directory others may not enter (Python under a 0700 /root, say), the
   worker first enters a private mount namespace in which each such directory is covered by
   an empty read-only tmpfs holding bind mounts of just the paths the agent needs (`reveal`);
5. no_new_privs: nothing exec'd later can gain privileges (set-uid binaries, file caps);
6. parent-death signal: if the place dies, so does the worker (armed after the uid change,
   which would clear it);
7. a private umask; the working directory was made private by the place.

The new session (setsid) is made by the place when it starts the process.
This module is imported inside agent processes: standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys

# typing costs a worker ~9 ms to import; annotations are strings (PEP 563) anyway.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["cgroup_members", "close_inherited", "describe_exit", "die_with_parent", "enter",
           "exec_plan",
           "kill_cgroup", "plan_from_argv"]

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV = 1, 2, 4
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl({option})")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else os.fsencode(s)

    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)),
           f"mount {target}")


def reveal(cover: list[tuple[str, list[str]]]) -> None:
    """In a new mount namespace, cover each directory with a tmpfs showing only `paths`.

    `cover` pairs a directory others may not enter with the paths below it the agent needs;
    the tmpfs holds just enough directories to mount those paths on (bind mounts of the
    originals, opened before the tmpfs hides them), and is then made read-only.
    """
    _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    for directory, paths in cover:
        originals = [(path, os.open(path, os.O_PATH)) for path in paths]
        _mount("tmpfs", directory, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
        for path, fd in originals:
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(path, 0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
                open(path, "a").close()
            _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
            os.close(fd)
        _mount(None, directory, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _become(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:  # never run an agent as root by mistake
        raise OSError(f"could not switch to uid {uid}")


def _setrlimit(which: int, value: int, slack: int = 0) -> None:
    """Set soft limit `value` and hard limit `value + slack`, never above the current hard."""
    _, hard = resource.getrlimit(which)
    soft, new_hard = value, value + slack
    if hard != resource.RLIM_INFINITY:
        soft, new_hard = min(soft, hard), min(new_hard, hard)
    resource.setrlimit(which, (soft, new_hard))


def enter(plan: dict[str, Any]) -> None:
    """Confine this process as `plan` says; raises OSError if a layer cannot be applied."""
    cgroup = plan.get("cgroup")
    if cgroup:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    limits = plan["limits"]
    _setrlimit(resource.RLIMIT_CORE, 0)
    _setrlimit(resource.RLIMIT_NOFILE, int(limits["open_files"]))
    _setrlimit(resource.RLIMIT_FSIZE, int(limits["file_bytes"]))
    _setrlimit(resource.RLIMIT_AS, int(limits["memory_bytes"]))
    if plan.get("nproc") is not None:
        _setrlimit(resource.RLIMIT_NPROC, int(plan["nproc"]))
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    # One second between soft and hard limit: the kernel sends SIGXCPU at the soft limit
    # (reported as "CPU time limit reached") and SIGKILL only if that is ignored.
    _setrlimit(resource.RLIMIT_CPU, spent + int(limits["cpu_seconds"]), slack=1)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if plan.get("reveal"):
        reveal([(d, list(paths)) for d, paths in plan["reveal"]])
    if plan.get("uid") is not None:
        _become(int(plan["uid"]))
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    die_with_parent(int(plan["parent"]))
    os.umask(0o077)


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to this process when `parent` dies (and exit now if it already has)."""
    _prctl(_PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent:
        os._exit(70)  # the parent died before the death signal was armed


def cgroup_members(cgroup: str) -> list[int]:
    """The pids in a cgroup (none if it is gone)."""
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as f:
            return [int(pid) for pid in f.read().split()]
    except OSError:
        return []


def kill_cgroup(cgroup: str, rounds: int = 1000) -> None:
    """SIGKILL every process in a cgroup, again while it refills (a fork bomb is bounded
    by pids.max, so it cannot outlast the rounds)."""
    for _ in range(rounds):
        members = cgroup_members(cgroup)
        if not members:
            return
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def close_inherited(keep: tuple[int, ...] = ()) -> None:
    """Close every descriptor above stderr but `keep`: whatever the place's process had
    open (uvloop's subprocess launcher does not close them) is not an agent's."""
    top = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    top = 1 << 16 if top == resource.RLIM_INFINITY else top
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, top)


def exec_plan() -> None:
    """Confine this process as the plan on the command line says, then exec its `argv`.

    How the place runs a program other than a worker under an agent's confinement (a
    compiler on an agent's source, say); never returns.
    """
    plan = plan_from_argv()
    argv = [str(arg) for arg in plan["argv"]]
    close_inherited()
    enter(plan)
    try:
        os.execvp(argv[0], argv)  # noqa: S606 - the place's own command, confined
    except OSError as exc:
        sys.stderr.write(f"tacoma: cannot run {argv[0]}: {exc.strerror or exc}\n")
        os._exit(127)


def plan_from_argv() -> dict[str, Any]:
    """The plan the place passed as the last command-line argument."""
    plan = json.loads(sys.argv[-1])
    if not isinstance(plan, dict):
        raise SystemExit("tacoma worker: expected a JSON sandbox plan as the last argument")
    return plan


_SIGNALS = {s.value for s in signal.Signals}


def describe_exit(returncode: int, cpu_seconds: int, cpu_used: float = 0.0,
                  subject: str = "agent process") -> str:
    """Why an agent's process (`subject`) ended without answering, in words."""
    if returncode < 0 and cpu_used >= cpu_seconds:
        # SIGXCPU, or SIGKILL at the hard limit where the runtime blocks SIGXCPU (Guile).
        name = signal.Signals(-returncode).name if -returncode in _SIGNALS else "a signal"
        return f"{subject} killed by {name}: its CPU time limit of {cpu_seconds} s " \
               "was reached"
    if returncode < 0:
        sig = -returncode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        reasons: dict[int, str] = {
            signal.SIGXCPU: f"its CPU time limit of {cpu_seconds} s was reached",
            signal.SIGKILL: "out of memory, or killed from outside",
            signal.SIGSEGV: "a segmentation fault (crash)",
            signal.SIGABRT: "abort",
            signal.SIGBUS: "a bus error (crash)",
            signal.SIGXFSZ: "its file size limit was reached",
        }
        why = reasons.get(sig)
        return f"{subject} killed by {name}" + (f": {why}" if why else "")
    return f"{subject} exited with status {returncode} before answering"
