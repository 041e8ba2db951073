"""The meet path, measured: from the passive baseline up to a Python agent in a new process.

What each benchmark times is one call of the benchmarked function on the client's event loop
(`loop.run_until_complete`), so every number includes the client's own work: building and
encoding the request, the loopback round trip, decoding the reply. Every round checks that it
did its work (the briefcase came back equal, a meet id was returned); nothing here asserts a
time. See README.md for how the numbers map to TACOMA's Table 1 and PAN's passive baseline.

Round counts are fixed (pedantic mode) rather than sized by pytest-benchmark from a first
call, which on a shared machine can be a stall; the passive and null-meet paths get the same
count. The first call of each is untimed: the first meet to a place also opens the connection.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import tacoma
from tacoma import Briefcase
from tacoma.bench._overhead import TRUSTED_NULL, install_trusted_null
from tacoma.client._client import PlaceClient
from tacoma.wire._program import code_digest

from _harness import PAYLOAD, PassiveClient, ServerProcess, rss_kib, served

Summary = Callable[[str], None]

#: Rounds of the passive echo and of the null meet (the same for both), after a warm-up.
ECHO_ROUNDS = 2000
ECHO_WARMUP = 100
#: Async meets submitted per round of the submission-rate benchmark.
ASYNC_BATCH = 200
ASYNC_ROUNDS = 50
#: Null meets between the two memory readings, and before the first; and pooled Python
#: meets among them (the worker path: meet records, pools, workers' channels), so many at a
#: time.
MEMORY_MEETS = 100_000
MEMORY_WARMUP = 1_000
MEMORY_PYTHON_MEETS = 10_000  # of one program: warm workers serve them
MEMORY_FRESH_MEETS = 1_000  # a new program each: fresh workers, and the warm book's churn
MEMORY_PYTHON_IN_FLIGHT = 8
#: Pause before each paced Python meet, not timed: long enough for the place to have
#: destroyed the last worker and forked its replacement (a few ms; see
#: test_meet_python_agent_cold), so the timed meet neither waits for a worker nor shares
#: the CPU with one starting.
POOL_REFILL_PAUSE = 0.2
PYTHON_ROUNDS = 20
#: Back-to-back Python meets timed (no pause: the pool refills while the next meets run).
BACK_TO_BACK_ROUNDS = 200
#: Isolated Python meets per round of the sustained-rate benchmark, and how many in flight.
SUSTAINED_MEETS = 256
IN_FLIGHT = 32
SUSTAINED_ROUNDS = 5
#: New connections timed per connection benchmark.
CONNECT_ROUNDS = 100
COLD_ROUNDS = 8


def _median_seconds(benchmark: Any) -> float | None:
    """The benchmark's median round time, or None when benchmarks are disabled."""
    stats = getattr(benchmark, "stats", None)
    inner = getattr(stats, "stats", None)
    return None if inner is None else float(inner.median)


def _pass_meet(place: ServerProcess) -> Callable[[], Awaitable[None]]:
    """One sync meet to ag_python at `place` with the program 'pass', checked."""
    target = f"ag_python@{place.address}"
    expected = {**PAYLOAD, "CODE": [b"pass"]}

    async def python_meet() -> None:
        result = await tacoma.ameet(target, PAYLOAD, code="pass", timeout=60)
        assert result == expected, result

    return python_meet


def _payload_bytes() -> int:
    return int(Briefcase(PAYLOAD).size())


def _passive_echoes(benchmark: Any, loop: asyncio.AbstractEventLoop, client: PassiveClient,
                    **info: Any) -> None:
    """Time ECHO_ROUNDS request/replies of the payload to the passive server over `client`,
    after one untimed (see the header); `info` goes into extra_info."""

    async def echo() -> None:
        reply = await client.request(PAYLOAD)
        assert reply == PAYLOAD, reply

    benchmark.extra_info.update(payload_bytes=_payload_bytes(), folders=sorted(PAYLOAD), **info)
    loop.run_until_complete(echo())
    benchmark.pedantic(lambda: loop.run_until_complete(echo()),
                       rounds=ECHO_ROUNDS, warmup_rounds=ECHO_WARMUP, iterations=1)


