"""Cabinets kept apart by principal: a private cabinet belongs to a program run for one
principal, a database of the layout before that is upgraded (its private cabinets wait for
the administrator to name their owner), and every principal's cabinet bytes are bounded.

Two real identities of the tests' CA, alice and mallory, meet one place over TLS; the
attacker is an agent, written in each language, that runs alice's very program.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import tacoma
from tacoma import Briefcase
from tacoma.client import PlaceClient
from tacoma.client._identity import Credentials
from tacoma.place._cabinets import Store

from conftest import (
    AGENT,
    RunningPlace,
    fill,
    issue_identity,
    language_params,
    launch_place,
    small_disk,
)

LANGUAGES = language_params()

#: One program per language, run by alice and by mallory alike (so both run the same
#: program, `code:SHA256` of it): DO=write makes cabinet C private with DAY=[rain];
#: DO=read reads DAY into READ; DO=attack tries to read, write, remove and list C's folders,
#: one RESULT line each ("read: refused <why>" or "read: done"), and LISTED is C if
#: cabinets() shows it.
OWNER = {
    "python": '''
c, what = bc.text("C")[0], bc.text("DO")[0]
if what == "write":
    cabinet_replace(c, "DAY", [b"rain"], private=True)
elif what == "read":
    bc["READ"] = cabinet_read(c, "DAY")
else:
    for name, op in (("read", lambda: cabinet_read(c, "DAY")),
                     ("write", lambda: cabinet_append(c, "DAY", b"mallory was here")),
                     ("remove", lambda: cabinet_remove(c)),
                     ("folders", lambda: cabinet_folders(c))):
        try:
            op()
            bc.append("RESULT", name + ": done")
        except Exception as exc:
            bc.append("RESULT", f"{name}: refused {exc}")
    bc["LISTED"] = [x for x in cabinets() if x == c]
''',
    "tcl": '''
set c [lindex [bc_text C] 0]
set what [lindex [bc_text DO] 0]
if {$what eq "write"} {
    cabinet_replace $c DAY [list rain] -private
} elseif {$what eq "read"} {
    bc_replace READ [cabinet_read $c DAY]
} else {
    foreach {name script} {
        read {cabinet_read $c DAY}
        write {cabinet_append $c DAY "mallory was here"}
        remove {cabinet_remove $c}
        folders {cabinet_folders $c}
    } {
        if {[catch $script message]} {
            bc_append_text RESULT "$name: refused $message"
        } else {
            bc_append_text RESULT "$name: done"
        }
    }
    foreach x [cabinets] { if {$x eq $c} { bc_append_text LISTED $x } }
}
''',
    "scheme": '''
(define c (car (bc-text "C")))
(define what (car (bc-text "DO")))
(define (try name thunk)
  (catch #t
    (lambda () (thunk) (bc-append "RESULT" (string-append name ": done")))
    (lambda (key . args)
      (bc-append "RESULT" (string-append name ": refused " (format #f "~a" args))))))
(cond
  ((string=? what "write") (cabinet-replace c "DAY" (list "rain") #:private #t))
  ((string=? what "read") (bc-replace "READ" (cabinet-read c "DAY")))
  (else
    (try "read" (lambda () (cabinet-read c "DAY")))
    (try "write" (lambda () (cabinet-append c "DAY" "mallory was here")))
    (try "remove" (lambda () (cabinet-remove c)))
    (try "folders" (lambda () (cabinet-folders c)))
    (bc-replace "LISTED" (filter (lambda (x) (string=? x c)) (cabinets)))))
''',
    "c": '''
#include <tacoma.h>
static void report(const char *name, int failed) {
    char line[1024];
    snprintf(line, sizeof line, "%s: %s%s", name, failed ? "refused " : "done",
             failed ? tc_error() : "");
    tc_append_text(TC_SELF, "RESULT", line);
}
int main(void) {
    tc_list cs, dos, got, all;
    if (tc_text(TC_SELF, "C", &cs) != 0 || tc_text(TC_SELF, "DO", &dos) != 0)
        tc_fail("%s", tc_error());
    const char *c = (const char *)cs.items[0].data, *what = (const char *)dos.items[0].data;
    tc_elem rain = {(unsigned char *)"rain", 4};
    if (strcmp(what, "write") == 0) {
        if (tc_cabinet_replace(c, "DAY", &rain, 1, 1) != 0) tc_fail("%s", tc_error());
    } else if (strcmp(what, "read") == 0) {
        if (tc_cabinet_read(c, "DAY", &got) != 0) tc_fail("%s", tc_error());
        tc_replace(TC_SELF, "READ", got.items, got.count);
    } else {
        report("read", tc_cabinet_read(c, "DAY", &got) != 0);
        report("write", tc_cabinet_append(c, "DAY", "mallory was here", 16, 0) != 0);
        report("remove", tc_cabinet_remove(c, NULL) != 0);
        report("folders", tc_cabinet_folders(c, &got) != 0);
        if (tc_cabinets(&all) != 0) tc_fail("%s", tc_error());
        for (size_t i = 0; i < all.count; i++)
            if (strcmp((const char *)all.items[i].data, c) == 0)
                tc_append_text(TC_SELF, "LISTED", c);
    }
    return 0;
}
''',
}

#: A Python agent that reads cabinet C's DAY (ERR: why not), for the upgrade's test.
READER = '''
try:
    bc["READ"] = cabinet_read(bc.text("C")[0], "DAY")
except CabinetError as exc:
    bc["ERR"] = [str(exc)]
'''


def new_identity(base: str) -> tuple[str, Path]:
    """A fresh client identity of the tests' CA: its name (the principal) and file."""
    name = f"{base}-{uuid.uuid4().hex[:8]}"
    return name, issue_identity(name)


