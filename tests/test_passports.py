"""Signed agents: no place can act in another principal's name.

Place C allows only alice's meets and lets place B itself meet only ag_echo. B holds a real
place certificate of the cluster (the tests' CA), and alice never sent anything through B.
Each attack a compromised B could make before passports is tried here and refused at C
with NotAuthorized naming the missing or invalid passport, and C's log names B. Then the
passports themselves: tampered (program, itinerary, deadline, principal), signed by a
revoked or a foreign certificate, replayed for another meet id; and what B may do with a
passport it does hold (an agent of alice's that passed through it): run that program,
and nothing else, for alice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import tacoma
from tacoma import Briefcase
from tacoma.client import PlaceClient
from tacoma.client._identity import Credentials, program_of
from tacoma.trust._passport import Papers

from conftest import (
    RunningPlace,
    identity,
    language_params,
    launch_place,
    meet_as,
    name_of,
    signed_papers,
    wait_until,
)

LANGUAGES = language_params(agents=True)

#: alice's agent: says whose it is, and where it runs.
WHOAMI = "bc.replace('WHO', [principal, place])\n"
#: An agent that keeps a line in its private cabinet (and reads it back).
DIARY = textwrap.dedent("""
    if "WRITE" in bc:
        cabinet_append("diary", "SECRET", bc["WRITE"][0])
    bc["READ"] = cabinet_read("diary", "SECRET")
""")


@pytest.fixture(scope="module")
def alice() -> Path:
    return identity("alice")


@pytest.fixture(scope="module")
def place_b() -> Path:
    """The compromised place's own, real, certificate."""
    return identity("place-b", "place")


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory, alice: Path, place_b: Path
      ) -> Iterator[RunningPlace]:
    """Place C: alice may meet anything there; place B itself, only ag_echo."""
    running = launch_place(tmp_path_factory.mktemp("c") / "state", "--allow",
                           f"{name_of(alice)}:*", "--allow", f"{name_of(place_b)}:ag_echo",
                           quiet=False)
    yield running
    assert running.stop() == 0, running.log()


def as_place(place: Path, address: str, agent: str, folders: dict[str, Any] | None = None,
             *, principal: str = "", papers: bytes | None = None, code: str | None = None,
             mode: str = "sync", meet_id: str = "", timeout: float = 60) -> Any:
    """One meet from `place`'s own connection, naming `principal` with `papers`."""
    bc = Briefcase()
    for name, elements in (folders or {}).items():
        bc[name] = elements
    if code is not None:
        bc["CODE"] = [code.encode()]

    async def run() -> Any:
        credentials = Credentials(place)
        credentials.signs = False  # a place signs no passports: it hands on what it holds
        client = await PlaceClient.connect(address, credentials=credentials)
        try:
            return await client.meet(agent, bc, mode, timeout, principal,  # type: ignore[arg-type]
                                     meet_id, papers=papers or b"")
        finally:
            client.close()

    return asyncio.run(run())


def passport(who: Path, *, code: str = WHOAMI, **terms: Any) -> bytes:
    """A passport `who` signs for WHOAMI (as its client would), in its papers."""
    return signed_papers(who, code=code, **terms)


def tampered(papers: bytes, field: int, value: object) -> bytes:
    """`papers` with field `field` of the passport's statement changed, signature kept."""
    passport_raw = Papers.read(papers).passport
    statement, certificate, signature = msgpack.unpackb(passport_raw)
    fields = msgpack.unpackb(statement)
    fields[field] = value
    forged = msgpack.packb([msgpack.packb(fields), certificate, signature])
    return Papers(forged).to_wire()


def refused_for_passport(c: RunningPlace, attempt: Callable[[], object], match: str) -> None:
    """`attempt` is refused at C with NotAuthorized matching `match`, and C's log names
    place B's attempt."""
    with pytest.raises(tacoma.NotAuthorized, match=match):
        attempt()


def logged(c: RunningPlace, place_b: Path) -> None:
    wait_until(lambda: f"place {name_of(place_b)} tried to act for" in c.log(), 10,
               "C to log which place tried")