def test_passive_echo_round_trip(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                 passive_client: PassiveClient) -> None:
    """PAN's t_passive: a msgpack request/reply over the same loopback transport, no meet."""
    _passive_echoes(benchmark, loop, passive_client, tls=False,
                    measures="one msgpack request/reply with the briefcase-shaped payload to "
                             "the passive echo server (separate process, one kept TCP "
                             "connection)")


def test_passive_echo_round_trip_tls(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                     passive_tls_client: PassiveClient) -> None:
    """t_passive over mutual TLS 1.3 (the place's own contexts and the local place
    identity): the baseline of the meets over TLS, as the plaintext echo is of the
    --insecure place's."""
    _passive_echoes(benchmark, loop, passive_tls_client, tls=True,
                    measures="one msgpack request/reply with the briefcase-shaped payload to "
                             "the passive echo server over mutual TLS 1.3 (one kept "
                             "connection)")


def _null_meets(benchmark: Any, loop: asyncio.AbstractEventLoop, target: str,
                **info: Any) -> None:
    """Time ECHO_ROUNDS sync meets with `target` (AGENT@PLACE), which returns the briefcase
    it got, after one untimed (it connects, or loads the agent: see the header); `info`
    goes into extra_info with the agent's name."""

    async def null_meet() -> None:
        result = await tacoma.ameet(target, PAYLOAD)
        assert result == PAYLOAD, result

    benchmark.extra_info.update(target=target.split("@")[0], payload_bytes=_payload_bytes(),
                                **info)
    loop.run_until_complete(null_meet())
    benchmark.pedantic(lambda: loop.run_until_complete(null_meet()),
                       rounds=ECHO_ROUNDS, warmup_rounds=ECHO_WARMUP, iterations=1)


def test_meet_ag_echo_sync(benchmark: Any, loop: asyncio.AbstractEventLoop,
                           place: ServerProcess) -> None:
    """The null meet: tacoma.ameet to ag_echo, which the place answers itself (no agent code)."""
    _null_meets(benchmark, loop, f"ag_echo@{place.address}",
                measures="one sync tacoma.ameet to ag_echo: protocol, checks and meet "
                         "bookkeeping at the place, no agent process; cached connection")


def test_meet_ag_echo_sync_plaintext(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                     plaintext_place: ServerProcess) -> None:
    """The null meet without TLS (a place started with --insecure): the baseline of what
    mutual TLS adds per meet on a warm connection (test_meet_ag_echo_sync)."""
    _null_meets(benchmark, loop, f"ag_echo@{plaintext_place.address}",
                tls=False, measures="one sync tacoma.ameet to ag_echo at an --insecure "
                                    "place, in plaintext; cached connection")


def test_meet_trusted_null_agent(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                 place: ServerProcess) -> None:
    """PAN's in-kernel mode: a null agent installed with --trusted, which the place runs in
    its own process (no worker); its ActiveOverhead against test_passive_echo_round_trip."""
    assert place.state_dir is not None
    if not install_trusted_null(place.state_dir):
        pytest.skip("no interpreter here runs agents in the place's process")
    _null_meets(benchmark, loop, f"{TRUSTED_NULL}@{place.address}",
                measures="one sync tacoma.ameet to a trusted null agent (tacoma install "
                         "--trusted): called in the place's own process, no worker; "
                         "cached connection")


