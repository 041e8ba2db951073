"""What one connection may cost the others, and its own client: bounded.

A place that says nothing, or breaks the protocol and never finishes the close, does not
hold its client's meets; a place gives back the memory of connections and frames it let
go of; one large briefcase does not stop a place from serving other clients while its
result is encoded. Real places (a `tacoma place` process, or one in this process where
its state must be looked at), real TLS with the tests' CA; a fake place only where a
real one would not misbehave.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import msgpack
import pytest
import tacoma
from hypothesis import given
from hypothesis import strategies as st
from tacoma import Briefcase
from tacoma.client._client import PlaceClient
from tacoma.transport import Channel
from tacoma.trust._store import Bundle
from tacoma.trust._tls import server_context
from tacoma.wire._events import decode, encode, encode_in_pieces
from tacoma.wire._protocol import PROTOCOL_VERSION, Meet, Result, Role

from conftest import RunningPlace, issue_identity, process_status, tls_connection, wait_until

SMALL = Briefcase(OK=[b"1"])
#: How long a test waits for what must happen well within it (a guard, not a measure).
GUARD = 20.0


def _frame(obj: object) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return len(body).to_bytes(4, "big") + body


def _rss_kib(pid: int) -> int:
    return int(process_status(pid)["VmRSS"].split()[0])


async def _until(predicate: Callable[[], bool], what: str) -> None:
    """Wait, on the event loop, until `predicate` holds (at most GUARD seconds)."""
    try:
        async with asyncio.timeout(GUARD):
            while not predicate():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


@pytest.fixture
def stopped() -> Iterator[list[int]]:
    """Processes a test stopped with SIGSTOP (continued whatever happens, so that they can
    be stopped for good)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        os.kill(pid, signal.SIGCONT)


# ---------------------------------------------------------------- a place that says nothing
def test_a_place_that_says_nothing_fails_the_meets_waiting_on_it(start_place,
                                                                  stopped: list[int]) -> None:
    """A stopped place accepts bytes (its kernel does) and never answers: a meet without a
    timeout waited for ever. Now the client asks whether it is there, and gives up."""
    place: RunningPlace = start_place()

    async def scenario() -> None:
        client = await PlaceClient.connect(place.address, heartbeat=0.2, silence=0.5)
        try:
            assert await client.meet("ag_echo", SMALL) == SMALL
            os.kill(place.proc.pid, signal.SIGSTOP)
            stopped.append(place.proc.pid)
            async with asyncio.timeout(GUARD):
                with pytest.raises(tacoma.ConnectionLost, match="said nothing") as lost:
                    await client.meet("ag_echo", SMALL)
            assert "not even to a null meet (ag_echo)" in str(lost.value)
            assert client.probes >= 1
        finally:
            client.close()

    asyncio.run(scenario())


def test_a_long_meet_at_a_place_that_answers_is_not_cut_short(place: RunningPlace) -> None:
    """The place answers each probe at once, however long the meet runs."""

    async def scenario() -> None:
        client = await PlaceClient.connect(place.address, heartbeat=0.05, silence=10)
        try:
            code = Briefcase(CODE=["import time\ntime.sleep(2)"])
            assert await client.meet("ag_python", code, timeout=60) == code
            assert client.probes >= 3  # it asked, and was answered, all along
        finally:
            client.close()

    asyncio.run(scenario())


