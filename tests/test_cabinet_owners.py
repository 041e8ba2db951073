"""Cabinets kept apart by principal: a private cabinet belongs to a program run for one
principal and is keyed by its owner as well as its name, so that nobody reaches, blocks or
learns of another's; a database of an earlier layout is upgraded (private cabinets from
before principals wait for the administrator to name their owner), and every principal's
cabinet bytes are bounded.

Two real identities of the tests' CA, alice and mallory, meet one place over TLS; the
attacker is an agent, written in each language, that runs alice's very program, or mallory
herself, as a client.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import uuid
from pathlib import Path

import pytest
import tacoma
from tacoma import Briefcase
from tacoma.client import PlaceClient
from tacoma.client._identity import Credentials
from tacoma.place.stores._cabinets import Store

from conftest import (
    AGENT,
    RunningPlace,
    fill,
    issue_identity,
    language_params,
    launch_place,
    small_disk,
    tacoma_cli,
)

LANGUAGES = language_params()

#: One program per language, run by alice and by mallory alike (so both run the same
#: program, `code:SHA256` of it), on cabinet C. DO=write replaces C's DAY with the
#: briefcase's DAY, private. Otherwise it reads C's DAY into READ, C's folders into FOLDERS
#: and C, if cabinets() lists it, into LISTED; DO=attack then appends to DAY and removes C.
#: Each step adds a RESULT line ("read: done", or "read: refused <why>").
OWNER = {
    "python": '''
c, what = bc.text("C")[0], bc.text("DO")[0]

def attempt(name, op):
    try:
        result = op()
    except Exception as exc:
        bc.append("RESULT", f"{name}: refused {exc}")
        return []
    bc.append("RESULT", name + ": done")
    return result

if what == "write":
    cabinet_replace(c, "DAY", bc["DAY"], private=True)
else:
    bc["READ"] = attempt("read", lambda: cabinet_read(c, "DAY"))
    bc["FOLDERS"] = attempt("folders", lambda: cabinet_folders(c))
    bc["LISTED"] = [x for x in attempt("list", cabinets) if x == c]
    if what == "attack":
        attempt("write", lambda: cabinet_append(c, "DAY", b"mallory was here"))
        attempt("remove", lambda: cabinet_remove(c))
''',
    "tcl": '''
set c [lindex [bc_text C] 0]
set what [lindex [bc_text DO] 0]
proc attempt {name script} {
    if {[catch {uplevel 1 $script} result]} {
        bc_append_text RESULT "$name: refused $result"
        return {}
    }
    bc_append_text RESULT "$name: done"
    return $result
}
if {$what eq "write"} {
    cabinet_replace $c DAY [bc_folder DAY] -private
} else {
    bc_replace READ [attempt read {cabinet_read $c DAY}]
    bc_replace FOLDERS [attempt folders {cabinet_folders $c}]
    foreach x [attempt list {cabinets}] { if {$x eq $c} { bc_append_text LISTED $x } }
    if {$what eq "attack"} {
        attempt write {cabinet_append $c DAY "mallory was here"}
        attempt remove {cabinet_remove $c}
    }
}
''',
    "scheme": '''
(define c (car (bc-text "C")))
(define what (car (bc-text "DO")))
(define (attempt name thunk)
  (catch #t
    (lambda ()
      (let ((result (thunk)))
        (bc-append "RESULT" (string-append name ": done"))
        result))
    (lambda (key . args)
      (bc-append "RESULT" (string-append name ": refused " (format #f "~a" args)))
      '())))
(if (string=? what "write")
    (cabinet-replace c "DAY" (bc-folder "DAY") #:private #t)
    (begin
      (bc-replace "READ" (attempt "read" (lambda () (cabinet-read c "DAY"))))
      (bc-replace "FOLDERS" (attempt "folders" (lambda () (cabinet-folders c))))
      (bc-replace "LISTED" (filter (lambda (x) (string=? x c)) (attempt "list" cabinets)))
      (when (string=? what "attack")
        (attempt "write" (lambda () (cabinet-append c "DAY" "mallory was here")))
        (attempt "remove" (lambda () (cabinet-remove c))))))
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
    tc_list cs, dos, day, got, all;
    if (tc_text(TC_SELF, "C", &cs) != 0 || tc_text(TC_SELF, "DO", &dos) != 0)
        tc_fail("%s", tc_error());
    const char *c = (const char *)cs.items[0].data, *what = (const char *)dos.items[0].data;
    if (strcmp(what, "write") == 0) {
        if (tc_folder(TC_SELF, "DAY", &day) != 0
            || tc_cabinet_replace(c, "DAY", day.items, day.count, 1) != 0)
            tc_fail("%s", tc_error());
        return 0;
    }
    int failed = tc_cabinet_read(c, "DAY", &got) != 0;
    report("read", failed);
    tc_replace(TC_SELF, "READ", got.items, failed ? 0 : got.count);
    failed = tc_cabinet_folders(c, &got) != 0;
    report("folders", failed);
    tc_replace(TC_SELF, "FOLDERS", got.items, failed ? 0 : got.count);
    failed = tc_cabinets(&all) != 0;
    report("list", failed);
    tc_replace(TC_SELF, "LISTED", NULL, 0);
    for (size_t i = 0; !failed && i < all.count; i++)
        if (strcmp((const char *)all.items[i].data, c) == 0)
            tc_append_text(TC_SELF, "LISTED", c);
    if (strcmp(what, "attack") == 0) {
        report("write", tc_cabinet_append(c, "DAY", "mallory was here", 16, 0) != 0);
        report("remove", tc_cabinet_remove(c, NULL) != 0);
    }
    return 0;
}
''',
}
OWNER["wasm"] = OWNER["c"]  # the C source, built for WebAssembly

#: Every step of a read or an attack, as RESULT says when none was refused.
READ_STEPS = ["read: done", "folders: done", "list: done"]
ATTACK_STEPS = [*READ_STEPS, "write: done", "remove: done"]

#: A Python agent that reads cabinet C's DAY (ERR: why not), for the upgrade's test.
READER = '''
try:
    bc["READ"] = cabinet_read(bc.text("C")[0], "DAY")
except CabinetError as exc:
    bc["ERR"] = [str(exc)]
'''


def found(answer: Briefcase) -> list[bytes]:
    """What READER read, checking that nothing refused it."""
    assert "ERR" not in answer, answer.text("ERR")
    return answer["READ"]


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


def fresh(base: str) -> str:
    """A cabinet name no test has used."""
    return f"{base}-{uuid.uuid4().hex[:8]}"


def owner(identity: tuple[str, Path], place: RunningPlace, language: str, what: str,
          cabinet: str, *day: bytes) -> Briefcase:
    """What the OWNER program answers, run as `identity` (DO=`what` on `cabinet`)."""
    folders: dict[str, list[str | bytes]] = {"DO": [what], "C": [cabinet]}
    if day:
        folders["DAY"] = list(day)
    return meet_as(identity, place, AGENT[language], folders, OWNER[language])


def seen(answer: Briefcase) -> dict[str, list[bytes]]:
    """What a read or an attack saw, the cabinet's name aside."""
    return {name: answer.get(name, []) for name in ("RESULT", "READ", "FOLDERS", "LISTED")}


