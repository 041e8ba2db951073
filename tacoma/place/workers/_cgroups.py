"""Cgroups for agents: one group per worker, for the totals of all its processes.

A group caps the number of processes (pids.max; RLIMIT_NPROC does not bind root), the memory
of all of them together (memory.limit_in_bytes on v1, memory.max on v2; the tmpfs an agent
writes is charged there too), and their CPU rate (cpu.cfs_quota_us, cpu.max: by default one
core), and it lists every process the agent made, even ones that left its process group, so
that all can be killed. The CPU time they spent together and whether the memory limit
killed one of them are read from it (`usage`, `oom_kills`).

Works with cgroup v1 (one hierarchy per controller, as on this project's machines) and v2
(one hierarchy, controllers enabled down the tree). Needs root; `Cgroups.available` says
which controllers it could use and why not the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from ...agent import _sandbox
from .._settings import Limits

__all__ = ["CONTROLLERS", "Cgroups", "Group", "find_controllers"]

#: The names of the groups the places of this process made (see Cgroups.make).
_OURS: set[str] = set()
_NUMBERS = itertools.count(1)

log = logging.getLogger("tacoma.place")

CONTROLLERS = ("pids", "memory", "cpu")
#: The CFS period the CPU quota is a share of.
CPU_PERIOD_US = 100_000
#: Emptied groups kept for the next workers (see `Cgroups.destroy`): making a group (a
#: directory per controller, its limits written) and removing it again cost the place
#: about a quarter of its CPU per meet under load, and the kernel more (a memory cgroup is
#: costly to make and is freed by a kernel worker).
SPARE_GROUPS = 16
#: A group is reused only if the memory still charged to it is below this (what an agent's
#: files or the kernel's objects left charged to it would cut into the next one's limit).
REUSE_CHARGE = 1 << 20


@dataclass
class Group:
    """One worker's cgroup: a directory per hierarchy (v1) or one (v2)."""

    dirs: dict[str, Path]  # controller -> its directory (v2: the same for all)
    v2: bool
    limits: Limits | None = None  # the limits written into it
    #: The files read at every meet, kept open: a pread of one costs a microsecond, where
    #: opening it again cost the place 30 (a tenth of its CPU time with warm workers).
    _files: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)

    def _read(self, controller: str, name: str) -> str:
        """The file `name` of the group's `controller` directory."""
        fd = self._files.get((controller, name))
        if fd is None:
            fd = os.open(self.dirs[controller] / name, os.O_RDONLY | os.O_CLOEXEC)
            self._files[controller, name] = fd
        return os.pread(fd, 4096, 0).decode("ascii")

    def close(self) -> None:
        """Close the files kept open (before the group is removed)."""
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()

    def reusable(self) -> bool:
        """Whether the group, emptied of its processes, may serve another worker: none was
        killed for memory (the count of such kills stays with the group, and would be read
        as the next agent's), and little memory stays charged to it."""
        if self.oom_kills():
            return False
        if "memory" not in self.dirs:
            return True
        charged = self.memory_bytes()
        return charged is not None and charged < REUSE_CHARGE

    @property
    def procs_dirs(self) -> list[str]:
        """The directories whose cgroup.procs a worker joins."""
        return sorted({str(d) for d in self.dirs.values()})

    @property
    def kill_dir(self) -> str:
        return str(self.dirs.get("pids") or next(iter(self.dirs.values())))

    def cpu_seconds(self) -> float:
        """CPU time all the group's processes used, ended ones included."""
        path = self.dirs.get("cpu")
        try:
            if path is None:
                return 0.0
            if self.v2:
                for line in self._read("cpu", "cpu.stat").splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
                return 0.0
            return int(self._read("cpuacct", "cpuacct.usage")) / 1e9
        except (OSError, ValueError, KeyError):
            return 0.0

    def memory_bytes(self) -> int | None:
        """The memory charged to the group now (None without a memory cgroup)."""
        if "memory" not in self.dirs:
            return None
        name = "memory.current" if self.v2 else "memory.usage_in_bytes"
        try:
            return int(self._read("memory", name))
        except (OSError, ValueError):
            return None

    @property
    def accounts_cpu(self) -> bool:
        """Whether the group can say how much CPU time its processes used."""
        return "cpu" in self.dirs and (self.v2 or "cpuacct" in self.dirs)

    def oom_kills(self) -> int:
        """How many of the group's processes the memory limit killed."""
        path = self.dirs.get("memory")
        if path is None:
            return 0
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            for line in self._read("memory", name).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0