@pytest.mark.parametrize("tls", [True, False], ids=["mutual-tls", "plaintext"])
def test_connect_and_first_meet(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                place: ServerProcess, plaintext_place: ServerProcess,
                                tls: bool) -> None:
    """What a new connection costs: connect (the TLS 1.3 handshake with both certificates
    verified, or a plain TCP connect), both Hellos, one null meet, close. Paid once per
    peer: every later meet reuses the connection."""
    address = place.address if tls else plaintext_place.address

    async def first_meet() -> None:
        client = await tacoma.PlaceClient.connect(address)
        try:
            result = await client.meet("ag_echo", Briefcase(PAYLOAD))
            assert result == PAYLOAD, result
        finally:
            client.close()

    benchmark.extra_info.update(
        measures="a new connection to the place (handshake and Hellos) and one ag_echo meet "
                 "on it", tls=tls)
    benchmark.pedantic(lambda: loop.run_until_complete(first_meet()),
                       rounds=CONNECT_ROUNDS, warmup_rounds=5, iterations=1)


def test_meet_python_agent_pooled(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                  place: ServerProcess) -> None:
    """A Python agent that only returns, in a pre-started worker, the pool refilled between."""
    python_meet = _pass_meet(place)
    def refill() -> None:
        # Pacing between timed rounds, not waiting for an event: the place's pool cannot be
        # observed from outside its process, so give it time to replace the used worker.
        loop.run_until_complete(asyncio.sleep(POOL_REFILL_PAUSE))

    benchmark.extra_info.update(
        measures="one sync meet to ag_python with code 'pass': a pre-started sandboxed worker "
                 "gets the briefcase, compiles and runs the program, returns the briefcase. "
                 f"Untimed {POOL_REFILL_PAUSE} s pause before each round lets the pool refill, "
                 "so this is the latency of an unloaded place, not a sustained rate.",
        target="ag_python", pool_size=2, refill_pause_s=POOL_REFILL_PAUSE,
        payload_bytes=_payload_bytes())
    benchmark.pedantic(lambda: loop.run_until_complete(python_meet()), setup=refill,
                       rounds=PYTHON_ROUNDS, warmup_rounds=2, iterations=1)


def test_meet_ag_echo_paced(benchmark: Any, loop: asyncio.AbstractEventLoop,
                            place: ServerProcess) -> None:
    """The null meet with the same untimed pause before each round as the paced Python
    meets: the control for what an idle machine's wake-ups cost any paced meet."""

    async def null_meet() -> None:
        result = await tacoma.ameet(f"ag_echo@{place.address}", PAYLOAD)
        assert result == PAYLOAD, result

    benchmark.extra_info.update(
        measures=f"one sync ag_echo meet after an untimed {POOL_REFILL_PAUSE} s pause",
        target="ag_echo", pause_s=POOL_REFILL_PAUSE)
    loop.run_until_complete(null_meet())
    benchmark.pedantic(lambda: loop.run_until_complete(null_meet()),
                       setup=lambda: loop.run_until_complete(asyncio.sleep(POOL_REFILL_PAUSE)),
                       rounds=PYTHON_ROUNDS, warmup_rounds=2, iterations=1)


def test_meet_python_agent_pooled_fresh(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                        fresh_workers_place: ServerProcess) -> None:
    """The paced Python meet at a place that keeps no worker warm (--reuse never): a new
    pre-started worker for every meet."""
    python_meet = _pass_meet(fresh_workers_place)
    benchmark.extra_info.update(
        measures="one sync meet to ag_python with code 'pass' in a new pre-started worker "
                 f"(--reuse never), after an untimed {POOL_REFILL_PAUSE} s pause",
        target="ag_python", reuse="never", payload_bytes=_payload_bytes())
    benchmark.pedantic(lambda: loop.run_until_complete(python_meet()),
                       setup=lambda: loop.run_until_complete(asyncio.sleep(POOL_REFILL_PAUSE)),
                       rounds=PYTHON_ROUNDS, warmup_rounds=2, iterations=1)


