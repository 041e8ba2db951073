"""WebAssembly instances on threads of the place's own process (--instances-in-place).

In this mode no sandbox layer stands around the runtime: an instance runs on a thread of
the place, beside its identity and every principal's meets. The hostile suite
(test_wasm_hostile) and the conformance suite run in this mode too; these are the duties of
the mode itself, none of which needs root:
- an agent reaches none of the place's memory (loads, stores, copies and indirect calls out
  of bounds trap; a memory cannot grow past its limit);
- the instances that run at once are bounded (--instances-memory, each charged its
  --memory), and one principal holds no more than its share of them (two real identities);
- a meet asleep (WASI's poll_oneoff, which an epoch cannot interrupt) ends at its deadline
  and at `tacoma kill`, and frees its thread;
- the place leaves no thread behind, and says where instances run (status, ps).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tacoma
from tacoma import Briefcase

from conftest import RunningPlace, launch_place, meet_as, release, tacoma_cli, wait_until
from test_lazy import LAZY_AND_GO, READ_RANGE
from test_wasm_hostile import WASM_PROBLEM, c_agent, published, wat_agent, wat_string

pytestmark = pytest.mark.skipif(WASM_PROBLEM is not None,
                                reason=f"WebAssembly C agents cannot run here: {WASM_PROBLEM}")

MiB = 2**20
#: Each instance is charged its 256 MiB (what clang needs to build C agents) of the 1 GiB
#: the place lets them hold: four at once, and (--share 0.5) two of one principal.
MEMORY = 256 * MiB
AT_ONCE, SHARE = 4, 2


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlace]:
    running = launch_place(
        tmp_path_factory.mktemp("wasm-in-place"), "--instances-in-place",
        "--memory", str(MEMORY), "--instances-memory", str(AT_ONCE * MEMORY),
        "--share", "0.5", "--cpu-seconds", "2", "--meet-seconds", "30")
    yield running
    assert running.stop() == 0, running.log()


def meet(place: RunningPlace, code: str, timeout: float = 60, **folders: list[str]
         ) -> Briefcase:
    return tacoma.meet(place.target("ag_wasm"), Briefcase(folders), code=code,
                       timeout=timeout)


def serves(place: RunningPlace) -> None:
    """The place is up and serves WebAssembly and another language."""
    assert place.proc.poll() is None, place.log()
    assert meet(place, '(module (func (export "_start")))')["CODE"]
    assert tacoma.meet(place.target("ag_python"), code='bc["OK"] = [b"yes"]\n',
                       timeout=60)["OK"] == [b"yes"]


def threads(place: RunningPlace) -> int:
    """The place's threads now."""
    return len(list(Path(f"/proc/{place.proc.pid}/task").iterdir()))


def token(place: RunningPlace) -> str:
    return (place.state_dir / "admin.token").read_text().strip()


# --------------------------------------------------------------------- the place's memory
#: Each reaches for memory outside the instance's own: what it would read or write is the
#: place's, were the bounds not checked.
OUT_OF_BOUNDS = {
    "load-past-the-end": "(drop (i32.load (i32.const 65536)))",
    "load-at-the-top-of-the-address-space": "(drop (i32.load (i32.const -4)))",
    "load-whose-offset-overflows": "(drop (i64.load offset=0xffffffff (i32.const 16)))",
    "store-straddling-the-end": "(i32.store (i32.const 65534) (i32.const -1))",
    "copy-from-past-the-end": "(memory.copy (i32.const 0) (i32.const 65000) (i32.const 4096))",
    "fill-past-the-end": "(memory.fill (i32.const 4096) (i32.const 0) (i32.const 1048576))",
    "indirect-call-past-the-table": "(call_indirect (type $none) (i32.const 7))",
}
DECLARATIONS = "(type $none (func)) (table 1 funcref)"
TRAPS = {"indirect-call-past-the-table": "undefined element"}


@pytest.mark.parametrize("attack", OUT_OF_BOUNDS)
def test_no_access_outside_the_instances_memory(place: RunningPlace, attack: str) -> None:
    with pytest.raises(tacoma.AgentFailed,
                       match=TRAPS.get(attack, "out of bounds memory access")):
        meet(place, wat_agent(OUT_OF_BOUNDS[attack], declarations=DECLARATIONS))
    serves(place)


