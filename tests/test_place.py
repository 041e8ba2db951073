"""Meets against a real place process: the kernel's behaviour end to end."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
import venv
from pathlib import Path
from typing import Any

import msgpack
import pytest
import tacoma
from tacoma import Briefcase
from tacoma.wire._protocol import PROTOCOL_VERSION

from conftest import (
    RunningPlace,
    needs_root,
    place_fixture,
    processes_of_uid,
    tls_connection,
    wait_until,
)

V = PROTOCOL_VERSION  # in the hand-made Hello frames below

#: The module's own place, not the worker's shared one: a test here checks that what it did
#: left no traceback in the place's log.
place = place_fixture()


def run(place: RunningPlace, code: str, timeout: float | None = 60, **folders: list[bytes]
        ) -> Briefcase:
    return tacoma.meet(place.target("ag_python"), Briefcase(folders),
                       code=textwrap.dedent(code), timeout=timeout)


# --------------------------------------------------------------------------- ag_echo
def test_echo_returns_the_briefcase_it_got(place: RunningPlace) -> None:
    every_byte = bytes(range(256))
    big = os.urandom(1024 * 1024)
    bc = Briefcase(TEXT=["hello", "wörld"], BIN=[every_byte, b"", big], EMPTY=[])
    assert tacoma.meet(place.target("ag_echo"), bc) == bc


def test_async_api_and_many_concurrent_meets_on_one_connection(place: RunningPlace) -> None:
    async def many() -> list[Briefcase]:
        return await asyncio.gather(*(
            tacoma.ameet(place.target("ag_echo"), {"N": [str(i)]}) for i in range(200)))

    results = asyncio.run(many())
    assert [r.text("N") for r in results] == [[str(i)] for i in range(200)]


# --------------------------------------------------------------------------- ag_python
def test_python_agent_sees_and_changes_the_briefcase(place: RunningPlace) -> None:
    result = run(place, """
        bc["GREETING"] = [b"hello, " + n for n in bc["NAME"]]
        bc["NAME"].append(b"more")
        del bc["DROP"]
    """, NAME=[b"world", b"tacoma"], DROP=[b"x"])
    assert result["GREETING"] == [b"hello, world", b"hello, tacoma"]
    assert result["NAME"] == [b"world", b"tacoma", b"more"]
    assert "DROP" not in result


def test_a_worker_starts_from_a_frozen_image(place: RunningPlace) -> None:
    """The zygote freezes what it holds before it forks: a collection in the worker then
    never writes to (and so copies) the inherited objects during the meet."""
    result = run(place, """
        import gc
        bc["FROZEN"] = [str(gc.get_freeze_count())]
    """)
    assert int(result.text("FROZEN")[0]) > 1000


def test_binary_elements_survive_a_python_agent(place: RunningPlace) -> None:
    every_byte = bytes(range(256))
    result = run(place, 'bc["OUT"] = [bytes(reversed(e)) for e in bc["IN"]]',
                 IN=[every_byte, b"", b"\x00" * 1000])
    assert result["OUT"] == [bytes(reversed(every_byte)), b"", b"\x00" * 1000]


def test_async_meet_returns_a_meet_id_at_once(place: RunningPlace) -> None:
    meet_id = tacoma.meet(place.target("ag_python"), code="import time; time.sleep(1)",
                          mode="async")
    assert isinstance(meet_id, str) and meet_id


def test_unknown_agent_lists_what_the_place_has(place: RunningPlace) -> None:
    with pytest.raises(tacoma.UnknownAgent) as info:
        tacoma.meet(place.target("ag_nosuch"), {})
    assert "ag_nosuch" in str(info.value)
    assert "ag_echo" in info.value.detail and "ag_python" in info.value.detail


def test_python_agent_without_code_is_a_clear_error(place: RunningPlace) -> None:
    with pytest.raises(tacoma.MeetError, match="CODE folder"):
        tacoma.meet(place.target("ag_python"), {})


def test_agent_exception_carries_the_agents_traceback(place: RunningPlace) -> None:
    with pytest.raises(tacoma.AgentFailed) as info:
        run(place, """
            def inner():
                raise KeyError("missing thing")
            inner()
        """)
    assert "KeyError" in str(info.value)
    assert 'raise KeyError("missing thing")' in info.value.detail
    assert "line 3, in inner" in info.value.detail


def test_syntax_error_and_fail_are_reported(place: RunningPlace) -> None:
    with pytest.raises(tacoma.AgentFailed, match="SyntaxError"):
        run(place, "def (:")
    with pytest.raises(tacoma.AgentFailed, match=r"^no luck today$"):
        run(place, 'fail("no luck today")')
    with pytest.raises(tacoma.AgentFailed, match="status 3"):
        run(place, "import sys; sys.exit(3)")


def test_result_that_is_not_a_briefcase_is_reported(place: RunningPlace) -> None:
    with pytest.raises(tacoma.AgentFailed, match="must be a briefcase"):
        run(place, "bc = 42")
    with pytest.raises(tacoma.AgentFailed, match="cannot be sent"):
        run(place, 'bc["X"].append(42)', X=[b"1"])


def test_agent_meets_agents_at_its_own_place(place: RunningPlace) -> None:
    result = run(place, """
        echoed = meet("ag_echo", Briefcase(A=[b"x"]))
        bc["ECHO"] = echoed["A"]
        inner = meet("ag_python", Briefcase(CODE=['bc["R"] = [b"inner"]']))
        bc["INNER"] = inner["R"]
        bc["ID"] = [meet("ag_echo", Briefcase(), mode="async")]
        try:
            meet("ag_missing", Briefcase())
        except UnknownAgent as exc:
            bc["CAUGHT"] = [str(exc)]
        log("nested meets done")
    """.replace("UnknownAgent", "__import__('tacoma').UnknownAgent"))
    assert result["ECHO"] == [b"x"]
    assert result["INNER"] == [b"inner"]
    assert result["ID"][0]
    assert b"ag_missing" in result["CAUGHT"][0]


def test_agent_meets_an_agent_at_another_place(place: RunningPlace,
                                               shared_place: RunningPlace) -> None:
    other = shared_place
    child = 'bc["AT"] = [place]'  # a program of its own there, which its passport names
    result = tacoma.meet(place.target("ag_python"), code=textwrap.dedent(f"""
        there = meet("ag_python@{other.address}", Briefcase(CODE=[{child!r}]))
        bc["THERE"] = there["AT"]
        bc["HERE"] = [place]
    """), timeout=60, programs=[child])
    assert result["THERE"] == [other.address.encode()]
    assert result["HERE"] == [place.address.encode()]


def test_the_visit_example_runs_a_copy_of_itself_elsewhere_for_you(
        place: RunningPlace, shared_place: RunningPlace) -> None:
    """examples/nested/visit.py, as the tour runs it: its copy at the other place carries
    the passport signed for its own program, and runs there for its launcher."""
    program = (Path(__file__).parent.parent / "examples" / "nested" / "visit.py").read_text()
    result = tacoma.meet(place.target("ag_python"), {"THERE": [shared_place.address]},
                         code=program, timeout=60)
    assert result.text("VISITED") == [f"{shared_place.address}: ran at "
                                      f"{shared_place.address} for "
                                      f"{tacoma.client.current_principal()}"]


def test_installed_agent_is_met_by_name(place: RunningPlace, tmp_path: Path) -> None:
    program = tmp_path / "ag_hello.py"
    program.write_text('bc["GREETING"] = [b"hello, " + n for n in bc["NAME"]]\n')
    subprocess.run([sys.executable, "-m", "tacoma", "install", str(program),
                    "--state-dir", str(place.state_dir)], check=True, capture_output=True)
    result = tacoma.meet(place.target("ag_hello"), {"NAME": [b"x"]})
    assert result["GREETING"] == [b"hello, x"]
    assert "CODE" not in result  # the installed program is not handed to the caller
    with_code = tacoma.meet(place.target("ag_hello"), {"NAME": [b"y"], "CODE": [b"mine"]})
    assert with_code["CODE"] == [b"mine"]
    with pytest.raises(tacoma.UnknownAgent) as info:
        tacoma.meet(place.target("ag_nosuch"), {})
    assert "ag_hello" in info.value.detail


def test_many_clients_at_once(place: RunningPlace) -> None:
    def one(i: int) -> bytes:
        return run(place, 'bc["OUT"] = [bc["IN"][0] * 2]', IN=[str(i).encode()])["OUT"][0]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, range(24))) == [str(i).encode() * 2 for i in range(24)]


# --------------------------------------------------------------------------- the wire
def _raw_connection(place: RunningPlace) -> socket.socket:
    """A connection to the place, past its TLS handshake: what is sent then is the test's."""
    return tls_connection(place.address)