# ------------------------------------------------------------------ the attacks, refused
def test_b_cannot_run_an_agent_as_alice(c: RunningPlace, alice: Path, place_b: Path) -> None:
    refused_for_passport(c, lambda: as_place(place_b, c.address, "ag_python", code=WHOAMI,
                                             principal=name_of(alice)), "without a passport")
    logged(c, place_b)
    # alice herself still runs it; B as itself may meet ag_echo only.
    assert meet_as(alice, c.address, "ag_python", code=WHOAMI).text("WHO")[0] == \
        name_of(alice)
    with pytest.raises(tacoma.NotAuthorized, match="may not meet ag_python"):
        as_place(place_b, c.address, "ag_python", code=WHOAMI)


def test_b_cannot_read_alices_async_results_by_id(c: RunningPlace, alice: Path,
                                                  place_b: Path) -> None:
    meet_id = meet_as(alice, c.address, "ag_python", {"X": [b"hers"]}, code=WHOAMI,
                      mode="async")
    wait_until(lambda: meet_as(alice, c.address, "ag_status", {"ID": [meet_id]})
               .text("STATE")[0] == "done", 30, "alice's meet to end")
    refused_for_passport(c, lambda: as_place(place_b, c.address, "ag_status",
                                             {"ID": [meet_id]}, principal=name_of(alice)),
                         "without a passport")


def test_b_cannot_fill_alices_share(c: RunningPlace, alice: Path, place_b: Path) -> None:
    for _ in range(8):
        refused_for_passport(c, lambda: as_place(place_b, c.address, "ag_python",
                                                 code="import time; time.sleep(30)",
                                                 principal=name_of(alice), mode="async"),
                             "without a passport")
    assert meet_as(alice, c.address, "ag_python", code=WHOAMI).text("WHO")[0] == \
        name_of(alice)


def test_b_cannot_read_alices_lazy_data_or_cabinet(c: RunningPlace, alice: Path,
                                                   place_b: Path) -> None:
    secret = uuid.uuid4().hex
    kept = meet_as(alice, c.address, "ag_python", {"WRITE": [secret.encode()]}, code=DIARY)
    assert kept.text("READ")[-1] == secret
    # Her private cabinet, by running the program that owns it as her: refused.
    refused_for_passport(c, lambda: as_place(place_b, c.address, "ag_python", code=DIARY,
                                             principal=name_of(alice)), "without a passport")
    # Her lazy data, given a reference: refused before the reference is even looked at.
    refused_for_passport(c, lambda: as_place(place_b, c.address, "ag_lazy",
                                             {"OP": [b"fetch"], "REF": [b"x"]},
                                             principal=name_of(alice)), "without a passport")


def test_b_cannot_make_c_connect_to_a_home_it_made_up(c: RunningPlace, alice: Path,
                                                      place_b: Path) -> None:
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    home = f"127.0.0.1:{listener.getsockname()[1]}"
    try:
        trip = {"HOME": [home.encode(), uuid.uuid4().hex.encode(), repr(time.time() + 60)
                         .encode(), b"1", home.encode(), b"0"]}
        # As alice, without her passport: refused.
        refused_for_passport(c, lambda: as_place(place_b, c.address, "ag_python", trip,
                                                 code=WHOAMI, principal=name_of(alice),
                                                 mode="go"), "without a passport")
        # As B itself (were it allowed to run agents at C): the home must have signed the
        # trip's first line, and B cannot sign for an address it does not serve.
        with pytest.raises(tacoma.NotAuthorized):
            as_place(place_b, c.address, "ag_echo", trip, mode="go")
        time.sleep(1.0)
        with pytest.raises(TimeoutError):
            listener.accept()  # C never connected there
    finally:
        listener.close()


# ---------------------------------------------------------------- passports, checked
def test_a_passport_b_holds_runs_its_program_only(c: RunningPlace, alice: Path,
                                                  place_b: Path) -> None:
    """What a compromised place can still do is exactly what it holds."""
    held = passport(alice)
    answer = as_place(place_b, c.address, "ag_python", code=WHOAMI, principal=name_of(alice),
                      papers=held)
    assert answer.text("WHO")[0] == name_of(alice)
    with pytest.raises(tacoma.NotAuthorized, match="another program elsewhere"):
        as_place(place_b, c.address, "ag_python", code=DIARY, principal=name_of(alice),
                 papers=held)
    with pytest.raises(tacoma.NotAuthorized, match="does not let the agent use cabinets"):
        as_place(place_b, c.address, "ag_cabinet", {"OP": [b"list"]},
                 principal=name_of(alice), papers=passport(alice, may=("meet",)))


