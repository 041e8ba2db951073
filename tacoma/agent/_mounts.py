"""The agent's view of the file system: a mount namespace of its own (bubblewrap's way).

Entered as root (or in a user namespace of the place's) before the agent's uid is taken,
and gone with the agent's last process. What every agent of a language sees alike (the
covers below) is prepared once, by its zygote, in a mount namespace of the zygote's own
(`prepare_view`); each worker then enters a copy of it and adds its own part
(`enter_scratch`): one tmpfs mount, a few bind mounts and a /proc. In all:
- covers: a directory is covered by an empty read-only tmpfs that shows only the paths
  below it that the agent needs, bind-mounted from the originals (opened before the cover
  hides them). This is how the state directory shows the agent just its own working
  directory, the data directory and the compile cache; how a trust directory shows
  nothing; and how a directory others may not enter (Python under a 0700 /root) shows just
  the installation;
- hidden files (a place's identity file outside its trust directory) are covered by
  /dev/null;
- one private tmpfs, of the agent's disk quota, mounted on the place's work directory,
  holds its working directory (the only one it can see there) and its /tmp, /var/tmp and
  /dev/shm: whatever it writes counts against one total and vanishes with it. What the
  agent needs from below the host's /tmp (an installation, a state directory placed there)
  is bound into its /tmp read-only, as bubblewrap's --ro-bind does, and its own working
  directory bound writable over that: its /tmp stays its own to write wherever tacoma is
  installed;
- a new /proc, where the agent has a PID namespace of its own: it shows the agent's
  processes and nothing else.

Standard library only: this runs inside agent processes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import stat

from ._libc import check
from ._libc import libc as _libc

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["TMP_DIRS", "enter_namespace", "enter_scratch", "is_below", "prepare_view",
           "read_only"]

_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
# mount_setattr(2) (Linux 5.12): the one call that makes a whole tree of mounts read-only;
# a remount with MS_RDONLY changes only the top one. Its number is the same on every
# architecture (the new system calls share one table).
_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE = 442, -100, 0x8000
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

#: The shared scratch directories every agent gets a private one of, and the name of each
#: in the agent's tmpfs.
TMP_DIRS = (("/tmp", "tmp"), ("/var/tmp", "vartmp"), ("/dev/shm", "shm"))  # noqa: S108 - covered

def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else os.fsencode(s)

    check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)),
           f"mount {target}")


def is_below(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _open_originals(directory: str, keep: list[str]) -> list[tuple[str, int]]:
    """O_PATH descriptors of the kept paths below `directory`, opened before it is covered."""
    originals = []
    for path in dict.fromkeys(keep):  # a path kept twice (sys.prefix, sys.exec_prefix) once
        if is_below(path, directory) and path != directory:
            with contextlib.suppress(FileNotFoundError):
                originals.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC)))
    return originals


def _show(originals: list[tuple[str, int]]) -> None:
    """Mount each original on its own path again, making the directories it needs."""
    for path, fd in originals:
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path, 0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
                if not os.path.exists(path):
                    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
            _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        finally:
            os.close(fd)


def _mounts_below(path: str) -> list[str]:
    """The mount points at or below `path` in this mount namespace (/proc/self/mountinfo's
    fifth field, its octal escapes decoded), outermost first."""
    points = []
    with open("/proc/self/mountinfo", "rb") as info:
        for line in info:
            raw = line.split(b" ")[4]
            point = os.fsdecode(re.sub(rb"\\([0-7]{3})",
                                       lambda m: bytes([int(m.group(1), 8)]), raw))
            if is_below(point, path):
                points.append(point)
    return sorted(set(points), key=len)


def read_only(path: str) -> None:
    """Make the mount at `path` and every mount below it read-only (and nosuid, nodev).

    mount_setattr does it in one call; where it fails (a kernel before 5.12, or a policy
    that refuses it), each mount below is remounted read-only in turn: the top one alone
    would leave a state directory's data and cache mounts, shown below it, writable."""
    attr = _MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV, 0, 0, 0)
    if _libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, os.fsencode(path), _AT_RECURSIVE,
                     ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
        return
    read_only_each(path)