def admin_list(state: Path) -> list[dict[str, object]]:
    out = tacoma_cli("cabinet", "list", "--json", "--state-dir", str(state))
    assert out.returncode == 0, out.stderr
    rows: list[dict[str, object]] = json.loads(out.stdout)["cabinets"]
    return rows


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_private_write_never_lands_in_a_public_cabinet_of_its_name(
        place: RunningPlace, alice: tuple[str, Path], mallory: tuple[str, Path],
        language: str) -> None:
    """mallory makes a public cabinet first, with the name alice's agent will then write
    private: alice's write makes her own private cabinet, and mallory, as a client or
    running alice's very program, never reads (or replaces) what alice wrote."""
    cabinet, secret = fresh(f"diary-{language}"), f"alice's secret in {language}".encode()
    cab(mallory, place, OP=["append"], CABINET=[cabinet], BAIT=["x"])
    owner(alice, place, language, "write", cabinet, secret)
    # mallory as a client: the public cabinet, with her bait and no DAY.
    assert cab(mallory, place, OP=["read"], CABINET=[cabinet], FOLDER=["DAY", "BAIT"]) == \
        Briefcase({"DAY": [], "BAIT": [b"x"]})
    assert cab(mallory, place, OP=["folders"], CABINET=[cabinet]).text("FOLDERS") == ["BAIT"]
    cab(mallory, place, OP=["replace"], CABINET=[cabinet], DAY=["mallory's"])
    # mallory's agent, running alice's program: the public one too.
    attack = owner(mallory, place, language, "attack", cabinet)
    assert seen(attack) == {"RESULT": [e.encode() for e in ATTACK_STEPS],
                            "READ": [b"mallory's"], "FOLDERS": [b"BAIT", b"DAY"],
                            "LISTED": [cabinet.encode()]}
    # alice's own, untouched: only her DAY, her cabinet listed once.
    mine = owner(alice, place, language, "read", cabinet)
    assert seen(mine) == {"RESULT": [e.encode() for e in READ_STEPS], "READ": [secret],
                          "FOLDERS": [b"DAY"], "LISTED": [cabinet.encode()]}
    # The administrator sees both: mallory's public one (removed by her attack), and
    # alice's, private to her.
    rows = [row for row in admin_list(place.state_dir) if row["name"] == cabinet]
    assert [(row["principal"], row["folders"]) for row in rows] == [(alice[0], ["DAY"])]
    assert place.proc.poll() is None