def _frame(obj: object) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return len(body).to_bytes(4, "big") + body


def _read_frames(sock: socket.socket) -> list[object]:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    frames = []
    while len(data) >= 4:
        size = int.from_bytes(data[:4], "big")
        frames.append(msgpack.unpackb(data[4:4 + size], raw=False))
        data = data[4 + size:]
    return frames


@pytest.mark.parametrize("garbage", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\xff\xff\xff\xff",
    _frame([1, 99, "client", 2**20, "x"]),  # a Hello with a version from the future
    _frame([1, V, "client", 2**20, "x"]) + _frame([4, 1, {}]),  # a client sending a Result
    _frame([1, V, "client", 2**20, "x"]) + (10**8).to_bytes(4, "big"),  # too large
    _frame([1, V, "client", 2**20, "x"]) + _frame([2, 1, "ag_echo", {"X": ["text"]}, "sync",
                                                   None]),  # str where bytes belong
])
def test_garbage_gets_a_bye_and_the_place_serves_others(place: RunningPlace,
                                                        garbage: bytes) -> None:
    with _raw_connection(place) as sock:
        sock.sendall(garbage)
        frames = _read_frames(sock)
    assert frames[0][0] == 1  # the place's Hello
    bye = frames[-1]
    assert bye[0] == 7 and bye[1], frames  # Bye, with a reason
    assert tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}