#: A module that would hold more than one memory or table: each limit of the store bounds
#: one memory and one table, not their sum, so one is all an instance may have.
MANY = {
    "two-memories": ('(module (memory (export "memory") 1) (memory 1) (func (export "_start")))',
                     "multiple memories"),
    "two-tables": ('(module (memory (export "memory") 1) (table 1 funcref) (table 1 funcref) '
                   '(func (export "_start")))', "table"),
}


@pytest.mark.parametrize("module", MANY)
def test_an_instance_holds_one_memory_and_one_table(place: RunningPlace, module: str) -> None:
    code, message = MANY[module]
    with pytest.raises(tacoma.AgentFailed, match=message):
        meet(place, code)
    serves(place)


def test_a_sleep_on_a_cpu_clock_is_refused(place: RunningPlace) -> None:
    """An absolute sleep on the process's CPU-time clock would tell an agent how much CPU
    the place spent (every principal's meets): WASI's poll_oneoff refuses it (EINVAL, 28,
    in the event), as it does any clock but realtime and monotonic."""
    subscription = (b"\0" * 8 + b"\0" * 8 + (2).to_bytes(4, "little") + b"\0" * 4
                    + (8 * 10**9).to_bytes(8, "little") + b"\0" * 8
                    + (1).to_bytes(2, "little") + b"\0" * 6)
    code = f"""(module
  (import "wasi_snapshot_preview1" "poll_oneoff"
    (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) {wat_string(subscription)})
  (func (export "_start")
    (drop (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128)))
    (call $exit (i32.load16_u (i32.const 72)))))"""
    started = time.monotonic()
    with pytest.raises(tacoma.AgentFailed, match="exited with status 28"):  # the event's
        meet(place, code)
    assert time.monotonic() - started < 5  # not the 8 s it asked for, less the place's CPU


def test_a_memory_cannot_grow_past_its_limit(place: RunningPlace) -> None:
    """memory.grow by 4 GiB, and then by the limit's worth, is refused (-1): the meet ends
    well, having seen both refusals."""
    code = wat_agent("""
        (if (i32.ne (memory.grow (i32.const 65535)) (i32.const -1)) (then unreachable))
        (if (i32.ne (memory.grow (i32.const 4096)) (i32.const -1)) (then unreachable))
        (call $record (i32.const 0) (i32.const 4))""", data={0: b"held"})
    assert meet(place, code)["R"] == [b"held"]
    serves(place)


# ---------------------------------------------------------------- instances at once, shared
HOLDER = c_agent("""
    int main(void) {
        hold("HERE");
        tc_append_text(TC_SELF, "DONE", "yes");
        return 0;
    }
""")


def _run(call: Callable[[], Any], outcomes: list[Any]) -> threading.Thread:
    """`call` on a thread of its own; its outcome (what it returned, or the error) appended
    to `outcomes`."""
    def run() -> None:
        try:
            outcomes.append(call())
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            outcomes.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _hold(who: Path, place: RunningPlace, cabinet: str, outcomes: list[Any]) -> threading.Thread:
    """A holder meet of `who`, on a thread of its own (see _run)."""
    return _run(lambda: meet_as(who, place.address, "ag_wasm", {"CAB": [cabinet]},
                                code=HOLDER), outcomes)


NESTER = c_agent("""
    int main(void) {
        tc_bc inner = tc_new();
        tc_append_text(inner, "CODE", "(module (func (export \\"_start\\")))");
        tc_bc got = tc_meet("ag_wasm", inner, 0);
        tc_append_text(TC_SELF, "R", got < 0 ? tc_error() : "served");
        return 0;
    }
""")
NULL = '(module (func (export "_start")))'


