"""Latency percentiles of the meet path, without pytest-benchmark: `python benchmarks/report.py`.

Starts its own places (the default, one with --insecure, one that keeps no worker warm,
--reuse never, and one without a worker pool) and the passive echo server in plaintext and
in mutual TLS, each in its own process as the benchmarks do (_harness.py), times N calls of
each path on one uvloop event loop, and prints p50 and p99 in microseconds, the ratios to
the passive baseline on the same transport (PAN's ActiveOverhead) and to TACOMA v1.3's
21,675 us meet. State directories go to the user's cache directory, not below /tmp. Each
call is timed around its `await` inside one coroutine, so the numbers do not include
starting the loop;
every call's result is checked.

The Python-agent meets are paced (an untimed pause before each, so the place's pool has
replaced the last worker); a pause lets the CPUs go idle, and waking processes costs time of
its own on a virtual machine, so the same pause is also put before a set of null meets: that
row is the control to compare the paced Python meet with.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import platformdirs
import tacoma
from tacoma.bench._overhead import TRUSTED_NULL, install_trusted_null
from tacoma.client._runtime import new_event_loop

from _harness import (
    PAYLOAD,
    PassiveClient,
    ServerProcess,
    close_meet_connections,
    start_passive,
    start_place,
)

#: TACOMA v1.3's median meet, the sum of its Table 1 (HP C-160, 10 Mbit/s Ethernet).
TACOMA_MEET_US = 21_675
PYTHON_RESULT = {**PAYLOAD, "CODE": [b"pass"]}
PASSIVE_TLS = "passive echo (mutual TLS)"
PLAINTEXT_ECHO = "ag_echo null meet (plaintext)"


def check(ok: bool, what: str) -> None:
    """Fail the report if a call did not do its work (not an assert: -O must not skip it)."""
    if not ok:
        raise RuntimeError(f"benchmark call did not do its work: {what}")


def percentile(samples: list[float], q: int) -> float:
    """The q-th percentile (1..99) by linear interpolation between closest ranks."""
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


Call = Callable[[], Awaitable[None]]


async def timed(call: Call, count: int, warmup: int = 0, before: Call | None = None,
                ) -> list[float]:
    """Microseconds of each of `count` awaits of `call()`, after `warmup` untimed ones.

    `before`, if given, is awaited untimed before each call (warm-up calls included).
    """
    for _ in range(warmup):
        if before is not None:
            await before()
        await call()
    samples = []
    for _ in range(count):
        if before is not None:
            await before()
        start = time.perf_counter_ns()
        await call()
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


#: The row of a null agent installed with --trusted (run in the place's own process).
TRUSTED_STEP = "trusted null meet (in the place)"


async def measure(args: argparse.Namespace, passive: ServerProcess,
                  passive_tls: ServerProcess, place: ServerProcess,
                  plaintext_place: ServerProcess, fresh_place: ServerProcess,
                  cold_place: ServerProcess) -> dict[str, list[float]]:
    from tacoma.client._identity import credentials, register_place

    client = await PassiveClient.connect(passive.address)
    tls_client = await PassiveClient.connect(passive_tls.address,
                                             credentials().context(passive_tls.address))
    register_place(plaintext_place.address, None)
    echo_target = f"ag_echo@{place.address}"

    async def passive_echo() -> None:
        reply = await client.request(PAYLOAD)
        check(reply == PAYLOAD, f"passive echo returned {reply!r}")

    async def passive_echo_tls() -> None:
        reply = await tls_client.request(PAYLOAD)
        check(reply == PAYLOAD, f"passive echo returned {reply!r}")

    async def null_meet() -> None:
        result = await tacoma.ameet(echo_target, PAYLOAD)
        check(result == PAYLOAD, f"ag_echo returned {result!r}")

    async def plaintext_null_meet() -> None:
        result = await tacoma.ameet(f"ag_echo@{plaintext_place.address}", PAYLOAD)
        check(result == PAYLOAD, f"ag_echo returned {result!r}")

    assert place.state_dir is not None
    trusted = install_trusted_null(place.state_dir)

    async def trusted_meet() -> None:
        result = await tacoma.ameet(f"{TRUSTED_NULL}@{place.address}", PAYLOAD)
        check(result == PAYLOAD, f"the trusted null agent returned {result!r}")

    def python_meet(address: str) -> Call:
        async def call() -> None:
            result = await tacoma.ameet(f"ag_python@{address}", PAYLOAD, code="pass")
            check(result == PYTHON_RESULT, f"ag_python returned {result!r}")
        return call

    last: list[str] = []

    async def async_batch() -> None:
        ids = await asyncio.gather(*(tacoma.ameet(echo_target, PAYLOAD, mode="async")
                                     for _ in range(args.batch)))
        check(all(isinstance(i, str) and i for i in ids), f"meet ids {ids!r}")
        check(len(set(ids)) == args.batch, f"{len(set(ids))} distinct meet ids")
        last[:] = ids

    async def previous_batch_ended() -> None:
        # Each batch starts at an idle place: an async meet is accepted (journaled) before
        # it runs, so the last batch may still be in flight (and, piled up, overrun the
        # place's --max-queued). Their ends, asked for by id, are the barrier, as in
        # test_meet.py.
        await asyncio.gather(*(tacoma.aresult(f"{meet_id}@{place.address}", timeout=120)
                               for meet_id in last))

    async def pause() -> None:
        await asyncio.sleep(args.pause)  # pacing for the pool to refill; see the header

    results: dict[str, list[float]] = {}
    step = "passive echo"
    print(f"  {step} x{args.n}", file=sys.stderr)
    results[step] = await timed(passive_echo, args.n, warmup=100)
    step = PASSIVE_TLS
    print(f"  {step} x{args.n}", file=sys.stderr)
    results[step] = await timed(passive_echo_tls, args.n, warmup=100)
    step = "ag_echo null meet"
    print(f"  {step} x{args.n}", file=sys.stderr)
    results[step] = await timed(null_meet, args.n, warmup=100)
    step = PLAINTEXT_ECHO
    print(f"  {step} x{args.n}", file=sys.stderr)
    results[step] = await timed(plaintext_null_meet, args.n, warmup=100)
    if trusted:
        step = TRUSTED_STEP
        print(f"  {step} x{args.n}", file=sys.stderr)
        results[step] = await timed(trusted_meet, args.n, warmup=100)
    step = "ag_python meet (pooled, paced)"
    print(f"  {step} x{args.n_python}, {args.pause} s apart", file=sys.stderr)
    results[step] = await timed(python_meet(place.address), args.n_python, warmup=2,
                                before=pause)
    step = "ag_python meet (fresh worker, paced)"
    print(f"  {step} x{args.n_python}, {args.pause} s apart", file=sys.stderr)
    results[step] = await timed(python_meet(fresh_place.address), args.n_python, warmup=2,
                                before=pause)
    step = "ag_echo null meet (paced, control)"
    print(f"  {step} x{args.n_control}, {args.pause} s apart", file=sys.stderr)
    results[step] = await timed(null_meet, args.n_control, before=pause)
    for step, address in (("ag_python back to back (warm)", place.address),
                          ("ag_python back to back (fresh)", fresh_place.address)):
        print(f"  {step} x{args.n_python}", file=sys.stderr)
        results[step] = await timed(python_meet(address), args.n_python, warmup=10)
    step = "ag_python meet (no pool, cold)"
    print(f"  {step} x{args.n_cold}", file=sys.stderr)
    results[step] = await timed(python_meet(cold_place.address), args.n_cold, warmup=1)
    step = f"async submission, batch of {args.batch}"
    print(f"  {step} x{args.rounds}", file=sys.stderr)
    results[step] = await timed(async_batch, args.rounds, warmup=2,
                                before=previous_batch_ended)
    client.close()
    tls_client.close()
    return results


def print_report(args: argparse.Namespace, results: dict[str, list[float]]) -> None:
    passive_p50 = percentile(results["passive echo"], 50)
    print(f"\ntacoma {tacoma.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average at the end "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"payload: {sorted(PAYLOAD)} ({sum(len(e) for v in PAYLOAD.values() for e in v)} "
          "bytes in elements); loopback TCP; client and servers in separate processes\n")
    header = (f"{'path':<38} {'n':>5} {'p50 us':>11} {'p99 us':>11} "
              f"{'p50/passive (same transport)':>29}")
    print(header)
    print("-" * len(header))
    batch_name = f"async submission, batch of {args.batch}"
    tls_p50 = percentile(results[PASSIVE_TLS], 50)
    for name, samples in results.items():
        p50, p99 = percentile(samples, 50), percentile(samples, 99)
        # Each against the passive echo on its own transport: TLS but for the plaintext rows.
        base = passive_p50 if name in ("passive echo", PLAINTEXT_ECHO) else tls_p50
        ratio = "-" if name == batch_name else f"{p50 / base:.2f}x"
        print(f"{name:<38} {len(samples):>5} {p50:>11,.1f} {p99:>11,.1f} {ratio:>29}")

    batch = results[batch_name]
    p50, p99 = percentile(batch, 50), percentile(batch, 99)
    print(f"\nasync submission rate: {args.batch / p50 * 1e6:,.0f} meets/s at the p50 round "
          f"({p50 / args.batch:,.1f} us a meet), {args.batch / p99 * 1e6:,.0f} meets/s at p99")

    def overhead(name: str, base: float = tls_p50) -> str:
        active = percentile(results[name], 50)
        return f"{100 * (active - base) / base:,.0f}%"

    print("\nPAN ActiveOverhead = (t_active - t_passive) / t_passive, from p50 round trips, "
          "t_passive on the same transport:")
    print(f"  ag_echo null meet (TLS):    {overhead('ag_echo null meet')}")
    print(f"  ag_echo null meet (plain):  {overhead(PLAINTEXT_ECHO, passive_p50)}")
    if TRUSTED_STEP in results:
        print(f"  trusted null agent:         {overhead(TRUSTED_STEP)}")
    paced_python = percentile(results["ag_python meet (pooled, paced)"], 50)
    paced_echo = percentile(results["ag_echo null meet (paced, control)"], 50)
    paced_fresh = percentile(results["ag_python meet (fresh worker, paced)"], 50)
    print(f"  ag_python meet (warm):      {overhead('ag_python meet (pooled, paced)')}  "
          f"({paced_python / paced_echo:.1f}x the paced null meet; a fresh worker's: "
          f"{paced_fresh / paced_echo:.1f}x)")
    echo_p50 = percentile(results["ag_echo null meet"], 50)
    for name in ("ag_python back to back (warm)", "ag_python back to back (fresh)"):
        print(f"  {name}: p50 {percentile(results[name], 50) / echo_p50:.1f}x the null "
              f"meet, p99 {percentile(results[name], 99) / 1000:.2f} ms")
    print(f"\nTACOMA v1.3 meet (Table 1 total): {TACOMA_MEET_US:,} us. Here, at p50:")
    for name in ("ag_echo null meet", "ag_python meet (pooled, paced)",
                 "ag_python meet (fresh worker, paced)",
                 "ag_python meet (no pool, cold)"):
        p50 = percentile(results[name], 50)
        print(f"  {name:<32} {p50:>11,.1f} us = {p50 / TACOMA_MEET_US:.3f} of TACOMA's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000,
                        help="passive echoes and null meets (default 2000)")
    parser.add_argument("--n-python", type=int, default=300,
                        help="paced Python-agent meets (default 300)")
    parser.add_argument("--n-control", type=int, default=100,
                        help="paced null meets, the control (default 100)")
    parser.add_argument("--n-cold", type=int, default=30,
                        help="Python-agent meets at a place without a pool (default 30)")
    parser.add_argument("--pause", type=float, default=0.2,
                        help="seconds before each paced meet, for the pool to refill "
                             "(default 0.2; forking and confining a worker takes a few "
                             "ms, destroying the last one as long again)")
    parser.add_argument("--batch", type=int, default=200, help="async meets per round")
    parser.add_argument("--rounds", type=int, default=50, help="async rounds (default 50)")
    parser.add_argument("--quick", action="store_true", help="a tenth of every count")
    args = parser.parse_args()
    if args.quick:
        for name in ("n", "n_python", "n_control", "n_cold", "rounds"):
            setattr(args, name, max(3, getattr(args, name) // 10))

    runs = Path(platformdirs.user_cache_dir("tacoma", appauthor=False)) / "bench-runs"
    runs.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(prefix="report-", dir=runs) as tmp:
        base = Path(tmp)
        servers = [start_passive(base), start_passive(base, tls=True),
                   start_place(base / "place"), start_place(base / "plain", "--insecure"),
                   start_place(base / "fresh", "--reuse", "never"),
                   start_place(base / "cold", "--pool-size", "0", "--reuse", "never")]
        loop = new_event_loop()
        try:
            print(f"passive {servers[0].address} and {servers[1].address} (TLS), places "
                  f"{', '.join(s.address for s in servers[2:])}; measuring:", file=sys.stderr)
            results = loop.run_until_complete(measure(args, *servers))
        finally:
            close_meet_connections(loop)
            loop.close()
            statuses = {server.name + f" ({server.address})": server.stop()
                        for server in servers}
    bad = {name: status for name, status in statuses.items() if status != 0}
    if bad:
        raise SystemExit(f"servers exited badly after SIGTERM: {bad}")
    print_report(args, results)


if __name__ == "__main__":
    main()