def test_a_meet_cancelled_right_behind_it_is_answered_and_forgotten(place: RunningPlace
                                                                    ) -> None:
    # 100 Meet+Cancel pairs in one write: each Cancel reaches the place before its meet's
    # task ever ran. Each must still be answered (MeetError, cancelled), once.
    hello = _frame([1, V, "client", 2**20, "x"])
    pairs = b"".join(
        _frame([2, rid, "ag_python", {"CODE": [b"import time; time.sleep(60)"]}, "sync",
                None, ""]) + _frame([8, rid]) for rid in range(1, 101))
    with _raw_connection(place) as sock:
        sock.sendall(hello + pairs)
        answers: dict[int, list[object]] = {}
        data = b""
        while len(answers) < 100:
            chunk = sock.recv(65536)
            assert chunk, f"the place closed after {len(answers)} answers"
            data += chunk
            while len(data) >= 4 and len(data) >= 4 + int.from_bytes(data[:4], "big"):
                size = int.from_bytes(data[:4], "big")
                event = msgpack.unpackb(data[4:4 + size], raw=False)
                data = data[4 + size:]
                if event[0] == 5:  # Failed
                    assert event[1] not in answers, "answered twice"
                    answers[event[1]] = event
    assert sorted(answers) == list(range(1, 101))
    # Past a principal's share (a quarter of --max-meets) a meet is refused at once.
    cancelled = [a for a in answers.values() if a[2] == "meet-failed" and "cancelled" in a[3]]
    refused = [a for a in answers.values() if a[2] == "unavailable"]
    assert len(cancelled) >= 50 and len(cancelled) + len(refused) == 100, answers
    assert tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}


def test_a_deeply_nested_hello_gets_a_bye_not_a_traceback(place: RunningPlace) -> None:
    nested = b"\x91" * 1000 + msgpack.packb("client")
    body = b"\x95\x01" + msgpack.packb(V) + nested + msgpack.packb(2**20) + msgpack.packb("x")
    with _raw_connection(place) as sock:
        sock.sendall(len(body).to_bytes(4, "big") + body)
        frames = _read_frames(sock)
    assert frames[-1][0] == 7 and "malformed Hello" in frames[-1][1]
    assert "Traceback" not in place.log() and "RecursionError" not in place.log()


def test_meet_ids_differ_across_restarts() -> None:
    # Two runs of a place within the same second (its ids were the time's low bits and a
    # counter from 1): the book of meets of each run hands out ids the other never does.
    from tacoma.place.meets._meet import Meets

    runs = [Meets(256, "127.0.0.1:7707"), Meets(256, "127.0.0.1:7707")]
    ids = [{run.new("ag_echo", Briefcase(), None).id for _ in range(100)} for run in runs]
    assert len(ids[0]) == len(ids[1]) == 100
    assert not ids[0] & ids[1]


def test_version_mismatch_is_named_in_the_bye(place: RunningPlace) -> None:
    with _raw_connection(place) as sock:
        sock.sendall(_frame([1, 99, "client", 2**20, "x"]))
        bye = _read_frames(sock)[-1]
    assert "version 99" in bye[1] and f"version {PROTOCOL_VERSION}" in bye[1]


def test_a_stalled_partial_frame_does_not_block_others(place: RunningPlace) -> None:
    with _raw_connection(place) as sock:
        sock.sendall(_frame([1, V, "client", 2**20, "x"]) + (1000).to_bytes(4, "big") + b"ab")
        assert tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}


def test_connection_refused_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(tacoma.ConnectError, match="refused"):
        tacoma.meet(f"ag_echo@127.0.0.1:{port}", {})


def test_bad_target_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="AGENT@HOST:PORT"):
        tacoma.meet("ag_echo@", {})


#: A place that takes briefcases of at most 100,000 bytes.
small = place_fixture("--max-briefcase", "100000")


def test_oversized_briefcase_is_refused_before_sending(small: RunningPlace) -> None:
    with pytest.raises(tacoma.LimitExceeded, match="at most 100,000 bytes"):
        tacoma.meet(small.target("ag_echo"), {"BIG": [b"x" * 200_000]})
    assert tacoma.meet(small.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}


def test_result_too_large_for_the_place_is_reported(small: RunningPlace) -> None:
    with pytest.raises(tacoma.LimitExceeded, match="too large"):
        tacoma.meet(small.target("ag_python"), code='bc["BIG"] = [b"x" * 500_000]')
    assert tacoma.meet(small.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}


