"""Containment: the outside of an agent's confinement, kept by the place.

An agent process confines itself on entry (`agent._sandbox.enter`, the inside); what must be
set up for it from outside, and taken down after it, lives here:
- a uid and gid of its own, as root (`AgentUids`): agents can neither signal the place nor
  each other, nor read what only root may. If the interpreter lives below a directory
  others may not enter, the plan says which paths to reveal (see agent._sandbox);
- a pids cgroup of its own, as root (`PidsCgroups`): it caps the number of processes
  (RLIMIT_NPROC does not bind root) and lists every process the agent made, including
  ones that left its process group with setsid, so that all can be killed;
- not as root, RLIMIT_NPROC counts the user's processes, so the limit is set to what the
  user runs now plus the configured allowance;
- the sandbox plan itself (`Containment.plan`), and `Containment.confined`, which runs a
  program other than a worker (a compiler on an agent's source) under the same rules.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from typing import Any, BinaryIO

from ..agent import _sandbox
from ..agent._interpreter import worker_sys_path
from ..wire._errors import MeetTimeout, PlaceUnavailable
from ._settings import PlaceSettings

__all__ = ["AgentUids", "Containment", "PidsCgroups", "private_output", "tail"]

log = logging.getLogger("tacoma.place")

#: Bytes of an agent's stdout/stderr returned with an error: enough for a traceback.
OUTPUT_TAIL = 4096


class PidsCgroups:
    """Per-worker pids cgroups under `<hierarchy>/tacoma/<place pid>/`, when root.

    Works with a cgroup v1 pids hierarchy or a cgroup v2 one where the pids controller can
    be enabled. `available()` returns None (with the reason logged) where neither works.
    """

    def __init__(self, base: Path, v2: bool) -> None:
        self.base = base
        self.v2 = v2
        self._n = 0

    @classmethod
    def available(cls) -> PidsCgroups | None:
        if os.geteuid() != 0:
            return None
        try:
            root, v2 = cls._find_hierarchy()
            top = root / "tacoma"
            top.mkdir(exist_ok=True)
            if v2:
                cls._enable_pids(root)
                cls._enable_pids(top)
            cls._sweep(top)
            base = top / str(os.getpid())
            base.mkdir(exist_ok=True)
            if v2:
                cls._enable_pids(base)
            return cls(base, v2)
        except (OSError, LookupError) as exc:
            log.warning("no pids cgroup for agents (%s); process counts rely on rlimits", exc)
            return None

    @staticmethod
    def _find_hierarchy() -> tuple[Path, bool]:
        v2_root = None
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fstype, _, options = right.split(" ", 2)
                mount_point = Path(left.split(" ")[4])
                if fstype == "cgroup" and "pids" in options.strip().split(","):
                    return mount_point, False
                if fstype == "cgroup2":
                    v2_root = mount_point
        if v2_root is not None and "pids" in (v2_root / "cgroup.controllers").read_text():
            return v2_root, True
        raise LookupError("no cgroup hierarchy with the pids controller is mounted")

    @staticmethod
    def _enable_pids(path: Path) -> None:
        if "pids" not in (path / "cgroup.subtree_control").read_text().split():
            (path / "cgroup.subtree_control").write_text("+pids")

    @classmethod
    def _sweep(cls, top: Path) -> None:
        """Kill and remove cgroups left by places that died without cleaning up."""
        for place_dir in top.iterdir():
            if not place_dir.is_dir() or not place_dir.name.isdigit():
                continue
            alive = Path(f"/proc/{place_dir.name}").exists()
            if alive and place_dir.name != str(os.getpid()):  # a place with our pid was
                continue                                      # before us (containers)
            for worker_dir in place_dir.iterdir():
                if worker_dir.is_dir():
                    cls._kill_sync(worker_dir)
            with contextlib.suppress(OSError):
                place_dir.rmdir()

    @staticmethod
    def _kill_sync(path: Path) -> None:
        _sandbox.kill_cgroup(str(path))
        with contextlib.suppress(OSError):
            path.rmdir()

    def create(self, processes: int) -> Path:
        while True:
            self._n += 1
            path = self.base / f"w{self._n}"
            try:
                path.mkdir()
                break
            except FileExistsError:  # left by a place that had our pid; swept, or in use
                continue
        (path / "pids.max").write_text(str(processes))
        return path

    async def destroy(self, path: Path) -> None:
        """Kill every process in the cgroup, wait until it is empty, and remove it."""
        for _ in range(500):
            if not _sandbox.cgroup_members(str(path)):
                break
            _sandbox.kill_cgroup(str(path), rounds=1)
            await asyncio.sleep(0.01)  # killed processes leave the cgroup once reaped
        for _ in range(100):
            try:
                path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                await asyncio.sleep(0.01)
        log.warning("could not remove cgroup %s", path)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.base.rmdir()


class AgentUids:
    """Uids for agents: one per worker, from a block of 65,536 chosen by the place's pid.

    The blocks start at 0x70000000, far above the uids of real users and services (Debian
    hands out up to 60,000; 65,534 is nobody), and a place cycles through its own block.
    """

    BASE = 0x70000000

    def __init__(self, settings: PlaceSettings, module_paths: list[str]) -> None:
        self.base = self.BASE + (os.getpid() % 2048) * 65536
        self._n = 0
        self.live: set[int] = set()
        self.cover = self.cover_plan([*self.interpreter_paths(), *module_paths,
                                      str(settings.work_dir), str(settings.cache_dir),
                                      str(settings.data_dir)])

    def next(self) -> int:
        """A uid no live agent (nor compile) of this place has."""
        for _ in range(65535):
            self._n = self._n % 65535 + 1
            uid = self.base + self._n
            if uid not in self.live:
                self.live.add(uid)
                return uid
        raise PlaceUnavailable("every agent uid of this place is in use")

    def release(self, uid: int) -> None:
        self.live.discard(uid)

    @staticmethod
    def interpreter_paths() -> list[str]:
        """What a Python worker reads after it dropped root: the installation, sys.path."""
        return [sys.prefix, sys.base_prefix, sys.exec_prefix,
                *(p for p in sys.path if os.path.isabs(p))]

    @staticmethod
    def cover_plan(paths: list[str]) -> list[tuple[str, list[str]]]:
        """For each outermost directory others may not enter, the needed paths below it."""
        # A directory others may not enter is no use to reveal (the agent could not enter
        # it anyway), and kept as a path it would hide the paths below it that are needed
        # (the place's cwd, on sys.path, being a 0700 checkout holding tacoma, say).
        real = sorted({os.path.realpath(p) for p in paths if os.path.exists(p)
                       and (not os.path.isdir(p) or os.stat(p).st_mode & stat.S_IXOTH)})
        kept: list[str] = []
        for path in real:  # sorted, so an ancestor comes before what it contains
            if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
                kept.append(path)
        cover: dict[str, list[str]] = {}
        for path in kept:
            parts = Path(path).parts
            for i in range(2, len(parts)):
                ancestor = os.path.join(*parts[:i])
                if not os.stat(ancestor).st_mode & stat.S_IXOTH:
                    cover.setdefault(ancestor, []).append(path)
                    break
        return sorted(cover.items())


def _user_process_count() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += 1
    return count


class Containment:
    """What confines every process a place starts for its agents: the plan each one
    enters, and the uids and cgroups it gets; shared by the worker pools and the builds."""

    def __init__(self, settings: PlaceSettings, cgroups: PidsCgroups | None,
                 uids: AgentUids | None, place_address: str) -> None:
        self.settings = settings
        self.cgroups = cgroups
        self.uids = uids
        self.place_address = place_address

    def plan(self, workdir: Path, uid: int | None, cgroup: Path | None) -> dict[str, Any]:
        """What `agent._sandbox.enter` applies to an agent's process (or a build's)."""
        limits = self.settings.limits
        return {
            "workdir": str(workdir),
            "env": {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir),
                    "TMPDIR": str(workdir), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                    "TACOMA_DATA": str(self.settings.data_dir)},
            "place": self.place_address,
            "max_frame": self.settings.max_frame,
            "cgroup": str(cgroup) if cgroup is not None else None,
            "uid": uid,
            "reveal": self.uids.cover if self.uids is not None else [],
            "nproc": (limits.processes if uid is not None
                      else None if os.geteuid() == 0
                      else _user_process_count() + limits.processes),
            "limits": {"cpu_seconds": limits.cpu_seconds,
                       "memory_bytes": limits.memory_bytes,
                       "file_bytes": limits.file_bytes,
                       "open_files": limits.open_files},
        }

    def new_uid(self) -> int | None:
        return self.uids.next() if self.uids is not None else None

    def release_uid(self, uid: int | None) -> None:
        if uid is not None and self.uids is not None:
            self.uids.release(uid)

    def new_cgroup(self) -> Path | None:
        return self.cgroups.create(self.settings.limits.processes) \
            if self.cgroups is not None else None

    async def destroy_cgroup(self, cgroup: Path | None) -> None:
        if cgroup is not None and self.cgroups is not None:
            await self.cgroups.destroy(cgroup)

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
        cgroup: Path | None = None
        proc: asyncio.subprocess.Process | None = None
        uid = self.new_uid()
        try:
            for filename, data in files.items():
                (workdir / filename).write_bytes(data)
                if uid is not None:
                    os.chown(workdir / filename, uid, uid)
            if uid is not None:
                os.chown(workdir, uid, uid)
            cgroup = self.new_cgroup()
            plan = {**self.plan(workdir, uid, cgroup), "argv": argv, "parent": os.getpid()}
            boot = (f"import sys; sys.path[:0] = {worker_sys_path()!r}; "
                    "from tacoma.agent._sandbox import exec_plan; exec_plan()")
            with private_output(output) as out:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-I", "-S", "-B", "-c", boot, json.dumps(plan),
                    cwd=workdir, env=plan["env"], stdin=asyncio.subprocess.DEVNULL,
                    stdout=out, stderr=out, start_new_session=True)
            try:
                returncode = await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                raise MeetTimeout(f"{argv[0]} did not finish within {timeout:g} s; "
                                  "its processes were killed") from None
            await self.destroy_cgroup(cgroup)  # nothing it started runs on
            cgroup = None
            yield returncode, workdir, output
        finally:
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            await self.destroy_cgroup(cgroup)
            await asyncio.to_thread(shutil.rmtree, workdir, True)
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
