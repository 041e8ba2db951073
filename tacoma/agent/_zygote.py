"""The zygote: one pre-initialised interpreter per language that forks the workers.

Starting a Python worker from scratch costs tens of milliseconds of CPU (exec, interpreter
start, imports); forking one from a process that already did all that costs about one. So
each language's pool starts one zygote (its worker module run as `main`), which warms its
code paths up with a dummy meet and then waits for spawn requests from the place on a
SOCK_SEQPACKET control socket. For each request it forks a child that makes itself a
worker: a new session, the output file on stdout and stderr, the private working directory,
a minimal environment, then `_channel.serve_one`, which confines it and serves one meet.

The zygote never runs an agent and never sees a briefcase (those reach the child after the
fork, over the channel it was handed), so every worker starts from the same clean image:
a fresh address space, with nothing of the place's memory, nor of another agent's (a warm
worker serves later meets of the same principal and program only: `_reuse`).
The zygote is the first layer of the sandbox (the rest is `_sandbox.enter`, in the child):
before it forks anything it enters a network namespace of its own, empty, so that no worker
has a network unless the place gives agents the host's (`--agent-network host`); as root it
forks each worker as the first process of a new PID namespace (reset to its own with setns,
then a new one with unshare, before each fork: cheaper than a second fork), so an agent sees
only its own processes and all of them die with it. Without root it does the same in a user
namespace of its own where the kernel allows that (no PID namespaces there: see
`_sandbox`).

The zygote reaps its children and reports how each ended. When the place dies, however it
dies (SIGTERM as its parent-death signal, or the control socket's end), the zygote kills
every process of its live workers, through their cgroups where they have them and their
process groups otherwise, and exits: an agent's own children do not outlive the place.

The zygote starts with a `_plan.ZygotePlan` as JSON on its command line. Control messages
are msgpack maps: place -> zygote `{"op": "spawn", "id", "plan"}` (the worker's
`_plan.SandboxPlan`, in its wire form) with the worker's channel and output file
descriptors attached (SCM_RIGHTS); zygote -> place `{"op": "ready"}` (or `{"op": "failed",
"message"}` if it could not enter its namespaces), `{"op": "spawned", "id", "pid"}` (or
`{"op": "spawn-failed", "id", "message"}`, also for a plan it cannot read),
`{"op": "exited", "pid", "status", "cpu"}` (status as subprocess reports it: an exit code,
or minus the signal number; cpu: the seconds of CPU the worker used, so a kill at the CPU
limit can be told as such).

Standard library and msgpack only: this is the image every agent process starts from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import select
import signal
import socket
import sys
import traceback
from collections.abc import Callable

import msgpack

from ..wire._protocol import Meet
from . import _channel, _mounts, _sandbox
from ._plan import SandboxPlan, ZygotePlan

__all__ = ["main"]

#: Largest control message: a spawn request is a sandbox plan, well under this.
MAX_CONTROL = 64 * 1024


def _send(control: socket.socket, message: dict[str, object]) -> None:
    control.send(msgpack.packb(message, use_bin_type=True))


def _reap(control: socket.socket, live: dict[int, str | None]) -> None:
    """Reap every child that ended, and report the workers among them.

    Where no PID namespace and no cgroup holds an agent's processes (a place without root),
    this is what ends them: a worker's process group is killed before the worker is reaped,
    while its zombie still holds the pid, so the number names no other process's group; and
    the zygote, a child subreaper, adopts whatever a worker left outside its group (setsid,
    a double fork) and kills it (`_kill_orphans`).
    """
    while True:
        try:
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            break
        if ended is None:
            break
        pid = ended.si_pid
        if pid in live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        if pid not in live:
            continue  # an orphan adopted and killed below: the place never knew it
        live.pop(pid)
        # If the place is gone the send fails; the main loop notices and cleans up.
        with contextlib.suppress(OSError):
            _send(control, {"op": "exited", "pid": pid,
                            "status": os.waitstatus_to_exitcode(status),
                            "cpu": usage.ru_utime + usage.ru_stime})
    _kill_orphans(live)


def _kill_orphans(live: dict[int, str | None]) -> None:
    """Kill every child of the zygote that is not a live worker: processes of ended
    workers, adopted as their parents died. Each is a child until it is reaped, so its pid
    is not reused meanwhile; its own children are adopted in turn when it dies, and
    killed when that SIGCHLD is handled."""
    for pid in _sandbox.children():
        if pid not in live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _kill_everything(live: dict[int, str | None]) -> None:
    """Kill every process of every live worker: the place is gone and nobody else will."""
    for pid, cgroup in live.items():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # not reaped yet, so the pid is still ours
        if cgroup is not None:
            _sandbox.kill_cgroup(cgroup)
    _kill_orphans({})


def _become_worker(run: _channel.Runner, plan: SandboxPlan, fds: list[int],
                   zygote: int, zygote_fd: int, prepare: Callable[[], None] | None,
                   warm: Meet | None, reset: Callable[[], None] | None,
                   instances: bool) -> None:
    """In the forked child: shed the zygote's state and serve its meets."""
    channel_fd, output_fd = fds
    os.setsid()  # a session and process group of its own, for the place to kill whole
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    os.close(output_fd)
    if plan.mounts is None:  # else made in its own tmpfs, and entered, by _sandbox
        os.chdir(plan.workdir)
    os.environ.clear()
    os.environ.update(plan.env)
    sys.argv = ["tacoma-agent"]
    _channel.serve_one(run, dataclasses.replace(plan, fd=channel_fd, parent=zygote,
                                                parent_pidfd=zygote_fd), prepare, warm,
                       reset, instances)


