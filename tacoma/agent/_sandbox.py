"""Entering the sandbox: the one place where an agent process is confined.

Every worker process, whatever its language, calls `enter(plan)` first thing, before it says
Hello to its place and long before any agent code runs (so none of this is on a meet's
critical path: the pool pre-starts workers). The plan (`_plan.SandboxPlan`) is made by the
place (`place.workers._containment.Containment.plan`, the outside of confinement) and passed
to the zygote with the spawn request (or as JSON on the command line, for a build). What the
zygote does before the fork belongs to the same story: it is in a network namespace of its
own (empty: no interface but a loopback that is down), and forks each worker as the first
process of a new PID namespace (`_zygote`).

What is applied, in order (each layer where the plan has it; the place's log and `tacoma
doctor` say which apply on this host, and why not):
1. the cgroups the place made for this worker (as root): pids (a fork bomb stops), memory
   and CPU totals for all of the agent's processes together; the place kills them all
   through the pids cgroup;
2. resource limits per process: no core dumps, open files, file size, address space,
   processes (where no cgroup counts them), and CPU time counted from now (start-up costs
   are not charged to the agent); SIGXFSZ ignored, so writing past the file-size limit is an
   OSError the agent can report rather than a silent death;
3. a System V IPC namespace of its own; a mount namespace (`_mounts`): the place's state
   directory and trust directory covered but for the agent's own working directory, the
   data directory and the compile cache; one private tmpfs of the agent's disk quota for
   its working directory, /tmp, /var/tmp and /dev/shm; a /proc of its own PID namespace;
4. no_new_privs: nothing exec'd later can gain privileges (set-uid binaries, file caps);
5. Landlock (`_landlock`): reads the system, the interpreter and the data directory, writes
   only its scratch tmpfs, runs only the system's programs (and, for C, the cached binary);
   no TCP bind or connect unless the place gives agents the host's network; no signal to,
   nor abstract socket of, a process outside its own domain;
6. as root, a uid and gid of the agent's own (no supplementary groups): the agent cannot
   signal the place or other agents, nor read what only root may; every capability gone;
7. parent-death signal: if the zygote (or place) dies, so does the worker (armed after the
   uid change, which would clear it);
8. a seccomp filter, built by the place (`place.workers._seccomp`): system calls an agent never
   needs fail with EPERM;
9. a private umask.

The new session (setsid) is made by the zygote (or the place) when it starts the process.
This module is imported inside agent processes: standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import resource
import select
import signal
import sys

from . import _landlock, _mounts
from ._libc import check, error
from ._libc import libc as _libc
from ._plan import Mounts, SandboxPlan

# typing costs a worker ~9 ms to import; annotations are strings (PEP 563) anyway.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    P = TypeVar("P")

__all__ = ["CLONE_NEWIPC", "CLONE_NEWNET", "CLONE_NEWPID", "CLONE_NEWUSER", "become_subreaper",
           "cgroup_members", "children", "close_inherited", "describe_exit",
           "die_with_parent", "enter", "enter_user_namespace", "exec_plan", "kill_cgroup",
           "pidfd_open", "plan_from_argv", "setns", "unshare"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_CAPBSET_DROP = 24
_PR_SET_SECCOMP = 22
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_SECCOMP_MODE_FILTER = 2
_SYS_CAPSET = 126  # x86-64; the place builds no seccomp filter elsewhere either
_SYS_PIDFD_OPEN = 434
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
#: How many meets at its CPU limit a warm worker's hard RLIMIT_CPU leaves room for.
REUSE_CPU_MEETS = 4




def _prctl(option: int, arg: int) -> None:
    check(_libc.prctl(option, arg, 0, 0, 0), f"prctl({option})")


def unshare(flags: int) -> None:
    check(_libc.unshare(flags), f"unshare({flags:#x})")


def setns(fd: int, nstype: int) -> None:
    check(_libc.setns(fd, nstype), f"setns({nstype:#x})")


def enter_user_namespace(flags: int = 0) -> None:
    """Unshare a user namespace (and `flags`) in which this user is itself, with every
    capability there: how a place not run as root makes the other namespaces."""
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER | flags)
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")


def pidfd_open(pid: int) -> int:
    """A descriptor that becomes readable when process `pid` ends."""
    fd = int(_libc.syscall(_SYS_PIDFD_OPEN, pid, 0))
    if fd < 0:
        raise error("pidfd_open")
    return fd


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _load_seccomp(program: bytes) -> None:
    """Load a seccomp filter (struct sock_filter[], as libseccomp exports it)."""
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
           "seccomp")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_bounding_capabilities() -> None:
    """Empty the bounding and ambient sets (needs CAP_SETPCAP: before the uid change)."""
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # EINVAL past the last capability this kernel knows


def _drop_capabilities() -> None:
    """No capability left, effective, permitted or inheritable (a worker in a user namespace
    of the place's has them all in it, and root keeps them where agents share its uid)."""
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    check(_libc.syscall(_SYS_CAPSET, ctypes.byref(header), data), "capset")


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


def _mount_spec(mounts: Mounts) -> dict[str, object]:
    """`mounts` as `_mounts` takes it: its spec is still a map, made here in the process
    that applies it (nothing of it crosses a process boundary as a map)."""
    spec: dict[str, object] = {"at": mounts.at, "quota": mounts.quota, "uid": mounts.uid,
                               "keep": list(mounts.keep), "proc": mounts.proc,
                               "name": mounts.name}
    if mounts.view is not None:
        spec["covers"] = [(directory, list(shown)) for directory, shown in mounts.view.covers]
        spec["hide_files"] = list(mounts.view.hide_files)
    return spec


def enter(plan: SandboxPlan) -> None:
    """Confine this process as `plan` says; raises OSError if a layer cannot be applied."""
    for cgroup in plan.cgroups:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    limits = plan.limits
    _setrlimit(resource.RLIMIT_CORE, 0)
    _setrlimit(resource.RLIMIT_NOFILE, limits.open_files)
    _setrlimit(resource.RLIMIT_FSIZE, limits.file_bytes)
    _setrlimit(resource.RLIMIT_AS, limits.memory_bytes)
    if plan.nproc is not None:
        _setrlimit(resource.RLIMIT_NPROC, plan.nproc)
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    # One second between soft and hard limit: the kernel sends SIGXCPU at the soft limit
    # (reported as "CPU time limit reached") and SIGKILL at the hard one: where SIGXCPU is
    # blocked (Guile) or cannot kill (the first process of a PID namespace ignores it).
    # A warm worker (`plan.reuse`) serves several meets in one life: its hard limit leaves
    # room for REUSE_CPU_MEETS meets at the limit, and it sets each meet's soft limit itself
    # (`_reuse`; raising a hard limit needs a capability the place may not have). Each
    # meet's CPU time, all its processes together, is bounded by the place (its cgroup).
    lives = REUSE_CPU_MEETS if plan.reuse else 1
    _setrlimit(resource.RLIMIT_CPU, spent + limits.cpu_seconds,
               slack=1 + (lives - 1) * limits.cpu_seconds)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if plan.ipcns:
        # System V shared memory, queues and semaphores of its own, gone with its last
        # process: in the host's, a segment outlived the agent (counted to no cgroup) and
        # could be read by the next agent given its uid, or by anyone, made 0666.
        unshare(CLONE_NEWIPC)
    mounts = plan.mounts
    if mounts is not None and mounts.view is not None:  # a build: no zygote prepared it
        _mounts.enter_namespace(_mount_spec(mounts))
    elif mounts is not None:
        _mounts.enter_scratch({**_mount_spec(mounts), "unshare": True})
    if plan.userns:
        # A user namespace of the worker's own, nested in its zygote's: the kernel counts
        # RLIMIT_NPROC per user *and namespace*, so this is what makes the limit the
        # agent's own allowance. In the zygote's namespace every worker's processes
        # counted together, starting from none of the user's others on the host.
        enter_user_namespace()
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    if plan.landlock is not None:
        _landlock.restrict(list(plan.landlock.rules), deny_tcp=plan.landlock.deny_tcp,
                           scope=True)
    # Root that stays root (--same-uid) would get every capability back at an exec; a
    # worker in a user namespace holds them all there. Changing to another uid clears them.
    stays_root = plan.uid is None and os.geteuid() == 0
    if stays_root or plan.userns:
        _drop_bounding_capabilities()
    if plan.uid is not None:
        _become(plan.uid)
    if stays_root or plan.userns:
        _drop_capabilities()
    die_with_parent(plan.parent, pidfd=plan.parent_pidfd)
    if plan.seccomp:
        _load_seccomp(plan.seccomp)
    os.umask(0o077)


def die_with_parent(parent: int, sig: int = signal.SIGKILL, pidfd: int | None = None) -> None:
    """Send `sig` to this process when `parent` dies (and exit now if it already has).

    `pidfd`: a pidfd of the parent, for a process that cannot see its parent's pid (the
    first of a new PID namespace sees 0); it is closed here.
    """
    _prctl(_PR_SET_PDEATHSIG, sig)
    if pidfd is not None:
        gone = select.select([pidfd], [], [], 0)[0]
        os.close(pidfd)
        if gone:
            os._exit(70)  # the parent died before the death signal was armed
    elif os.getppid() != parent:
        os._exit(70)  # the parent died before the death signal was armed


def become_subreaper() -> None:
    """Adopt the orphans of this process's descendants (PR_SET_CHILD_SUBREAPER): what a
    worker leaves behind becomes a child of its zygote, not of init, and can be killed."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def children() -> list[int]:
    """The pids of this process's children, as the kernel lists them per thread ([] where
    the kernel does not list them)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), \
                    open(f"/proc/self/task/{task}/children") as listed:
                found.extend(int(pid) for pid in listed.read().split())
    return found


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
    compiler on an agent's source, say); never returns. Where the plan asks for namespaces
    (`namespaces`, as root), this process stays outside as the waiter that mirrors the
    program's exit, and the program runs as the first process of new PID and network
    namespaces (so its /proc shows only itself, and it has no network).
    """
    plan = plan_from_argv(SandboxPlan.from_wire)
    argv = list(plan.argv)
    close_inherited()
    if plan.userns:  # not root: the namespaces are made in a user namespace
        enter_user_namespace(CLONE_NEWNET)
    if plan.namespaces:
        die_with_parent(plan.parent)
        unshare(CLONE_NEWPID | CLONE_NEWNET)
        child = os.fork()
        if child:
            _, status = os.waitpid(child, 0)
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)
        # The waiter is outside this PID namespace: getppid() is 0 here, and that is who
        # the death signal is armed for.
        plan = dataclasses.replace(plan, parent_pidfd=None, parent=0)
    enter(plan)
    try:
        os.execvp(argv[0], argv)  # noqa: S606 - the place's own command, confined
    except OSError as exc:
        sys.stderr.write(f"tacoma: cannot run {argv[0]}: {exc.strerror or exc}\n")
        os._exit(127)


def plan_from_argv(from_wire: Callable[[object], P]) -> P:
    """The plan the place passed as the last command-line argument, read by `from_wire`
    (`SandboxPlan.from_wire`, or `ZygotePlan.from_wire`)."""
    plan = json.loads(sys.argv[-1])
    if not isinstance(plan, dict):
        raise SystemExit("tacoma worker: expected a JSON sandbox plan as the last argument")
    try:
        return from_wire(plan)
    except ValueError as exc:
        raise SystemExit(f"tacoma worker: {exc}") from None


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