def read_only_each(path: str) -> None:
    """`read_only`, one mount at a time (where mount_setattr cannot be had)."""
    for point in _mounts_below(path):
        _mount(None, point, None,
               _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def cover(directory: str, keep: list[str]) -> None:
    """Cover `directory` with an empty read-only tmpfs showing only the `keep` paths below it."""
    if not os.path.isdir(directory):
        return
    originals = _open_originals(directory, keep)
    _mount("tmpfs", directory, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
    _show(originals)
    _mount(None, directory, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def hide_file(path: str) -> None:
    if os.path.isfile(path):
        _mount("/dev/null", path, None, _MS_BIND)


def prepare_view(covers: list[tuple[str, list[str]]], hide_files: list[str]) -> None:
    """Enter a new mount namespace, private from the host's, with the covers and hidden
    files applied: the view every agent shares (a zygote prepares it once, at its start)."""
    check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    for directory, paths in covers:
        cover(str(directory), [str(p) for p in paths])
    for path in hide_files:
        hide_file(str(path))


def enter_scratch(spec: dict[str, Any]) -> None:
    """The agent's own part of its view, in a mount namespace of its own (a copy of the
    view its zygote prepared, where "unshare" says so).

    spec: "at" (the directory the agent's tmpfs is mounted on: for a worker the whole work
    directory, so that its own working directory, "name", is the only one it can see; for a
    build an empty directory of its own), "quota" (the tmpfs's size in bytes), "uid" (the
    owner of what is made in it), "keep" (paths that must stay visible below the scratch
    directories), "proc" (mount a new /proc: the process is the first of a new PID
    namespace).
    """
    if spec.get("unshare"):
        check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    at = str(spec["at"])
    quota = int(spec["quota"])
    uid = spec.get("uid")
    owner = (int(uid), int(uid)) if uid is not None else (os.getuid(), os.getgid())
    inodes = max(1024, quota // 4096)
    keep = [str(p) for p in spec.get("keep", [])]
    # Descriptors of what must show through the scratch directories, opened before the
    # tmpfs can hide them (a state directory below /tmp, say).
    originals = {directory: _open_originals(directory, keep) for directory, _ in TMP_DIRS
                 if not os.path.islink(directory) and os.path.isdir(directory)}
    _mount("tmpfs", at, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
           f"mode=0755,size={quota},nr_inodes={inodes}")
    name = spec.get("name")
    for sub, mode in [*(((str(name), 0o700),) if name else ()),
                      *((scratch, 0o1777) for _, scratch in TMP_DIRS)]:
        path = os.path.join(at, sub)
        os.mkdir(path, mode)
        os.chmod(path, mode)  # umask aside
        os.chown(path, *owner)
    staged = os.open(at, os.O_PATH | os.O_CLOEXEC)
    try:
        shown: list[str] = []
        for directory, scratch in TMP_DIRS:
            if directory in originals:
                _mount(f"/proc/self/fd/{staged}/{scratch}", directory, None, _MS_BIND)
                shown += [path for path, _ in originals[directory]]
                _show(originals[directory])
        # What shows through is the host's, to read: read-only, the mounts below it too,
        # so that the agent may be given its /tmp to write (Landlock allows what lies
        # beneath a path, whatever is mounted there). Its own tmpfs, if it lies below
        # (a state directory under /tmp), is bound over its read-only copy, writable.
        for path in shown:
            read_only(path)
        if any(is_below(at, path) for path in shown):
            _mount(f"/proc/self/fd/{staged}", at, None, _MS_BIND)
    finally:
        os.close(staged)
    if spec.get("proc"):
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    if name:
        os.chdir(os.path.join(at, str(name)))  # under the new mount, not the one before


def enter_namespace(spec: dict[str, Any]) -> None:
    """Enter a new mount namespace arranged as `spec` says, in one go (for a process no
    zygote prepared the view of: a build): `prepare_view` with spec's "covers" and
    "hide_files", then `enter_scratch` with the rest."""
    prepare_view([(str(d), [str(p) for p in paths]) for d, paths in spec.get("covers", [])],
                 [str(p) for p in spec.get("hide_files", [])])
    enter_scratch({**spec, "unshare": False})
