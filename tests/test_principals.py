"""Principals kept apart: what one authenticated user (mallory) tries against another
(alice), with two real identities of one CA, real places in real processes, real agents in
every language, and, as root, a real full disk (a tmpfs of the test's own).

Each test is an attack that worked before this was fixed, or a fault it caused, and each
ends by checking that the place still serves the next normal meet.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import sqlite3
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tacoma
from tacoma import Briefcase
from tacoma.client import PlaceClient, current_principal
from tacoma.client._identity import Credentials
from tacoma.trust import TrustStore, _certs
from tacoma.wire._lazy import Lazy, Ref

from conftest import (
    LAZY_READER,
    RunningPlace,
    SharedPlaces,
    fill,
    identity,
    issue_identity,
    language_params,
    launch_place,
    meet_as,
    name_of,
    place_fixture,
    release,
    serves,
    settled,
    signed_papers,
    small_disk,
    status_as,
    wait_until,
    waits_for,
)

LANGUAGES = language_params(agents=True)
OK = {"OK": [b"1"]}

#: Each language's agent: meet every target in TARGET with a briefcase of the folders named
#: in SEND (copied from its own; its PROGRAM folder, if any, as CODE), and say in OUT how
#: each went: "ok", or "KIND: message".
MEETER = {
    "ag_python": textwrap.dedent("""
        send = Briefcase()
        for name in (bc.text("SEND") if "SEND" in bc else []):
            send[name] = bc[name]
        if "PROGRAM" in bc:
            send["CODE"] = bc["PROGRAM"]
        for target in bc.text("TARGET"):
            try:
                meet(target, send, timeout=30)
                bc.append("OUT", "ok")
            except Exception as exc:
                bc.append("OUT", f"{getattr(exc, 'kind', type(exc).__name__)}: {exc}")
    """),
    "ag_tcl": textwrap.dedent("""
        set send [dict create]
        if {[lsearch [bc_folders] SEND] >= 0} {
            foreach name [bc_text SEND] { dict set send $name [bc_folder $name] }
        }
        if {[lsearch [bc_folders] PROGRAM] >= 0} { dict set send CODE [bc_folder PROGRAM] }
        foreach target [bc_text TARGET] {
            if {[catch {meet $target $send -timeout 30} message options]} {
                bc_append_text OUT "[lindex [dict get $options -errorcode] 1]: $message"
            } else {
                bc_append_text OUT ok
            }
        }
    """),
    "ag_scheme": textwrap.dedent("""
        (define send
          (append
            (if (member "SEND" (bc-folders))
                (map (lambda (name) (cons name (bc-folder name))) (bc-text "SEND"))
                '())
            (if (member "PROGRAM" (bc-folders))
                (list (cons "CODE" (bc-folder "PROGRAM")))
                '())))
        (for-each
          (lambda (target)
            (catch 'tacoma
              (lambda () (meet target send #:timeout 30) (bc-append "OUT" "ok"))
              (lambda (key kind message)
                (bc-append "OUT" (string-append kind ": " message)))))
          (bc-text "TARGET"))
    """),
    "ag_c": textwrap.dedent("""
        #include <tacoma.h>
        int main(void) {
            tc_list targets, names;
            if (tc_text(TC_SELF, "TARGET", &targets) != 0) tc_fail("%s", tc_error());
            tc_bc send = tc_new();
            if (tc_text(TC_SELF, "SEND", &names) == 0)
                for (size_t i = 0; i < names.count; i++) {
                    tc_list f;
                    const char *name = (const char *)names.items[i].data;
                    if (tc_folder(TC_SELF, name, &f) == 0)
                        tc_replace(send, name, f.items, f.count);
                }
            tc_list program;
            if (tc_folder(TC_SELF, "PROGRAM", &program) == 0 && program.count)
                tc_replace(send, "CODE", program.items, program.count);
            for (size_t i = 0; i < targets.count; i++) {
                if (tc_meet((const char *)targets.items[i].data, send, 30) == TC_ERROR)
                    tc_append_textf(TC_SELF, "OUT", "%s: %s", tc_error_kind(), tc_error());
                else
                    tc_append_text(TC_SELF, "OUT", "ok");
            }
            return 0;
        }
    """),
}


#: Each language's agent: meet ag_echo every tenth of a second until it is stopped.
LOOPER = {
    "ag_python": "import time\nwhile True:\n    meet('ag_echo')\n    time.sleep(0.1)\n",
    "ag_tcl": "while 1 { meet ag_echo {}; after 100 }\n",
    "ag_scheme": "(let loop () (meet \"ag_echo\" '()) (usleep 100000) (loop))\n",
    "ag_c": textwrap.dedent("""
        #include <tacoma.h>
        #include <unistd.h>
        int main(void) {
            for (;;) {
                if (tc_meet("ag_echo", tc_new(), 0) == TC_ERROR) tc_fail("%s", tc_error());
                usleep(100000);
            }
        }
    """),
}


# A WebAssembly agent is the C agent, built for WebAssembly: the same source.
for _agents in (MEETER, LOOPER):
    _agents["ag_wasm"] = _agents["ag_c"]


# --------------------------------------------------------------------------- helpers
def journal_rows(place: RunningPlace, where: str, *args: object) -> list[tuple[object, ...]]:
    """Rows of the place's journal (read beside the running place: SQLite's WAL allows it)."""
    query = f"SELECT principal, id, state, trip, error FROM meets {where}"  # noqa: S608
    db = sqlite3.connect(place.state_dir / "journal.sqlite3")
    try:
        return db.execute(query, args).fetchall()
    finally:
        db.close()


class Listener:
    """A plain TCP server on loopback that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.accepted += 1
                conn.close()

    def close(self) -> None:
        self.sock.close()


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="module")
def rogue() -> Path:
    """A real place identity of the cluster, used here to speak as a place would."""
    return identity("rogue-place", "place")


@pytest.fixture
def two(shared_places: SharedPlaces) -> Iterator[tuple[RunningPlace, RunningPlace]]:
    """Two places with default settings, shared with the other tests of this worker
    (conftest.SharedPlaces): alice and mallory are this module's own identities, and each
    test names its own gates and meet ids."""
    a, b = shared_places[0], shared_places[1]
    yield a, b
    settled(a)
    settled(b)


# ------------------------------------------------------------- 1. another's trip's end
def _trip_in_flight(a: RunningPlace, b: RunningPlace, alice: Path, gate: str
                    ) -> tuple[threading.Thread, list[object], str]:
    """alice's agent goes from a to b and waits there on cabinet `gate`: the thread of her
    meet, where its outcome goes, and the trip's id (from a's journal, as a log shows it)."""
    code = textwrap.dedent(f"""
        if place == {a.address!r}:
            go({b.address!r})
    """) + waits_for(gate) + 'bc["DONE"] = ["alice\'s own end"]\n'
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(meet_as(alice, a.address, "ag_python", code=code, timeout=90))
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    principal = name_of(alice)
    wait_until(lambda: bool(journal_rows(a, "WHERE principal = ? AND trip IS NOT NULL",
                                         principal)), 30, "the trip to begin")
    trip = journal_rows(a, "WHERE principal = ? AND trip IS NOT NULL", principal)[-1][3]
    assert isinstance(trip, str)
    return thread, outcome, trip


def test_no_client_and_no_other_principal_ends_anothers_trip(
        two: tuple[RunningPlace, RunningPlace], alice: Path, mallory: Path,
        rogue: Path) -> None:
    a, b = two
    gate = f"gate-{uuid.uuid4().hex[:8]}"
    thread, outcome, trip = _trip_in_flight(a, b, alice, gate)
    forged = {"HOME": [trip.encode()], "FORGED": [b"mallory's"]}
    # A client, whoever it is, may not meet ag_home at all.
    with pytest.raises(tacoma.NotAllowed, match="ag_home is met by places"):
        meet_as(mallory, a.address, "ag_home", forged)
    # A place of the cluster cannot name alice without her passport ...
    with pytest.raises(tacoma.NotAuthorized, match="without a passport"):
        meet_as(rogue, a.address, "ag_home", forged, principal=name_of(alice))
    # ... and one forwarding mallory's meet, or its own, is not heard for alice's trip.
    assert meet_as(rogue, a.address, "ag_home", forged, principal=name_of(mallory),
                   papers=signed_papers(mallory)) == Briefcase()
    assert meet_as(rogue, a.address, "ag_home", forged) == Briefcase()
    assert thread.is_alive()  # the trip goes on: nothing ended it
    release(b, gate)
    thread.join(90)
    (result,) = outcome
    assert isinstance(result, Briefcase), result
    assert result.text("DONE") == ["alice's own end"] and "FORGED" not in result
    serves(a)


@pytest.mark.parametrize("agent", LANGUAGES)
def test_an_agent_ends_no_trip_here_or_elsewhere(two: tuple[RunningPlace, RunningPlace],
                                                 agent: str) -> None:
    a, b = two
    result = tacoma.meet(b.target(agent), {
        "TARGET": ["ag_home", f"ag_home@{a.address}", "ag_trip", f"ag_trip@{a.address}"],
        "SEND": ["HOME", "OP", "TRIP"], "HOME": ["0" * 32], "OP": ["stop"],
        "TRIP": ["0" * 32]}, code=MEETER[agent], timeout=120)
    outcomes = result.text("OUT")
    assert len(outcomes) == 4 and all(o.startswith("not-allowed: ") for o in outcomes), \
        outcomes


# ------------------------------------------------------ 2. cabinets: test_cabinet_owners.py
# ------------------------------------------------- 3. a lazy folder's origin, anywhere
@pytest.mark.parametrize("agent", LANGUAGES)
def test_a_forged_lazy_folder_makes_its_place_connect_nowhere(
        two: tuple[RunningPlace, RunningPlace], agent: str) -> None:
    a, _ = two
    listener = Listener()
    try:
        # A reference nobody sealed, naming an open port and a closed one, and a real
        # sealed one of a's own with its origin changed: each refused alike, before any
        # connection.
        made = tacoma.meet(a.target("ag_python"), code='bc["DATA"] = [b"x" * 1000]\n'
                                                        'bc.lazy("DATA")', timeout=60)
        real = made.lazy_refs()[0]
        refs = [Ref("DATA", listener.address, "0" * 32, 1000, 1, 65536, b"\0" * 32),
                Ref("DATA", closed_port(), "0" * 32, 1000, 1, 65536, b"\0" * 32),
                Ref("DATA", listener.address, real.id, real.size, real.count, real.chunk,
                    real.root, real.seal)]
        errors = []
        for ref in refs:
            result = tacoma.meet(a.target(agent), {"DATA": Lazy(ref)}, code=LAZY_READER[agent],
                                 timeout=120)
            (error,) = result.text("ERR")
            errors.append(error)
        assert all(e.startswith("lazy-folder: ") and "is refused" in e for e in errors), errors
        assert "not sealed" in errors[0] and "not sealed" in errors[1], errors
        assert "does not serve 127.0.0.1" not in errors[2]  # a's certificate serves it ...
        assert "does not match" in errors[2], errors  # ... but not for this origin's port
        assert listener.accepted == 0
    finally:
        listener.close()
    serves(a)


def test_an_agent_reads_only_from_origins_handed_to_it(
        two: tuple[RunningPlace, RunningPlace]) -> None:
    a, b = two
    made = tacoma.meet(a.target("ag_python"), code='bc["DATA"] = [b"sealed"]\n'
                                                    'bc.lazy("DATA")', timeout=60)
    made.remove("CODE")
    packed = made.lazy_refs()[0].pack()
    # Handed over in its briefcase, b's agent reads it (b fetches from a) ...
    got = tacoma.meet(b.target("ag_python"), made, code=LAZY_READER["ag_python"], timeout=60)
    assert got["GOT"] == [b"seal"]
    # ... but the same reference, smuggled in as plain bytes and made up inside the agent,
    # names an origin no folder handed to it names: b does not fetch for it.
    smuggle = textwrap.dedent("""
        from tacoma.wire._lazy import Lazy, Ref
        bc["DATA"] = Lazy(Ref.unpack(bc["PACKED"][0]))
        try:
            bc["GOT"] = [bc.read("DATA", 0, 4)]
        except NotAllowed as exc:
            bc["ERR"] = [f"{exc.kind}: {exc}"]
    """)
    got = tacoma.meet(b.target("ag_python"), {"PACKED": [packed]}, code=smuggle, timeout=60)
    assert got.text("ERR") and "no lazy folder handed to this agent" in got.text("ERR")[0]


def test_the_allow_rules_hold_for_lazy_folders_data(start_place: Callable[..., RunningPlace],
                                                   alice: Path, mallory: Path) -> None:
    p = start_place("--allow", f"{name_of(alice)}:*")
    ref = Ref("DATA", p.address, "0" * 32, 10, 1, 65536, b"\0" * 32)
    request = {"OP": [b"fetch"], "REF": [ref.pack()], "FIRST": [b"0"], "COUNT": [b"1"]}
    with pytest.raises(tacoma.NotAuthorized, match="may not meet ag_lazy"):
        meet_as(mallory, p.address, "ag_lazy", request)
    with pytest.raises(tacoma.LazyFolderError):  # alice may: the place has no such data
        meet_as(alice, p.address, "ag_lazy", request)


# ------------------------------------------------------------- 4. ids per principal
def test_a_meet_id_finds_only_its_own_principals_meet(
        two: tuple[RunningPlace, RunningPlace], alice: Path, mallory: Path) -> None:
    a, _ = two
    mine = f"alice-{uuid.uuid4().hex[:12]}"
    assert meet_as(alice, a.address, "ag_echo", OK, mode="async", meet_id=mine) == mine
    wait_until(lambda: status_as(alice, a, mine) == "done", 30, "alice's meet to end")
    gate = f"gate-{uuid.uuid4().hex[:8]}"
    outcome: list[object] = []
    hers = threading.Thread(target=lambda: outcome.append(meet_as(
        mallory, a.address, "ag_python", code=waits_for(gate), meet_id=mine, timeout=60)))
    hers.start()
    try:
        wait_until(lambda: status_as(mallory, a, mine) == "running", 30,
                   "mallory's meet under alice's id to run")
        assert status_as(alice, a, mine) == "done"  # not hidden by mallory's
        # An async meet sent again under the same id is one meet for its own principal,
        # and a new one for another.
        assert meet_as(mallory, a.address, "ag_echo", OK, mode="async",
                       meet_id=f"{mine}-2") == f"{mine}-2"
        assert meet_as(alice, a.address, "ag_echo", OK, mode="async",
                       meet_id=f"{mine}-2") == f"{mine}-2"
        wait_until(lambda: status_as(alice, a, f"{mine}-2") == "done", 30, "alice's 2nd")
    finally:
        release(a, gate)
        hers.join(60)
    assert isinstance(outcome[0], Briefcase)
    assert status_as(alice, a, mine) == "done"


# ----------------------------------------------------- 6. a principal's share of meets
#: Meets ag_python with itself, deeper and deeper; the meet refused says so in a public
#: cabinet (its name in GATE), and waits there until the test lets it go.
NESTS = textwrap.dedent("""
    import time
    depth = int(bc.text("DEPTH")[0])
    try:
        meet("ag_python", Briefcase(CODE=bc["CODE"], DEPTH=[str(depth + 1)],
                                    GATE=bc["GATE"]), timeout=60)
    except Exception as exc:
        gate = bc.text("GATE")[0]
        cabinet_append(gate, "REFUSED", f"{depth}: {type(exc).__name__}: {exc}")
        while True:
            try:
                if cabinet_read(gate, "GO"):
                    break
            except Exception:
                pass
            time.sleep(0.05)
""")


#: 2 meets running at once for each principal: shared by the tests of every language, each
#: of which ends every meet it made (`settled`) before the next begins.
two_meets_each = place_fixture("--max-meets", "8", "--share", "0.25")


@pytest.mark.parametrize("agent", LANGUAGES)
def test_an_agents_own_meets_count_against_its_principals_share(
        two_meets_each: RunningPlace, agent: str, alice: Path, mallory: Path) -> None:
    p = two_meets_each
    gate = f"gate-{uuid.uuid4().hex[:8]}"
    held = threading.Thread(target=lambda: meet_as(mallory, p.address, agent, {
        "TARGET": [b"ag_python"], "SEND": [b"DEPTH", b"GATE"],
        "PROGRAM": [NESTS.encode()], "DEPTH": [b"1"], "GATE": [gate.encode()]},
        code=MEETER[agent], timeout=120))
    held.start()
    try:
        def refused() -> list[bytes]:
            answer = tacoma.meet(p.target("ag_cabinet"), {"OP": ["read"], "CABINET": [gate],
                                                           "FOLDER": ["REFUSED"]})
            return answer.folder("REFUSED")

        wait_until(lambda: bool(refused()), 60, "mallory's nested meet to be refused")
        # Her agent's meet holds one slot, the first nested one the other: the next one
        # was refused for her share, and alice still runs hers.
        assert refused()[0].startswith(b"1: PlaceUnavailable: ") and b"share" in refused()[0]
        principal = name_of(mallory)
        assert len([a for a in p.agents() if a["principal"] == principal]) == 2
        assert meet_as(alice, p.address, "ag_python", code='bc["OK"] = ["1"]')["OK"] == [b"1"]
    finally:
        release(p, gate)
        held.join(120)
        settled(p)


# ------------------------------------------------------- 6. messages waiting at a place
def test_one_principals_messages_leave_room_in_the_places_mailboxes(
        start_place: Callable[..., RunningPlace], alice: Path, mallory: Path) -> None:
    # --grace 1s: the place ends without waiting for its two sleeping residents.
    p = start_place("--mailbox-total-bytes", "4M", "--share", "0.25", "--grace", "1s")
    stay = 'import time\nreside(bc.text("NAME")[0])\ntime.sleep(120)\n'
    for who, name in ((mallory, "hers"), (alice, "his")):
        meet_as(who, p.address, "ag_python", {"NAME": [name.encode()]}, code=stay,
                mode="async", timeout=300)
    wait_until(lambda: {a["name"] for a in p.agents()} >= {"hers", "his"}, 60,
               "both residents")
    sent, refusal = 0, None
    for _ in range(20):  # 6 MB, more than all the mailboxes of the place hold
        try:
            meet_as(mallory, p.address, "hers", {"M": [b"m" * 300_000]}, mode="async")
            sent += 1
        except tacoma.MailboxFull as exc:
            refusal = exc
            break
    assert refusal is not None and "--share of --mailbox-total-bytes" in str(refusal)
    assert sent == 3  # 1 MiB is mallory's share of 4
    assert isinstance(meet_as(alice, p.address, "his", {"M": [b"a" * 300_000]},
                              mode="async"), str)
    serves(p)


def test_a_failures_text_is_cut_and_charged_to_its_principal(
        start_place: Callable[..., RunningPlace]) -> None:
    p = start_place("--journal-bytes", "4M", "--share", "0.25")  # 1 MiB each
    ids = [tacoma.meet(p.target("ag_python"), code='fail("E" * (6 << 20))', mode="async",
                       timeout=60) for _ in range(3)]
    for meet_id in ids:
        final = tacoma.status(f"{meet_id}@{p.address}", wait=60)
        assert final.state == "failed" and "more)" in str(final.error)
        assert len(str(final.error)) < 20_000
    rows = journal_rows(p, "WHERE state = 'failed'")
    assert all(len(str(row[4])) < 100_000 for row in rows) and len(rows) == 3
    serves(p)


def test_a_principals_own_lazy_folders_are_charged_to_it(
        start_place: Callable[..., RunningPlace], alice: Path, mallory: Path) -> None:
    p = start_place("--lazy-bytes", "2M", "--share", "0.25")  # 512 records each
    many = Briefcase()
    for i in range(600):
        many[f"F{i}"] = Lazy(Ref(f"F{i}", "", "0" * 32, 1, 1, 65536, b"\0" * 32))

    async def send(who: Path) -> None:
        client = await PlaceClient.connect(p.address, credentials=Credentials(who))
        try:
            await client.meet("ag_echo", many)
        finally:
            client.close()

    with pytest.raises(tacoma.LimitExceeded, match="--share of --lazy-bytes"):
        asyncio.run(send(mallory))
    for _ in range(3):  # and again on new connections: nothing piles up
        with pytest.raises(tacoma.LimitExceeded, match="--share of --lazy-bytes"):
            asyncio.run(send(mallory))
    # alice's own lazy folder is relayed, and read, as ever.
    got = meet_as(alice, p.address, "ag_python", {"DATA": tacoma.lazy(b"alice's")},
                  code=LAZY_READER["ag_python"])
    assert isinstance(got, Briefcase) and got["GOT"] == [b"alic"]
    serves(p)


# ------------------------------------------- 3. the places an agent names, any address
@pytest.mark.parametrize("agent", LANGUAGES)
def test_an_agent_cannot_map_the_network_through_its_place(
        start_place: Callable[..., RunningPlace], agent: str) -> None:
    p = start_place()
    listener = Listener()  # open, and not a place
    try:
        result = tacoma.meet(p.target(agent), {
            "TARGET": [f"ag_echo@{closed_port()}", f"ag_echo@{listener.address}"]},
            code=MEETER[agent], timeout=120)
    finally:
        listener.close()
    # A closed port and an open one that is not a place fail alike, but for the address.
    said = {re.sub(r"127\.0\.0\.1:\d+", "ADDRESS", o) for o in result.text("OUT")}
    assert len(said) == 1 and "cannot be reached" in said.pop(), result.text("OUT")
    serves(p)


def test_a_principal_tries_few_addresses_no_place_answers_at(
        start_place: Callable[..., RunningPlace]) -> None:
    p = start_place()
    result = tacoma.meet(p.target("ag_python"), {
        "TARGET": [f"ag_echo@{closed_port()}" for _ in range(10)]},
        code=MEETER["ag_python"], timeout=120)
    outcomes = result.text("OUT")
    assert all("cannot be reached" in o for o in outcomes[:8]), outcomes
    assert all(o.startswith("limit-exceeded: ") and "could not be reached" in o
               for o in outcomes[8:]), outcomes
    serves(p)


# ---------------------------------------------------------------------- 7. log floods
def test_what_peers_say_is_bounded_in_the_log(start_place: Callable[..., RunningPlace],
                                              rogue: Path, mallory: Path) -> None:
    p = start_place("--allow", f"{current_principal()}:ag_echo", quiet=False)
    before = p.log_path.stat().st_size
    with pytest.raises(tacoma.MeetError, match="malformed"):
        meet_as(rogue, p.address, "ag_home", {"HOME": [b"7" * (4 << 20)]})

    async def refusals() -> None:
        client = await PlaceClient.connect(p.address, credentials=Credentials(mallory))
        try:
            for i in range(300):
                with pytest.raises(tacoma.NotAuthorized):
                    await client.meet(f"ag_{i:04d}_" + "x" * 900, Briefcase())
        finally:
            client.close()

    asyncio.run(refusals())
    serves(p)
    grown = p.log_path.stat().st_size - before
    assert grown < 16 * 1024, f"the log grew {grown:,} bytes"


def test_one_principals_agents_log_within_a_budget(start_place: Callable[..., RunningPlace],
                                                    mallory: Path) -> None:
    p = start_place()  # -q: warnings and errors only, and the agents log errors
    noisy = 'for i in range(1000):\n    log("x" * 1100, level="error")\n'
    ids = [meet_as(mallory, p.address, "ag_python", code=noisy, mode="async", timeout=120)
           for _ in range(12)]
    for meet_id in ids:
        assert isinstance(meet_id, str)
        wait_until(lambda m=meet_id: status_as(mallory, p, m) == "done", 60, "a noisy meet")
    # Each meet may log 1 MiB; all of one principal's together 1 MiB and 64 KiB a second.
    assert len(p.log()) < 4 << 20, f"{len(p.log()):,} characters of log"
    assert "a second for all the agents of one principal" in p.log()
    serves(p)


# -------------------------------------------------- 6. briefcases being received at once
def test_one_principal_holds_its_share_of_the_briefcases_being_received(
        start_place: Callable[..., RunningPlace], alice: Path, mallory: Path) -> None:
    from tacoma.wire._protocol import Connection, Role

    p = start_place("--max-briefcase", "8M", "--max-receiving", "32M")
    host, port = p.address.rsplit(":", 1)
    hogs = []
    try:
        for _ in range(4):  # each all but the end of an 8 MiB frame: the whole budget
            sock = Credentials(mallory).context(p.address).wrap_socket(
                socket.create_connection((host, int(port)), timeout=15), server_hostname=host)
            conn = Connection(Role.CLIENT)
            sock.sendall(conn.send(conn.hello()))
            size = (8 << 20) - 1024
            with contextlib.suppress(OSError):
                sock.sendall(size.to_bytes(4, "big") + b"\0" * (size - 65536))
            hogs.append(sock)
        # alice's briefcase is received beside mallory's share (8 MiB of 32).
        big = {"X": [b"a" * (2 << 20)]}
        assert meet_as(alice, p.address, "ag_echo", big, timeout=30) == Briefcase(big)
    finally:
        for sock in hogs:
            sock.close()
    serves(p)


# ------------------------------------------------------ 8. a flood of TLS handshakes
def test_one_hosts_unfinished_handshakes_leave_room(start_place: Callable[..., RunningPlace]
                                                    ) -> None:
    p = start_place("--max-connections", "64")
    host, port = p.address.rsplit(":", 1)
    stalled = []
    try:
        # From another host, and from the client's own: they connect and never say a word.
        for source in ["127.0.0.2"] * 150 + ["127.0.0.1"] * 150:
            sock = socket.socket()
            sock.bind((source, 0))
            sock.settimeout(5)
            with contextlib.suppress(OSError):
                sock.connect((host, int(port)))
            stalled.append(sock)

        async def fresh() -> None:  # a connection of its own, handshake and all
            client = await PlaceClient.connect(p.address)
            try:
                assert await client.meet("ag_echo", Briefcase(OK)) == Briefcase(OK)
            finally:
                client.close()

        for _ in range(20):
            asyncio.run(fresh())
    finally:
        for sock in stalled:
            sock.close()
    assert "127.0.0.2 has 4 TLS handshakes under way" in p.log()


# ---------------------------------------------------------------------- 9. revocation
def _revoke(path: Path) -> None:
    store = TrustStore(Path(os.environ["TACOMA_TRUST_DIR"]))
    _certs.revoke(store, name_of(path))


@pytest.mark.parametrize("agent", LANGUAGES)
def test_a_revoked_principals_agents_stop(start_place: Callable[..., RunningPlace],
                                          agent: str, rogue: Path) -> None:
    p = start_place()
    victim = identity("revoked")
    principal = name_of(victim)
    meet_id = meet_as(victim, p.address, agent, mode="async", code=LOOPER[agent],
                      timeout=300)
    assert isinstance(meet_id, str)
    resident = meet_as(victim, p.address, "ag_python", mode="async", timeout=300,
                       code='reside("kept")\nwhile receive(1) is not None or True:\n'
                            '    pass\n')
    assert isinstance(resident, str)
    wait_until(lambda: len([a for a in p.agents() if a["principal"] == principal]) == 2,
               60, "both agents to run")
    _revoke(victim)
    wait_until(lambda: not [a for a in p.agents() if a["principal"] == principal], 30,
               "the revoked principal's agents to stop")
    def recorded() -> list[tuple[object, ...]]:
        return journal_rows(p, "WHERE principal = ? AND id = ? AND state = 'failed'",
                            principal, meet_id)

    wait_until(lambda: bool(recorded()), 30, "its meet's end in the journal")
    assert "revoked" in str(recorded()[0][4])
    # A place that forwards a meet for it is refused too.
    with pytest.raises(tacoma.NotAuthorized, match="revoked"):
        meet_as(rogue, p.address, "ag_echo", OK, principal=principal)
    serves(p)


def test_a_name_revoked_again_is_refused_again(start_place: Callable[..., RunningPlace],
                                               rogue: Path) -> None:
    p = start_place()
    eve = identity("eve")
    name = name_of(eve)

    papers = signed_papers(eve, agent="ag_echo")  # a passport her first certificate signed

    def forwarded() -> object:
        try:
            return meet_as(rogue, p.address, "ag_echo", OK, principal=name, papers=papers)
        except tacoma.NotAuthorized as exc:
            return exc

    assert forwarded() == Briefcase(OK)
    _revoke(eve)
    wait_until(lambda: isinstance(forwarded(), tacoma.NotAuthorized), 30, "eve's revocation")
    eve = issue_identity(name)  # issued again: a new certificate, not on the list
    assert meet_as(eve, p.address, "ag_echo", OK) == Briefcase(OK)  # shows itself here
    assert isinstance(forwarded(), tacoma.NotAuthorized)  # the old one's passports: never
    papers = signed_papers(eve, agent="ag_echo")  # the new certificate's
    assert forwarded() == Briefcase(OK)
    _revoke(eve)  # and revoked again: forwarded meets for the name are refused again
    wait_until(lambda: isinstance(forwarded(), tacoma.NotAuthorized), 30,
               "eve's second revocation")
    serves(p)


# ------------------------------------------------------ 6 and 11. a full state disk
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


def alice_gets_in(alice: Path, p: RunningPlace) -> str:
    """alice is not starved: her async meet of 1 MiB (its id returned) and her cabinet write
    of 100 kB go through, and the place serves on."""
    made = meet_as(alice, p.address, "ag_echo", {"DATA": [b"a" * (1 << 20)]}, mode="async")
    assert isinstance(made, str)
    meet_as(alice, p.address, "ag_cabinet", {"OP": [b"append"], "CABINET": [b"alice-pub"],
                                             "X": [b"1" * 100000]})
    serves(p)
    return made


@needs_root
@pytest.mark.root
def test_one_principal_keeps_at_most_its_share_of_the_journal(
        tmp_path: Path, alice: Path, mallory: Path) -> None:
    with small_disk(tmp_path / "state", "64m") as state:
        p = launch_place(state)
        try:
            big = {"DATA": [b"m" * (2 << 20)]}
            accepted, refusal = 0, None
            for _ in range(40):  # the whole disk, and more, if nothing stopped her
                try:
                    meet_as(mallory, p.address, "ag_echo", big, mode="async")
                    accepted += 1
                except tacoma.LimitExceeded as exc:
                    refusal = exc
                    break
            assert refusal is not None and "--journal-bytes" in str(refusal), refusal
            assert 0 < accepted < 10
            # alice is not starved: her async meet and her cabinet write go through.
            made = alice_gets_in(alice, p)
            wait_until(lambda: status_as(alice, p, made) == "done", 30, "alice's meet")
        finally:
            assert p.stop() == 0, p.log()
        assert "Traceback" not in p.log() and "savepoint" not in p.log()


@needs_root
@pytest.mark.root
def test_compiled_programs_leave_room_on_the_disk(tmp_path: Path, alice: Path,
                                                   mallory: Path) -> None:
    with small_disk(tmp_path / "state", "64m") as state:
        p = launch_place(state, "--pool-size", "0")
        try:
            for i in range(10):  # 60 MB of programs, each 6 MB of initialized data
                big = ("#include <tacoma.h>\n"
                       f"static volatile char big[6 << 20] = {{{i + 1}}};\n"
                       "int main(void) { return big[0] == 0; }\n")
                with contextlib.suppress(tacoma.LimitExceeded):
                    meet_as(mallory, p.address, "ag_c", code=big, timeout=120)
            cache = sum(f.stat().st_size for f in (state / "cache").rglob("*") if f.is_file())
            assert cache <= 16 << 20, f"{cache:,} bytes of compiled programs"
            alice_gets_in(alice, p)
        finally:
            assert p.stop() == 0, p.log()


@needs_root
@pytest.mark.root
def test_an_accepted_async_meet_is_not_lost_to_a_full_disk(tmp_path: Path) -> None:
    with small_disk(tmp_path / "state", "20m") as state:
        p = launch_place(state, "--journal-bytes", "1G", "--share", "1")
        try:
            accepted: list[str] = []
            refusal = None
            for _ in range(100):  # until the disk says no
                try:
                    accepted.append(tacoma.meet(p.target("ag_echo"),
                                                {"DATA": [b"x" * (256 << 10)]},
                                                mode="async", timeout=60))
                except tacoma.TacomaError as exc:
                    refusal = exc
                    break
            assert isinstance(refusal, tacoma.LimitExceeded), refusal
            assert "disk" in str(refusal) and accepted
            for meet_id in accepted:  # every meet answered Accepted ends, and well
                final = tacoma.status(f"{meet_id}@{p.address}", wait=30)
                assert final.state == "done", (meet_id, final)
            serves(p)
        finally:
            assert p.stop() == 0, p.log()
        assert "OperationalError" not in p.log() and "Traceback" not in p.log()


@needs_root
@pytest.mark.root
def test_a_place_starts_on_a_full_disk_and_says_so(tmp_path: Path) -> None:
    with small_disk(tmp_path / "state", "20m") as state:
        p = launch_place(state)
        done = tacoma.meet(p.target("ag_echo"), OK, mode="async", timeout=30)
        tacoma.meet(p.target("ag_cabinet"), {"OP": ["append"], "CABINET": ["kept"],
                                              "X": ["1"]}, timeout=30)
        assert tacoma.status(f"{done}@{p.address}", wait=30).state == "done"
        assert p.stop() == 0
        fill(state / "filler")
        p = launch_place(state, quiet=False)
        try:
            assert "is full" in p.log()
            serves(p)
            assert tacoma.meet(p.target("ag_python"), code='bc["X"] = ["y"]',
                               timeout=60)["X"] == [b"y"]
            # SQLite cannot open its cabinets without room for their shared memory file:
            # a typed refusal, as for everything that needs the disk.
            with pytest.raises(tacoma.LimitExceeded, match=r"disk .* is full"):
                tacoma.meet(p.target("ag_cabinet"), {"OP": ["read"], "CABINET": ["kept"],
                                                      "FOLDER": ["X"]}, timeout=30)
            with pytest.raises(tacoma.LimitExceeded, match="disk"):
                tacoma.meet(p.target("ag_echo"), OK, mode="async", timeout=30)
            with pytest.raises(tacoma.LimitExceeded, match="disk"):
                tacoma.meet(p.target("ag_cabinet"), {"OP": ["append"], "CABINET": ["kept"],
                                                      "X": ["2" * 100000]}, timeout=30)
            serves(p)
        finally:
            assert p.stop() == 0, p.log()


def _an_old_journal_is_moved(tmp_path: Path, schema: str, meet_id: str) -> None:
    """A journal made with `schema` (an older layout), holding one failed async meet of the
    tests' principal, is moved to the current layout at start, rows and all, and gains the
    columns of passports and paths."""
    _certs.ensure_local(TrustStore())  # the principal below, whichever test ran first
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    db = sqlite3.connect(state / "journal.sqlite3")
    db.executescript(schema)
    db.execute("INSERT INTO meets (id, kind, agent, principal, via, state, runs, accepted, "
               "ended, error) VALUES (?, 'async', 'ag_echo', ?, '', 'failed', 1, "
               "strftime('%s','now'), strftime('%s','now'), ?)",
               (meet_id, current_principal(), json.dumps(["meet", "it failed", ""])))
    db.commit()
    db.close()
    p = launch_place(state)
    try:
        final = tacoma.status(f"{meet_id}@{p.address}")
        assert final.state == "failed" and "it failed" in str(final.error)
    finally:
        assert p.stop() == 0
    db = sqlite3.connect(state / "journal.sqlite3")
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3
    columns = {row[1] for row in db.execute("PRAGMA table_info(meets)")}
    assert {"papers", "passport", "path"} <= columns  # agents' passports, trips' paths
    db.close()


def test_the_journal_moves_to_ids_per_principal(tmp_path: Path) -> None:
    """A journal of the layout before ids were per principal is moved, rows and all."""
    _an_old_journal_is_moved(tmp_path, """
        CREATE TABLE meets (id TEXT PRIMARY KEY, kind TEXT NOT NULL, agent TEXT NOT NULL,
            principal TEXT NOT NULL, via TEXT NOT NULL, caller TEXT, timeout REAL,
            briefcase BLOB, state TEXT NOT NULL, runs INTEGER NOT NULL DEFAULT 0,
            accepted REAL NOT NULL, ended REAL, trip TEXT, deadline REAL, result BLOB,
            error TEXT);
        CREATE INDEX meets_ended ON meets(ended);
        CREATE INDEX meets_trip ON meets(trip);
    """, "old-meet-1")


def test_a_journal_of_ids_per_principal_gains_passports(tmp_path: Path) -> None:
    """A journal of version 2 (ids per principal, no passports) keeps its rows."""
    _an_old_journal_is_moved(tmp_path, """
        CREATE TABLE meets (id TEXT NOT NULL, kind TEXT NOT NULL, agent TEXT NOT NULL,
            principal TEXT NOT NULL, via TEXT NOT NULL, caller TEXT, timeout REAL,
            briefcase BLOB, state TEXT NOT NULL, runs INTEGER NOT NULL DEFAULT 0,
            accepted REAL NOT NULL, ended REAL, trip TEXT, deadline REAL, result BLOB,
            error TEXT, PRIMARY KEY (principal, id));
        PRAGMA user_version = 2;
    """, "v2-meet-1")

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