def _own_namespaces(plan: ZygotePlan) -> int | None:
    """Enter the namespaces the plan asks for, once, and prepare the mount view every
    worker shares. Returns the descriptor of this process's own PID namespace where each
    worker is to get a new one (else None)."""
    namespaces = plan.namespaces
    if namespaces.userns:
        _sandbox.enter_user_namespace(_sandbox.CLONE_NEWNET)
    elif namespaces.netns:
        _sandbox.unshare(_sandbox.CLONE_NEWNET)
    view = namespaces.view
    if view is not None:
        _mounts.prepare_view([(d, list(shown)) for d, shown in view.covers],
                             list(view.hide_files))
    pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC) \
        if namespaces.pidns else None
    return pidns


def _new_pid_namespace(pidns: int) -> None:
    """Make the next child the first process of a new PID namespace: back to our own for
    children (a second unshare is refused otherwise), then a new one."""
    _sandbox.setns(pidns, _sandbox.CLONE_NEWPID)
    _sandbox.unshare(_sandbox.CLONE_NEWPID)


def main(run: _channel.Runner, warm_up: Meet | None = None,
         prepare: Callable[[], None] | None = None,
         reset: Callable[[], None] | None = None, instances: bool = False) -> None:
    """Run as a zygote until the place closes the control socket. Never returns.

    `warm_up` is a harmless meet run once here, and again in each worker started ahead of
    its meet; `prepare` runs in each worker, confined, before it says it is ready; `reset`
    in a warm worker between two meets, to give the next a fresh interpreter state;
    `instances`: the language runs each meet in a fresh instance of its runtime (see
    _channel.serve_one).
    """
    plan = _sandbox.plan_from_argv(ZygotePlan.from_wire)
    _sandbox.close_inherited(keep=(plan.control_fd,))
    parent = plan.parent
    signal.signal(signal.SIGTERM, lambda *_: None)  # wakes the loop below, which cleans up
    _sandbox.die_with_parent(parent, signal.SIGTERM)
    _sandbox.become_subreaper()  # see _reap
    control = socket.socket(fileno=plan.control_fd)
    os.set_inheritable(control.fileno(), False)
    try:
        pidns = _own_namespaces(plan)
    except OSError as exc:  # the place said the kernel allows it: say what did not work
        _send(control, {"op": "failed", "message": f"namespaces: {exc}"})
        os._exit(1)
    next_namespace = False  # whether the next child will be in a new PID namespace already
    zygote_fd = _sandbox.pidfd_open(os.getpid())  # how a worker in a new PID namespace
    #                                               knows the zygote still lives
    if warm_up is not None:
        _channel.warm_up(run, warm_up)
    # Every object so far is the image each worker starts from. Frozen, the collector never
    # visits it in a worker: a collection there would otherwise write to every inherited
    # object, and so copy every page of the image, on the meet's critical path (the gc
    # module's own advice for fork without exec).
    gc.collect()
    gc.freeze()
    # SIGCHLD wakes the select below through a pipe (Python's own wakeup-fd mechanism).
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    live: dict[int, str | None] = {}  # worker pid -> its cgroup
    _send(control, {"op": "ready"})
    while True:
        readable, _, _ = select.select([control.fileno(), wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(control, live)
            if os.getppid() != parent:
                _kill_everything(live)
                os._exit(0)
        if control.fileno() not in readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(control, MAX_CONTROL, 2)
        except OSError:
            data, fds = b"", []
        if not data:  # the place is gone or closing
            _kill_everything(live)
            os._exit(0)
        request = msgpack.unpackb(data, raw=False)
        try:
            worker_plan = SandboxPlan.from_wire(request["plan"])
        except ValueError as exc:  # the place's bug: it hears why, and no worker starts
            for fd in fds:
                os.close(fd)
            _send(control, {"op": "spawn-failed", "id": request["id"], "message": str(exc)})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            if pidns is not None and not next_namespace:
                _new_pid_namespace(pidns)
            next_namespace = False
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            _send(control, {"op": "spawn-failed", "id": request["id"], "message": str(exc)})
            continue
        if pid == 0:
            status = 0
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                for fd in (wake_r, wake_w, *([pidns] if pidns is not None else [])):
                    os.close(fd)
                control.close()
                _become_worker(run, worker_plan, fds, os.getppid(), zygote_fd, prepare,
                               warm_up, reset, instances)
            except BaseException:  # noqa: BLE001 - whatever happens, never return to the loop
                traceback.print_exc()
                status = 71
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        for fd in fds:
            os.close(fd)
        # Any of its cgroups lists all its processes.
        live[pid] = worker_plan.cgroups[0] if worker_plan.cgroups else None
        _send(control, {"op": "spawned", "id": request["id"], "pid": pid})
        if pidns is not None:  # the next worker's namespace, made now rather than then
            with contextlib.suppress(OSError):
                _new_pid_namespace(pidns)
                next_namespace = True