# ------------------------------------------------------- a peer that breaks the protocol
class _BreaksTheProtocol(asyncio.Protocol):
    """A fake place: TLS and Hello as a place, then bytes that are no frame in answer to the
    first meet; and it reads nothing more, so the TLS close is never completed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.frames = 0
        self.received = b""
        transport.write(_frame([1, PROTOCOL_VERSION, "place", 2**20, "fake"]))

    def data_received(self, data: bytes) -> None:
        self.received += data
        while len(self.received) >= 4:
            size = int.from_bytes(self.received[:4], "big")
            if len(self.received) < 4 + size:
                return
            self.received = self.received[4 + size:]
            self.frames += 1
            if self.frames == 2:  # the client's Hello, then its Meet
                self.transport.write(b"\xff\xff\xff\xffnot a frame")
                self.transport.pause_reading()
                return


def test_a_peer_that_breaks_the_protocol_does_not_hold_the_meet_for_its_close() -> None:
    """The client answers a protocol error with a Bye and closes; the peer never completes
    the TLS close. The meet waited for TLS's own limit (30 s); now the close is cut short
    when the peer takes nothing, and the meet fails with the fault at once."""
    identity = issue_identity("fakeplace", "place", addresses=("127.0.0.1",))
    context = server_context(Bundle.read(identity))

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_BreaksTheProtocol, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        try:
            client = await PlaceClient.connect(f"127.0.0.1:{port}")
            async with asyncio.timeout(GUARD):
                with pytest.raises(tacoma.ConnectionLost, match="exceeds the limit"):
                    await client.meet("ag_echo", SMALL)
        finally:
            server.close()

    asyncio.run(scenario())


# ---------------------------------------------------------------------------- memory
def test_the_memory_of_a_dropped_large_frame_is_given_back(start_place) -> None:
    """A connection that sends all but the last byte of a 60 MB frame and is dropped: the
    place held those bytes after it was gone (until its garbage collector ran, which an
    idle place may not do for a long time), and then kept the freed memory."""
    place = start_place("--max-briefcase", "64M")
    assert tacoma.meet(place.target("ag_echo"), SMALL) == SMALL
    before = _rss_kib(place.proc.pid)
    size = 60_000_000
    with tls_connection(place.address) as sock:
        sock.sendall(_frame([1, PROTOCOL_VERSION, "client", 2**20, "x"]))
        sock.sendall(size.to_bytes(4, "big") + bytes(size - 1))
        wait_until(lambda: _rss_kib(place.proc.pid) > before + 40_000, GUARD,
                   "the place to hold the frame")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")  # a reset
    wait_until(lambda: _rss_kib(place.proc.pid) < before + 20_000, GUARD,
               "the place to give the frame's memory back")
    assert tacoma.meet(place.target("ag_echo"), SMALL) == SMALL


def test_a_closed_connection_is_freed_at_once_not_by_the_garbage_collector(
        tmp_path: Path) -> None:
    """Each connection's channel and session, and its TLS state, were a reference cycle:
    freed only when the garbage collector ran. With it off, none may be left behind."""

    def channels() -> int:  # of connections between clients and the place (not workers')
        return sum(isinstance(o, Channel) and o.conn.role in (Role.PLACE, Role.CLIENT)
                   for o in gc.get_objects())

    async def scenario() -> None:
        place = tacoma.Place(tacoma.PlaceSettings(listen="127.0.0.1:0",
                                                  state_dir=tmp_path / "state"))
        address = await place.start()
        gc.disable()
        try:
            before, sessions = channels(), len(place.sessions)
            for _ in range(20):
                client = await PlaceClient.connect(address)
                assert await client.meet("ag_echo", SMALL) == SMALL
                client.close()
                assert client.channel is not None
                await client.channel.closed
            await _until(lambda: len(place.sessions) == sessions, "the place's side to close")
            del client
            assert channels() <= before, f"{channels() - before} channels left behind"
        finally:
            gc.enable()
            await place.stop(grace=1)

    asyncio.run(scenario())


def test_freed_memory_is_handed_back_to_the_system(place: RunningPlace) -> None:
    """glibc keeps freed blocks below the top of its heap; once a large frame has been let
    go of, the process asks it (malloc_trim) to give them back. Here the freed blocks are
    this client's own: 200 MB of them, under a block kept at the top so that free() alone
    cannot shrink the heap."""
    if not os.confstr("CS_GNU_LIBC_VERSION"):
        pytest.skip("the C library is not glibc: nothing to trim")
    blocks = [bytes(100_000) for _ in range(2000)]
    top = bytes(100_000)
    held = _rss_kib(os.getpid())
    del blocks
    big = Briefcase(BIG=[b"y" * (2 << 20)])  # a frame encoded and decoded elsewhere
    assert tacoma.meet(place.target("ag_echo"), big) == big
    wait_until(lambda: _rss_kib(os.getpid()) < held - 100_000, GUARD,
               "the freed memory to be handed back")
    del top


# -------------------------------------------------------------- one large briefcase
@given(folders=st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,7}", fullmatch=True),
                               st.lists(st.binary(max_size=300), max_size=70), max_size=20),
       meet=st.booleans(), elements=st.integers(1, 20), size=st.integers(1, 100))
def test_a_body_coded_in_pieces_is_the_body_coded_whole(
        folders: dict[str, list[bytes]], meet: bool, elements: int, size: int) -> None:
    """What a thread encodes and decodes a piece at a time (so that the event loop beside
    it runs between pieces) is byte for byte, and event for event, the whole."""
    event = (Meet(7, "ag_echo", Briefcase(folders), "sync", 5.0) if meet
             else Result(7, Briefcase(folders)))
    body = encode(event)
    assert b"".join(encode_in_pieces(event, elements)) == body
    assert decode(body, size) == decode(body) == event
    for damaged in (body[:-1], body + b"\x00"):  # cut short, or with bytes after it
        with pytest.raises(ValueError, match="undecodable"):
            decode(damaged, size)


def test_others_are_served_while_a_large_result_is_encoded(tmp_path: Path) -> None:
    """An ag_echo of millions of elements: its result was encoded on the event loop, and for
    seconds the place served nobody. It is encoded on a thread now, a piece at a time: a
    meet of another client is answered while the place still owes the large result.
    (In this process, so that what the place owes can be seen.)"""
    elements = 4_000_000

    async def scenario() -> None:
        place = tacoma.Place(tacoma.PlaceSettings(listen="127.0.0.1:0",
                                                  state_dir=tmp_path / "state"))
        address = await place.start()
        large = await PlaceClient.connect(address)
        other = await PlaceClient.connect(address)
        try:
            many = Briefcase(MANY=[b"x"] * elements)
            echo = asyncio.ensure_future(large.meet("ag_echo", many, timeout=120))

            def encoding() -> bool:  # the place took the meet and owes its result
                return any(session.channel.conn.owed for session in place.sessions)

            await _until(encoding, "the place to take the large meet")
            assert await other.meet("ag_echo", SMALL) == SMALL
            assert encoding(), "the large result was sent before the other meet's"
            result = await echo
            assert len(result.folder("MANY")) == elements
        finally:
            large.close()
            other.close()
            await place.stop(grace=1)

    asyncio.run(scenario())