# --------------------------------------------------------------------------- lifecycle
def test_sigterm_lets_running_meets_finish_and_exits_zero(start_place) -> None:
    p = start_place("--grace", "20")

    async def scenario() -> Briefcase:
        meet = asyncio.ensure_future(tacoma.ameet(
            p.target("ag_python"),
            code='import time; time.sleep(1.5); bc["DONE"] = [b"yes"]'))
        # The meet reaches its agent; then the place is asked to stop.
        await asyncio.to_thread(wait_until, lambda: bool(p.agents()), 20, "the agent to run")
        p.proc.send_signal(signal.SIGTERM)
        return await meet

    assert asyncio.run(scenario())["DONE"] == [b"yes"]
    assert p.proc.wait(30) == 0


def test_sigterm_kills_meets_that_outlast_the_grace(start_place) -> None:
    p = start_place("--grace", "0.5")

    async def scenario() -> None:
        meet = asyncio.ensure_future(tacoma.ameet(
            p.target("ag_python"), code="import os, time\nbc['P'] = [str(os.getpid())]\n"
                                         "time.sleep(600)"))
        await asyncio.to_thread(wait_until, lambda: bool(p.agents()), 20, "the agent to run")
        p.proc.send_signal(signal.SIGTERM)
        with pytest.raises((tacoma.ConnectionLost, tacoma.MeetError)):
            await meet

    asyncio.run(scenario())
    assert p.proc.wait(30) == 0
    assert not list((p.state_dir / "work").iterdir())  # working directories removed


def agent_uid(place: RunningPlace, cabinet: str) -> int:
    """The uid a running agent left in a cabinet (every agent's own, as root)."""
    def left() -> bool:
        return bool(tacoma.meet(place.target("ag_cabinet"), {
            "OP": [b"read"], "CABINET": [cabinet.encode()], "FOLDER": [b"UID"]}).get("UID"))

    wait_until(left, what="agent start")
    return int(tacoma.meet(place.target("ag_cabinet"), {
        "OP": [b"read"], "CABINET": [cabinet.encode()], "FOLDER": [b"UID"]})["UID"][0])


@needs_root
def test_agents_and_their_children_die_with_a_killed_place(start_place) -> None:
    p = start_place()

    async def scenario() -> None:
        meet = asyncio.ensure_future(tacoma.ameet(
            p.target("ag_python"),
            code="import os, time\n"
                 "child = os.fork()\n"
                 "if child == 0:\n"
                 "    os.setsid()\n"  # even out of the agent's process group
                 "    time.sleep(600)\n"
                 "    os._exit(0)\n"
                 "cabinet_replace('killed-place', 'UID', [str(os.getuid()).encode()])\n"
                 "time.sleep(600)"))
        uid = await asyncio.to_thread(agent_uid, p, "killed-place")
        assert len(processes_of_uid(uid)) == 2
        p.proc.kill()
        with pytest.raises(tacoma.ConnectionLost):
            await meet
        await asyncio.to_thread(wait_until, lambda: not processes_of_uid(uid), 20,
                                "the agent and its child to die with their place")

    asyncio.run(scenario())


def test_blocking_meet_works_inside_a_running_event_loop(place: RunningPlace) -> None:
    async def notebook_cell() -> Briefcase:
        return tacoma.meet(place.target("ag_echo"), {"X": [b"1"]})

    assert asyncio.run(notebook_cell()) == {"X": [b"1"]}


def test_bare_agent_name_meets_at_the_embedded_place() -> None:
    result = tacoma.meet("ag_python", {"N": [b"2"]}, code='bc["N"] = [bc["N"][0] * 3]')
    assert result["N"] == [b"222"]
    assert tacoma.meet("ag_echo", {"E": [b""]}) == {"E": [b""]}


def test_starting_the_embedded_place_is_not_part_of_the_first_meets_time(
        tmp_path: Path) -> None:
    """The first bare-name meet starts the embedded place (about a second); its timeout
    bounds the meet, not the start, and a start is never left half done. (The meet's time
    does include its connection, a TLS handshake of a few milliseconds, hence 0.3 s: still
    well under the start's time.)"""
    code = textwrap.dedent("""
        import tacoma
        print(tacoma.meet("ag_echo", {"E": ["1"]}, timeout=0.3).text("E"))
    """)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}  # where its state directory goes
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['1']"
    assert (tmp_path / "tacoma" / "embedded").is_dir()
    assert not list((tmp_path / "tacoma" / "embedded").iterdir())  # removed at exit


