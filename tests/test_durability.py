"""Durable meets: the journal, async meets that outlive their place, and status by id.

Real places in real processes, killed with SIGKILL and started again on the same state
directory (and port): an accepted async meet runs after the restart (at least once, the
agent told by RERUN), each outcome is recorded once under its meet id, and `tacoma status`
says what became of a meet. Loopback only; the multi-host faults are in test_faults.py.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import tacoma
from tacoma import Briefcase
from tacoma.client._client import PlaceClient

from conftest import RunningPlace, launch_place, wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_an_async_meets_result_is_kept_under_its_id(shared_place: RunningPlace) -> None:
    p = shared_place
    meet_id = tacoma.meet(p.target("ag_python"), {"N": [b"7"]}, mode="async",
                          code='bc["TWICE"] = [bc["N"][0] * 2]')
    result = tacoma.result(f"{meet_id}@{p.address}", timeout=30)
    assert result["TWICE"] == [b"77"]
    status = tacoma.status(f"{meet_id}@{p.address}")
    assert (status.state, status.agent, status.runs) == ("done", "ag_python", 1)
    assert status.accepted is not None and status.ended is not None
    assert status.ended >= status.accepted


def test_a_failed_async_meet_is_reported_with_its_error(shared_place: RunningPlace) -> None:
    p = shared_place
    meet_id = tacoma.meet(p.target("ag_python"), mode="async", code="raise KeyError('x')")
    with pytest.raises(tacoma.AgentFailed, match="KeyError"):
        tacoma.result(f"{meet_id}@{p.address}", timeout=30)
    status = tacoma.status(f"{meet_id}@{p.address}")
    assert status.state == "failed" and isinstance(status.error, tacoma.AgentFailed)


def test_an_unknown_id_is_unknown(shared_place: RunningPlace) -> None:
    p = shared_place
    assert tacoma.status(f"nosuchmeet@{p.address}").state == "unknown"
    with pytest.raises(tacoma.UnknownMeet, match="no record of meet nosuchmeet"):
        tacoma.result(f"nosuchmeet@{p.address}", wait=False)


def test_result_without_wait_says_it_has_not_ended(shared_place: RunningPlace) -> None:
    p = shared_place
    meet_id = tacoma.meet(p.target("ag_python"), mode="async",
                          code="import time; time.sleep(3)")
    with pytest.raises(tacoma.MeetTimeout, match="not yet ended"):
        tacoma.result(f"{meet_id}@{p.address}", wait=False)
    assert tacoma.status(f"{meet_id}@{p.address}").state in ("queued", "running")
    with pytest.raises(tacoma.MeetTimeout):
        tacoma.result(f"{meet_id}@{p.address}", timeout=0.5)
    assert "CODE" in tacoma.result(f"{meet_id}@{p.address}", timeout=30)


def test_async_meets_over_max_meets_queue_and_then_run(start_place) -> None:
    p = start_place("--max-meets", "2", "--share", "1", "--max-queued", "6")
    # The first two hold their slots for 2 s (a gate cannot do it: opening one takes a
    # meet, and the place is full): a busy machine takes the eight within that, so the
    # other six are queued, and the queue is full.
    ids = [tacoma.meet(p.target("ag_python"), {"N": [str(i)]}, mode="async",
                       code="import time; time.sleep(2)") for i in range(8)]
    with pytest.raises(tacoma.PlaceUnavailable, match="--max-queued"):
        tacoma.meet(p.target("ag_python"), mode="async", code="pass")
    states = {tacoma.status(f"{i}@{p.address}").state for i in ids}
    assert "queued" in states
    for meet_id in ids:
        assert tacoma.result(f"{meet_id}@{p.address}", timeout=60)["N"]


def test_an_async_meet_sent_twice_with_one_id_is_taken_once(shared_place: RunningPlace) -> None:
    p = shared_place
    # The place is shared: an id and a cabinet of this test's own.
    meet_id, cabinet = f"same-id-{uuid.uuid4().hex[:8]}", f"runs-{uuid.uuid4().hex[:8]}"

    async def twice() -> list[object]:
        client = await PlaceClient.connect(p.address)
        try:
            code = Briefcase(CODE=[f'cabinet_append("{cabinet}", "R", b"1")'])
            first = await client.meet("ag_python", code, "async", meet_id=meet_id)
            again = await client.meet("ag_python", code, "async", meet_id=meet_id)
            return [first, again]
        finally:
            client.close()

    assert asyncio.run(twice()) == [meet_id, meet_id]
    tacoma.result(f"{meet_id}@{p.address}", timeout=30)
    # Both were answered Accepted: had the second been taken as a meet of its own, it
    # would be running or queued until it has appended too.
    token = (p.state_dir / "admin.token").read_text().strip()

    def idle() -> bool:
        status = tacoma.place_status(p.address, token=token)
        return status.running == status.queued == 0

    wait_until(idle, 30, "every meet at the place to end")
    runs = tacoma.meet(p.target("ag_cabinet"), {"OP": ["read"], "CABINET": [cabinet],
                                                "FOLDER": ["R"]})
    assert runs["R"] == [b"1"]


#: Each async meet marks that it ran in a cabinet, once per run, and says if it is a re-run.
MARKER = textwrap.dedent("""
    import time
    time.sleep(0.2)
    rerun = bc.get("RERUN", [b"0"])[0].decode()
    cabinet_append("runs", "RAN", bc["N"][0] + b":" + rerun.encode())
    bc["RERUN_SEEN"] = [rerun]