def test_instances_at_once_are_bounded_and_shared_between_principals(
        place: RunningPlace, alice: Path, mallory: Path) -> None:
    """Alice runs her share: her next meet waits (past its time: MeetTimeout, saying why),
    and her agent's own meet is refused at once, while Mallory's meets still run; with all
    the place's room taken, anyone's next meet waits; once some end, a waiting meet runs."""
    pool = next(p for p in tacoma.place_status(place.address, token=token(place)).pools
                if p.agent == "ag_wasm")
    assert (pool.runs_in, pool.at_once) == ("place", AT_ONCE)
    cabinets = {who: f"in-place-{who}-{uuid.uuid4().hex}" for who in ("alice", "mallory")}
    outcomes: list[Any] = []
    holders: list[threading.Thread] = []
    try:
        holders.append(_hold(alice, place, cabinets["alice"], outcomes))
        wait_until(lambda: len(published(place, cabinets["alice"], "HERE")) == 1
                   or bool(outcomes), 30, "alice's first meet to run")
        # Her agent's meet here would be her third at once: refused, not waiting for itself.
        nested = meet_as(alice, place.address, "ag_wasm", code=NESTER)
        assert nested.text("R")[0].endswith(
            f"has its share of {SHARE} wasm instances in its own process running at once; "
            "try again when some end"), nested.text("R")
        holders.append(_hold(alice, place, cabinets["alice"], outcomes))
        wait_until(lambda: len(published(place, cabinets["alice"], "HERE")) == SHARE
                   or bool(outcomes), 30, "alice's meets to run")
        assert not outcomes, outcomes
        # Held back, not run (it would end at once): its time runs out waiting, and the
        # place says why (unless the caller's own clock ran out first, on a loaded host).
        with pytest.raises(tacoma.MeetTimeout,
                           match=f"has its share of {SHARE}|did not finish within"):
            meet_as(alice, place.address, "ag_wasm", code=NULL, timeout=1.5)
        holders += [_hold(mallory, place, cabinets["mallory"], outcomes)
                    for _ in range(AT_ONCE - SHARE)]
        wait_until(lambda: len(published(place, cabinets["mallory"], "HERE")) == SHARE, 30,
                   "mallory's meets to run beside alice's")
        with pytest.raises(tacoma.MeetTimeout,
                           match=f"its most of {AT_ONCE}|did not finish within"):
            meet(place, NULL, timeout=1.5)
        waiting = _run(lambda: meet_as(alice, place.address, "ag_wasm", code=NULL), outcomes)
        assert not outcomes, outcomes  # nobody's held meet was disturbed; one waits
    finally:
        for cabinet in cabinets.values():
            with contextlib.suppress(tacoma.MeetError):
                release(place, cabinet)
        for holder in holders:
            holder.join(60)
    waiting.join(60)
    assert len(outcomes) == AT_ONCE + 1
    held = [o for o in outcomes if isinstance(o, Briefcase) and o.text("DONE") == ["yes"]]
    assert len(held) == AT_ONCE, outcomes
    assert all(isinstance(o, Briefcase) for o in outcomes), outcomes  # the waiting one ran
    wait_until(lambda: not place.agents(), 30, "the holders to end")
    serves(place)


def test_room_is_shared_in_order_and_given_back_once() -> None:
    """The bound itself (the place's Slots): at most `most` at once, one principal its
    share; refused at once without a wait, a waiter served in order when room is given
    back, and a wait past its time says which bound held it."""
    from tacoma.place.workers._threads import Slots

    async def main() -> None:
        slots = Slots(most=2, share=1)
        give_a = await slots.take("a", "instances", None)
        with pytest.raises(tacoma.PlaceUnavailable, match="a has its share of 1 instances"):
            await slots.take("a", "instances", None)
        give_b = await slots.take("b", "instances", None)
        with pytest.raises(tacoma.PlaceUnavailable, match="its most of 2 instances"):
            await slots.take("c", "instances", None)
        with pytest.raises(tacoma.MeetTimeout, match=r"waiting for room: .*its most of 2"):
            await slots.take("c", "instances", 0.05)
        first = asyncio.ensure_future(slots.take("c", "instances", 10))
        second = asyncio.ensure_future(slots.take("d", "instances", 10))
        await asyncio.sleep(0.01)
        give_a()
        give_a()  # once only
        give_c = await asyncio.wait_for(first, 1)
        assert not second.done() and slots.running == 2
        give_b()
        give_d = await asyncio.wait_for(second, 1)
        give_c()
        give_d()
        assert slots.running == 0 and not slots.by_principal

    asyncio.run(main())