@pytest.fixture(scope="module")
def alice() -> tuple[str, Path]:
    return new_identity("alice")


@pytest.fixture(scope="module")
def mallory() -> tuple[str, Path]:
    return new_identity("mallory")


def meet_as(identity: tuple[str, Path], place: RunningPlace, agent: str,
            folders: dict[str, list[str | bytes]], code: str | None = None) -> Briefcase:
    """A sync meet of `agent` at `place`, made over a connection of its own as `identity`."""
    async def meet() -> Briefcase:
        client = await PlaceClient.connect(place.address, credentials=Credentials(identity[1]))
        try:
            briefcase = Briefcase(folders)
            if code is not None:
                briefcase.replace(tacoma.CODE, [code])
            answer = await client.meet(agent, briefcase, timeout=60)
            assert isinstance(answer, Briefcase)
            return answer
        finally:
            client.close()

    return asyncio.run(meet())


def tacoma_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tacoma", *args], capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_same_program_run_for_another_principal_is_not_the_owner(
        place: RunningPlace, alice: tuple[str, Path], mallory: tuple[str, Path],
        language: str) -> None:
    agent, code, cabinet = AGENT[language], OWNER[language], f"diary-{language}"
    meet_as(alice, place, agent, {"DO": ["write"], "C": [cabinet]}, code)
    attack = meet_as(mallory, place, agent, {"DO": ["attack"], "C": [cabinet]}, code)
    results = attack.text("RESULT")
    assert [line.split(":")[0] for line in results] == ["read", "write", "remove", "folders"]
    for line in results:
        assert ": refused" in line and "private to its owner" in line, line
    assert attack.get("LISTED", []) == []
    # alice's next meet of the same program finds it as she left it.
    again = meet_as(alice, place, agent, {"DO": ["read"], "C": [cabinet]}, code)
    assert again.text("READ") == ["rain"]
    assert place.proc.poll() is None


