"""A place's state directory: checked, made, and held by one place at a time.

Two places on one state directory wreck each other: the second takes over the first's
admin token (its `tacoma ps` and `kill` then fail) and empties `work/` under the first's
running workers. So a place takes an exclusive lock on `STATE/place.lock` before it touches
anything else there, and a second place is refused, naming the first. The lock is
`flock(2)`: the kernel drops it when the holder's process ends, however it ends, so a place
killed with SIGKILL leaves no stale lock behind (the file stays; its text is only read while
somebody holds it). The file says who holds it: `ADDRESS pid N` once the place listens.

The checks before it say plainly what is wrong with a path that cannot be a state directory
(a file, a directory of somebody else's, a read-only one) instead of the OS's "File exists",
and a directory whose mode the place must change is changed with a line in the log, not
silently.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
from pathlib import Path

from ...wire._errors import LimitExceeded, PlaceUnavailable

__all__ = ["LOCK_NAME", "Disk", "StateDir", "disk_full"]

log = logging.getLogger("tacoma.place")

#: The lock file in the state directory.
LOCK_NAME = "place.lock"


class StateDir:
    """`claim(mode)` before touching the directory; `announce(address)` once listening;
    `release()` at stop (or when the start fails)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def claim(self, mode: int) -> None:
        """Make or check the directory, lock it, and give it `mode`; PlaceUnavailable saying
        why if it cannot be this place's."""
        path = self.path
        try:
            info = path.stat()
        except FileNotFoundError:
            try:
                path.mkdir(parents=True, mode=mode)
            except OSError as exc:
                raise PlaceUnavailable(f"cannot make the state directory {path}: "
                                       f"{exc.strerror}") from None
            info = path.stat()
        except OSError as exc:
            raise PlaceUnavailable(f"cannot use {path} as the state directory: "
                                   f"{exc.strerror}") from None
        if not stat.S_ISDIR(info.st_mode):
            raise PlaceUnavailable(f"the state directory {path} is not a directory; give the "
                                   "place a directory (--state-dir DIR)")
        if info.st_uid != os.geteuid():
            raise PlaceUnavailable(f"the state directory {path} belongs to uid {info.st_uid}, "
                                   "not to the user running the place; give the place a "
                                   "directory of its own (--state-dir DIR)")
        if not info.st_mode & stat.S_IWUSR:
            raise PlaceUnavailable(
                f"the state directory {path} is read-only (mode "
                f"{stat.S_IMODE(info.st_mode):04o}); make it writable (chmod u+w {path}) or "
                "give the place another (--state-dir DIR)")
        self._lock()
        old = stat.S_IMODE(info.st_mode)
        if old != mode:
            path.chmod(mode)
            log.info("state directory %s: mode %04o changed to %04o (agents' directories "
                     "and the admin token must not be listed by others)", path, old, mode)

    def _lock(self) -> None:
        lock = self.path / LOCK_NAME
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise PlaceUnavailable(f"cannot open {lock}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise PlaceUnavailable(f"the state directory {self.path} is in use by {holder}; "
                                   "give this place another (--state-dir DIR)") from None
        except OSError as exc:
            os.close(fd)
            raise PlaceUnavailable(f"cannot lock {lock}: {exc.strerror}") from None
        self._fd = fd
        self._write(f"- pid {os.getpid()}")

    def announce(self, address: str) -> None:
        """Say in the lock file which place holds it, for a second place's refusal."""
        self._write(f"{address} pid {os.getpid()}")

    def _write(self, text: str) -> None:
        """Say who holds the lock: best effort (on a full disk the lock holds all the same,
        and a second place is still refused; it only cannot say whose it is)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, (text + "\n").encode(), 0)
        except OSError as exc:
            log.warning("cannot write %s: %s", self.path / LOCK_NAME, exc.strerror or exc)

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the only descriptor drops the flock
        self._fd = None


def _read(fd: int) -> str:
    """Who holds a lock, from its file: "the place at ADDRESS (pid N)"."""
    try:
        text = os.pread(fd, 256, 0).decode(errors="replace").split()
    except OSError:
        text = []
    if len(text) == 3 and text[1] == "pid":
        if text[0] == "-":
            return f"a place that is starting (pid {text[2]})"
        return f"the place at {text[0]} (pid {text[2]})"
    return "another place"


class Disk:
    """The file system of a place's state directory: room for what the place keeps.

    Async meets, their results, cabinets and compiled programs all go to one disk, which
    other users' meets fill as well. A write that would leave less than `reserve` free is
    refused (LimitExceeded) before the disk is full, so that what the place has already
    promised (an accepted meet's start and its outcome, a journal's own pages) still
    finds room, and the place can always start again. The reserve is a tenth of the file
    system, at most 64 MiB: statvfs is a system call of a microsecond, asked per write.
    """

    RESERVE_FRACTION = 0.1
    RESERVE_MOST = 64 * 1024 * 1024

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            info = os.statvfs(path)
            self.size = info.f_blocks * info.f_frsize
        except OSError:
            self.size = 0
        self.reserve = min(self.RESERVE_MOST, int(self.size * self.RESERVE_FRACTION))

    def free(self) -> int:
        """Bytes free for the place (its user's: statvfs's f_bavail)."""
        try:
            info = os.statvfs(self.path)
        except OSError:
            return 0
        return info.f_bavail * info.f_frsize

    def room(self, needed: int, what: str) -> None:
        """LimitExceeded unless `needed` bytes more (of `what`) leave the reserve free."""
        free = self.free()
        if free - needed < self.reserve:
            raise LimitExceeded(
                f"the place's disk is nearly full: {what} ({needed:,} bytes) would leave less "
                f"than the {self.reserve:,} bytes it keeps free ({free:,} free in "
                f"{self.path}); try again later, or ask the place's operator for room")


def disk_full(exc: BaseException) -> bool:
    """Whether an OSError or a SQLite error means the disk is full."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF == 13  # SQLITE_FULL, and its extended codes
    return "database or disk is full" in str(exc)