def test_what_an_agent_b_handed_over_does_at_c_is_its_passports_too(
        c: RunningPlace, alice: Path, place_b: Path) -> None:
    """The agent runs at C under the passport B holds: its own meets there (a cabinet, a
    program it starts) are checked against it as B's would be."""
    with pytest.raises(tacoma.AgentFailed, match="does not let the agent use cabinets"):
        as_place(place_b, c.address, "ag_python", code=DIARY, principal=name_of(alice),
                 papers=passport(alice, code=DIARY, may=("meet",)))
    starter = "meet('ag_python', Briefcase(CODE=[bc['CHILD'][0]]))\n"
    with pytest.raises(tacoma.AgentFailed, match="another program"):
        as_place(place_b, c.address, "ag_python", {"CHILD": [b"bc['X'] = [b'1']"]},
                 code=starter, principal=name_of(alice), papers=passport(alice, code=starter))


@pytest.mark.parametrize(("field", "value", "match"), [
    (3, ["0" * 64], "signature does not match"),
    (5, ["*"], "signature does not match"),
    (6, 4102444800.0, "signature does not match"),  # 2100-01-01
    (1, "mallory", "names 'mallory' but is signed by"),
], ids=["program", "itinerary", "deadline", "principal"])
def test_a_tampered_passport_is_refused(c: RunningPlace, alice: Path, place_b: Path,
                                        field: int, value: object, match: str) -> None:
    papers = passport(alice, places=("10.9.9.9:*",), seconds=60)
    forged = tampered(papers, field, value)
    principal = value if field == 1 else name_of(alice)
    with pytest.raises(tacoma.NotAuthorized, match=match):
        as_place(place_b, c.address, "ag_python", code=WHOAMI, principal=str(principal),
                 papers=forged)


def test_a_passport_holds_within_its_itinerary_and_deadline(c: RunningPlace, alice: Path,
                                                            place_b: Path) -> None:
    with pytest.raises(tacoma.NotAuthorized, match=r"itinerary .* does not admit"):
        as_place(place_b, c.address, "ag_python", code=WHOAMI, principal=name_of(alice),
                 papers=passport(alice, places=("10.9.9.9:*",)))
    with pytest.raises(tacoma.NotAuthorized, match="expired"):
        as_place(place_b, c.address, "ag_python", code=WHOAMI, principal=name_of(alice),
                 papers=passport(alice, seconds=-3600))
    assert as_place(place_b, c.address, "ag_python", code=WHOAMI, principal=name_of(alice),
                    papers=passport(alice, places=(c.address,))).text("WHO")[0] == \
        name_of(alice)


def test_a_passport_of_a_revoked_or_foreign_certificate_is_refused(
        c: RunningPlace, place_b: Path, tmp_path: Path) -> None:
    from tacoma.trust import TrustStore, _certs

    # Revoked: issued by this cluster's CA, then revoked (as tacoma trust revoke does).
    revoked = identity("carol")
    signed = passport(revoked)
    _certs.revoke(TrustStore(), name_of(revoked))
    refused = ""
    for _ in range(50):  # a place rereads its deny list every few seconds
        try:
            as_place(place_b, c.address, "ag_echo", principal=name_of(revoked), papers=signed)
        except tacoma.NotAuthorized as exc:
            refused = str(exc)
            break
        time.sleep(0.2)
    assert "revoked" in refused, refused
    # Foreign: a certificate of the same name from another CA.
    other = TrustStore(tmp_path / "other-trust")
    _certs.ensure_local(other)
    foreign = _certs.issue(other, name_of(identity("dave")), ("client",), ())
    with pytest.raises(tacoma.NotAuthorized, match="not signed by an identity of this "
                                                   "cluster's CA"):
        as_place(place_b, c.address, "ag_python", code=WHOAMI,
                 principal=name_of(foreign), papers=passport(foreign))