def test_the_client_package_alone_asks_for_a_place() -> None:
    """tacoma.client does not know the place: a bare name there is a clear error, while the
    public tacoma.meet meets it at the embedded place."""
    code = textwrap.dedent("""
        from tacoma.client import meet
        try:
            meet("ag_echo")
        except ValueError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert "names no place: give AGENT@HOST:PORT" in out.stdout


def test_a_traced_meet_carries_only_public_steps(place: RunningPlace) -> None:
    """A briefcase with a TRACE folder is traced on each side; the result holds every side's
    steps by name, and none of the internal ones (those starting with _)."""
    result = tacoma.meet(place.target("ag_echo"), {"TRACE": [], "X": ["1"]}, timeout=30)
    assert result.text("X") == ["1"]
    steps = [element.split("|")[:2] for element in result.text("TRACE")]
    assert {side for side, _ in steps} == {"client", "place"}
    assert ["client", "transfer"] in steps and ["place", "examine"] in steps
    assert not [step for _, step in steps if step.startswith("_")]


#: A place that takes briefcases of at most 1,000,000 bytes.
million = place_fixture("--max-briefcase", "1000000")


@pytest.mark.parametrize("declared_max_frame", [2**20, 2**62])
def test_a_client_that_never_reads_is_disconnected(million: RunningPlace,
                                                   declared_max_frame: int) -> None:
    # However large the frames the client says it accepts, the place buffers little for it.
    payload = {"BIG": [b"x" * 400_000]}
    with _raw_connection(million) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(_frame([1, V, "client", declared_max_frame, "x"]))
        sent = 0
        with contextlib.suppress(OSError):  # the place may cut us off while we still send
            for rid in range(1, 200):
                sock.sendall(_frame([2, rid, "ag_echo", payload, "sync", None]))
                sent += 1
        # We never read; the place must have stopped buffering replies for us.
        assert tacoma.meet(million.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}
        sock.settimeout(20)
        received = 0
        with contextlib.suppress(OSError):
            while chunk := sock.recv(1 << 20):
                received += len(chunk)
    assert sent > 5
    assert received < sent * 400_000  # cut off before every reply was delivered


def test_agent_log_lines_are_cut(start_place) -> None:
    p = start_place()
    result = tacoma.meet(p.target("ag_python"),
                         code='log("x" * 5_000_000, level="error"); bc["OK"] = [b"1"]')
    assert result["OK"] == [b"1"]
    assert p.stop() == 0
    err = p.log()
    assert "(4,995,904 more)" in err
    assert len(err) < 100_000


def test_an_agents_own_meets_count_against_max_meets(start_place) -> None:
    # --share 1: the place's limit alone (each principal's share is tested in test_trust).
    # Async meets over --max-meets wait in the journal, up to --max-queued.
    p = start_place("--max-meets", "3", "--share", "1", "--max-queued", "3")
    result = tacoma.meet(p.target("ag_python"), code=textwrap.dedent("""
        import tacoma
        accepted = refused = 0
        for _ in range(10):
            try:
                meet("ag_python", Briefcase(CODE=["import time; time.sleep(3)"]), mode="async")
                accepted += 1
            except tacoma.PlaceUnavailable:
                refused += 1
        bc["COUNTS"] = [str(accepted), str(refused)]
    """))
    accepted, refused = (int(n) for n in result["COUNTS"])
    assert accepted == 2 + 3  # this agent's own meet is the third; 3 more queue
    assert refused == 5


def test_an_unusable_agent_name_is_an_unknown_agent(place: RunningPlace) -> None:
    with pytest.raises(tacoma.UnknownAgent):
        tacoma.meet(place.target("a" * 300), {}, timeout=30)


def test_a_connection_that_never_says_hello_is_closed(start_place) -> None:
    place = start_place("--hello-timeout", "1s")  # 10 s by default
    started = time.monotonic()
    with _raw_connection(place) as sock:
        sock.settimeout(30)
        frames = _read_frames(sock)  # returns when the place closes the connection
    assert frames[0][0] == 1  # only the place's own Hello came
    assert time.monotonic() - started >= 1


def test_a_worker_cannot_speak_for_the_place(place: RunningPlace) -> None:
    # The agent writes a forged Failed straight to its channel, claiming the place shuts down.
    forged = ("import os, msgpack\n"
              "body = msgpack.packb([5, 1, 'unavailable', 'place is shutting down', ''])\n"
              "os.write(meet.__self__.fd, len(body).to_bytes(4, 'big') + body)\n"
              "os._exit(0)\n")
    with pytest.raises(tacoma.AgentFailed, match="place is shutting down"):
        tacoma.meet(place.target("ag_python"), code=forged)


def test_agent_log_lines_cannot_forge_place_lines(start_place) -> None:
    p = start_place()
    tacoma.meet(p.target("ag_python"),
                code='log("hi\\n2099-01-01 ERROR tacoma.place: forged", level="error")')
    assert p.stop() == 0
    lines = [line for line in p.log().splitlines() if "forged" in line]
    assert len(lines) == 1
    assert "hi\\n2099" in lines[0]


def test_a_place_cleans_up_after_a_killed_predecessor(start_place, tmp_path: Path) -> None:
    state = tmp_path / "state"
    stale = state / "work" / "python-stale"
    stale.mkdir(parents=True)
    (stale / "left.txt").write_text("from a place killed with SIGKILL")
    p = start_place(state_dir=state)
    assert not stale.exists()
    assert tacoma.meet(p.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}


#: A place that keeps no workers ready (--pool-size 0).
poolless = place_fixture("--pool-size", "0")


def test_cancelled_meets_leave_no_zygotes_behind(poolless: RunningPlace) -> None:
    p = poolless
    for _ in range(4):  # each client disconnects while its worker is being started
        with _raw_connection(p) as sock:
            sock.sendall(_frame([1, V, "client", 2**20, "x"])
                         + _frame([2, 1, "ag_python", {"CODE": [b"pass"]}, "sync", None]))
    assert run(p, 'bc["OK"] = [b"1"]')["OK"] == [b"1"]

    def zygotes() -> int:
        count = 0
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1]
                                                .split()[1]) == p.proc.pid:
                    count += "interpreters.python._worker" in (entry / "cmdline").read_text()
        return count

    wait_until(lambda: zygotes() == 1, what="one zygote for the place")


def test_an_agent_cannot_flood_the_log(start_place) -> None:
    p = start_place()
    result = tacoma.meet(p.target("ag_python"), code=textwrap.dedent("""
        for i in range(5000):
            log(f"line {i}", level="error")
        bc["OK"] = [b"1"]
    """))
    assert result["OK"] == [b"1"]
    assert p.stop() == 0
    text = p.log()
    assert text.count("] line ") == 1000
    assert "4000 more log lines from the agent were dropped" in text


def test_connections_past_the_maximum_are_refused(start_place) -> None:
    # --share 1: one identity may hold them all (by default, a quarter: see test_trust).
    p = start_place("--max-connections", "2", "--share", "1")
    with _raw_connection(p) as first, _raw_connection(p) as second:
        for sock in (first, second):
            sock.sendall(_frame([1, V, "client", 2**20, "x"]))
        wait_until(lambda: "maximum of 2 connections" in _third_connection(p))
        with pytest.raises(tacoma.ConnectError, match="maximum of 2 connections"):
            tacoma.meet(p.target("ag_echo"), {})
    wait_until(lambda: _echo_works(p), what="the place to accept connections again")


def _third_connection(p: RunningPlace) -> str:
    with _raw_connection(p) as sock:
        return str(_read_frames(sock))


def _echo_works(p: RunningPlace) -> bool:
    try:
        return tacoma.meet(p.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}
    except tacoma.ConnectError:
        return False


@needs_root
def test_a_cancelled_meet_stops_its_agent(place: RunningPlace) -> None:
    async def scenario() -> None:
        meet = asyncio.ensure_future(tacoma.ameet(
            place.target("ag_python"),
            code="import os, time\n"
                 "cabinet_replace('cancelled', 'UID', [str(os.getuid()).encode()])\n"
                 "time.sleep(600)"))
        uid = await asyncio.to_thread(agent_uid, place, "cancelled")
        assert processes_of_uid(uid)
        meet.cancel()  # as a notebook's interrupt would; the connection stays open
        with pytest.raises(asyncio.CancelledError):
            await meet
        await asyncio.to_thread(wait_until, lambda: not processes_of_uid(uid),
                                20, "the cancelled agent to be killed")
        assert await tacoma.ameet(place.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}

    asyncio.run(scenario())


def test_a_place_that_never_answers_is_not_a_place() -> None:
    # A listening socket nobody accepts on: the connection is made, no handshake ever comes.
    # That is not a tacoma place (or a stalled one), not a connection that failed.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        with pytest.raises(tacoma.RemoteProtocolError, match="accepted the connection but "
                           "did not answer as a tacoma place"):
            tacoma.meet(f"ag_echo@127.0.0.1:{port}", {}, connect_timeout=1)


def test_the_places_own_agents_count_against_max_meets(start_place) -> None:
    """A busy place still answers ag_echo (which holds nothing), ag_admin, ag_status and
    ag_home (a trip's end must reach its home); ag_cabinet, which holds memory and a thread,
    is refused at --max-meets like agents that need a worker."""
    p = start_place("--max-meets", "1")
    tacoma.meet(p.target("ag_python"), code="import time\ntime.sleep(5)", mode="async",
                timeout=30)
    token = (p.state_dir / "admin.token").read_text().strip()

    def running() -> int:
        return len(tacoma.meet(p.target("ag_admin"),
                               {"OP": ["ps"], "TOKEN": [token]}).folder("AGENTS"))

    wait_until(lambda: running() == 1, 20, "the agent to run")
    with pytest.raises(tacoma.PlaceUnavailable, match="maximum of 1 meets"):
        tacoma.meet(p.target("ag_python"), code="pass", timeout=10)
    assert tacoma.meet(p.target("ag_echo"), {"X": [b"1"]}) == {"X": [b"1"]}
    assert running() == 1
    assert tacoma.status(f"nosuchmeet@{p.address}").state == "unknown"
    with pytest.raises(tacoma.PlaceUnavailable, match="maximum of 1 meets"):
        tacoma.meet(p.target("ag_cabinet"), {"OP": ["list"]})


def test_the_zygotes_table_of_ended_workers_does_not_grow() -> None:
    # The zygote reports each worker's CPU time when it ends; the place kept every entry.
    from tacoma.place import _embedded

    for _ in range(5):
        tacoma.meet("ag_python", code="pass")
    place = _embedded._place
    assert place is not None and place.router is not None
    zygote = place.router.agents.pools["ag_python"].zygote
    assert zygote is not None
    wait_until(lambda: not zygote.cpu_used, what="the ended workers' entries to go")


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(tmp_path: Path) -> None:
    # Idle connections must not hold the place's slots. (In-process, for a timeout under the
    # CLI's minimum of 60 s.)
    from tacoma.client._client import PlaceClient

    async def scenario() -> None:
        place = tacoma.Place(tacoma.PlaceSettings(listen="127.0.0.1:0",
                                                  state_dir=tmp_path / "state",
                                                  idle_seconds=1.0))
        address = await place.start()
        try:
            idle = await PlaceClient.connect(address)
            busy = await PlaceClient.connect(address)
            meet = asyncio.ensure_future(busy.meet(
                "ag_python", Briefcase(CODE=["import time; time.sleep(3)"]), "sync", 30))
            await asyncio.sleep(2.5)
            assert not idle.usable
            assert idle.channel is not None and "idle for 1 s" in idle.channel.close_reason
            assert busy.usable  # a meet in flight: not idle, however long it runs
            assert await meet == {"CODE": [b"import time; time.sleep(3)"]}
            assert busy.channel is not None  # closed within 2.5 s: idle once answered
            await asyncio.wait_for(asyncio.shield(busy.channel.closed), 2.5)
            assert not busy.usable  # idle once its meet was answered
        finally:
            await place.stop(grace=1)

    asyncio.run(scenario())


def test_a_client_does_not_reuse_a_connection_the_place_may_be_closing() -> None:
    from tacoma.client._client import REUSE_SECONDS, PlaceClient
    from tacoma.wire._protocol import MIN_IDLE_SECONDS

    assert REUSE_SECONDS < MIN_IDLE_SECONDS
    client = PlaceClient("127.0.0.1:7707")
    assert not client.stale
    client._active -= REUSE_SECONDS + 1
    assert client.stale


def test_the_bytes_being_received_at_once_are_bounded(start_place) -> None:
    # Peers that each send all but the end of a large frame held max_frame bytes each.
    place = start_place("--max-briefcase", str(2**20), "--max-receiving", str(2 * 2**20))
    hello = _frame([1, V, "client", 2**20, "x"])
    almost = (2**20 - 1000).to_bytes(4, "big") + b"\x00" * 900_000  # a frame, unfinished
    holding = [_raw_connection(place), _raw_connection(place)]
    try:
        for sock in holding:
            sock.sendall(hello + almost)
        time.sleep(0.5)  # both are held now: 1.8 MB of the 2 MiB
        with _raw_connection(place) as third:
            third.sendall(hello + almost)
            bye = _read_frames(third)[-1]
        assert bye[0] == 7 and "budget for incoming briefcases" in bye[1], bye
        assert tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}
    finally:
        for sock in holding:
            sock.close()
    # What they held is given back: a large briefcase goes through again.
    big = {"BIG": [b"x" * 700_000]}

    def goes_through() -> bool:
        try:
            return tacoma.meet(place.target("ag_echo"), big) == big
        except tacoma.ConnectionLost as exc:  # until the place has seen both close
            if "budget for incoming briefcases" not in str(exc):
                raise
            return False

    wait_until(goes_through, what="the budget to be given back")


def test_receive_budget_accounting() -> None:
    from types import SimpleNamespace

    from tacoma.transport import ReceiveBudget

    class Fake:  # what the budget reads of a Channel (hashable, as a Channel is)
        def __init__(self, name: str) -> None:
            self.identity = SimpleNamespace(name=name)
            self.peer = "127.0.0.1:1"

    def channel(name: str) -> object:
        return Fake(name)

    budget = ReceiveBudget(100)
    a, b = channel("alice"), channel("bob")
    assert budget.hold(a, 60) and budget.hold(b, 40)  # type: ignore[arg-type]
    assert not budget.hold(b, 41)  # type: ignore[arg-type]
    assert budget.hold(a, 10) and budget.hold(b, 90)  # type: ignore[arg-type]
    assert budget.hold(a, 0) and budget.total == 90  # type: ignore[arg-type]
    # One identity holds at most its share, over all its connections.
    shared = ReceiveBudget(100, share=50)
    a1, a2, m = channel("alice"), channel("alice"), channel("mallory")
    assert shared.hold(a1, 30) and not shared.hold(a2, 30)  # type: ignore[arg-type]
    assert shared.hold(m, 50) and shared.hold(a2, 20)  # type: ignore[arg-type]
    assert shared.hold(a1, 0) and shared.total == 70  # type: ignore[arg-type]


def test_others_are_served_while_a_large_briefcase_is_decoded(place: RunningPlace) -> None:
    # One meet whose folder holds millions of elements took seconds to decode and check, and
    # the place served nobody meanwhile. Large frames are decoded on a thread now.
    elements = [b"x"] * 3_000_000
    big = _frame([2, 1, "ag_echo", {"MANY": elements}, "sync", None, ""])
    with _raw_connection(place) as sock:
        sock.sendall(_frame([1, V, "client", 2**26, "x"]))
        assert _next_frame(sock)[0] == 1  # the place's Hello
        sock.sendall(big)
        # While the place decodes it, another client's meet is served.
        assert tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}
        sock.setblocking(False)
        with pytest.raises((BlockingIOError, ssl.SSLWantReadError)):
            sock.recv(1)  # the large meet is not answered yet
        sock.setblocking(True)
        reply = _next_frame(sock)
    assert reply[0] == 4 and len(reply[2]["MANY"]) == 3_000_000


def _next_frame(sock: socket.socket) -> list[Any]:
    header = _recv_exactly(sock, 4)
    return msgpack.unpackb(_recv_exactly(sock, int.from_bytes(header, "big")), raw=False)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the place closed the connection"
        data += chunk
    return data


def test_places_started_from_a_checkout_run_the_installed_tacoma(tmp_path: Path) -> None:
    # Run from a directory holding a copy of the tree (a clone's root), `python -m tacoma`
    # imported the copy, which has no tacoma.interpreters: the places it started knew no
    # language ("no agent 'ag_python'"). They run the installed tacoma now (python -P).
    # A regular install is made by hand (the tree laid out as setup.cfg installs it, first
    # on PYTHONPATH, in a virtual environment of its own that sees this one's packages on
    # PYTHONPATH too, where no .pth file runs): an editable install's finder, which a .pth
    # file installs, would map tacoma.interpreters even for the copy, and hide the fault.
    root = Path(__file__).parents[1]
    ignore = shutil.ignore_patterns("__pycache__")
    installed = tmp_path / "site"
    shutil.copytree(root / "tacoma", installed / "tacoma", ignore=ignore)
    shutil.copytree(root / "interpreters", installed / "tacoma" / "interpreters", ignore=ignore)
    checkout = tmp_path / "clone"
    shutil.copytree(root / "tacoma", checkout / "tacoma", ignore=ignore)
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import tacoma
        assert tacoma.__file__.startswith({str(installed)!r}), tacoma.__file__
        with tacoma.local_places(1) as places:
            print(tacoma.meet(f"ag_python@{{places.addresses[0]}}",
                              code='bc["X"] = [b"ran"]').text("X")[0])
    """))
    venv.create(tmp_path / "venv", with_pip=False, symlinks=True)
    packages = [p for p in sys.path if p.endswith("-packages")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), *packages])}
    out = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), str(script)],
                         cwd=checkout, capture_output=True, text=True, timeout=120,
                         check=False, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ran"


