"""What the benchmarks and report.py share: the servers under test and the passive client.

Both servers run as separate processes, as they would in use: a place started with the
`tacoma place` command, and the passive msgpack echo server of passive_echo.py. Each prints
one line on stdout once it accepts connections; its address is read from that line, so
nothing here waits on a timer. Stopping is SIGTERM, then waiting for the exit status, which
must be 0: a server that crashed under load must not go unnoticed behind good numbers.

The client side runs on one uvloop event loop per benchmark session. The passive client keeps
one connection and does strict request/reply, as `tacoma.ameet` does over its cached
connection, so the two paths differ only in what tacoma adds on top of the same transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tacoma.bench._passive import PassiveClient

__all__ = [
    "PAYLOAD",
    "PassiveClient",
    "ServerProcess",
    "close_meet_connections",
    "rss_kib",
    "served",
    "start_passive",
    "start_place",
]

HERE = Path(__file__).resolve().parent

#: A small briefcase-shaped payload, the same for every path: folder name -> list of bytes.
#: About the size of TACOMA's minimal briefcase (42 bytes marshalled) plus a little data.
PAYLOAD: dict[str, list[bytes]] = {
    "NAME": [b"world"],
    "HOME": [b"127.0.0.1:7707"],
    "DATA": [bytes(range(64))],
}

#: How long a server may take to print its listening line (a cold start on a slow machine).
START_TIMEOUT = 30.0
#: How long a server may take to exit after SIGTERM (a place gives meets a grace period).
STOP_TIMEOUT = 30.0


def rss_kib(pid: int) -> int:
    """Resident set size of a process, in KiB, from /proc/PID/status (VmRSS)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status: is it a zombie?")


@dataclass
class ServerProcess:
    """A server process and the address it listens on."""

    name: str
    proc: subprocess.Popen[str]
    address: str
    log_path: Path
    state_dir: Path | None = None  # a place's

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, size: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def stop(self) -> int:
        """SIGTERM, wait for the exit, and return its status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"{self.name} did not exit within {STOP_TIMEOUT:g} s of "
                               f"SIGTERM; killed it. Its log:\n{self.log_tail()}") from None
        finally:
            assert self.proc.stdout is not None
            self.proc.stdout.close()
        return status

    def stop_checked(self) -> None:
        """Stop and raise if the exit status is not 0."""
        status = self.stop()
        if status != 0:
            raise RuntimeError(f"{self.name} exited with status {status} after SIGTERM, "
                               f"expected 0. Its log:\n{self.log_tail()}")


def _read_first_line(stream: IO[str], timeout: float) -> str:
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout):
            return ""
    return stream.readline()  # the servers print the whole line at once, then flush


def _start(name: str, argv: list[str], prefix: str, log_path: Path) -> ServerProcess:
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log,
                                stdin=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    server = ServerProcess(name, proc, "", log_path)
    line = _read_first_line(proc.stdout, START_TIMEOUT)
    if not line.startswith(prefix):
        with contextlib.suppress(RuntimeError):
            server.stop()
        raise RuntimeError(f"{name} did not start: expected a line starting {prefix!r} "
                           f"on stdout, got {line!r}. Command: {' '.join(argv)}\n"
                           f"Its log:\n{server.log_tail()}")
    server.address = line[len(prefix):].split()[0]
    return server


def start_place(state_dir: Path, *extra_args: str) -> ServerProcess:
    """`tacoma place` on a free loopback port, in its own process.

    `--share 1`: the benchmarks are one client, one principal, which may hold every meet
    (the default quarter would refuse the async batches past 64 meets in flight).
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-P", "-m", "tacoma", "place", "--listen", "127.0.0.1:0",
            "--state-dir", str(state_dir), "-q", "--share", "1", *extra_args]
    server = _start("tacoma place", argv, "tacoma place listening on ",
                    state_dir.parent / f"{state_dir.name}.log")
    server.state_dir = state_dir
    return server


def start_passive(log_dir: Path, tls: bool = False) -> ServerProcess:
    """The passive msgpack echo server on a free loopback port, in its own process: in
    plaintext, or (`tls`) in mutual TLS 1.3 as the local places speak it (with this user's
    local place identity)."""
    identity: list[str] = []
    if tls:
        from tacoma.trust import TrustStore, _certs
        from tacoma.trust._store import LOCAL_PLACE

        store = TrustStore()
        _certs.ensure_local(store)
        identity = ["--tls", str(store.identity_file(LOCAL_PLACE))]
    argv = [sys.executable, str(HERE / "passive_echo.py"), "--listen", "127.0.0.1:0",
            *identity]
    return _start("passive echo server", argv, "passive echo listening on ",
                  log_dir / f"passive_echo{'_tls' if tls else ''}.log")


def close_meet_connections(loop: asyncio.AbstractEventLoop) -> None:
    """Close the connections `tacoma.ameet` cached on `loop`, before the loop is closed.

    tacoma has no public call for this (its cache lives as long as the loop); reaching into
    the private cache is best effort, so a rename there only leaves a ResourceWarning.
    """
    from tacoma.client import _client

    caches = getattr(_client, "_caches", None)
    cache = caches.get(loop) if caches is not None else None
    if cache is not None:
        cache.close()
        loop.run_until_complete(asyncio.sleep(0))  # let the transports run their close


def served(place: ServerProcess, agent: str) -> tuple[int, int]:
    """(warm, fresh): the meets a warm and a fresh worker of `agent` served at `place` so
    far (from its status, with its admin token)."""
    import tacoma

    assert place.state_dir is not None
    token = (place.state_dir / "admin.token").read_text().strip()
    status = tacoma.place_status(place.address, token=token)
    pool = next(p for p in status.pools if p.agent == agent)
    return pool.warm, pool.fresh