def test_a_passport_replayed_for_another_meet_id_is_refused(c: RunningPlace, alice: Path,
                                                            place_b: Path) -> None:
    # At the launch: alice's client sends a meet whose passport names another meet.
    async def launch() -> Any:
        client = await PlaceClient.connect(c.address, credentials=Credentials(alice))
        try:
            return await client.meet("ag_python", Briefcase(CODE=[WHOAMI.encode()]), "sync",
                                     30, meet_id="meet-two-" + uuid.uuid4().hex[:8],
                                     papers=passport(alice, meet="meet-one-0000"))
        finally:
            client.close()

    with pytest.raises(tacoma.NotAuthorized, match="passport is for meet 'meet-one-0000'"):
        asyncio.run(launch())
    # A status query: a passport shows only the meets of its own launch.
    theirs = meet_as(alice, c.address, "ag_python", code=WHOAMI, mode="async")
    with pytest.raises(tacoma.NotAuthorized, match="meets of its own launch"):
        as_place(place_b, c.address, "ag_status", {"ID": [theirs]},
                 principal=name_of(alice), papers=passport(alice))


# --------------------------------------------------- agents carry their passports on
@pytest.fixture(scope="module")
def a(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningPlace]:
    running = launch_place(tmp_path_factory.mktemp("a") / "state")
    yield running
    assert running.stop() == 0, running.log()


@pytest.mark.parametrize("agent", LANGUAGES)
def test_an_agents_meets_elsewhere_carry_its_passport(a: RunningPlace, c: RunningPlace,
                                                      alice: Path, agent: str) -> None:
    """In every language: an agent's meet at C is alice's (C lets her in, not place A),
    and a program other than its own is refused there, as alice's."""
    from test_principals import MEETER

    result = meet_as(alice, a.address, agent, {
        "TARGET": [f"ag_echo@{c.address}".encode(), f"ag_python@{c.address}".encode()],
        "PROGRAM": [WHOAMI.encode()]}, code=MEETER[agent], timeout=120)
    out = result.text("OUT")
    assert out[0] == "ok", out
    assert out[1].startswith("not-authorized: ") and "another program" in out[1], out


# ------------------------------------------------ what a place holding a passport cannot do
STATUS_ASKER = textwrap.dedent("""
    try:
        meet("ag_status", Briefcase(ID=bc["ASK"]))
        bc["OUT"] = [b"answered"]
    except Exception as exc:
        bc["OUT"] = [f"{exc.kind}: {exc}"]
""")


def test_an_agent_b_handed_over_sees_only_its_own_launchs_meets(
        c: RunningPlace, alice: Path, place_b: Path) -> None:
    theirs = meet_as(alice, c.address, "ag_python", code=WHOAMI, mode="async")
    out = as_place(place_b, c.address, "ag_python", {"ASK": [theirs.encode()]},
                   code=STATUS_ASKER, principal=name_of(alice),
                   papers=passport(alice, code=STATUS_ASKER)).text("OUT")[0]
    assert out.startswith("not-authorized: ") and "meets of its own launch" in out, out


SLEEPER = textwrap.dedent("""
    import time
    if "LEG" not in bc:
        bc["LEG"] = [b"1"]
        go(bc.text("NEXT")[0])
    time.sleep(4)
    bc["RESULT"] = [b"genuine"]
""")


def test_b_cannot_end_a_trip_whose_passport_it_holds_unseen(
        a: RunningPlace, c: RunningPlace, alice: Path, place_b: Path) -> None:
    """A trip's end needs the home's first line and the sender's own end line: B, holding
    the trip's passport and its id, cannot end it with a result of its own."""
    import sqlite3

    meet_id = "launch-" + uuid.uuid4().hex[:8]
    papers = passport(alice, code=SLEEPER, meet=meet_id)
    launched = meet_as(alice, a.address, "ag_python", {"NEXT": [c.address.encode()]},
                       code=SLEEPER, mode="async", meet_id=meet_id, papers=papers)
    assert launched == meet_id

    def trip() -> str:
        db = sqlite3.connect(a.state_dir / "journal.sqlite3")
        try:
            row = db.execute("SELECT trip FROM meets WHERE id = ?", (meet_id,)).fetchone()
        finally:
            db.close()
        return str(row[0]) if row and row[0] else ""

    wait_until(lambda: bool(trip()), 30, "the trip to begin")
    forged = {"HOME": [trip().encode()], "RESULT": [b"FORGED-BY-B"]}
    assert as_place(place_b, a.address, "ag_home", forged, principal=name_of(alice),
                    papers=papers) == Briefcase()  # not taken, said alike
    from tacoma.client._status import _status_of

    answer = meet_as(alice, a.address, "ag_status", {"ID": [meet_id.encode()], "WAIT": [b"60"]},
                     timeout=90)
    status = _status_of(answer, meet_id, a.address)
    assert status.state == "done" and status.result is not None, status
    assert status.result.text("RESULT") == ["genuine"]
    assert [step.went for step in status.path] == [c.address, a.address]  # signed, both
    assert "is not taken: its first line is not this place's" in a.log() or \
        "is not taken" in a.log()