def _back_to_back(benchmark: Any, loop: asyncio.AbstractEventLoop, place: ServerProcess,
                  summary: Summary, what: str) -> None:
    python_meet = _pass_meet(place)
    benchmark.extra_info.update(
        measures=f"one sync meet to ag_python with code 'pass', back to back ({what}): p50 "
                 "and p99 of a caller that never waits",
        target="ag_python", payload_bytes=_payload_bytes())
    benchmark.pedantic(lambda: loop.run_until_complete(python_meet()),
                       rounds=BACK_TO_BACK_ROUNDS, warmup_rounds=10, iterations=1)
    data = getattr(getattr(benchmark, "stats", None), "stats", None)
    if data is not None and data.data:
        times = sorted(data.data)
        p99 = times[min(len(times) - 1, round(0.99 * (len(times) - 1)))]
        benchmark.extra_info["p99_ms"] = round(p99 * 1e3, 2)
        summary(f"back-to-back ag_python ({what}): p50 {data.median * 1e3:.2f} ms, "
                f"p99 {p99 * 1e3:.2f} ms")


def test_meet_python_agent_back_to_back_fresh(benchmark: Any,
                                              loop: asyncio.AbstractEventLoop,
                                              fresh_workers_place: ServerProcess,
                                              summary: Summary) -> None:
    """Back to back at a place that keeps no worker warm: each meet's worker is replaced
    while the next meets run."""
    _back_to_back(benchmark, loop, fresh_workers_place, summary, "fresh workers")


def test_meet_python_agent_back_to_back(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                        place: ServerProcess, summary: Summary) -> None:
    """The Python meet again, one after another with no pause: the same program of the
    same principal, so a warm worker serves each."""
    _back_to_back(benchmark, loop, place, summary, "warm workers")