# ------------------------------------------------------------------ the pool, by demand
def _python_pool(place: RunningPlace) -> Any:
    token = (place.state_dir / "admin.token").read_text().strip()
    status = tacoma.place_status(place.address, token=token)
    return next(pool for pool in status.pools if pool.agent == "ag_python")


@pytest.mark.slow
def test_the_pool_grows_under_load_and_shrinks_back_when_idle(start_place) -> None:
    place = start_place("--pool-size", "1", "--pool-max", "4")
    first = _python_pool(place)
    assert (first.size, first.most) == (1, 4)

    async def load() -> None:
        async def caller() -> None:
            for _ in range(4):
                await tacoma.ameet(place.target("ag_python"), code="pass", timeout=60)
        await asyncio.gather(*(caller() for _ in range(8)))

    asyncio.run(load())
    grown = _python_pool(place)
    assert grown.misses > 0 and 1 < grown.size <= 4, grown
    assert grown.ended >= 32
    # Idle: it halves back to --pool-size, a halving every few seconds without a miss.
    wait_until(lambda: _python_pool(place).size == 1, 30, "the pool to shrink back")
    wait_until(lambda: _python_pool(place).ready == 1, 10, "the workers over it destroyed")
    assert tacoma.meet(place.target("ag_python"), code="bc['X'] = [b'1']",
                       timeout=60)["X"] == [b"1"]


def test_no_pool_stays_no_pool(poolless: RunningPlace) -> None:
    place = poolless
    for _ in range(3):
        tacoma.meet(place.target("ag_python"), code="pass", timeout=60)
    pool = _python_pool(place)
    assert (pool.size, pool.most, pool.ready) == (0, 0, 0)


def test_pool_max_below_pool_size_is_refused(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "tacoma", "place", "--state-dir",
                          str(tmp_path / "s"), "--pool-size", "4", "--pool-max", "2"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2, out.stderr
    assert "pool_max must be from pool_size (4) to 256" in out.stderr
