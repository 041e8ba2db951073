"""Several places on this host, for trying moving agents and messages without set-up.

    with tacoma.local_places(3) as places:
        tacoma.meet(f"ag_python@{places.addresses[0]}", ...)

Each place is a real `tacoma place` process (one per host is the model; several on one host
stand in for a network), listening on a free loopback port, with a temporary state
directory of its own (in the user's cache directory: `private_state_dir`); all are
stopped, and their state removed, on leaving the block.
Unlike the embedded place, these are separate processes, so agents moving between them
cross real connections, as between hosts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from ..wire._errors import PlaceUnavailable

__all__ = ["LocalPlaces", "local_places", "private_state_dir"]

_READY = re.compile(r"tacoma place listening on (\S+) ")


def private_state_dir(kind: str) -> Path:
    """A new directory for the state of places this process starts (`kind`: "embedded",
    "local"), named after the process; the ones of processes that died are removed.

    In the user's cache directory, not in /tmp: a directory there is shared with every
    user of the host and may be emptied by the system (agents would cope: what they need
    from below /tmp is shown in their own /tmp, see agent/_mounts.py).
    """
    parent = Path(platformdirs.user_cache_dir("tacoma", appauthor=False)) / kind
    parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    for old in parent.glob("place-*"):
        pid = old.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                shutil.rmtree(old)
    return Path(tempfile.mkdtemp(prefix=f"place-{os.getpid()}-", dir=parent))


@dataclass(repr=False)
class LocalPlaces:
    """Places started by `local_places`: their addresses and state directories, in order."""

    addresses: list[str] = field(default_factory=list)
    state_dirs: list[Path] = field(default_factory=list)
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    def admin_token(self, index: int) -> str:
        """The admin token of place `index` (for ag_admin: ps and kill)."""
        return (self.state_dirs[index] / "admin.token").read_text().strip()

    def _rows(self) -> list[tuple[str, str, str, str, str]]:
        rows = []
        for index, (address, state) in enumerate(zip(self.addresses, self.state_dirs,
                                                      strict=False)):
            proc = self.processes[index] if index < len(self.processes) else None
            code = proc.poll() if proc is not None else None
            running = ("running" if proc is not None and code is None
                       else f"exited ({code})" if code is not None else "?")
            rows.append((str(index), address, str(proc.pid) if proc else "", running,
                         str(state)))
        return rows

    def __repr__(self) -> str:
        states = {row[3] for row in self._rows()}
        how = ", ".join(sorted(states)) or "none started"
        return (f"LocalPlaces({len(self.addresses)} places, {how}: "
                f"{', '.join(self.addresses)})")

    def _repr_html_(self) -> str:
        from ..display import html_table

        return html_table(("#", "address", "pid", "process", "state directory"),
                          self._rows(), caption=f"{len(self.addresses)} local places")


@contextmanager
def local_places(count: int, *flags: str, timeout: float = 60) -> Iterator[LocalPlaces]:
    """Start `count` places on loopback (with extra `tacoma place` flags); stop them after."""
    root = private_state_dir("local")
    places = LocalPlaces()
    try:
        for index in range(count):
            state = root / f"place{index}"
            # The command is this interpreter running tacoma itself, with fixed arguments.
            proc = subprocess.Popen(  # noqa: S603
                # -P: the installed tacoma, not a checkout in the current directory
                [sys.executable, "-P", "-m", "tacoma", "place", "--listen", "127.0.0.1:0",
                 "--state-dir", str(state), "-q", *flags],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            places.processes.append(proc)
            assert proc.stdout is not None
            line = proc.stdout.readline()  # the ready line, or "" if it died
            match = _READY.match(line)
            if match is None:
                raise PlaceUnavailable(f"a local place did not start (tacoma place said "
                                       f"{line.strip()!r}; exit status {proc.poll()})")
            places.addresses.append(match.group(1))
            places.state_dirs.append(state)
        yield places
    finally:
        for proc in places.processes:
            if proc.poll() is None:
                proc.terminate()
        for proc in places.processes:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)
