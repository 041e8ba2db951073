"""Uids for agents, allocated host-wide: no two places, nor a place and its restart, share one.

Each place claims a block of 65,536 uids for its life, recorded under the system's run
directory (`/run/tacoma/uids/BLOCK`, holding the owner's pid and start time) while holding a
lock on `/run/tacoma/uids.lock`, so two places starting at once never take the same block.
A block whose owner is gone is taken over only if no process runs under any of its uids
(one scan of /proc, at the place's start). Within its block a place cycles through the
uids, skipping the ones its live agents have; every process of a finished agent is dead
before its uid is given back (its cgroup, or its PID namespace, is emptied first), and an
agent can leave no file behind (it writes only to a tmpfs of its own, gone with it), so a
uid handed out again owns nothing.

The blocks start at 0x70000000, far above the uids of real users and services (Debian hands
out up to 60,000; 65,534 is nobody).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from ...wire._errors import PlaceUnavailable

__all__ = ["RUN_DIR", "AgentUids"]

RUN_DIR = Path("/run/tacoma")
BASE = 0x70000000
BLOCK = 65536
BLOCKS = 2048


def _start_time(pid: int) -> str:
    """The start time of process `pid` (field 22 of its stat), or "" if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2:].split()[19]


def _uids_in_use(low: int, high: int) -> bool:
    """Whether any process on the host runs under a uid in [low, high)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for line in Path(entry.path, "status").read_text().splitlines():
                if line.startswith("Uid:"):
                    if any(low <= int(u) < high for u in line.split()[1:]):
                        return True
                    break
    return False


class AgentUids:
    """The block of uids this place claimed, and which of them its live agents have."""

    def __init__(self, run_dir: Path = RUN_DIR) -> None:
        self.record_dir = run_dir / "uids"
        self.lock_file = run_dir / "uids.lock"
        self.block, self.record = self._claim(run_dir)
        self.base = BASE + self.block * BLOCK
        self._n = 0
        self.live: set[int] = set()

    def _claim(self, run_dir: Path) -> tuple[int, Path]:
        run_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        self.record_dir.mkdir(mode=0o700, exist_ok=True)
        me = f"{os.getpid()} {_start_time(os.getpid())}\n"
        with open(self.lock_file, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            first = os.getpid() % BLOCKS  # spread places out; any free block will do
            for i in range(BLOCKS):
                block = (first + i) % BLOCKS
                record = self.record_dir / str(block)
                try:
                    owner = record.read_text()
                except FileNotFoundError:
                    owner = ""
                if owner:
                    pid, _, started = owner.strip().partition(" ")
                    if pid.isdigit() and _start_time(int(pid)) == started:
                        continue  # its place still runs
                    low = BASE + block * BLOCK
                    if _uids_in_use(low, low + BLOCK):
                        continue  # an agent of a dead place still runs: not reusable yet
                record.write_text(me)
                return block, record
        raise PlaceUnavailable(f"every block of agent uids on this host is taken "
                               f"({BLOCKS} places run); see {self.record_dir}")

    def next(self) -> int:
        """A uid no live agent (nor compile) of this place has."""
        for _ in range(BLOCK - 1):
            self._n = self._n % (BLOCK - 1) + 1
            uid = self.base + self._n
            if uid not in self.live:
                self.live.add(uid)
                return uid
        raise PlaceUnavailable("every agent uid of this place is in use")

    def release(self, uid: int) -> None:
        self.live.discard(uid)

    def close(self) -> None:
        """Give the block back (only if the record is still this place's)."""
        with contextlib.suppress(OSError), open(self.lock_file, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.record.read_text().split(" ")[0] == str(os.getpid()):
                self.record.unlink()