def _machine_cpu_seconds() -> float:
    """CPU time the whole machine spent busy so far (every core, /proc/stat)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _sustained(benchmark: Any, loop: asyncio.AbstractEventLoop, place: ServerProcess,
               summary: Summary, meet: Callable[[int], Awaitable[None]], what: str,
               **info: Any) -> None:
    """SUSTAINED_ROUNDS rounds of SUSTAINED_MEETS meets (`meet(n)`), IN_FLIGHT at once:
    the rate, the machine's CPU time per meet and the share a warm worker served."""
    cpu: list[float] = []

    async def round_of_meets() -> None:
        todo = iter(range(SUSTAINED_MEETS))

        async def caller() -> None:
            for n in todo:
                await meet(n)

        started = _machine_cpu_seconds()
        await asyncio.gather(*(caller() for _ in range(IN_FLIGHT)))
        cpu.append(_machine_cpu_seconds() - started)

    benchmark.extra_info.update(
        measures=f"one round = {SUSTAINED_MEETS} sync meets to ag_python, {IN_FLIGHT} in "
                 f"flight at once; {what}", in_flight=IN_FLIGHT, meets=SUSTAINED_MEETS,
        **info)
    warm, fresh = served(place, "ag_python")
    benchmark.pedantic(lambda: loop.run_until_complete(round_of_meets()),
                       rounds=SUSTAINED_ROUNDS, warmup_rounds=1, iterations=1)
    after = served(place, "ag_python")
    warm, fresh = (n - before for n, before in zip(after, (warm, fresh), strict=True))
    median = _median_seconds(benchmark)
    if median is not None and warm + fresh:
        rate = round(SUSTAINED_MEETS / median)
        per_meet = sorted(cpu)[len(cpu) // 2] / SUSTAINED_MEETS * 1e3
        share = warm / (warm + fresh)
        benchmark.extra_info.update(meets_per_s=rate, warm_share=round(share, 3),
                                    machine_cpu_ms_per_meet=round(per_meet, 2))
        summary(f"{rate:,} isolated ag_python meets/s, {IN_FLIGHT} in flight ({what}); "
                f"{share:.0%} served warm; {per_meet:.2f} ms of CPU per meet (machine)")


def test_sustained_isolated_meets(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                  place: ServerProcess, summary: Summary) -> None:
    """Isolated Python meets as fast as the place runs them, IN_FLIGHT at once, all of one
    program and one principal: warm workers serve them."""
    python_meet = _pass_meet(place)
    _sustained(benchmark, loop, place, summary, lambda _: python_meet(),
               "one program, one principal: warm workers")


def test_sustained_fresh_meets(benchmark: Any, loop: asyncio.AbstractEventLoop,
                               place: ServerProcess, summary: Summary) -> None:
    """The same, with a new program every meet (a comment differs): no worker may be
    reused, so each meet gets a fresh sandboxed process."""
    target = f"ag_python@{place.address}"
    tag = uuid.uuid4().hex

    async def new_program(n: int) -> None:
        code = f"pass  # {tag} {n}"
        result = await tacoma.ameet(target, PAYLOAD, code=code, timeout=60)
        assert result == {**PAYLOAD, "CODE": [code.encode()]}, result

    counter = itertools.count()
    _sustained(benchmark, loop, place, summary, lambda _: new_program(next(counter)),
               "a new program each meet: fresh workers")


#: The mixed load: principals, and programs each runs in turn.
MIXED_PRINCIPALS = 8
MIXED_PROGRAMS = 4


def test_sustained_mixed_load(benchmark: Any, loop: asyncio.AbstractEventLoop,
                              place: ServerProcess, summary: Summary) -> None:
    """What a shared place sees: MIXED_PRINCIPALS principals (identities of their own,
    each its own connection) running MIXED_PROGRAMS programs each in turn, IN_FLIGHT meets
    at once: the rate, and the share of meets a warm worker served."""
    from tacoma.client._identity import Credentials
    from tacoma.trust import TrustStore, _certs

    store = TrustStore()
    _certs.ensure_local(store)
    tag = uuid.uuid4().hex[:8]
    clients = [loop.run_until_complete(PlaceClient.connect(
        place.address, credentials=Credentials(_certs.issue(store, f"mixed-{tag}-{i}",
                                                            ("client",), ()))))
        for i in range(MIXED_PRINCIPALS)]
    programs = [f"pass  # program {p}".encode() for p in range(MIXED_PROGRAMS)]

    async def meet(n: int) -> None:
        client = clients[n % MIXED_PRINCIPALS]
        code = programs[(n // MIXED_PRINCIPALS) % MIXED_PROGRAMS]
        result = await client.meet("ag_python", Briefcase({**PAYLOAD, "CODE": [code]}),
                                   "sync", 60)
        assert result == {**PAYLOAD, "CODE": [code]}, result

    try:
        _sustained(benchmark, loop, place, summary, meet,
                   f"{MIXED_PRINCIPALS} principals x {MIXED_PROGRAMS} programs",
                   principals=MIXED_PRINCIPALS, programs=MIXED_PROGRAMS)
    finally:
        for client in clients:
            client.close()


#: The program of the code-by-hash benchmarks: 100 KB, most of it comment.
BIG_PROGRAM = ("# " + "x" * 97 + "\n") * 1000 + "bc['RAN'] = [b'1']\n"
BIG_ROUNDS = 50


@pytest.mark.parametrize("by_hash", [True, False], ids=["by_hash", "sent_each_time"])
def test_meet_100kb_program(benchmark: Any, loop: asyncio.AbstractEventLoop,
                            place: ServerProcess, summary: Summary, by_hash: bool) -> None:
    """A pooled ag_python meet whose program is 100 KB: named by its hash once the place
    has it (the default), or sent in full each time (the client's name_programs off; the
    place still names it in the result, which the client puts back)."""
    program = BIG_PROGRAM.encode()
    expected = {**PAYLOAD, "CODE": [program], "RAN": [b"1"]}
    client = loop.run_until_complete(PlaceClient.connect(place.address))
    client.name_programs = by_hash

    async def big_meet() -> None:
        result = await client.meet("ag_python", Briefcase({**PAYLOAD, "CODE": [program]}),
                                   timeout=60)
        assert result == expected, result

    def refill() -> None:
        loop.run_until_complete(asyncio.sleep(POOL_REFILL_PAUSE))

    loop.run_until_complete(big_meet())  # untimed: the place now has the program
    digest = code_digest([program])
    sent = Briefcase({**PAYLOAD, "CODE_HASH": [digest]} if by_hash
                     else {**PAYLOAD, "CODE": [program]})
    returned = Briefcase({**PAYLOAD, "CODE_HASH": [digest], "RAN": [b"1"]})
    request_bytes = len(msgpack.packb(sent.to_wire()))
    reply_bytes = len(msgpack.packb(returned.to_wire()))
    before = len(msgpack.packb(Briefcase(expected).to_wire()))  # both ways before CODE_HASH
    benchmark.extra_info.update(
        measures="one sync meet to ag_python with a 100 KB program (comment, then one "
                 "line), paced as the pooled benchmark; the briefcase bytes each way are "
                 "its msgpack encoding", program_bytes=len(program), by_hash=by_hash,
        request_briefcase_bytes=request_bytes, reply_briefcase_bytes=reply_bytes,
        bytes_each_way_without_names=before)
    try:
        benchmark.pedantic(lambda: loop.run_until_complete(big_meet()), setup=refill,
                           rounds=BIG_ROUNDS, warmup_rounds=2, iterations=1)
    finally:
        client.close()
    median = _median_seconds(benchmark)
    if median is not None:
        summary(f"100 KB program {'by hash' if by_hash else 'sent each time'}: "
                f"{median * 1e3:.2f} ms; briefcase {request_bytes:,} B there, "
                f"{reply_bytes:,} B back (without names: {before:,} B each way)")


def test_meet_python_agent_cold(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                cold_place: ServerProcess) -> None:
    """The same meet at a place with no pool: the worker's start is on the critical path.

    The worker is forked from the language's zygote (an interpreter started once, never given
    an agent) inside the meet, then confined: the closest to what TACOMA v1.3 measured
    (fork, exec and interpreter start in every meet: steps 3, 7, 8 and 10a of its Table 1),
    without the exec and interpreter start, which the zygote took off every meet's path.
    """
    python_meet = _pass_meet(cold_place)
    benchmark.extra_info.update(
        measures="one sync meet to ag_python at a place started with --pool-size 0: process "
                 "creation (a fork of the zygote) and sandbox entry are inside the meet",
        target="ag_python", pool_size=0, payload_bytes=_payload_bytes())
    benchmark.pedantic(lambda: loop.run_until_complete(python_meet()),
                       rounds=COLD_ROUNDS, warmup_rounds=1, iterations=1)


def test_meet_async_submission_rate(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                    place: ServerProcess, summary: Summary) -> None:
    """ASYNC_BATCH async meets to ag_echo in flight at once on one connection, per round."""
    target = f"ag_echo@{place.address}"
    last: list[str] = []

    async def submit_batch() -> None:
        meet_ids = await asyncio.gather(*(tacoma.ameet(target, PAYLOAD, mode="async")
                                          for _ in range(ASYNC_BATCH)))
        assert all(isinstance(meet_id, str) and meet_id for meet_id in meet_ids), meet_ids
        assert len(set(meet_ids)) == ASYNC_BATCH, "meet ids must be distinct"
        last[:] = meet_ids

    async def previous_batch_ended() -> None:
        # Each round should start at an idle place: an async meet is accepted (journaled)
        # before it runs, so the last batch's meets may still be in flight. Their ends,
        # asked for by id, are the barrier.
        await asyncio.gather(*(tacoma.aresult(f"{meet_id}@{place.address}", timeout=120)
                               for meet_id in last))

    def barrier() -> None:
        loop.run_until_complete(previous_batch_ended())

    benchmark.extra_info.update(
        measures=f"one round = {ASYNC_BATCH} async tacoma.ameet calls to ag_echo submitted "
                 "concurrently over one connection, until every Accepted (meet id) arrived, "
                 "each written to the place's journal first; before each round (untimed) the "
                 "last batch's results are asked for by id, so that it ended",
        batch=ASYNC_BATCH)
    loop.run_until_complete(submit_batch())  # untimed first call: see the header
    benchmark.pedantic(lambda: loop.run_until_complete(submit_batch()), setup=barrier,
                       rounds=ASYNC_ROUNDS, warmup_rounds=2, iterations=1)
    median = _median_seconds(benchmark)
    if median is not None:
        benchmark.extra_info["meets_per_s"] = round(ASYNC_BATCH / median)
        benchmark.extra_info["us_per_meet"] = round(median / ASYNC_BATCH * 1e6, 1)
        summary(f"{benchmark.extra_info['meets_per_s']:,} async meets/s submitted "
                f"({benchmark.extra_info['us_per_meet']} us each, median round of "
                f"{ASYNC_BATCH})")


def test_place_memory_over_100k_meets(benchmark: Any, loop: asyncio.AbstractEventLoop,
                                      fresh_place: ServerProcess, summary: Summary) -> None:
    """The place's resident memory before and after MEMORY_MEETS null meets and
    MEMORY_PYTHON_MEETS Python meets of one program (warm workers) and MEMORY_FRESH_MEETS of
    a new program each (the goal: no more than 20 MB of growth over 10^5 meets)."""
    target = f"ag_echo@{fresh_place.address}"
    python_meet = _pass_meet(fresh_place)
    numbers = itertools.count()

    async def new_program() -> None:
        code = f"pass  # {next(numbers)}"
        result = await tacoma.ameet(f"ag_python@{fresh_place.address}", PAYLOAD, code=code,
                                    timeout=60)
        assert result == {**PAYLOAD, "CODE": [code.encode()]}, result

    async def meets(count: int, python: int, fresh: int) -> int:
        done = 0
        for _ in range(count):
            result = await tacoma.ameet(target, PAYLOAD)
            done += result == PAYLOAD
        for meet, n in ((python_meet, python), (new_program, fresh)):
            for _ in range(n // MEMORY_PYTHON_IN_FLIGHT):
                await asyncio.gather(*(meet() for _ in range(MEMORY_PYTHON_IN_FLIGHT)))
        return done

    assert loop.run_until_complete(meets(MEMORY_WARMUP, 16, 16)) == MEMORY_WARMUP
    before = rss_kib(fresh_place.pid)
    done = benchmark.pedantic(
        lambda: loop.run_until_complete(meets(MEMORY_MEETS, MEMORY_PYTHON_MEETS,
                                              MEMORY_FRESH_MEETS)),
        rounds=1, iterations=1)
    after = rss_kib(fresh_place.pid)
    assert done == MEMORY_MEETS, f"only {done} of {MEMORY_MEETS} null meets returned the payload"
    benchmark.extra_info.update(
        measures=f"wall time of {MEMORY_MEETS} sequential sync ag_echo meets and "
                 f"{MEMORY_PYTHON_MEETS} ag_python meets of one program and "
                 f"{MEMORY_FRESH_MEETS} of a new program each, {MEMORY_PYTHON_IN_FLIGHT} at "
                 f"a time (after {MEMORY_WARMUP} warm-up meets), and the place process's "
                 "VmRSS around them",
        meets=MEMORY_MEETS, python_meets=MEMORY_PYTHON_MEETS,
        fresh_meets=MEMORY_FRESH_MEETS, warmup_meets=MEMORY_WARMUP,
        rss_before_kib=before,
        rss_after_kib=after, rss_growth_kib=after - before,
        rss_growth_bytes_per_meet=round((after - before) * 1024 / MEMORY_MEETS, 2))
    median = _median_seconds(benchmark)
    if median is not None:
        benchmark.extra_info["seconds"] = round(median, 2)
    summary(f"place VmRSS {before:,} KiB -> {after:,} KiB over {MEMORY_MEETS:,} null meets "
            f"and {MEMORY_PYTHON_MEETS:,} warm and {MEMORY_FRESH_MEETS:,} fresh Python meets "
            f"({after - before:+,} KiB, "
            f"{benchmark.extra_info['rss_growth_bytes_per_meet']:+} bytes/meet)")