def test_a_trip_ends_home_whatever_its_passports_places(a: RunningPlace, c: RunningPlace,
                                                        alice: Path) -> None:
    code = 'if "LEG" not in bc:\n    bc["LEG"] = [b"1"]\n    go(bc.text("NEXT")[0])\n'
    meet_id = "launch-" + uuid.uuid4().hex[:8]
    result = meet_as(alice, a.address, "ag_python", {"NEXT": [c.address.encode()]},
                     code=code, meet_id=meet_id,
                     papers=passport(alice, code=code, meet=meet_id, places=(c.address,)))
    assert result.text("LEG") == ["1"]


def test_papers_with_more_lines_than_a_trip_keeps_are_refused(a: RunningPlace,
                                                             place_b: Path) -> None:
    from tacoma.trust._passport import MAX_LINES

    flood = Papers(b"", tuple(b"x" * 600 for _ in range(MAX_LINES + 1))).to_wire()
    with pytest.raises(tacoma.NotAuthorized, match="more than the"):
        as_place(place_b, a.address, "ag_home", {"HOME": [b"0" * 32]}, papers=flood)


def test_a_clients_next_launch_takes_the_passport_signed_ahead(a: RunningPlace,
                                                              alice: Path) -> None:
    """A launch's passport is signed ahead, right after the launch before (off its path):
    the next launch like it runs as that passport's meet, and the place takes it."""
    credentials = Credentials(alice)
    launch = Briefcase(CODE=[WHOAMI.encode()])

    async def two() -> tuple[str, str, Any]:
        client = await PlaceClient.connect(a.address, credentials=credentials)
        try:
            await client.meet("ag_python", Briefcase(launch), "sync", 30)
            for _ in range(100):  # signed on a thread, a moment after the answer
                if credentials._ahead:
                    break
                await asyncio.sleep(0.05)
            (ahead_id, _, _), = credentials._ahead.values()
            meet_id = credentials.launch_id(a.address, "ag_python", program_of(launch), 30)
            answer = await client.meet("ag_python", Briefcase(launch), "sync", 30,
                                       meet_id=meet_id)
            return ahead_id, meet_id, answer
        finally:
            client.close()

    ahead_id, meet_id, answer = asyncio.run(two())
    assert meet_id == ahead_id
    assert answer.text("WHO")[0] == name_of(alice)


def test_launches_faster_than_signing_ahead_queue_no_signatures(a: RunningPlace,
                                                                 alice: Path) -> None:
    """A burst of launches of one program: one passport at a time is signed ahead for
    them, not one more queued on the client's threads for each launch (which grew without
    bound under load, each a signature no launch took)."""
    credentials = Credentials(alice)
    launch = Briefcase(CODE=[WHOAMI.encode()])

    class Counting(concurrent.futures.ThreadPoolExecutor):
        """The loop's executor, counting the work given to it and not yet done."""
        waiting = most = 0

        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            Counting.waiting += 1
            Counting.most = max(Counting.most, Counting.waiting)
            future = super().submit(fn, *args, **kwargs)
            future.add_done_callback(lambda _: setattr(Counting, "waiting",
                                                       Counting.waiting - 1))
            return future

    async def burst() -> list[Any]:
        asyncio.get_running_loop().set_default_executor(Counting(max_workers=2))
        client = await PlaceClient.connect(a.address, credentials=credentials)
        try:
            todo = iter(range(48))

            async def caller() -> list[Any]:
                return [await client.meet("ag_python", Briefcase(launch), "sync", 30)
                        for _ in todo]

            return [answer for answers in await asyncio.gather(*(caller() for _ in range(12)))
                    for answer in answers]
        finally:
            client.close()

    answers = asyncio.run(burst())
    assert [answer.text("WHO")[0] for answer in answers] == [name_of(alice)] * 48
    assert Counting.most == 1