@pytest.mark.parametrize("language", LANGUAGES)
def test_another_owners_private_cabinet_does_not_keep_a_name_from_anyone(
        place: RunningPlace, alice: tuple[str, Path], mallory: tuple[str, Path],
        language: str) -> None:
    """mallory's private cabinet of a name, made first (by alice's very program), neither
    stops alice's private cabinet of that name nor tells her of itself: each reads her
    own."""
    cabinet = fresh(f"squat-{language}")
    owner(mallory, place, language, "write", cabinet, b"mallory's")
    owner(alice, place, language, "write", cabinet, b"alice's")  # no AgentFailed
    for who, day in ((alice, b"alice's"), (mallory, b"mallory's")):
        assert seen(owner(who, place, language, "read", cabinet)) == {
            "RESULT": [e.encode() for e in READ_STEPS], "READ": [day],
            "FOLDERS": [b"DAY"], "LISTED": [cabinet.encode()]}
    # Nobody else finds either: not a client, not another program of alice's.
    assert cab(alice, place, OP=["read"], CABINET=[cabinet], FOLDER=["DAY"]) == \
        Briefcase({"DAY": []})
    assert cabinet not in cab(mallory, place, OP=["list"]).text("CABINETS")
    principals = {row["principal"] for row in admin_list(place.state_dir)
                  if row["name"] == cabinet}
    assert principals == {alice[0], mallory[0]}


