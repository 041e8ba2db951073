"""Asking after meets and sending messages, with principals kept apart: what one
authenticated user (mallory) tries against another (alice, or ops, who has the admin
role), with real identities of one CA, real places in real processes, and residents in
every language.

- ag_status, always served, is bounded per principal: a flood of waits is refused past
  the principal's share, and a status request carries nothing large;
- meet ids are per principal for administrators too: `tacoma status` and `tacoma kill`
  name another principal's meet with --principal, never take the first of anyone's;
- a resident sees each message's principal in its ENVELOPE, and no principal fills
  another's resident's mailbox.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import tacoma
from tacoma import Briefcase
from tacoma.client import PlaceClient
from tacoma.client._identity import Credentials

from conftest import (
    RunningPlace,
    identity,
    language_params,
    meet_as,
    name_of,
    release,
    serves,
    status_as,
    wait_until,
    waits_for,
)

LANGUAGES = language_params(agents=True)


# --------------------------------------------------------------------------- helpers
def cli(who: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tacoma", *args, "--identity", str(who)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def ops() -> Path:
    return identity("ops", "client", "admin")


# ------------------------------------------------------------------ ag_status bounded
def test_a_flood_of_status_waits_is_refused_past_the_principals_share(
        start_place: Callable[..., RunningPlace], alice: Path, mallory: Path) -> None:
    # 4 status requests for each principal: its half of --max-meets and --max-queued.
    p = start_place("--max-meets", "4", "--max-queued", "4", "--share", "0.5")
    gate = f"gate-{uuid.uuid4().hex[:8]}"
    hers, mine = f"hers-{uuid.uuid4().hex[:8]}", f"mine-{uuid.uuid4().hex[:8]}"
    meet_as(mallory, p.address, "ag_python", code=waits_for(gate), mode="async",
            meet_id=hers)
    meet_as(alice, p.address, "ag_python", code=waits_for(gate), mode="async", meet_id=mine)
    wait_until(lambda: status_as(mallory, p, hers) == "running", 30, "mallory's meet to run")
    flood, parked = 60, 4
    refusals: list[BaseException] = []
    outcome: list[object] = []
    all_refused = threading.Event()

    async def flooding() -> None:
        client = await PlaceClient.connect(p.address, credentials=Credentials(mallory))
        try:
            request = Briefcase(ID=[hers], WAIT=["300"])
            waits = [asyncio.ensure_future(client.meet("ag_status", request, "sync", 300))
                     for _ in range(flood)]
            pending = set(waits)
            while len(pending) > parked:  # the refusals come at once
                done, pending = await asyncio.wait(pending, timeout=30,
                                                   return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    break
            refusals.extend(w.exception() for w in waits  # type: ignore[misc]
                            if w.done() and w.exception() is not None)
            all_refused.set()
            outcome.extend(await asyncio.gather(*pending, return_exceptions=True))
        finally:
            all_refused.set()
            client.close()

    thread = threading.Thread(target=lambda: asyncio.run(flooding()))
    thread.start()
    try:
        assert all_refused.wait(60)
        assert len(refusals) == flood - parked
        assert all(isinstance(r, tacoma.PlaceUnavailable) and
                   "--share of --max-meets and --max-queued" in str(r) for r in refusals)
        # alice is answered, waiting too, and the place serves.
        assert status_as(alice, p, mine) == "running"
        assert status_as(alice, p, mine, WAIT=[b"0.2"]) == "running"
        serves(p)
    finally:
        release(p, gate)
        thread.join(60)
    # The parked ones learn the end of her meet.
    assert len(outcome) == parked
    assert all(isinstance(o, Briefcase) and o.text("STATE") == ["done"] for o in outcome)
    assert status_as(mallory, p, hers) == "done"  # and her share is hers again


def test_a_status_request_carries_nothing_large(shared_place: RunningPlace,
                                                mallory: Path) -> None:
    p = shared_place
    with pytest.raises(tacoma.LimitExceeded, match="at most 4,096 bytes"):
        meet_as(mallory, p.address, "ag_status", {"ID": [b"nosuchmeet"], "WAIT": [b"60"],
                                                  "PAD": [b"p" * (8 << 20)]})
    with pytest.raises(tacoma.MeetError, match="takes the folders ID, WAIT and PRINCIPAL"):
        meet_as(mallory, p.address, "ag_status", {"ID": [b"nosuchmeet"], "X": [b"1"]})
    assert status_as(mallory, p, "nosuchmeet") == "unknown"
    serves(p)


# ------------------------------------------------------- ids per principal, for admins
def test_an_admin_sees_its_own_meet_by_id_and_anothers_by_naming_it(
        shared_place: RunningPlace, ops: Path, mallory: Path,
        alice: Path) -> None:
    p = shared_place
    job = f"nightly-{uuid.uuid4().hex[:8]}"
    report = 'bc["REPORT"] = ["real numbers"]'
    assert meet_as(ops, p.address, "ag_python", code=report, mode="async",
                   meet_id=job) == job
    wait_until(lambda: status_as(ops, p, job) == "done", 30, "ops's meet to end")
    forged = 'bc["REPORT"] = ["FORGED"]'
    assert meet_as(mallory, p.address, "ag_python", code=forged, mode="async",
                   meet_id=job) == job
    wait_until(lambda: status_as(mallory, p, job) == "done", 30, "mallory's meet to end")
    # By id alone, ops's own: through the CLI and the Python API.
    shown = cli(ops, "status", f"{job}@{p.address}")
    assert shown.returncode == 0, shown.stderr
    assert "real numbers" in shown.stdout and "FORGED" not in shown.stdout
    # Another's, by naming its principal.
    theirs = cli(ops, "status", f"{job}@{p.address}", "--principal", name_of(mallory))
    assert theirs.returncode == 0, theirs.stderr
    assert "FORGED" in theirs.stdout and f"of {name_of(mallory)}" in theirs.stderr
    # Nobody else may name another's.
    with pytest.raises(tacoma.NotAllowed, match="admin role"):
        status_as(alice, p, job, PRINCIPAL=[name_of(ops).encode()])
    refused = cli(alice, "status", f"{job}@{p.address}", "--principal", name_of(ops))
    assert refused.returncode == 15 and "NotAllowed" in refused.stderr
    assert status_as(alice, p, job) == "unknown"


def test_kill_by_id_names_the_principal_when_several_have_it(
        shared_place: RunningPlace, ops: Path, mallory: Path) -> None:
    p = shared_place
    gate = f"gate-{uuid.uuid4().hex[:8]}"
    job = f"longjob-{uuid.uuid4().hex[:8]}"
    for who in (ops, mallory):
        assert meet_as(who, p.address, "ag_python", code=waits_for(gate), mode="async",
                       meet_id=job) == job
    try:
        wait_until(lambda: status_as(ops, p, job) == status_as(mallory, p, job) == "running",
                   30, "both meets to run")
        table = cli(ops, "ps", p.address)
        assert table.returncode == 0, table.stderr
        assert "PRINCIPAL" in table.stdout
        assert name_of(ops) in table.stdout and name_of(mallory) in table.stdout
        ambiguous = cli(ops, "kill", f"{job}@{p.address}")
        assert ambiguous.returncode == 1 and "--principal" in ambiguous.stderr
        assert status_as(ops, p, job) == status_as(mallory, p, job) == "running"
        killed = cli(ops, "kill", f"{job}@{p.address}", "--principal", name_of(ops))
        assert killed.returncode == 0, killed.stderr
        wait_until(lambda: status_as(ops, p, job) == "failed", 30, "ops's meet to be killed")
        assert status_as(mallory, p, job) == "running"
    finally:
        release(p, gate)
    wait_until(lambda: status_as(mallory, p, job) == "done", 30, "mallory's meet to end")


def test_a_residents_name_is_no_meet_id(shared_place: RunningPlace,
                                        ops: Path, mallory: Path) -> None:
    p = shared_place
    # Shaped like the ids a place makes (10 hex digits, a dot, a number): refused.
    taken = meet_as(mallory, p.address, "ag_python", code=textwrap.dedent("""
        try:
            reside("a6801565af.3")
        except MessageError as exc:
            bc["REFUSED"] = [str(exc)]
    """))
    assert isinstance(taken, Briefcase)
    assert "shaped like the ids a place makes" in taken.text("REFUSED")[0]
    # A name that is also a meet's id: kill says which is which, and does neither.
    gate = f"gate-{uuid.uuid4().hex[:8]}"
    job = f"report-{uuid.uuid4().hex[:8]}"
    meet_as(ops, p.address, "ag_python", code=waits_for(gate), mode="async", meet_id=job)
    resident = threading.Thread(target=lambda: meet_as(
        mallory, p.address, "ag_python", code=f"reside({job!r})\n" + waits_for(gate)))
    resident.start()
    try:
        wait_until(lambda: job in {a["name"] for a in p.agents()}, 30, "mallory's resident")
        both = cli(ops, "kill", f"{job}@{p.address}")
        assert both.returncode == 1 and "both a resident agent's name" in both.stderr
        assert status_as(ops, p, job) == "running"
        assert job in {a["name"] for a in p.agents()}
    finally:
        release(p, gate)
        resident.join(60)


# ------------------------------------------------------------------- messages
#: A resident in each language: answers each of two requests with the principal in its
#: ENVELOPE (the fourth element), in FROM, then ends.
PRINCIPAL_READER = {
    "ag_python": textwrap.dedent("""
        reside(bc.text("NAME")[0])
        for _ in range(2):
            m = receive(60)
            reply(m, Briefcase(FROM=[m["ENVELOPE"][3]]))
    """),
    "ag_tcl": textwrap.dedent("""
        reside [lindex [bc_text NAME] 0]
        for {set i 0} {$i < 2} {incr i} {
            set m [receive 60]
            reply $m [dict create FROM [list [lindex [dict get $m ENVELOPE] 3]]]
        }
    """),
    "ag_scheme": textwrap.dedent("""
        (reside (car (bc-text "NAME")))
        (let loop ((i 0))
          (when (< i 2)
            (let* ((m (receive 60))
                   (envelope (cdr (assoc "ENVELOPE" m))))
              (reply m (list (cons "FROM" (list (cadddr envelope)))))
              (loop (+ i 1)))))
    """),
    "ag_c": textwrap.dedent("""
        #include <tacoma.h>
        int main(void) {
            tc_list name, envelope;
            if (tc_text(TC_SELF, "NAME", &name) != 0) tc_fail("%s", tc_error());
            if (tc_reside((const char *)name.items[0].data) != 0) tc_fail("%s", tc_error());
            for (int i = 0; i < 2; i++) {
                tc_bc m = tc_receive(60);
                if (m == TC_ERROR || m == 0) tc_fail("receive: %s", tc_error());
                tc_folder(m, "ENVELOPE", &envelope);
                if (envelope.count < 4) tc_fail("an ENVELOPE of %zu", envelope.count);
                tc_bc r = tc_new();
                tc_replace(r, "FROM", envelope.items + 3, 1);
                if (tc_reply(m, r) != 0) tc_fail("reply: %s", tc_error());
                tc_list_free(&envelope);
                tc_free(r);
                tc_free(m);
            }
            return 0;
        }
    """),
}
PRINCIPAL_READER["ag_wasm"] = PRINCIPAL_READER["ag_c"]  # the C source, built for WebAssembly


@pytest.mark.parametrize("agent", LANGUAGES)
def test_a_resident_sees_each_messages_principal(shared_place: RunningPlace,
                                                 agent: str, alice: Path,
                                                 mallory: Path) -> None:
    p = shared_place
    name = f"vault{uuid.uuid4().hex[:6]}"
    ended: list[object] = []
    resident = threading.Thread(target=lambda: ended.append(meet_as(
        alice, p.address, agent, {"NAME": [name.encode()]}, code=PRINCIPAL_READER[agent],
        timeout=120)))
    resident.start()
    try:
        wait_until(lambda: bool(ended) or name in {a["name"] for a in p.agents()}, 60,
                   "the resident")
        assert not ended, ended
        for who in (alice, mallory):
            answer = meet_as(who, p.address, name, {"Q": [b"who am i?"]})
            assert isinstance(answer, Briefcase)
            assert answer.text("FROM") == [name_of(who)]
    finally:
        resident.join(120)
    assert isinstance(ended[0], Briefcase), ended


def test_no_principal_fills_anothers_mailbox(start_place: Callable[..., RunningPlace],
                                             alice: Path, mallory: Path) -> None:
    # Another's share of one mailbox: 2 messages, 100,000 bytes.
    p = start_place("--mailbox-messages", "8", "--mailbox-bytes", "400000", "--share", "0.25")
    gate = f"gate-{uuid.uuid4().hex[:8]}"
    inbox = f"inbox{uuid.uuid4().hex[:6]}"
    meet_as(alice, p.address, "ag_python", code=f"reside({inbox!r})\n" + waits_for(gate),
            mode="async", timeout=120)
    try:
        wait_until(lambda: inbox in {a["name"] for a in p.agents()}, 60, "alice's resident")
        assert isinstance(meet_as(mallory, p.address, inbox, {"X": [b"m" * 60_000]},
                                  mode="async"), str)
        with pytest.raises(tacoma.MailboxFull, match="--share of --mailbox-bytes"):
            meet_as(mallory, p.address, inbox, {"X": [b"m" * 60_000]}, mode="async")
        assert isinstance(meet_as(mallory, p.address, inbox, {"X": [b"."]}, mode="async"),
                          str)
        with pytest.raises(tacoma.MailboxFull, match="--share of --mailbox-messages"):
            meet_as(mallory, p.address, inbox, {"X": [b"."]}, mode="async")
        # alice's own messages to her own resident fill the rest of its mailbox.
        for _ in range(6):
            assert isinstance(meet_as(alice, p.address, inbox, {"X": [b"a"]}, mode="async"),
                              str)
        with pytest.raises(tacoma.MailboxFull, match=f"the mailbox of {inbox} is full"):
            meet_as(alice, p.address, inbox, {"X": [b"a"]}, mode="async")
    finally:
        release(p, gate)
    serves(p)