""")


def _restartable(tmp_path: Path, *flags: str) -> tuple[RunningPlace, str]:
    listen = f"127.0.0.1:{free_port()}"
    return launch_place(tmp_path / "state", *flags, listen=listen), listen


@pytest.mark.parametrize("how", ["kill -9", "--grace 1"])
def test_async_meets_outlive_a_place_that_is_killed(tmp_path: Path, how: str) -> None:
    """50 accepted async meets, the place killed (or stopped with a short grace) while some
    run and the rest are queued: after the restart every one runs, and each outcome is
    recorded once; those that were running when it died run again, and know it."""
    flags = ("--max-meets", "3", "--share", "1")
    if how == "--grace 1":
        flags += ("--grace", "1")
    p, listen = _restartable(tmp_path, *flags)
    ids = [tacoma.meet(p.target("ag_python"), {"N": [str(i)]}, mode="async", code=MARKER,
                       timeout=60) for i in range(50)]
    wait_until(lambda: any(tacoma.status(f"{i}@{p.address}").state == "done" for i in ids),
               30, "some meets to end")
    if how == "kill -9":
        p.stop(signal.SIGKILL)
    else:
        assert p.stop(signal.SIGTERM) == 0
    p = launch_place(tmp_path / "state", *flags, listen=listen)
    try:
        results = {i: tacoma.result(f"{i}@{p.address}", timeout=120) for i in ids}
        assert sorted(int(r["N"][0]) for r in results.values()) == list(range(50))
        ran = tacoma.meet(p.target("ag_cabinet"), {"OP": ["read"], "CABINET": ["runs"],
                                                   "FOLDER": ["RAN"]})["RAN"]
        numbers = [int(entry.split(b":")[0]) for entry in ran]
        assert set(numbers) == set(range(50))  # every one ran: at least once
        assert len(numbers) - 50 <= 3  # a re-run only for those running at the kill
        for entry in ran:
            number, rerun = entry.split(b":")
            if numbers.count(int(number)) > 1 and rerun != b"0":
                assert rerun == b"1"
        statuses = [tacoma.status(f"{i}@{p.address}") for i in ids]
        assert all(s.state == "done" for s in statuses)
        reruns = [s for s in statuses if s.runs > 1]
        assert all(results[s.id]["RERUN_SEEN"] == [str(s.runs - 1).encode()] for s in reruns)
    finally:
        p.stop()


def test_a_sync_meet_whose_caller_is_gone_runs_on_and_is_recorded(
        shared_place: RunningPlace) -> None:
    """A client killed during a sync meet: the agent is not killed with its connection (the
    client chose the meet's id, so it can ask for the outcome), and the result waits."""
    p = shared_place
    script = textwrap.dedent(f"""
        import tacoma, sys
        try:
            tacoma.meet("ag_python@{p.address}", code="import time; time.sleep(2); "
                        "bc['OK'] = [b'1']", timeout=60)
        except tacoma.ConnectionLost as exc:
            print(exc.meet_id)
    """)
    client = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              text=True)
    wait_until(lambda: len(p.agents()) == 1, 30, "the agent to start")
    meet_id = p.agents()[0]["meet"]
    client.kill()
    client.wait()
    assert tacoma.result(f"{meet_id}@{p.address}", timeout=30)["OK"] == [b"1"]


