"""Containment: the outside of an agent's confinement, kept by the place.

An agent process confines itself on entry (`agent._sandbox.enter`, the inside); what must be
set up for it from outside, and taken down after it, lives here and in the modules it uses:
- the layers this host allows (`_layers.probe`, once at start), which every plan carries;
- a uid and gid of its own, as root, from a block claimed host-wide (`_uids`);
- cgroups of its own, as root (`_cgroups`): processes, memory and CPU of all of its
  processes together, and the list of them all, so that all can be killed;
- not as root and without cgroups, RLIMIT_NPROC bounds the processes: it counts a user's
  processes and threads per user namespace, so a worker in a user namespace of its own
  gets the configured allowance, and one without (no user namespaces here) what the user
  runs now plus the allowance;
- the file system it sees (covers of the state and trust directories, its tmpfs) and the
  Landlock rules it restricts itself to, both made here, in `Containment.plan`: the
  `agent._plan.SandboxPlan` the process enters (and `zygote_plan`, what a zygote enters
  once for all its workers);
- `Containment.confined`, which runs a program other than a worker (a compiler on an
  agent's source) under the same rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import BinaryIO

from ...agent import _landlock
from ...agent._interpreter import worker_sys_path
from ...agent._mounts import TMP_DIRS, is_below
from ...agent._plan import (
    Artifacts,
    Cover,
    Landlock,
    Mounts,
    Namespaces,
    Rlimits,
    Rule,
    SandboxPlan,
    View,
)
from ...wire._errors import MeetTimeout
from .._settings import PlaceSettings
from ._cgroups import Group
from ._layers import Layers
from ._uids import AgentUids

__all__ = ["Containment", "cover_plan", "interpreter_paths", "private_output", "tail"]

log = logging.getLogger("tacoma.place")

#: Bytes of an agent's stdout/stderr returned with an error: enough for a traceback.
OUTPUT_TAIL = 4096


def interpreter_paths() -> list[str]:
    """What a Python worker reads after it dropped root: the installation (its standard
    library and site-packages) and where tacoma and msgpack came from. Not the rest of the
    place's sys.path: its cwd may be "/" (a service) or a user's home."""
    return [p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *worker_sys_path())
            if os.path.isabs(p) and p != "/"]


def _closed(path: str) -> bool:
    """Whether others may not enter the directory `path`."""
    return not os.stat(path).st_mode & stat.S_IXOTH


def cover_plan(paths: list[str]) -> list[Cover]:
    """For each outermost directory others may not enter, the needed paths below it."""
    # A directory others may not enter is no use to reveal (the agent could not enter
    # it anyway), and kept as a path it would hide the paths below it that are needed
    # (the place's cwd, on sys.path, being a 0700 checkout holding tacoma, say). A path
    # below another needed one is revealed with it, unless a closed directory lies
    # between them (a state directory in a 0700 directory below the place's cwd).
    real = sorted({os.path.realpath(p) for p in paths if os.path.exists(p)
                   and (not os.path.isdir(p) or not _closed(p))})
    kept: list[str] = []
    for path in real:  # sorted, so an ancestor comes before what it contains
        parts = Path(path).parts
        if not any(is_below(path, k) and not any(
                _closed(os.path.join(*parts[:i]))
                for i in range(len(Path(k).parts) + 1, len(parts))) for k in kept):
            kept.append(path)
    cover: dict[str, list[str]] = {}
    for path in kept:
        parts = Path(path).parts
        for i in range(2, len(parts)):
            ancestor = os.path.join(*parts[:i])
            if _closed(ancestor):
                cover.setdefault(ancestor, []).append(path)
                break
    return [(directory, tuple(below)) for directory, below in sorted(cover.items())]


def _user_process_count() -> int:
    """What RLIMIT_NPROC is checked against: the user's tasks, threads included (the kernel
    counts every thread as a process; a user running a browser has hundreds of them)."""
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
    return count


#: System directories an agent may read and run programs from.
SYSTEM_RUN = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: And read only.
SYSTEM_READ = ("/etc", "/sys/devices/system/cpu", "/proc")
#: Devices an agent may read and write.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


class Containment:
    """What confines every process a place starts for its agents: the plan each one
    enters (`SandboxPlan`), and the uids and cgroups it gets; shared by the worker pools
    and the builds.

    The layers are those the place found it can apply here (`_layers.probe`); each plan
    carries all of them, and a process that cannot apply one does not start.
    """

    def __init__(self, settings: PlaceSettings, layers: Layers, uids: AgentUids | None,
                 place_address: str, module_paths: list[str], hidden: list[Path]) -> None:
        self.settings = settings
        self.layers = layers
        self.cgroups = layers.cgroups
        self.uids = uids
        self.place_address = place_address
        self.needed = [*interpreter_paths(), *module_paths]
        self.seccomp = layers.seccomp
        state = settings.state_dir
        # Covers, outermost first: directories others may not enter showing only what an
        # agent needs (Python below a 0700 /root); the state directory showing the work,
        # data and cache directories; then whatever else the place must hide (its trust
        # directory; its identity file, if it lies elsewhere).
        covers: list[Cover] = [
            *(cover_plan([*self.needed, str(state)]) if uids is not None else []),
            (str(state), (str(settings.work_dir), str(settings.data_dir),
                          str(settings.cache_dir)))]
        hide_files: list[str] = []
        for path in hidden:
            if path.is_dir() and not is_below(str(state), str(path)):
                covers.append((str(path), ()))
            elif path.is_file():
                hide_files.append(str(path))
        self.view = View(covers=tuple(covers), hide_files=tuple(hide_files))
        self.keep = [*self.needed, str(state)]
        # Where agents read and run programs, each once and none below another (a rule
        # covers what is beneath it), and only what exists: fewer rules for each worker.
        existing = sorted({os.path.realpath(p) for p in [*SYSTEM_RUN, *self.needed]
                           if os.path.exists(p)})
        self.run_paths = [p for p in existing
                          if not any(p != q and is_below(p, q) for q in existing)]
        # The scratch directories (/tmp, ...) are the agent's own tmpfs, which it may
        # write: what it needs from below the host's (the installation, the state
        # directory) is shown there read-only (`_mounts.enter_scratch`).
        self.scratch = [d for d, _ in TMP_DIRS]
        # The Landlock rules every agent of the place gets: read and run the system and
        # the installation, read the data directory and /proc, use the harmless devices,
        # write the scratch directories.
        readable = [*SYSTEM_READ, str(settings.data_dir)]
        self.rules: list[Rule] = [
            *((p, _landlock.RUN) for p in self.run_paths),
            *((p, _landlock.READ) for p in readable),
            *((p, _landlock.DEVICE) for p in DEVICES),
            *((p, _landlock.WRITE) for p in (self.scratch if layers.mounts else []))]

    @property
    def reuses(self) -> bool:
        """Whether workers may be kept warm (`PlaceSettings.reuse`): only where each has a
        PID namespace (its other processes can all be killed), a tmpfs (its files all
        emptied) and cgroups (its CPU time counted per meet) of its own, and where meets
        have principals (an --insecure place authenticates nobody: its meets would all
        share workers)."""
        layers = self.layers
        return (self.settings.reuse != "never" and not self.settings.insecure
                and layers.pidns and layers.mounts and not layers.userns
                and layers.cgroups is not None)

    def zygote_plan(self) -> Namespaces:
        """What a language's zygote enters and prepares once, for all its workers: its
        namespaces and the mount view they share. (Not their Landlock rules: a rule binds
        an inode, and each worker's tmpfs and /proc are new ones, made in the worker.)"""
        layers = self.layers
        return Namespaces(netns=layers.netns and not layers.userns, pidns=layers.pidns,
                          userns=layers.userns, view=self.view if layers.mounts else None)

    def _landlock(self, workdir: Path, execute: tuple[str, ...]) -> Landlock:
        """Landlock rules: the place's own (`self.rules`), and for this process: write its
        working directory, run programs beneath `execute`."""
        rules = [*self.rules, (str(workdir), _landlock.WRITE),
                 # exec reads the file too; but no READ_DIR: programs are run by name
                 *((p, _landlock.EXECUTE | _landlock.READ_FILE) for p in execute)]
        return Landlock(rules=tuple(rules), deny_tcp=self.settings.agent_network == "none")

    def plan(self, workdir: Path, uid: int | None, group: Group | None,
             artifacts: Artifacts | None = None, ahead: bool = False,
             build: bool = False) -> SandboxPlan:
        """What `agent._sandbox.enter` applies to an agent's process (or a build's).

        artifacts: where a worker of a compiled language finds its programs, beneath which
        it may then run programs besides the system's. ahead: a pool's worker, started
        before its meet. build: a program the place runs on an agent's behalf (a compiler),
        not forked by a zygote: it prepares its own view, its working directory stays on
        disk for the place to read back, and it makes its own PID and network namespaces.
        """
        settings, layers, limits = self.settings, self.layers, self.settings.limits
        mounts = None
        if build and layers.mounts:
            stage = workdir.with_name(workdir.name + ".tmp")
            view = View(covers=(*self.view.covers,
                                (str(settings.work_dir), (str(workdir), str(stage)))),
                        hide_files=self.view.hide_files)
            mounts = Mounts(at=str(stage), quota=limits.disk_bytes, uid=uid,
                            keep=tuple(self.keep), proc=layers.pidns, view=view)
        elif layers.mounts:  # the zygote prepared the view; this is the worker's own part
            mounts = Mounts(at=str(settings.work_dir), quota=limits.disk_bytes, uid=uid,
                            keep=tuple(self.keep), proc=layers.pidns, name=workdir.name)
        execute = (artifacts.directory,) if artifacts is not None else ()
        return SandboxPlan(
            workdir=str(workdir),
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir),
                 "TMPDIR": str(workdir), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                 "TACOMA_DATA": str(settings.data_dir)},
            place=self.place_address,
            max_frame=settings.max_frame,
            prefetch=settings.prefetch,
            cgroups=tuple(group.procs_dirs) if group is not None else (),
            uid=uid,
            userns=layers.userns,
            ipcns=layers.mounts,  # the same privilege: root, or the zygote's user namespace
            # Counted per uid and user namespace: an agent's own uid, or its own user
            # namespace (`_sandbox.enter`), has no other processes; else the user's count.
            nproc=(limits.processes if uid is not None or layers.userns
                   else None if os.geteuid() == 0 or group is not None
                   else _user_process_count() + limits.processes),
            limits=Rlimits(cpu_seconds=limits.cpu_seconds, memory_bytes=limits.memory_bytes,
                           file_bytes=limits.file_bytes, open_files=limits.open_files),
            seccomp=self.seccomp,
            namespaces=build and layers.pidns,
            mounts=mounts,
            landlock=self._landlock(workdir, execute) if layers.landlock_abi else None,
            artifacts=artifacts,
            ahead=ahead,
            reuse=not build and self.reuses,
        )

    @property
    def private_workdirs(self) -> bool:
        """Whether each worker mounts a tmpfs of its own on the work directory and makes
        its working directory there (the mount layer), so the place need not."""
        return bool(self.layers.mounts)

    def new_uid(self) -> int | None:
        return self.uids.next() if self.uids is not None else None

    def release_uid(self, uid: int | None) -> None:
        if uid is not None and self.uids is not None:
            self.uids.release(uid)

    def new_group(self) -> Group | None:
        return self.cgroups.create(self.settings.limits) if self.cgroups is not None else None

    async def destroy_group(self, group: Group | None) -> None:
        if group is not None and self.cgroups is not None:
            await self.cgroups.destroy(group)

    @contextlib.asynccontextmanager
    async def confined(self, name: str, argv: list[str], files: dict[str, bytes],
                       timeout: float) -> AsyncIterator[tuple[int, Path, Path]]:
        """Run `argv` confined like an agent (own uid, cgroup, limits, a private directory
        named after `name` holding `files`), and yield its exit status, its directory and
        its output file, which are removed when the block ends.

        For work the place does on an agent's behalf with the agent's input, such as
        compiling its program. Raises MeetTimeout (the processes killed) after `timeout`.
        """
        workdir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.settings.work_dir))
        output = workdir.with_name(workdir.name + ".out")
        stage = workdir.with_name(workdir.name + ".tmp")
        group: Group | None = None
        proc: asyncio.subprocess.Process | None = None
        uid = self.new_uid()
        try:
            stage.mkdir(mode=0o700)
            for filename, data in files.items():
                (workdir / filename).write_bytes(data)
                if uid is not None:
                    os.chown(workdir / filename, uid, uid)
            if uid is not None:
                os.chown(workdir, uid, uid)
            group = self.new_group()
            plan = dataclasses.replace(self.plan(workdir, uid, group, build=True),
                                       argv=tuple(argv), parent=os.getpid())
            boot = (f"import sys; sys.path[:0] = {worker_sys_path()!r}; "
                    "from tacoma.agent._sandbox import exec_plan; exec_plan()")
            with private_output(output) as out:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-I", "-S", "-B", "-c", boot, json.dumps(plan.to_wire()),
                    cwd=workdir, env=plan.env, stdin=asyncio.subprocess.DEVNULL,
                    stdout=out, stderr=out, start_new_session=True)
            try:
                returncode = await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                raise MeetTimeout(f"{argv[0]} did not finish within {timeout:g} s; "
                                  "its processes were killed") from None
            await self.destroy_group(group)  # nothing it started runs on
            group = None
            yield returncode, workdir, output
        finally:
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            await self.destroy_group(group)
            await asyncio.to_thread(shutil.rmtree, workdir, True)
            with contextlib.suppress(OSError):
                stage.rmdir()
            with contextlib.suppress(OSError):
                output.unlink()
            self.release_uid(uid)


@contextlib.contextmanager
def private_output(path: Path, readable: bool = False) -> Iterator[BinaryIO]:
    """A new output file for an agent process: the place's, mode 0600, so no other agent
    can read it, whatever its uid (the process writes through the descriptor it is given)."""
    flags = (os.O_RDWR if readable else os.O_WRONLY) | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with open(os.open(path, flags, 0o600), "w+b" if readable else "wb") as f:
        yield f


def tail(path: Path) -> str:
    """The end of a process's output file: enough for a traceback."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - OUTPUT_TAIL))
            tail = f.read()
    except OSError:
        return ""
    text = tail.decode("utf-8", "replace").strip()
    return ("...\n" if size > OUTPUT_TAIL else "") + text if text else ""