@pytest.mark.parametrize("language", LANGUAGES)
def test_another_owners_private_cabinet_reads_as_a_name_nobody_used(
        place: RunningPlace, alice: tuple[str, Path], mallory: tuple[str, Path],
        language: str) -> None:
    """Every answer mallory gets about alice's private cabinet, running alice's very
    program or as a client, is the answer she gets about a name nobody has used: no
    refusal, no error to tell them apart; and nothing of it touches alice's cabinet."""
    cabinet, unused = fresh(f"diary-{language}"), fresh(f"unused-{language}")
    owner(alice, place, language, "write", cabinet, b"rain")
    attack = seen(owner(mallory, place, language, "attack", cabinet))
    assert attack == seen(owner(mallory, place, language, "attack", unused))
    assert attack["RESULT"] == [e.encode() for e in ATTACK_STEPS]
    assert attack["READ"] == [] and attack["LISTED"] == []
    for name in (cabinet, unused):
        assert cab(mallory, place, OP=["read"], CABINET=[name], FOLDER=["DAY"]) == \
            Briefcase({"DAY": []})
        assert cab(mallory, place, OP=["folders"], CABINET=[name]) == Briefcase({"FOLDERS": []})
        assert cab(mallory, place, OP=["remove"], CABINET=[name]) == Briefcase()
        assert name not in cab(mallory, place, OP=["list"]).text("CABINETS")
    # alice's next meet of the same program finds it as she left it.
    assert seen(owner(alice, place, language, "read", cabinet))["READ"] == [b"rain"]
    assert place.proc.poll() is None


def test_the_administrator_tells_same_named_cabinets_apart(
        place: RunningPlace, alice: tuple[str, Path], mallory: tuple[str, Path]) -> None:
    """`tacoma cabinet` shows each cabinet of a name with its owner, acts on the one its
    options pick, and refuses to guess."""
    state, cabinet = str(place.state_dir), fresh("shared")
    cab(mallory, place, OP=["append"], CABINET=[cabinet], DAY=["public"])
    owner(alice, place, "python", "write", cabinet, b"alice's")
    owner(mallory, place, "python", "write", cabinet, b"mallory's")
    program = "code:" + hashlib.sha256(OWNER["python"].encode()).hexdigest()
    rows = [row for row in admin_list(place.state_dir) if row["name"] == cabinet]
    assert [(row["owner"], row["principal"]) for row in rows] == [
        (None, None), *sorted([(program, alice[0]), (program, mallory[0])])]
    table = tacoma_cli("cabinet", "list", "--state-dir", state).stdout
    assert f"private to {program} for {alice[0]!r}" in table
    assert f"private to {program} for {mallory[0]!r}" in table
    ambiguous = tacoma_cli("cabinet", "show", cabinet, "--state-dir", state)
    assert ambiguous.returncode == 2
    assert f"3 cabinets are named {cabinet!r}: public; private to {program} for " \
           in ambiguous.stderr and "--principal NAME" in ambiguous.stderr

    def show(*which: str) -> dict[str, object]:
        out = tacoma_cli("cabinet", "show", cabinet, "--json", *which, "--state-dir", state)
        assert out.returncode == 0, out.stderr
        shown: dict[str, object] = json.loads(out.stdout)["folders"]
        return shown

    assert show("--public") == {"DAY": ["public"]}
    assert show("--principal", alice[0]) == {"DAY": ["alice's"]}
    assert show("--program", program, "--principal", mallory[0]) == {"DAY": ["mallory's"]}
    put = tacoma_cli("cabinet", "put", cabinet, "-f", "DAY=from the administrator",
                     "--principal", alice[0], "--state-dir", state)
    assert put.returncode == 0 and f"for {alice[0]!r}" in put.stdout, put.stderr
    assert owner(alice, place, "python", "read", cabinet).text("READ") == \
        ["alice's", "from the administrator"]
    nobody = tacoma_cli("cabinet", "put", cabinet, "-f", "DAY=x", "--principal", "nobody",
                        "--state-dir", state)
    assert nobody.returncode == 2 and "put makes public cabinets only" in nobody.stderr
    removed = tacoma_cli("cabinet", "rm", cabinet, "--principal", mallory[0],
                         "--state-dir", state)
    assert removed.returncode == 0, removed.stderr
    assert owner(mallory, place, "python", "read", cabinet).text("READ") == ["public"]
    assert show("--principal", alice[0]) == {"DAY": ["alice's", "from the administrator"]}
    books(place.state_dir)


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
    # Anyone else finds no cabinet of that name (and is not told of one).
    assert found(meet_as(mallory, place, "ag_python", {"C": ["diary"]}, READER)) == []
    # Only the same program is the owner, for alice too.
    assert found(meet_as(alice, place, "ag_python", {"C": ["diary"]}, READER + "\n")) == []
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


