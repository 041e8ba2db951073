"""Cabinets: a place's own folders, kept in SQLite, that stay when agents leave.

TACOMA's file cabinets. A cabinet is a named set of folders (each a list of byte strings,
like a briefcase's) stored at one place. Agents reach cabinets only through the place, by
meeting the built-in agent `ag_cabinet` (answered by the place itself, like ag_echo), so
every language's own `meet` is its cabinet API, and each language wraps it in a few
functions; a cabinet is never a file an agent can open.

One SQLite database per place, `STATE/cabinets.sqlite3`, in WAL mode with synchronous=FULL:
a write is acknowledged (the meet answered) only after its transaction is durable, so a
place restarted or killed with SIGKILL (or a power cut) loses nothing it acknowledged. Each
`ag_cabinet` meet is one transaction. SQLite runs on one thread of its own, so the event
loop never waits for a disk.

Ownership: a write may make the cabinet it creates private (a PRIVATE folder in that meet).
A private cabinet belongs to its owner, a program run for a principal, both of which the
place gives the meet and the agent cannot choose: the program is `agent:NAME` for an
installed agent, `code:SHA256` (of its program) for one that brought its code, and the
principal is who launched the meet (so mallory running alice's program is not alice). A
private cabinet is keyed by its owner as well as its name: two owners' private cabinets of
one name are two cabinets, and a public one of that name is a third. For the agent that uses
it, a name means its owner's own private cabinet of that name if there is one, else the
public one. Nobody else's private cabinet is ever found: to everyone but its owner its name
reads as one nobody has used, so no error tells of it and none stops another owner from
making its own. A write with PRIVATE where the owner has no such cabinet makes one, even
where a public cabinet of that name exists; from then on the name means the private one to
that owner. (Writing into the public one would publish what its writer asked to keep
private; refusing would let anyone who makes a public cabinet first keep every owner from a
private one of that name.) Meets from clients outside the place run no program: they see
public cabinets only. The administrator's `tacoma cabinet` command reads the database
directly (`caller` None): a name alone means the public cabinet there too, and a `Cabinet`
(a row, from `cabinets()`) any one.

The layout is versioned (`PRAGMA user_version`) and upgraded when the database is opened,
in one transaction. Version 0 is the layout from before principals owned cabinets; in 1 a
cabinet's name was its key, so one owner's private cabinet kept the name from everyone;
from 2 a cabinet's key is a number, unique per name among public cabinets and per name and
owner among private ones. The upgrade moves the old tables aside, makes the new ones (their
triggers included) and copies the rows in, so the books after it are those of its rows.
Private cabinets from version 0 keep their program but have no principal: guessing one
would give the cabinet to whoever asks first, so they wait, readable by no agent, until the
administrator names the owner (`tacoma cabinet claim`), and the place says at start how
many wait. Their program's agents are told so (and do not fall through to a public cabinet
of that name, which would publish what they write).

Bytes are bounded: every element is charged to the principal whose meet wrote it (and a
cabinet's own row to its creator), in tables that triggers keep, so that every way rows
go (a folder replaced or removed, a cabinet removed with its elements) gives the bytes
back, whoever runs the SQL. A meet's write is refused whole (LimitExceeded) if it would
take the place past --cabinet-bytes, or its principal past its --share of it; a full
disk refuses it the same way, and the transaction rolled back leaves the database as it
was.

The ag_cabinet briefcase: OP (one of list, folders, read, append, replace, remove),
CABINET (its name), FOLDER (folder names, for read and remove), PRIVATE (on a write: into
the caller's own private cabinet of that name, made if need be), and for append and replace
the folders to write: every other folder of the briefcase (CODE excepted).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ...wire._briefcase import CABINET_REQUEST_FOLDERS, Briefcase
from ...wire._errors import CabinetError, LimitExceeded
from ...wire._text import escape, shown
from .._settings import PlaceSettings
from ._statedir import Disk, disk_full

__all__ = ["Cabinet", "Cabinets", "Caller", "Store"]

log = logging.getLogger("tacoma.place")

OPS = ("list", "folders", "read", "append", "replace", "remove")
_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,200}$")

#: The layout this code writes, kept in `PRAGMA user_version`. 0: the layout from before
#: principals owned cabinets (no principal, no charges); 1: a cabinet's name was its key.
#: Both are upgraded when opened.
VERSION = 2

# Each statement run on its own, in the transaction that makes or upgrades the layout
# (executescript would commit on its own). A private cabinet's key is its name and its
# owner, so that nobody's name is taken by another's cabinet; NULL is never equal in a
# UNIQUE index, so public cabinets (owner NULL) get an index of their own, and unclaimed
# ones (principal NULL, from version 0, whose names were unique) never meet a second of
# their name and program before they are claimed, which checks.
_TABLES = (
    """CREATE TABLE cabinets (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        owner TEXT,         -- the program it is private to (code:SHA256, agent:NAME); NULL: public
        principal TEXT,     -- with owner, the principal it is private to; NULL: not named yet
        creator TEXT,       -- the principal charged for its row; NULL: the administrator
        created REAL NOT NULL,
        updated REAL NOT NULL
    )""",
    "CREATE UNIQUE INDEX public_cabinets ON cabinets (name) WHERE owner IS NULL",
    "CREATE UNIQUE INDEX private_cabinets ON cabinets (name, owner, principal) "
    "WHERE owner IS NOT NULL",
    """CREATE TABLE elements (
        cabinet INTEGER NOT NULL REFERENCES cabinets(id) ON DELETE CASCADE,
        folder TEXT NOT NULL,
        position INTEGER NOT NULL,
        data BLOB NOT NULL,
        writer TEXT,        -- the principal charged for it; NULL: the administrator
        PRIMARY KEY (cabinet, folder, position)
    )""",
)
# The bytes kept, in all (kept, one row) and per principal (charges), kept by triggers so
# that no way of adding or removing rows (a cascade included) can skip the books. An
# element costs its data and folder name and 40 bytes, a cabinet its name and 64: roughly
# what SQLite's record and index entry take beyond them (an element's cabinet is a number
# in both), so that a million empty elements are not free. (Written out in each statement:
# this is SQL, not text to assemble.)
_ACCOUNTS = (
    "CREATE TABLE charges (principal TEXT PRIMARY KEY, bytes INTEGER NOT NULL)",
    "CREATE TABLE kept (only INTEGER PRIMARY KEY CHECK (only = 0), bytes INTEGER NOT NULL)",
    "INSERT INTO kept VALUES (0, 0)",
    """CREATE TRIGGER element_added AFTER INSERT ON elements BEGIN
        UPDATE kept SET bytes = bytes + length(NEW.data) + length(NEW.folder) + 40;
        INSERT INTO charges SELECT NEW.writer, length(NEW.data) + length(NEW.folder) + 40
            WHERE NEW.writer IS NOT NULL
            ON CONFLICT (principal) DO UPDATE SET bytes = bytes + excluded.bytes;
    END""",
    """CREATE TRIGGER element_removed AFTER DELETE ON elements BEGIN
        UPDATE kept SET bytes = bytes - length(OLD.data) - length(OLD.folder) - 40;
        UPDATE charges SET bytes = bytes - length(OLD.data) - length(OLD.folder) - 40
            WHERE principal = OLD.writer;
        DELETE FROM charges WHERE principal = OLD.writer AND bytes <= 0;
    END""",
    """CREATE TRIGGER cabinet_added AFTER INSERT ON cabinets BEGIN
        UPDATE kept SET bytes = bytes + length(NEW.name) + 64;
        INSERT INTO charges SELECT NEW.creator, length(NEW.name) + 64
            WHERE NEW.creator IS NOT NULL
            ON CONFLICT (principal) DO UPDATE SET bytes = bytes + excluded.bytes;
    END""",
    """CREATE TRIGGER cabinet_removed AFTER DELETE ON cabinets BEGIN
        UPDATE kept SET bytes = bytes - length(OLD.name) - 64;
        UPDATE charges SET bytes = bytes - length(OLD.name) - 64 WHERE principal = OLD.creator;
        DELETE FROM charges WHERE principal = OLD.creator AND bytes <= 0;
    END""",
)
# From an older layout: its tables (and version 1's books, whose triggers would otherwise
# move with them) out of the way, the new ones made as for a new database, the rows copied
# in through the new triggers, the old tables dropped. Version 0 has no principal, creator
# or writer: NULL, as the administrator's.
_MOVE_ASIDE = {
    0: (),
    1: ("DROP TRIGGER element_added", "DROP TRIGGER element_removed",
        "DROP TRIGGER cabinet_added", "DROP TRIGGER cabinet_removed",
        "DROP TABLE charges", "DROP TABLE kept"),
}
_MOVE_ASIDE_TABLES = ("ALTER TABLE elements RENAME TO elements_before",
                      "ALTER TABLE cabinets RENAME TO cabinets_before")
# A cabinet keeps its rowid of before as its number, which finds its elements by the old
# name's own index.
_COPY = {
    0: ("""INSERT INTO cabinets (id, name, owner, principal, creator, created, updated)
            SELECT rowid, name, owner, NULL, NULL, created, updated FROM cabinets_before""",
        """INSERT INTO elements (cabinet, folder, position, data, writer)
            SELECT cabinets_before.rowid, folder, position, data, NULL FROM elements_before
            JOIN cabinets_before ON cabinets_before.name = elements_before.cabinet"""),
    1: ("""INSERT INTO cabinets (id, name, owner, principal, creator, created, updated)
            SELECT rowid, name, owner, principal, creator, created, updated
            FROM cabinets_before""",
        """INSERT INTO elements (cabinet, folder, position, data, writer)
            SELECT cabinets_before.rowid, folder, position, data, writer FROM elements_before
            JOIN cabinets_before ON cabinets_before.name = elements_before.cabinet"""),
}
_DROP_BEFORE = ("DROP TABLE elements_before", "DROP TABLE cabinets_before")

T = TypeVar("T")


def check_name(name: str, what: str = "cabinet") -> str:
    if not _NAME.match(name):
        raise CabinetError(f"bad {what} name {name!r}: 1 to 200 letters, digits and _.:@-")
    return name


def claim_command(cabinet: str) -> str:
    """The command with which the administrator names an unclaimed cabinet's principal."""
    return f"tacoma cabinet claim {cabinet} --principal NAME"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a cabinet request: the program of the agent that made it (`code:SHA256` or
    `agent:NAME`; None for a client outside the place, which runs none) and the principal
    its meet is for ("" where nobody is authenticated: an --insecure place). A private
    cabinet belongs to one program run for one principal, and its bytes to the principal."""

    program: str | None
    principal: str


@dataclass(frozen=True, slots=True)
class Cabinet:
    """A cabinet as its row says, for the administrator: `key` tells apart cabinets of one
    name (a public one, and private ones of different owners)."""

    key: int
    name: str
    program: str | None  # the program it is private to; None: public
    principal: str | None  # with program, the principal; None: waits for it to be named
    created: float
    updated: float

    @property
    def unclaimed(self) -> bool:
        """Private, from before principals owned cabinets, and not yet given one."""
        return self.program is not None and self.principal is None

    @property
    def owner(self) -> str:
        """Whose it is, for the administrator's eyes (escaped: the agents' words)."""
        if self.program is None:
            return "public"
        if self.principal is None:
            return f"private to {escape(self.program)}, for a principal not yet named (claim)"
        return f"private to {escape(self.program)} for {shown(self.principal)}"


class Store:
    """The database itself, used from one thread at a time (the place's SQLite thread, or
    the `tacoma cabinet` command).

    `caller` None is the administrator (`tacoma cabinet`): a name means the public cabinet
    of that name, as for a client, and a `Cabinet` (from `cabinets()`) that one, whoever's
    it is; their writes are charged to nobody and never refused for their size. `limit` and
    `share` are --cabinet-bytes and --share (None: no bound, as for the administrator).
    """

    def __init__(self, path: Path, limit: int | None = None, share: float = 1.0) -> None:
        self.path = path
        self.limit = limit
        self.share = share
        # The place's alone (0600; SQLite gives its -wal and -shm files the same mode):
        # agents, whatever their uid, reach cabinets only through ag_cabinet.
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(path, 0o600)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self._upgrade()
        except BaseException:
            self.db.close()
            raise

    def _upgrade(self) -> None:
        """Make the layout, or bring an older one to VERSION, in one transaction."""
        if self.db.execute("PRAGMA user_version").fetchone()[0] == VERSION:
            return
        with self._transaction():  # another process may have done it meanwhile: ask again
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version == VERSION:
                return
            if version > VERSION:
                raise CabinetError(
                    f"{self.path} is in the layout of a newer tacoma (version {version}; this "
                    f"one knows up to {VERSION}): use that tacoma on this state directory")
            made = self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                   "name = 'cabinets'").fetchone() is not None
            if not made:
                steps: tuple[str, ...] = (*_TABLES, *_ACCOUNTS)
            else:
                steps = (*_MOVE_ASIDE[version], *_MOVE_ASIDE_TABLES, *_TABLES, *_ACCOUNTS,
                         *_COPY[version], *_DROP_BEFORE)
            for statement in steps:
                self.db.execute(statement)
            self.db.execute(f"PRAGMA user_version = {VERSION}")

    def close(self) -> None:
        self.db.close()

    def _find(self, cabinet: str | Cabinet, caller: Caller | None,
              public: bool = True) -> int | None:
        """The key of the cabinet `cabinet` means to `caller`, None if it means none.

        A name means the caller's own private cabinet of that name, else (with `public`) the
        public one: never another owner's, which is not looked for, so nothing here can tell
        of it. The administrator (`caller` None) names a private cabinet by its row, which
        is found if it is still as it was. The one refusal is for a name that is the
        caller's program's own cabinet from before principals, still unclaimed: it may be
        this caller's, and falling through to a public cabinet of that name would publish
        what the program keeps there."""
        if isinstance(cabinet, Cabinet):
            if caller is not None:
                raise ValueError("only the administrator names a cabinet by its row")
            row = self.db.execute(
                "SELECT id FROM cabinets WHERE id = ? AND name = ? AND owner IS ? "
                "AND principal IS ?",
                (cabinet.key, cabinet.name, cabinet.program, cabinet.principal)).fetchone()
            return None if row is None else int(row[0])
        if caller is not None and caller.program is not None:
            row = self.db.execute(
                "SELECT id FROM cabinets WHERE name = ? AND owner = ? AND principal = ?",
                (cabinet, caller.program, caller.principal)).fetchone()
            if row is not None:
                return int(row[0])
            if self.db.execute("SELECT 1 FROM cabinets WHERE name = ? AND owner = ? "
                               "AND principal IS NULL", (cabinet, caller.program)).fetchone():
                raise CabinetError(
                    f"cabinet {cabinet!r} is private, and was made before a private cabinet "
                    f"belonged to a principal as well as a program: it waits for its owner to "
                    f"be named by the place's administrator, with {claim_command(cabinet)}")
        if not public:
            return None
        row = self.db.execute("SELECT id FROM cabinets WHERE name = ? AND owner IS NULL",
                              (cabinet,)).fetchone()
        return None if row is None else int(row[0])

    def names(self, caller: Caller) -> list[str]:
        """The names of the cabinets `caller` may use: its own private ones and the public
        ones (a name that is both, once)."""
        rows = self.db.execute(
            "SELECT DISTINCT name FROM cabinets WHERE owner IS NULL "
            "OR (owner = ? AND principal = ?) ORDER BY name",
            (caller.program, caller.principal)).fetchall()
        return [row[0] for row in rows]

    def cabinets(self, name: str | None = None) -> list[Cabinet]:
        """Every cabinet (or every one named `name`), for the administrator: by name, the
        public one first, then the private ones by principal and program."""
        rows = self.db.execute(
            "SELECT id, name, owner, principal, created, updated FROM cabinets "
            "WHERE ?1 IS NULL OR name = ?1 ORDER BY name, owner IS NOT NULL, principal, owner",
            (name,)).fetchall()
        return [Cabinet(*row) for row in rows]

    def count(self) -> int:
        """How many cabinets there are, everyone's."""
        return int(self.db.execute("SELECT COUNT(*) FROM cabinets").fetchone()[0])

    def unclaimed(self) -> list[str]:
        """The private cabinets that wait for the administrator to name their principal."""
        rows = self.db.execute("SELECT name FROM cabinets WHERE owner IS NOT NULL AND "
                               "principal IS NULL ORDER BY name").fetchall()
        return [row[0] for row in rows]

    def folders(self, cabinet: str | Cabinet, caller: Caller | None) -> list[str]:
        """The names of a cabinet's folders; none for a cabinet it does not find."""
        key = self._find(cabinet, caller)
        rows = [] if key is None else self.db.execute(
            "SELECT DISTINCT folder FROM elements WHERE cabinet = ? ORDER BY folder",
            (key,)).fetchall()
        return [row[0] for row in rows]

    def read(self, cabinet: str | Cabinet, folder: str, caller: Caller | None) -> list[bytes]:
        """A folder of a cabinet; empty for a cabinet it does not find."""
        key = self._find(cabinet, caller)
        rows = [] if key is None else self.db.execute(
            "SELECT data FROM elements WHERE cabinet = ? AND folder = ? ORDER BY position",
            (key, folder)).fetchall()
        return [bytes(row[0]) for row in rows]

    def write(self, cabinet: str | Cabinet, folders: dict[str, list[bytes]], replace: bool,
              caller: Caller | None, private: bool = False) -> None:
        """Append to (or replace) folders of a cabinet, creating it (public, or with
        `private` the caller's own); one transaction, kept whole or not at all."""
        if private and (caller is None or caller.program is None):
            raise CabinetError("only an agent at the place can own a private cabinet")
        now = time.time()
        writer = None if caller is None else caller.principal
        with self._transaction():
            before = self._books(writer)
            key = self._find(cabinet, caller, public=not private)
            if key is None:
                if isinstance(cabinet, Cabinet):
                    raise CabinetError(f"cabinet {cabinet.name!r} ({cabinet.owner}) was "
                                       f"removed or given another owner meanwhile: nothing "
                                       f"was written; list the cabinets again")
                owner = (caller.program, caller.principal) if private and caller \
                    else (None, None)
                made = self.db.execute(
                    "INSERT INTO cabinets (name, owner, principal, creator, created, updated) "
                    "VALUES (?, ?, ?, ?, ?, ?)", (cabinet, *owner, writer, now, now))
                assert made.lastrowid is not None
                key = made.lastrowid
            else:
                self.db.execute("UPDATE cabinets SET updated = ? WHERE id = ?", (now, key))
            for folder, elements in folders.items():
                if replace:
                    self.db.execute("DELETE FROM elements WHERE cabinet = ? AND folder = ?",
                                    (key, folder))
                    start = 0
                else:
                    row = self.db.execute("SELECT MAX(position) FROM elements WHERE cabinet = ? "
                                          "AND folder = ?", (key, folder)).fetchone()
                    start = 0 if row[0] is None else row[0] + 1
                self.db.executemany(
                    "INSERT INTO elements (cabinet, folder, position, data, writer) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [(key, folder, start + i, e, writer) for i, e in enumerate(elements)])
            if writer is not None:
                self._bound(writer, before)

    def _books(self, principal: str | None) -> tuple[int, int]:
        """The bytes kept in all, and charged to `principal`."""
        kept = self.db.execute("SELECT bytes FROM kept").fetchone()[0]
        row = self.db.execute("SELECT bytes FROM charges WHERE principal = ?",
                              (principal,)).fetchone()
        return kept, 0 if row is None else row[0]

    def _bound(self, principal: str, before: tuple[int, int]) -> None:
        """Refuse a write (in its transaction, so that none of it stays) that took the place
        past --cabinet-bytes or `principal` past its share; one that made less is let be,
        so that whoever is over (the setting lowered since) can still tidy up."""
        if self.limit is None:
            return
        (kept, own), (kept_before, own_before) = self._books(principal), before
        if kept > self.limit and kept > kept_before:
            raise LimitExceeded(
                f"this place keeps at most {self.limit:,} bytes of cabinets (--cabinet-bytes) "
                f"and has {kept_before:,}: this write of {kept - kept_before:,} more was not "
                f"kept; remove cabinets or folders no longer needed, or ask the place's "
                f"administrator for a larger --cabinet-bytes")
        share = int(self.limit * self.share)
        if own > share and own > own_before:
            who = shown(principal) if principal else "anonymous"
            raise LimitExceeded(
                f"{who} has {own_before:,} bytes in cabinets at this place, and any one "
                f"principal may keep {share:,} (--share of --cabinet-bytes): this write of "
                f"{own - own_before:,} more was not kept; remove cabinets or folders of "
                f"yours no longer needed first")

    def accounts(self) -> tuple[int, dict[str, int]]:
        """The books as the triggers keep them: bytes kept in all, and per principal."""
        kept = self.db.execute("SELECT bytes FROM kept").fetchone()[0]
        return kept, dict(self.db.execute("SELECT principal, bytes FROM charges").fetchall())

    def recount(self) -> tuple[int, dict[str, int]]:
        """The books counted again from the rows (to check `accounts`)."""
        charges: dict[str, int] = {}
        kept = 0
        for sql in ("SELECT writer, length(data) + length(folder) + 40 FROM elements",
                    "SELECT creator, length(name) + 64 FROM cabinets"):
            for principal, cost in self.db.execute(sql):
                kept += cost
                if principal is not None:
                    charges[principal] = charges.get(principal, 0) + cost
        return kept, charges

    def remove(self, cabinet: str | Cabinet, folders: list[str] | None,
               caller: Caller | None) -> None:
        """Remove folders of a cabinet, or (folders None) the whole cabinet; nothing for a
        cabinet it does not find."""
        with self._transaction():
            key = self._find(cabinet, caller)
            if key is None:
                return
            if folders is None:
                self.db.execute("DELETE FROM cabinets WHERE id = ?", (key,))
            else:
                self.db.executemany("DELETE FROM elements WHERE cabinet = ? AND folder = ?",
                                    [(key, f) for f in folders])
                self.db.execute("UPDATE cabinets SET updated = ? WHERE id = ?",
                                (time.time(), key))

    def claim(self, cabinet: Cabinet, principal: str) -> None:
        """Name the principal a private cabinet belongs to, with its program (the
        administrator's: `tacoma cabinet claim`)."""
        with self._transaction():
            key = self._find(cabinet, None)
            if key is None:
                raise CabinetError(f"cabinet {cabinet.name!r} ({cabinet.owner}) was removed "
                                   f"or given another owner meanwhile: list the cabinets again")
            if cabinet.program is None:
                raise CabinetError(f"cabinet {cabinet.name!r} is public: any agent may use it, "
                                   f"so it has no owner to name")
            if self.db.execute("SELECT 1 FROM cabinets WHERE name = ? AND owner = ? "
                               "AND principal = ? AND id != ?",
                               (cabinet.name, cabinet.program, principal, key)).fetchone():
                raise CabinetError(
                    f"{shown(principal)} already has a private cabinet {cabinet.name!r} of "
                    f"{escape(cabinet.program)}: one owner has one cabinet of a name; remove "
                    f"one of the two first (tacoma cabinet rm)")
            self.db.execute("UPDATE cabinets SET principal = ? WHERE id = ?", (principal, key))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self.db.execute("COMMIT")
            except BaseException:
                # SQLite may have rolled back already (a full disk can do that).
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) != sqlite3.SQLITE_FULL:
                raise
            raise LimitExceeded(
                f"the disk of this place's cabinets ({self.path.parent}) is full: nothing of "
                f"this change was kept; try again once the place's administrator has freed "
                f"space there") from exc


