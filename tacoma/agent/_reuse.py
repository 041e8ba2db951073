"""Making a warm worker clean again between two meets, inside the worker.

A worker whose plan says `reuse` may serve a later meet, and the place hands it only a meet
of the same principal and the same program (place.workers._warm): what a meet leaves in the
process's memory is then visible only to the program that could have kept it anyway. Here
the worker takes back everything else before it says Ready:

- every other process of the agent: the worker is the first process of its own PID
  namespace, so `kill(-1, SIGKILL)` reaches all of them and nothing outside; it reaps them
  (orphans are its children there);
- the files: its working directory and its private /tmp, /var/tmp and /dev/shm emptied
  (the parts of the place's installation shown below /tmp are mount points, skipped) and
  their modes put back;
- descriptors it did not have before its first meet, closed; those it had must still be
  the same files (the agent may have put another file on stdout, say);
- environment, working directory, umask, interval timers; its output file emptied, so each
  meet's output is its own;
- its resource limits must be those it entered with, and it must have no more threads than
  before;
- the next meet's CPU time limit (RLIMIT_CPU's soft limit) counted from now, within the
  hard limit `_sandbox.enter` gave it for its whole life: one whose life's CPU time is
  nearly spent is not reused.

Whatever cannot be made as it was ends the worker instead (`clean` says what): the place
then destroys it, and the next meet gets a fresh one. Standard library only: this
runs inside agent processes.
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import signal
import time

from ._libc import libc as _libc
from ._mounts import TMP_DIRS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._plan import SandboxPlan

__all__ = ["Baseline"]

#: The resource limits a worker must still have after a meet (RLIMIT_CPU is set per meet).
_LIMITS = (resource.RLIMIT_CORE, resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE,
           resource.RLIMIT_AS, resource.RLIMIT_NPROC)
#: How long the worker waits for the agent's other processes to die once killed.
_REAP_SECONDS = 1.0
_TIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)


def _open_fds() -> list[int]:
    return [int(fd) for fd in os.listdir("/proc/self/fd")]


def _identity(fd: int) -> tuple[int, int] | None:
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Baseline:
    """What a worker was before its first meet, to make it so again after each."""

    def __init__(self, plan: SandboxPlan) -> None:
        self.plan = plan
        self.cwd = os.getcwd()
        self.env = dict(plan.env)
        self.limits = {which: resource.getrlimit(which) for which in _LIMITS}
        self.threads = len(os.listdir("/proc/self/task"))
        self.fds = {fd: ident for fd in _open_fds() if (ident := _identity(fd)) is not None}
        self.device = os.stat(self.cwd).st_dev  # its tmpfs: what it may empty
        # Its scratch directories, each with the mode it was made with (`_mounts`).
        self.scratch = [(self.cwd, 0o700)] + [
            (path, 0o1777) for path, _ in TMP_DIRS
            if os.path.isdir(path) and not os.path.islink(path)
            and os.stat(path).st_dev == self.device]

    def clean(self) -> str | None:
        """Make the worker as it was before its first meet; what is not, if it cannot be."""
        if os.getpid() != 1:  # no PID namespace of its own: kill(-1) would reach others
            return "it has no PID namespace of its own"
        steps = ((self._no_other_processes, "its other processes did not end"),
                 (self._cpu_limit, "its CPU time for a life of meets is nearly spent"),
                 (self._same_threads, "it has threads it did not have"),
                 (self._same_limits, "its resource limits changed"),
                 (self._descriptors, "a descriptor it had is another file now"),
                 (self._files, "files are left in its directories"),
                 (self._process_state, "its process state could not be reset"))
        for step, failed in steps:
            try:
                if not step():
                    return failed
            except (OSError, RecursionError, ValueError) as exc:
                return f"{failed}: {exc}"
        return None

    def renew(self) -> bool:
        """The next meet's CPU time limit and output file, and nothing else: for a worker
        whose meets each run in a fresh instance of a runtime (`_channel.serve_one`'s
        `instances`), which reach nothing else of the process. False if it cannot be
        reused (its life's CPU time is nearly spent, or its output cannot be emptied)."""
        try:
            if not self._cpu_limit():
                return False
            os.ftruncate(1, 0)
            os.lseek(1, 0, os.SEEK_SET)
        except OSError:
            return False
        return True

    def _no_other_processes(self) -> bool:
        deadline = time.monotonic() + _REAP_SECONDS
        while True:
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)
            try:
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            except ChildProcessError:
                return True  # none left, not even a zombie
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0005)

    def _cpu_limit(self) -> bool:
        """The next meet's CPU limit: as a fresh worker's, from what it used so far."""
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(used.ru_utime + used.ru_stime) + 1 + self.plan.limits.cpu_seconds
        if hard != resource.RLIM_INFINITY and soft + 1 > hard:
            return False
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        return True

    def _same_threads(self) -> bool:
        # Counted, not named: a runtime may end one of its own threads and start it anew
        # (Guile's finalizer thread, around a fork).
        return len(os.listdir("/proc/self/task")) <= self.threads

    def _same_limits(self) -> bool:
        return all(resource.getrlimit(which) == limits for which, limits in self.limits.items())

    def _descriptors(self) -> bool:
        extra = [fd for fd in _open_fds() if fd not in self.fds]
        if extra:
            # An object of the agent's still holding one would close its number later,
            # when that may be another file: let the collector close what it can first.
            gc.collect()
            for fd in extra:
                with contextlib.suppress(OSError):
                    os.close(fd)
        return all(_identity(fd) == ident for fd, ident in self.fds.items())

    def _files(self) -> bool:
        for path, mode in self.scratch:
            os.chmod(path, mode)  # the agent may have taken its own rights away
            _empty(path, self.device)
        return all(not _holds_own(path, self.device) for path, _ in self.scratch)

    def _process_state(self) -> bool:
        os.chdir(self.cwd)
        # The process's own environment, which an interpreter may have changed without
        # Python's mapping knowing (Tcl's env array, Guile's setenv): emptied, then the
        # plan's put back through the mapping.
        if _libc.clearenv() != 0:
            return False
        os.environ.clear()
        os.environ.update(self.env)
        os.umask(0o077)
        for timer in _TIMERS:
            signal.setitimer(timer, 0)
        os.ftruncate(1, 0)  # its output file: the next meet's output starts it anew
        os.lseek(1, 0, os.SEEK_SET)
        return True


def _empty(directory: str, device: int) -> None:
    """Remove everything below `directory` that lies on the file system `device`; mount
    points on it (what the place shows of its installation below /tmp) and the directories
    that lead to them are left."""
    with os.scandir(directory) as entries:
        found = list(entries)
    for entry in found:
        st = entry.stat(follow_symlinks=False)
        if st.st_dev != device:
            continue  # a mount point
        if entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(PermissionError):
                os.chmod(entry.path, 0o700)  # one of the agent's, made unreadable
            _empty(entry.path, device)
            with contextlib.suppress(OSError):  # not empty: it leads to a mount point
                os.rmdir(entry.path)
        else:
            os.unlink(entry.path)


def _holds_own(directory: str, device: int) -> bool:
    """Whether anything the agent could have made is left below `directory`: a file, or a
    directory it owns (those leading to mount points are the place's)."""
    uid = os.getuid()
    with os.scandir(directory) as entries:
        for entry in entries:
            st = entry.stat(follow_symlinks=False)
            if st.st_dev != device:
                continue
            if not entry.is_dir(follow_symlinks=False) or st.st_uid == uid \
                    or _holds_own(entry.path, device):
                return True
    return False