#: The layout of version 1, as that tacoma made it: a cabinet's name was its key, and
#: triggers kept the books (an element cost its cabinet's name too).
V1_SCHEMA = """
CREATE TABLE cabinets (
    name TEXT PRIMARY KEY, owner TEXT, created REAL NOT NULL, updated REAL NOT NULL,
    principal TEXT, creator TEXT
);
CREATE TABLE elements (
    cabinet TEXT NOT NULL REFERENCES cabinets(name) ON DELETE CASCADE,
    folder TEXT NOT NULL, position INTEGER NOT NULL, data BLOB NOT NULL, writer TEXT,
    PRIMARY KEY (cabinet, folder, position)
);
CREATE TABLE charges (principal TEXT PRIMARY KEY, bytes INTEGER NOT NULL);
CREATE TABLE kept (only INTEGER PRIMARY KEY CHECK (only = 0), bytes INTEGER NOT NULL);
INSERT INTO kept VALUES (0, 0);
CREATE TRIGGER element_added AFTER INSERT ON elements BEGIN
    UPDATE kept
        SET bytes = bytes + length(NEW.data) + length(NEW.folder) + length(NEW.cabinet) + 32;
    INSERT INTO charges
        SELECT NEW.writer, length(NEW.data) + length(NEW.folder) + length(NEW.cabinet) + 32
        WHERE NEW.writer IS NOT NULL
        ON CONFLICT (principal) DO UPDATE SET bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER element_removed AFTER DELETE ON elements BEGIN
    UPDATE kept
        SET bytes = bytes - length(OLD.data) - length(OLD.folder) - length(OLD.cabinet) - 32;
    UPDATE charges
        SET bytes = bytes - length(OLD.data) - length(OLD.folder) - length(OLD.cabinet) - 32
        WHERE principal = OLD.writer;
    DELETE FROM charges WHERE principal = OLD.writer AND bytes <= 0;
END;
CREATE TRIGGER cabinet_added AFTER INSERT ON cabinets BEGIN
    UPDATE kept SET bytes = bytes + length(NEW.name) + 64;
    INSERT INTO charges SELECT NEW.creator, length(NEW.name) + 64
        WHERE NEW.creator IS NOT NULL
        ON CONFLICT (principal) DO UPDATE SET bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER cabinet_removed AFTER DELETE ON cabinets BEGIN
    UPDATE kept SET bytes = bytes - length(OLD.name) - 64;
    UPDATE charges SET bytes = bytes - length(OLD.name) - 64 WHERE principal = OLD.creator;
    DELETE FROM charges WHERE principal = OLD.creator AND bytes <= 0;
END;
PRAGMA user_version = 1;
"""


def v1_database(path: Path, program: str, alice: str, mallory: str) -> None:
    """A cabinets database of version 1: `diary`, private to `program` run for `alice`,
    `old`, private to `program` from version 0 and unclaimed, and the public `notes` that
    `mallory` made and `alice` wrote into too."""
    owner = "code:" + hashlib.sha256(program.encode()).hexdigest()
    db = sqlite3.connect(path)
    db.executescript(V1_SCHEMA)
    db.executemany("INSERT INTO cabinets VALUES (?, ?, 1.0, 1.0, ?, ?)",
                   [("diary", owner, alice, alice), ("old", owner, None, None),
                    ("notes", None, None, mallory)])
    db.executemany("INSERT INTO elements VALUES (?, ?, ?, ?, ?)",
                   [("diary", "DAY", 0, b"rain", alice), ("diary", "DAY", 1, b"sun", alice),
                    ("old", "DAY", 0, b"fog", None), ("notes", "LINES", 0, b"hello", mallory),
                    ("notes", "LINES", 1, b"hi", alice)])
    db.commit()
    db.close()