# ------------------------------------------------------------------ its builds' native code
def test_a_subverted_builds_native_code_never_runs_in_the_place(place: RunningPlace) -> None:
    """A C agent's build runs clang on the agent's source, confined; an exploit of clang
    could leave any native code in the build's precompiled module. A worker runs that code
    as it is (confined as the build was); the place's own process must not: it compiles
    the module the build left beside it. Planted here as such a build's output: a module
    that records "module", precompiled as one that records "native code"."""
    import wasmtime
    from tacoma.agent._interpreter import discover_interpreters
    from tacoma.interpreters.wasm._engine import compile_module, new_engine, pack_artifact
    from tacoma.wire._program import artifact_key

    def recorder(word: bytes) -> bytes:
        return bytes(wasmtime.wat2wasm(wat_agent("(call $record (i32.const 0) (i32.const "
                                                 f"{len(word)}))", data={0: word})))

    interpreter = discover_interpreters()["ag_wasm"]
    assert interpreter.build is not None
    program = c_agent(f"int main(void) {{ return 0; }} /* {uuid.uuid4().hex} */\n")
    cache = place.state_dir / "cache" / "wasm"
    cache.mkdir(parents=True, exist_ok=True)
    planted = cache / artifact_key(interpreter.build.build_id(), program.encode())
    native = bytes(compile_module(recorder(b"native code"), new_engine()).serialize())
    planted.write_bytes(pack_artifact(recorder(b"module"), native))
    assert meet(place, program)["R"] == [b"module"]


def test_every_module_is_compiled_confined_before_the_place_compiles_it(
        place: RunningPlace) -> None:
    """A module or WAT, which a worker would compile itself, is built first in a confined
    process here (what compiling it takes is bounded there by the agent's limits, not
    spent first in the place's process); one that does not compile is refused there."""
    from tacoma.agent._interpreter import discover_interpreters
    from tacoma.wire._program import artifact_key

    interpreter = discover_interpreters()["ag_wasm"]
    assert interpreter.build is not None
    program = wat_agent("(call $record (i32.const 0) (i32.const 4))",
                        data={0: uuid.uuid4().hex[:4].encode()})
    cached = (place.state_dir / "cache" / "wasm"
              / artifact_key(interpreter.build.build_id(), program.encode()))
    assert not cached.exists()
    assert len(meet(place, program)["R"]) == 1
    assert cached.exists()
    with pytest.raises(tacoma.AgentFailed, match=r"does not compile.*has a start function"):
        meet(place, '(module (func $s) (start $s) (func (export "_start")))')


# ------------------------------------------------------------------- asleep, then stopped
SLEEPER = c_agent("""
    #include <unistd.h>
    int main(void) {
        tc_cabinet_append(arg("CAB"), "ASLEEP", "1", 1, 0);
        sleep(3600);
        tc_append_text(TC_SELF, "WOKE", "yes");
        return 0;
    }
""")


def test_a_sleeping_meet_ends_at_its_deadline(place: RunningPlace) -> None:
    before = threads(place)
    started = time.monotonic()
    with pytest.raises((tacoma.MeetTimeout, tacoma.AgentKilled)):
        meet(place, SLEEPER, timeout=2, CAB=[f"sleep-{uuid.uuid4().hex}"])
    assert time.monotonic() - started < 20  # not the hour it asked for
    wait_until(lambda: not place.agents(), 20, "the sleeper to end")
    wait_until(lambda: threads(place) <= before + 1, 20, "its thread to end")
    serves(place)


def test_tacoma_kill_stops_a_sleeping_meet_and_ps_shows_it(place: RunningPlace) -> None:
    cabinet = f"kill-{uuid.uuid4().hex}"
    outcomes: list[Any] = []

    def sleep() -> None:
        try:
            outcomes.append(meet(place, SLEEPER, CAB=[cabinet]))
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            outcomes.append(exc)

    before = threads(place)
    sleeper = threading.Thread(target=sleep, daemon=True)
    sleeper.start()
    wait_until(lambda: bool(published(place, cabinet, "ASLEEP")), 30, "the agent to sleep")
    ps = tacoma_cli("ps", place.address, "--state-dir", str(place.state_dir), "--json")
    assert ps.returncode == 0, ps.stderr
    rows = [r for r in json.loads(ps.stdout)["agents"] if r["language"] == "wasm"]
    assert len(rows) == 1, rows
    row = rows[0]
    assert (row["pid"], row["processes"]) == (0, 0)  # no process: a thread of the place
    assert row["worker"].endswith("thread")
    shown = tacoma_cli("ps", place.address, "--state-dir", str(place.state_dir))
    assert "thread" in shown.stdout, shown.stdout
    killed = tacoma_cli("kill", f"{row['meet']}@{place.address}", "--state-dir",
                        str(place.state_dir), "--principal", row["principal"])
    assert killed.returncode == 0, killed.stderr
    sleeper.join(30)
    assert len(outcomes) == 1 and isinstance(outcomes[0], tacoma.AgentKilled), outcomes
    wait_until(lambda: not place.agents(), 20, "the killed agent to end")
    # Its thread woke from its hour's sleep and ended (the pool has started another).
    wait_until(lambda: threads(place) <= before + 1, 20, "the killed agent's thread to end")
    serves(place)