def test_the_cli_says_the_status(shared_place: RunningPlace) -> None:
    p = shared_place
    meet_id = tacoma.meet(p.target("ag_python"), mode="async", code='bc["X"] = [b"y"]')
    cli = [sys.executable, "-m", "tacoma", "status"]
    done = subprocess.run([*cli, f"{meet_id}@{p.address}", "--wait", "30", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["state"] == "done" and out["folders"]["X"] == ["y"]
    human = subprocess.run([*cli, f"{meet_id}@{p.address}"], capture_output=True, text=True,
                           timeout=60)
    assert "done (ag_python)" in human.stderr and "y" in human.stdout
    unknown = subprocess.run([*cli, f"nosuchmeet@{p.address}"], capture_output=True,
                             text=True, timeout=60)
    assert unknown.returncode == 18 and "UnknownMeet" in unknown.stderr
    failing = tacoma.meet(p.target("ag_python"), mode="async", code="raise SystemExit(3)")
    failed = subprocess.run([*cli, f"{failing}@{p.address}", "--wait", "30"],
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode == 5 and "AgentFailed" in failed.stderr
    usage = subprocess.run([*cli, "justanid"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "MEET_ID@HOST:PORT" in usage.stderr


#: An agent in each language that only sleeps: its result is the briefcase it got, RERUN
#: included when the place runs it again.
SLEEPERS = {
    "ag_python": "import time\ntime.sleep(4)",
    "ag_tcl": "after 4000",
    "ag_scheme": "(sleep 4)",
    "ag_c": "#include <tacoma.h>\n#include <unistd.h>\nint main(void) { sleep(4); return 0; }",
}


@pytest.mark.parametrize("agent", list(SLEEPERS))
def test_every_language_sees_that_it_runs_again(tmp_path: Path, agent: str) -> None:
    p, listen = _restartable(tmp_path)
    meet_id = tacoma.meet(p.target(agent), {"X": [b"1"]}, mode="async", code=SLEEPERS[agent],
                          timeout=60)
    wait_until(lambda: bool(p.agents()), 30, "the agent to start")
    p.stop(signal.SIGKILL)
    p = launch_place(tmp_path / "state", listen=listen)
    try:
        result = tacoma.result(f"{meet_id}@{p.address}", timeout=60)
        assert result["RERUN"] == [b"1"] and result["X"] == [b"1"]
        assert tacoma.status(f"{meet_id}@{p.address}").runs == 2
    finally:
        p.stop()


def test_a_client_cannot_say_it_is_a_rerun(shared_place: RunningPlace) -> None:
    p = shared_place
    meet_id = tacoma.meet(p.target("ag_python"), {"RERUN": [b"5"]}, mode="async",
                          code='bc["SAW"] = bc.get("RERUN", [b"none"])')
    assert tacoma.result(f"{meet_id}@{p.address}", timeout=30)["SAW"] == [b"none"]
    assert tacoma.meet(p.target("ag_python"), {"RERUN": [b"5"]},
                       code='bc["SAW"] = bc.get("RERUN", [b"none"])')["SAW"] == [b"none"]


# ------------------------------------------------------------------ found in review
def test_a_burst_of_async_meets_does_not_pass_max_queued(start_place) -> None:
    p = start_place("--max-meets", "1", "--share", "1", "--max-queued", "2")
    tacoma.meet(p.target("ag_python"), mode="async", code="import time; time.sleep(5)")

    async def burst() -> list[object]:
        return await asyncio.gather(*(
            tacoma.ameet(p.target("ag_python"), mode="async", code="pass")
            for _ in range(50)), return_exceptions=True)

    answers = asyncio.run(burst())
    accepted = [a for a in answers if isinstance(a, str)]
    assert len(accepted) == 2
    assert all(isinstance(a, tacoma.PlaceUnavailable) for a in answers if a not in accepted)


def test_place_made_ids_cannot_be_chosen_by_clients(shared_place: RunningPlace) -> None:
    p = shared_place

    async def claim() -> None:
        client = await PlaceClient.connect(p.address)
        try:
            # Without papers (a passport names the meet's id, which its client chooses).
            made = await client.meet("ag_python", Briefcase(CODE=["pass"]), "async",
                                     papers=b"")
            assert isinstance(made, str) and "." in made
            with pytest.raises(TypeError, match="meet_id"):  # no client may send it
                await client.meet("ag_echo", Briefcase(), "async", meet_id=made)
        finally:
            client.close()

    asyncio.run(claim())


def test_waiting_for_a_status_holds_no_slot(start_place) -> None:
    """With --max-meets 1, callers waiting for a queued meet's end must not keep it from
    starting."""
    p = start_place("--max-meets", "1", "--share", "1")
    first = tacoma.meet(p.target("ag_python"), mode="async", code="import time; time.sleep(1)")
    second = tacoma.meet(p.target("ag_python"), mode="async", code="pass")

    async def waits() -> list[object]:
        return await asyncio.gather(*(tacoma.astatus(f"{second}@{p.address}", wait=30)
                                      for _ in range(3)))

    started = time.monotonic()
    assert {s.state for s in asyncio.run(waits())} == {"done"}
    assert time.monotonic() - started < 15
    assert tacoma.status(f"{first}@{p.address}").state == "done"


def test_outcomes_are_forgotten_while_the_place_runs(start_place) -> None:
    p = start_place("--keep-results", "1")
    meet_id = tacoma.meet(p.target("ag_python"), mode="async", code="pass")
    tacoma.result(f"{meet_id}@{p.address}", timeout=30)
    wait_until(lambda: tacoma.status(f"{meet_id}@{p.address}").state == "unknown", 15,
               "the outcome to expire")


@pytest.mark.parametrize("agent", ["ag_trip", "ag_home"])
def test_agents_cannot_meet_the_places_trip_agents(shared_place: RunningPlace, agent: str) -> None:
    p = shared_place
    code = textwrap.dedent(f"""
        import tacoma
        for mode in ("sync", "async"):
            try:
                meet("{agent}", Briefcase(OP=["stop"], TRIP=["x"], HOME=["x"]), mode=mode)
            except tacoma.NotAllowed as exc:
                bc.append("REFUSED", mode)
    """)
    assert tacoma.meet(p.target("ag_python"), code=code).text("REFUSED") == ["sync", "async"]


def test_an_async_meet_whose_go_failed_runs_again_after_a_crash(tmp_path: Path) -> None:
    p, listen = _restartable(tmp_path)
    code = textwrap.dedent("""
        import time
        if not bc.get("RERUN"):
            try:
                go("127.0.0.1:1")
            except Exception:
                pass
            time.sleep(30)
    """)
    meet_id = tacoma.meet(p.target("ag_python"), mode="async", code=code, timeout=60)
    wait_until(lambda: bool(p.agents()), 30, "the agent to run")
    time.sleep(1.5)  # its go failed meanwhile
    p.stop(signal.SIGKILL)
    p = launch_place(tmp_path / "state", listen=listen)
    try:
        assert tacoma.result(f"{meet_id}@{p.address}", timeout=60)["RERUN"] == [b"1"]
    finally:
        p.stop()