def test_a_database_of_version_1_is_upgraded_whole(
        start_place, tmp_path: Path, alice: tuple[str, Path],
        mallory: tuple[str, Path]) -> None:
    """Every cabinet keeps its owner and elements, every element its writer; the books are
    those of the rows; and the names are freed: mallory's private cabinet of alice's
    cabinet's name is now her own."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    v1_database(state / "cabinets.sqlite3", READER, alice[0], mallory[0])
    place = start_place(state_dir=state, quiet=False)
    assert "private cabinets waiting for their owner to be named: 1" in place.log()
    assert meet_as(alice, place, "ag_python", {"C": ["diary"]}, READER).text("READ") == \
        ["rain", "sun"]
    assert found(meet_as(mallory, place, "ag_python", {"C": ["diary"]}, READER)) == []
    assert "waits for its owner to be named" in \
        meet_as(alice, place, "ag_python", {"C": ["old"]}, READER).text("ERR")[0]
    assert cab(mallory, place, OP=["read"], CABINET=["notes"], FOLDER=["LINES"]).text(
        "LINES") == ["hello", "hi"]
    mine = "cabinet_replace('diary', 'DAY', [b'mallory'], private=True)\n" + READER
    assert meet_as(mallory, place, "ag_python", {"C": ["diary"]}, mine).text("READ") == \
        ["mallory"]
    assert meet_as(alice, place, "ag_python", {"C": ["diary"]}, READER).text("READ") == \
        ["rain", "sun"]
    assert place.stop() == 0
    store = Store(state / "cabinets.sqlite3")
    try:
        assert store.db.execute("PRAGMA user_version").fetchone() == (2,)
        assert store.db.execute("PRAGMA foreign_key_check").fetchall() == []
        assert [(c.name, c.principal) for c in store.cabinets()] == [
            ("diary", alice[0]), ("diary", mallory[0]), ("notes", None), ("old", None)]
        assert store.db.execute("SELECT data, writer FROM elements ORDER BY cabinet, "
                                "folder, position").fetchall()[:5] == [
            (b"rain", alice[0]), (b"sun", alice[0]), (b"fog", None), (b"hello", mallory[0]),
            (b"hi", alice[0])]
        kept, charged = store.accounts()
        assert (kept, charged) == store.recount()
        # diary's row and elements, and one element of notes, are alice's (the elements
        # now cost their data, their folder's name and 40 bytes)
        assert charged[alice[0]] == (5 + 64) + (4 + 3 + 40) + (3 + 3 + 40) + (2 + 5 + 40)
    finally:
        store.close()


def old_layouts(path: Path, version: int) -> None:
    if version == 0:
        old_database(path, READER)
    else:
        v1_database(path, READER, "alice", "mallory")


@pytest.mark.parametrize(("version", "in_the_way", "refusal"), [
    (0, "CREATE TABLE charges (x)", "charges already exists"),
    (1, "CREATE TABLE cabinets_before (x)", "already another table"),
])
def test_the_upgrade_is_one_transaction(tmp_path: Path, version: int, in_the_way: str,
                                        refusal: str) -> None:
    """A database the upgrade cannot finish is left in its old layout, whole: its tables,
    its rows, and (in version 1) its books and the triggers that keep them."""
    path = tmp_path / "cabinets.sqlite3"
    old_layouts(path, version)
    db = sqlite3.connect(path)
    before = {table: db.execute(f"SELECT * FROM {table}").fetchall()  # noqa: S608
              for table in ("cabinets", "elements", *(("charges", "kept") if version else ()))}
    schema = db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    db.execute(in_the_way)
    db.commit()
    db.close()
    with pytest.raises(sqlite3.OperationalError, match=refusal):
        Store(path)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (version,)
    assert db.execute("SELECT type, name, sql FROM sqlite_master WHERE name != ? "
                      "ORDER BY name", (in_the_way.split()[2],)).fetchall() == schema
    assert {table: db.execute(f"SELECT * FROM {table}").fetchall()  # noqa: S608
            for table in before} == before
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