class Cabinets:
    """The place's cabinets: `ag_cabinet` meets run here, on SQLite's own thread.

    `settings` give --cabinet-bytes and --share (None: their defaults)."""

    def __init__(self, path: Path, settings: PlaceSettings | None = None) -> None:
        self.path = path
        settings = settings or PlaceSettings(state_dir=path.parent)
        self.limit = settings.cabinet_bytes
        self.share = settings.share
        self.disk: Disk | None = None  # the state directory's, once the place knows it
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "tacoma-cabinets")
        self._store: Store | None = None

    def bound(self, disk: Disk) -> None:
        """The disk the cabinets are on: writes leave its reserve free, and without a
        --cabinet-bytes the place keeps a quarter of it at most (1 GiB at most)."""
        self.disk = disk
        if self.limit is None:
            self.limit = max(1 << 20, min(1 << 30, disk.size // 4))

    async def _run(self, call: Callable[[Store], T]) -> T:
        def in_thread() -> T:
            if self._store is None:
                self._store = Store(self.path, self.limit, self.share)
            return call(self._store)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, in_thread)
        except sqlite3.OperationalError as exc:
            # On a full disk SQLite cannot even open its shared-memory file: "disk I/O
            # error" then means a full disk, and says so.
            if disk_full(exc) or (self.disk is not None and self.disk.free() < self.disk.reserve):
                raise LimitExceeded(f"the disk of this place's cabinets ({self.path.parent}) "
                                    "is full: try again once the place's administrator has "
                                    "freed space there") from exc
            raise

    async def open(self) -> None:
        """Open the database (upgrading its layout), and say which private cabinets wait
        for the administrator to name their owner."""
        waiting = await self._run(lambda store: store.unclaimed())
        if waiting:
            names = ", ".join(shown(name) for name in waiting[:10])
            more = f" and {len(waiting) - 10:,} more" if len(waiting) > 10 else ""
            log.warning("private cabinets waiting for their owner to be named: %d (made "
                        "before a private cabinet belonged to a principal; no agent may use "
                        "them until the administrator names each one's with %s): %s%s",
                        len(waiting), claim_command("CABINET"), names, more)

    async def count(self) -> int:
        """How many cabinets the place has, private ones included (for its status)."""
        return await self._run(lambda store: store.count())

    async def serve(self, briefcase: Briefcase, who: str | None, principal: str) -> Briefcase:
        """Answer one ag_cabinet meet made by the agent `who` (None: a client outside the
        place) for `principal`."""
        caller = Caller(who, principal)
        op = _one(briefcase, "OP", f"one of {', '.join(OPS)}")
        if op not in OPS:
            raise CabinetError(f"unknown cabinet operation {op!r}; one of {', '.join(OPS)}")
        result = Briefcase()
        if op == "list":
            result.replace("CABINETS", await self._run(lambda s: s.names(caller)))
            return result
        cabinet = check_name(_one(briefcase, "CABINET", "the cabinet's name"))
        wanted = [check_name(f, "folder") for f in briefcase.text("FOLDER")] \
            if "FOLDER" in briefcase else None
        if op == "folders":
            result.replace("FOLDERS", await self._run(lambda s: s.folders(cabinet, caller)))
        elif op == "read":
            if not wanted:
                raise CabinetError("read needs the folders to read in FOLDER")
            names = wanted

            def read(store: Store) -> None:
                for folder in names:
                    result.replace(folder, store.read(cabinet, folder, caller))

            await self._run(read)
        elif op in ("append", "replace"):
            data = {check_name(name, "folder"): briefcase.folder(name)
                    for name in briefcase.folders() if name not in CABINET_REQUEST_FOLDERS}
            private = bool(briefcase.get("PRIVATE"))
            if self.disk is not None:
                self.disk.room(sum(len(e) for f in data.values() for e in f), "a cabinet write")
            await self._run(lambda s: s.write(cabinet, data, op == "replace", caller, private))
        else:  # remove
            await self._run(lambda s: s.remove(cabinet, wanted, caller))
        return result

    async def close(self) -> None:
        if self._store is not None:
            try:
                await self._run(lambda s: s.close())
            except RuntimeError:  # at interpreter exit the executor takes no more work
                self._executor.shutdown(wait=True)
                self._store.close()  # its thread is done: closing it here is safe
        self._executor.shutdown(wait=True)


def _one(briefcase: Briefcase, folder: str, what: str) -> str:
    values = briefcase.text(folder) if folder in briefcase else []
    if len(values) != 1:
        raise CabinetError(f"ag_cabinet needs {folder}: {what}")
    return values[0]