# ------------------------------------------------------------------------- the upgrade
#: The layout of a database from before principals owned cabinets, as that tacoma made it.
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS cabinets (
    name TEXT PRIMARY KEY,
    owner TEXT,              -- NULL: public
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS elements (
    cabinet TEXT NOT NULL REFERENCES cabinets(name) ON DELETE CASCADE,
    folder TEXT NOT NULL,
    position INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (cabinet, folder, position)
);
"""


def old_database(path: Path, program: str) -> None:
    """A cabinets database of the old layout: `diary`, private to `program`, and the public
    `notes`."""
    owner = "code:" + hashlib.sha256(program.encode()).hexdigest()
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA)
    db.executemany("INSERT INTO cabinets VALUES (?, ?, 1.0, 1.0)",
                   [("diary", owner), ("notes", None)])
    db.executemany("INSERT INTO elements VALUES (?, ?, 0, ?)",
                   [("diary", "DAY", b"rain"), ("notes", "LINES", b"hello")])
    db.commit()
    db.close()


def test_an_upgraded_private_cabinet_waits_for_the_administrator_to_name_its_owner(
        start_place, tmp_path: Path, alice: tuple[str, Path],
        mallory: tuple[str, Path]) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    old_database(state / "cabinets.sqlite3", READER)
    place = start_place(state_dir=state, quiet=False)
    log = place.log()
    assert "private cabinets waiting for their owner to be named: 1" in log
    assert "'diary'" in log and "tacoma cabinet claim CABINET --principal NAME" in log
    # Nobody's yet: not alice's (whose program made it), not mallory's.
    for who in (alice, mallory):
        result = meet_as(who, place, "ag_python", {"C": ["diary"]}, READER)
        assert "READ" not in result
        assert "waits for its owner to be named by the place's administrator, with tacoma " \
               "cabinet claim diary --principal NAME" in result.text("ERR")[0]
    assert tacoma.meet(place.target("ag_cabinet"), {"OP": ["read"], "CABINET": ["notes"],
                                                    "FOLDER": ["LINES"]}).text("LINES") \
        == ["hello"]  # public stays public
    # The administrator names alice.
    out = tacoma_cli("cabinet", "claim", "diary", "--principal", alice[0],
                     "--state-dir", str(state))
    assert out.returncode == 0, out.stderr
    assert f"for {alice[0]!r}" in out.stdout
    assert meet_as(alice, place, "ag_python", {"C": ["diary"]}, READER).text("READ") == \
        ["rain"]
    refused = meet_as(mallory, place, "ag_python", {"C": ["diary"]}, READER)
    assert "READ" not in refused and "private to its owner" in refused.text("ERR")[0]
    # Only the same program is the owner, for alice too.
    other = meet_as(alice, place, "ag_python", {"C": ["diary"]}, READER + "\n")
    assert "private to its owner" in other.text("ERR")[0]
    listed = json.loads(tacoma_cli("cabinet", "list", "--json", "--state-dir",
                                   str(state)).stdout)
    assert {row["name"]: row["principal"] for row in listed["cabinets"]} == \
        {"diary": alice[0], "notes": None}
    # What claim refuses.
    public = tacoma_cli("cabinet", "claim", "notes", "--principal", alice[0],
                        "--state-dir", str(state))
    assert public.returncode == 2 and "cabinet 'notes' is public" in public.stderr
    missing = tacoma_cli("cabinet", "claim", "nope", "--principal", alice[0],
                         "--state-dir", str(state))
    assert missing.returncode == 2 and "no cabinet 'nope'" in missing.stderr
    assert place.stop() == 0
    # Upgraded once: the next start has nothing waiting.
    again = start_place(state_dir=state, quiet=False)
    assert "waiting for their owner" not in again.log()


def test_the_upgrade_is_one_transaction(tmp_path: Path) -> None:
    """A database the upgrade cannot finish is left in the old layout, whole."""
    path = tmp_path / "cabinets.sqlite3"
    old_database(path, READER)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE charges (x)")  # in the way of the upgrade's own
    db.commit()
    db.close()
    with pytest.raises(sqlite3.OperationalError, match="charges already exists"):
        Store(path)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (0,)
    assert [row[1] for row in db.execute("PRAGMA table_info(cabinets)")] == \
        ["name", "owner", "created", "updated"]
    db.close()


# ------------------------------------------------------------------------- the bound
def cab(identity: tuple[str, Path], place: RunningPlace,
        **folders: list[str | bytes]) -> Briefcase:
    return meet_as(identity, place, "ag_cabinet", dict(folders))


def books(state: Path) -> tuple[int, dict[str, int]]:
    """The place's cabinet books, checked against its rows."""
    store = Store(state / "cabinets.sqlite3")
    try:
        assert store.accounts() == store.recount()
        return store.accounts()
    finally:
        store.close()


def test_each_principal_writes_at_most_its_share(
        start_place, alice: tuple[str, Path], mallory: tuple[str, Path]) -> None:
    place = start_place("--cabinet-bytes", "64K", "--share", "0.25")  # 16 KiB each
    bob = new_identity("bob")
    cab(alice, place, OP=["append"], CABINET=["a"], X=[b"a" * 10_000])
    before = books(place.state_dir)
    # One meet's write of two folders, the second past her share: none of it is kept.
    with pytest.raises(tacoma.LimitExceeded, match=r"--share of --cabinet-bytes") as refused:
        cab(alice, place, OP=["append"], CABINET=["a"], X=[b"x"], Y=[b"y" * 7_000])
    assert alice[0] in str(refused.value)
    with pytest.raises(tacoma.LimitExceeded, match=r"--cabinet-bytes"):
        cab(alice, place, OP=["append"], CABINET=["new"], Y=[b"y" * 7_000])
    assert books(place.state_dir) == before
    assert cab(alice, place, OP=["read"], CABINET=["a"], FOLDER=["X", "Y"]) == \
        Briefcase({"X": [b"a" * 10_000], "Y": []})
    assert "new" not in cab(alice, place, OP=["list"]).text("CABINETS")
    # bob still writes, into alice's public cabinet too: charged to him, not to her.
    cab(bob, place, OP=["append"], CABINET=["a"], B=[b"b" * 10_000])
    assert books(place.state_dir)[1][bob[0]] > 10_000
    assert books(place.state_dir)[1][alice[0]] == before[1][alice[0]]
    # An agent's writes are its principal's: mallory's agent is refused at her share.
    with pytest.raises(tacoma.AgentFailed, match="--cabinet-bytes"):
        meet_as(mallory, place, "ag_python", {},
                "for i in range(20):\n    cabinet_append('m', 'X', b'm' * 1000)\n")
    # Giving bytes back (a replace, a remove) makes room again.
    cab(alice, place, OP=["replace"], CABINET=["a"], X=[b"a"])
    cab(alice, place, OP=["append"], CABINET=["a"], Y=[b"y" * 7_000])
    cab(bob, place, OP=["remove"], CABINET=["a"])
    assert bob[0] not in books(place.state_dir)[1]
    assert alice[0] not in books(place.state_dir)[1]  # her elements went with the cabinet
    cab(alice, place, OP=["append"], CABINET=["a2"], X=[b"a" * 15_000])
    kept, charged = books(place.state_dir)
    assert kept == sum(charged.values())


def test_the_place_keeps_at_most_cabinet_bytes(start_place, alice: tuple[str, Path],
                                               mallory: tuple[str, Path]) -> None:
    place = start_place("--cabinet-bytes", "32K", "--share", "1")
    cab(alice, place, OP=["append"], CABINET=["a"], X=[b"a" * 20_000])
    with pytest.raises(tacoma.LimitExceeded, match="at most 32,768 bytes of cabinets "
                                                   r"\(--cabinet-bytes\)"):
        cab(mallory, place, OP=["append"], CABINET=["m"], X=[b"m" * 20_000])
    assert cab(mallory, place, OP=["list"]).text("CABINETS") == ["a"]


def test_cabinet_bytes_is_checked() -> None:
    with pytest.raises(ValueError, match="cabinet_bytes must be at least 0"):
        tacoma.PlaceSettings(cabinet_bytes=-1)
    out = tacoma_cli("place", "--cabinet-bytes", "lots", "--listen", "127.0.0.1:0")
    assert out.returncode == 2 and "'lots' is not a size" in out.stderr


# ------------------------------------------------------------------------- a full disk
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_disk_refuses_a_write_and_the_place_serves_on(tmp_path: Path) -> None:
    with small_disk(tmp_path / "state", "24m") as state:
        # The disk stops the write, not the principal's share of the cabinets.
        place = launch_place(state, "--pool-size", "0", "--cabinet-bytes", "1G")
        try:
            kept = [os.urandom(1000)]
            tacoma.meet(place.target("ag_cabinet"), {"OP": ["append"], "CABINET": ["kept"],
                                                     "X": kept})
            fill(state / "filler")
            big = os.urandom(2 * 2**20)
            # Refused before SQLite meets the full disk: the place keeps a reserve free.
            with pytest.raises(tacoma.LimitExceeded, match="disk is nearly full"):
                tacoma.meet(place.target("ag_cabinet"), {"OP": ["append"],
                                                         "CABINET": ["big"], "X": [big]})
            assert tacoma.meet(place.target("ag_echo"), {"OK": [b"1"]}) == {"OK": [b"1"]}
            assert tacoma.meet(place.target("ag_cabinet"), {
                "OP": ["read"], "CABINET": ["kept"], "FOLDER": ["X"]})["X"] == kept
            assert "big" not in tacoma.meet(place.target("ag_cabinet"),
                                            {"OP": ["list"]}).text("CABINETS")
            # Room again: the same write is kept.
            (state / "filler").unlink()
            tacoma.meet(place.target("ag_cabinet"), {"OP": ["append"], "CABINET": ["big"],
                                                     "X": [big]})
            assert tacoma.meet(place.target("ag_cabinet"), {
                "OP": ["read"], "CABINET": ["big"], "FOLDER": ["X"]})["X"] == [big]
        finally:
            assert place.stop() == 0, place.log()
        db = sqlite3.connect(state / "cabinets.sqlite3")
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        db.close()
        books(state)
