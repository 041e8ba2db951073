"""`tacoma bench overhead`: PAN's active overhead, per briefcase size and isolation setting.

Nygren, Garland and Kaashoek (PAN, seed 004) compare an active node with a passive one
doing the same transport work: ActiveOverhead = (t_active - t_passive) / t_passive. Here
t_passive is a plain msgpack request/reply of the same briefcase over the same transport
(tacoma's framing, a uvloop protocol, TCP_NODELAY, loopback) to the passive echo server
(`_passive`), and t_active is a meet carrying it: with `ag_echo` (the kernel's own path,
no agent), with a trusted null agent (`tacoma install --trusted`: an agent in the place's
own process, PAN's in-kernel mode), with the null agent of a language that runs each meet
in a fresh instance of its runtime (WebAssembly: a memory-safe sandbox per meet, inside a
confined worker kept warm for its principal; back to back, as the echo) and with
`ag_python` running `pass` (an agent in a pooled, confined worker). Each is the median of
its round trips; the Python meets are paced (the pool refills between them, untimed), as
an unloaded place sees them.

Settings are the place's: as root, agents under uids of their own (the default) and
`--same-uid`; the pool (default) against `--pool-size 0`, where each meet forks and confines
its worker inside the meet; and mutual TLS (the default) against `--insecure` (plaintext),
the cost of authentication and encryption on a warm connection; and workers kept warm for
the same program (the default) against `--reuse never`, a fresh worker for every meet. The
passive echo speaks the same transport as the place it is compared with: mutual TLS 1.3
with the local place identity, or plaintext beside an --insecure place.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .. import Briefcase, ameet, local_places
from ..agent._interpreter import discover_interpreters
from ..client._identity import credentials, register_place
from ..client._runtime import run_blocking
from ..display import Progress
from ..display import table as show_table
from ._passive import PassiveClient

__all__ = ["OverheadRow", "measure_overhead", "overhead_table"]

SIZES = [128, 256, 512, 1024, 1500, 4096, 16384]
QUICK_SIZES = [128, 1500]


@dataclass
class OverheadRow:
    setting: str
    size: int
    passive_us: float
    echo_us: float
    agent_us: float
    trusted_us: float | None = None  # None: no language here runs in the place's process
    instance_us: float | None = None  # None: no language here runs meets in fresh instances

    @property
    def echo_overhead(self) -> float:
        return (self.echo_us - self.passive_us) / self.passive_us

    @property
    def trusted_overhead(self) -> float | None:
        if self.trusted_us is None:
            return None
        return (self.trusted_us - self.passive_us) / self.passive_us

    @property
    def instance_overhead(self) -> float | None:
        if self.instance_us is None:
            return None
        return (self.instance_us - self.passive_us) / self.passive_us

    @property
    def agent_overhead(self) -> float:
        return (self.agent_us - self.passive_us) / self.passive_us


def settings() -> list[tuple[str, tuple[str, ...]]]:
    """The isolation settings this place can run in, as `tacoma place` flags."""
    import os

    pooled: list[tuple[str, tuple[str, ...]]] = (
        [("own uid per agent, pooled", ())] if os.geteuid() == 0
        else [("place's user, pooled", ())])
    if os.geteuid() == 0:
        pooled.append(("same uid (--same-uid), pooled", ("--same-uid",)))
    if os.geteuid() == 0:
        pooled.append(("own uid per agent, fresh workers (--reuse never)", ("--reuse", "never")))
    return [*pooled, ("own uid per agent, no pool (--pool-size 0 --reuse never)"
                      if os.geteuid() == 0 else
                      "place's user, no pool (--pool-size 0 --reuse never)",
                      ("--pool-size", "0", "--reuse", "never")),
            ("plaintext (--insecure), pooled", ("--insecure",))]


def _start_passive(tls: bool) -> tuple[subprocess.Popen[str], str]:
    """The passive echo in a process of its own: plaintext, or (`tls`) mutual TLS with this
    user's local place identity, as the local places it is compared with speak."""
    identity: list[str] = []
    if tls:
        from ..trust import TrustStore, _certs
        from ..trust._store import LOCAL_PLACE

        store = TrustStore()
        _certs.ensure_local(store)
        identity = ["--tls", str(store.identity_file(LOCAL_PLACE))]
    # This interpreter running tacoma's own passive server, with fixed arguments and the
    # path of this user's own identity file.
    proc = subprocess.Popen(  # noqa: S603
        # -P: the installed tacoma, not a checkout in the current directory
        [sys.executable, "-P", "-m", "tacoma.bench._passive", "--listen", "127.0.0.1:0",
         *identity], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    match = re.match(r"passive echo listening on (\S+)", proc.stdout.readline())
    if match is None:
        proc.kill()
        raise RuntimeError("the passive echo server did not start")
    return proc, match.group(1)


#: The name the trusted null agent is installed under at the measured place.
TRUSTED_NULL = "null"


def install_trusted_null(state_dir: Path) -> bool:
    """Put a trusted null agent into a place's state directory (the place loads it at its
    first meet); False if no interpreter here runs agents in the place's process."""
    for interpreter in discover_interpreters().values():
        if interpreter.in_process is not None:
            trusted = state_dir / "trusted"
            trusted.mkdir(mode=0o700, exist_ok=True)
            path = trusted / f"{TRUSTED_NULL}{interpreter.suffixes[0]}"
            path.write_text(interpreter.in_process.null)
            return True
    return False


def instance_null() -> tuple[str, str] | None:
    """The agent and null program of a language whose every meet is a fresh instance of
    its runtime (`Interpreter.instances`) that can run here; None if there is none."""
    for interpreter in discover_interpreters().values():
        if (interpreter.instances and "minimal" in interpreter.programs
                and interpreter.check() is None):
            return interpreter.agent, interpreter.programs["minimal"]
    return None


async def _timed(count: int, meet: Callable[[], Awaitable[Briefcase | str]],
                 expected: Briefcase) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        result = await meet()
        times.append(time.perf_counter() - start)
        if result != expected:
            raise RuntimeError("the agent returned another briefcase")
    return times


async def _round_trips(passive: str, place: str, size: int, quick: bool,
                       trusted: bool, tls: bool,
                       instance: tuple[str, str] | None) -> tuple[float, ...]:
    payload = Briefcase(DATA=[b"x" * size])
    wire = [2, 1, "ag_echo", payload.to_wire(), "sync", None]  # a Meet's shape
    # Fresh instances cost a worker each where none is kept (8-15 ms): fewer in quick mode.
    fast, instances, paced = (200, 40, 15) if quick else (1000, 1000, 40)
    client = await PassiveClient.connect(passive, credentials().context(passive)
                                         if tls else None)
    try:
        passive_times = []
        for _ in range(fast):
            start = time.perf_counter()
            reply = await client.request(wire)
            passive_times.append(time.perf_counter() - start)
            if reply != wire:
                raise RuntimeError("the passive server answered something else")
    finally:
        client.close()
    echo_times = await _timed(fast, lambda: ameet(f"ag_echo@{place}", payload), payload)
    trusted_times = (await _timed(fast, lambda: ameet(f"{TRUSTED_NULL}@{place}", payload),
                                  payload) if trusted else [float("nan")])
    instance_times = [float("nan")]
    if instance is not None:
        agent, code = instance
        carried = Briefcase(payload)
        carried["CODE"] = [code.encode()]
        await ameet(f"{agent}@{place}", payload, code=code)  # compiled once per worker
        instance_times = await _timed(instances, lambda: ameet(f"{agent}@{place}", payload,
                                                          code=code), carried)
    agent_times = []
    for _ in range(paced):
        await asyncio.sleep(0.1)  # the pool refills, untimed
        start = time.perf_counter()
        result = await ameet(f"ag_python@{place}", payload, code="pass")
        agent_times.append(time.perf_counter() - start)
        if result["DATA"] != payload["DATA"]:
            raise RuntimeError("the agent returned another briefcase")
    return tuple(statistics.median(t) * 1e6
                 for t in (passive_times, echo_times, agent_times, trusted_times,
                           instance_times))


def measure_overhead(quick: bool, progress: Progress | None = None) -> list[OverheadRow]:
    """A row per isolation setting and briefcase size; `progress` counts them (by default
    a bar in a terminal or a notebook)."""
    rows = []
    sizes = QUICK_SIZES if quick else SIZES
    every = settings()
    bar = progress or Progress(len(every) * len(sizes), "overhead")
    bar.update(total=len(every) * len(sizes))
    instance = instance_null()
    servers = {tls: _start_passive(tls) for tls in (False, True)}
    try:
        with bar if progress is None else contextlib.nullcontext():
            for setting, flags in every:
                with local_places(1, *flags) as places:
                    if "--insecure" in flags:
                        register_place(places.addresses[0], None)
                    trusted = install_trusted_null(places.state_dirs[0])
                    for size in sizes:
                        bar.update(description=f"{setting}: {size} bytes")
                        tls = "--insecure" not in flags  # the passive on the same transport
                        p, e, a, t, i = run_blocking(_round_trips(
                            servers[tls][1], places.addresses[0], size, quick, trusted, tls,
                            instance))
                        rows.append(OverheadRow(setting, size, p, e, a,
                                                t if trusted else None,
                                                i if instance is not None else None))
                        bar.advance()
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(30)
    return rows


def overhead_table(rows: list[OverheadRow], file: IO[str] | None = None) -> None:
    """Print the rows (on stdout, or `file`)."""
    instance = instance_null()
    header = ("setting", "bytes", "t_passive µs", "ag_echo µs", "overhead",
              "trusted µs", "overhead", f"{instance[0] if instance else 'instance'} µs",
              "overhead", "ag_python µs", "overhead")
    show_table(header, [(r.setting, str(r.size), f"{r.passive_us:,.1f}", f"{r.echo_us:,.1f}",
                         f"{r.echo_overhead:.0%}",
                         "-" if r.trusted_us is None else f"{r.trusted_us:,.1f}",
                         "-" if r.trusted_overhead is None else f"{r.trusted_overhead:.0%}",
                         "-" if r.instance_us is None else f"{r.instance_us:,.1f}",
                         "-" if r.instance_overhead is None else f"{r.instance_overhead:.0%}",
                         f"{r.agent_us:,.1f}", f"{r.agent_overhead:,.0%}") for r in rows],
               right=header[1:], file=file)