# ------------------------------------------------------------------- lazy folders, moving
def test_lazy_folders_are_read_through_the_meets_own_channel(place: RunningPlace) -> None:
    """An agent on a thread of the place reads a lazy folder's range (one fetch from the
    client), and makes a folder lazy and goes on with it (here, to the same place)."""
    from tacoma.client import _lazy as client_lazy

    data = os.urandom(4_000_000)
    before = dict(client_lazy.served)
    result = tacoma.meet(place.target("ag_wasm"), {"DATA": tacoma.lazy(data)},
                         code=READ_RANGE["ag_wasm"], timeout=120)
    assert result["MID"] == [data[300000:300010]]
    assert client_lazy.served["fetches"] - before["fetches"] == 1
    moved = tacoma.meet(place.target("ag_wasm"), {"NEXT": [place.address]},
                        code=LAZY_AND_GO["ag_wasm"], timeout=120)
    assert moved["MID"] == [b"3456789"] and moved.text("SIZE") == ["200000"]
    ref = {r.name: r for r in moved.lazy_refs()}["DATA"]
    assert ref.origin == place.address and ref.size == 200000


# ---------------------------------------------------------------------------- its threads
def test_failed_meets_leave_no_thread_behind(place: RunningPlace) -> None:
    """Traps, faults, CPU limits and deadlines, one after another: the place's threads come
    back to what they were (a thread's runner is kept for the next; the thread is not)."""
    serves(place)
    time.sleep(1)
    before = threads(place)
    for _ in range(3):
        with pytest.raises(tacoma.AgentFailed):
            meet(place, wat_agent("unreachable"))
        with pytest.raises(tacoma.AgentFailed):  # a pointer outside its memory
            meet(place, wat_agent("(drop (call $call (i32.const -16) (i32.const 64)))"))
    with pytest.raises(tacoma.AgentKilled, match="CPU time limit"):
        meet(place, wat_agent("(loop $l (br $l))"))
    with pytest.raises((tacoma.MeetTimeout, tacoma.AgentKilled)):
        meet(place, SLEEPER, timeout=1, CAB=[f"sleep-{uuid.uuid4().hex}"])
    wait_until(lambda: threads(place) <= before + 2, 30,
               f"the place's threads to come back to {before} (+2)")
    serves(place)


def test_runners_past_those_kept_for_later_end_their_threads(tmp_path: Path) -> None:
    """More threads at once than the place keeps runners for (FREE): the runners given back
    past that are dropped, and their tickers' threads end with them."""
    from tacoma.interpreters.wasm import _runner

    def tickers() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "tacoma-ticker")

    output = os.open(tmp_path / "out", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        leases = [_runner.lease(output, 1 << 20, 64 << 20) for _ in range(_runner.FREE + 8)]
        most = tickers()
        assert most >= _runner.FREE + 8
        for lease in leases:
            lease.close()
        wait_until(lambda: tickers() <= _runner.FREE, 10, "the dropped runners' tickers to end")
        again = [_runner.lease(output, 1 << 20, 64 << 20) for _ in range(_runner.FREE)]
        assert tickers() <= _runner.FREE  # the kept ones, lent again: no new threads
        for lease in again:
            lease.close()
    finally:
        os.close(output)


def test_status_says_the_instances_run_in_the_place(place: RunningPlace) -> None:
    status = tacoma.place_status(place.address, token=token(place))
    kinds = {p.agent: (p.runs_in, p.at_once) for p in status.pools}
    assert kinds["ag_wasm"] == ("place", AT_ONCE)
    assert kinds["ag_python"] == ("workers", 0)
    assert "ag_wasm instances (at most 4 at once)" in str(status)
    assert "--instances-in-place" in str(status)