@dataclass
class Cgroups:
    """The place's cgroups: `<hierarchy>/tacoma/<place pid>/w<N>` per worker."""

    bases: dict[str, Path]  # controller -> this place's directory in its hierarchy
    v2: bool
    missing: dict[str, str] = field(default_factory=dict)  # controller -> why not
    _n: int = 0
    _spare: list[Group] = field(default_factory=list)  # emptied, for the next workers

    @classmethod
    def available(cls) -> tuple[Cgroups | None, dict[str, str]]:
        """The cgroups this place can use, and for each controller it cannot, why."""
        if os.geteuid() != 0:
            return None, {c: "needs root" for c in CONTROLLERS}
        try:
            roots, v2 = _find_hierarchies()
        except (OSError, LookupError) as exc:
            return None, {c: str(exc) for c in CONTROLLERS}
        bases: dict[str, Path] = {}
        missing: dict[str, str] = {}
        # PID-N: the pid says whether its place still runs (see _sweep); N tells apart the
        # places of one process (an embedded place and another, in a notebook, say).
        name = f"{os.getpid()}-{next(_NUMBERS)}"
        _OURS.add(name)
        for controller in (*CONTROLLERS, "cpuacct"):
            root = roots.get(controller)
            if root is None:
                if controller != "cpuacct":
                    missing[controller] = "no hierarchy with this controller is mounted"
                continue
            try:
                top = root / "tacoma"
                top.mkdir(exist_ok=True)
                if v2:
                    _enable(root, controller)
                    _enable(top, controller)
                _sweep(top)
                base = top / name
                base.mkdir(exist_ok=True)
                if v2:
                    _enable(base, controller)
                bases[controller] = base
            except OSError as exc:
                missing[controller] = f"cannot make a cgroup in {root}: {exc.strerror or exc}"
        if "pids" not in bases:  # without it the place cannot find the agent's processes
            return None, {c: missing.get(c, "the pids controller is missing") for c in
                          CONTROLLERS}
        return cls(bases, v2, missing), missing

    def create(self, limits: Limits) -> Group:
        """A group with the limits applied: a spare one if there is one, else a new one."""
        while self._spare:
            group = self._spare.pop()
            if group.limits == limits:
                return group
            self._remove(group)
        self._n += 1
        name = f"w{self._n}"
        dirs: dict[str, Path] = {}
        for controller, base in self.bases.items():
            path = base / name
            if path not in dirs.values():
                with contextlib.suppress(FileExistsError):  # left by a place with our pid
                    path.mkdir()
            dirs[controller] = path
        group = Group(dirs, self.v2, limits)
        try:
            _write(dirs["pids"] / "pids.max", limits.processes)
            if "memory" in dirs:
                memory = dirs["memory"]
                if self.v2:
                    _write(memory / "memory.max", limits.memory_bytes)
                    with contextlib.suppress(OSError):
                        _write(memory / "memory.swap.max", 0)
                else:
                    _write(memory / "memory.limit_in_bytes", limits.memory_bytes)
                    with contextlib.suppress(OSError):  # only with swap accounting on
                        _write(memory / "memory.memsw.limit_in_bytes", limits.memory_bytes)
            if "cpu" in dirs:
                quota = max(1000, int(limits.cpus * CPU_PERIOD_US))
                if self.v2:
                    (dirs["cpu"] / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
                else:
                    _write(dirs["cpu"] / "cpu.cfs_period_us", CPU_PERIOD_US)
                    _write(dirs["cpu"] / "cpu.cfs_quota_us", quota)
        except OSError:
            for path in set(dirs.values()):
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise
        return group

    async def destroy(self, group: Group) -> None:
        """Kill every process in the group, wait until it is empty, and keep it for the
        next worker if it can serve one (`Group.reusable`) and fewer than SPARE_GROUPS
        wait; else remove it."""
        kill = group.kill_dir
        empty = False
        for _ in range(500):
            if not _sandbox.cgroup_members(kill):
                empty = True
                break
            _sandbox.kill_cgroup(kill, rounds=1)
            await asyncio.sleep(0.01)  # killed processes leave the cgroup once reaped
        if empty and len(self._spare) < SPARE_GROUPS and group.reusable():
            self._spare.append(group)
            return
        group.close()
        for path in sorted(set(group.dirs.values())):
            for _ in range(100):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    await asyncio.sleep(0.01)
            else:
                log.warning("could not remove cgroup %s", path)

    def _remove(self, group: Group) -> None:
        """Remove an empty group at once (a spare: no process to wait for)."""
        group.close()
        for path in sorted(set(group.dirs.values())):
            with contextlib.suppress(OSError):
                path.rmdir()

    def close(self) -> None:
        while self._spare:
            self._remove(self._spare.pop())
        for base in set(self.bases.values()):
            with contextlib.suppress(OSError):
                base.rmdir()
            _OURS.discard(base.name)


def find_controllers() -> dict[str, str]:
    """For each controller a place could not use here, why (making nothing)."""
    if os.geteuid() != 0:
        return {c: "needs root" for c in CONTROLLERS}
    try:
        roots, _ = _find_hierarchies()
    except (OSError, LookupError) as exc:
        return {c: str(exc) for c in CONTROLLERS}
    return {c: "no hierarchy with this controller is mounted" for c in CONTROLLERS
            if c not in roots}


def _write(path: Path, value: int) -> None:
    path.write_text(str(value))


def _find_hierarchies() -> tuple[dict[str, Path], bool]:
    """Controller -> the mount point of its hierarchy; and whether that is cgroup v2."""
    v1: dict[str, Path] = {}
    v2_root = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _, options = right.split(" ", 2)
            mount_point = Path(left.split(" ")[4])
            if fstype == "cgroup":
                for controller in options.split(" ")[-1].strip().split(","):
                    if controller in (*CONTROLLERS, "cpuacct"):
                        v1.setdefault(controller, mount_point)
            elif fstype == "cgroup2":
                v2_root = mount_point
    if "pids" in v1:
        return v1, False
    if v2_root is not None:
        available = (v2_root / "cgroup.controllers").read_text().split()
        return {c: v2_root for c in CONTROLLERS if c in available}, True
    raise LookupError("no cgroup hierarchy with the pids controller is mounted")


def _enable(path: Path, controller: str) -> None:
    if controller not in (path / "cgroup.subtree_control").read_text().split():
        (path / "cgroup.subtree_control").write_text(f"+{controller}")


def _sweep(top: Path) -> None:
    """Kill and remove the groups of places that died without cleaning up: those of a pid
    that is gone, and those of our own pid that no place of this process made (a process
    with our pid was before us: containers)."""
    for place_dir in top.iterdir():
        pid = place_dir.name.split("-", 1)[0]
        if not place_dir.is_dir() or not pid.isdigit() or place_dir.name in _OURS:
            continue
        if Path(f"/proc/{pid}").exists() and pid != str(os.getpid()):
            continue
        for worker_dir in place_dir.iterdir():
            if worker_dir.is_dir():
                _sandbox.kill_cgroup(str(worker_dir))
                with contextlib.suppress(OSError):
                    worker_dir.rmdir()
        with contextlib.suppress(OSError):
            place_dir.rmdir()
