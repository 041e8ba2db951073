"""Entering the sandbox: the one place where an agent process is confined.

Every worker process, whatever its language, calls `enter(plan)` first thing, before it says
Hello to its place and long before any agent code runs (so none of this is on a meet's
critical path: the pool pre-starts workers). The plan is made by the place
(`_workers.sandbox_plan`) and passed as JSON on the command line. Later kernel layers
(namespaces, Landlock, seccomp) belong here too, so there is exactly one place to read to
know what confines an agent.

What is applied, in order:
1. join the pids cgroup the place made for this worker (as root): caps its process count and
   lets the place kill every process it made, even ones that left the process group;
2. resource limits: no core dumps, open files, file size, address space, processes, and CPU
   time counted from now (start-up costs are not charged to the agent);
3. SIGXFSZ ignored, so writing past the file-size limit is an OSError the agent can report
   rather than a silent death;
4. no_new_privs: nothing exec'd later can gain privileges (set-uid binaries, file caps);
5. parent-death signal: if the place dies, so does the worker;
6. a private umask; the working directory was made private by the place.

The new session (setsid) is made by the place when it starts the process.
This module is imported inside agent processes: standard library only.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys
from typing import Any

__all__ = ["enter", "plan_from_argv"]

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38


def _prctl(option: int, arg: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}) failed: {os.strerror(err)}")


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
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != plan["parent"]:
        os._exit(70)  # the place died before the death signal was armed
    os.umask(0o077)


def plan_from_argv() -> dict[str, Any]:
    """The plan the place passed as the last command-line argument."""
    plan = json.loads(sys.argv[-1])
    if not isinstance(plan, dict):
        raise SystemExit("tacoma worker: expected a JSON sandbox plan as the last argument")
    return plan
