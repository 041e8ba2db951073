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

Ownership: whoever first writes a cabinet may make it private (a PRIVATE folder in that
meet); a private cabinet is then readable and writable only by that owner. An owner is
the identity the place gives the agent that made the meet, which the agent cannot choose:
`agent:NAME` for an installed agent, `code:SHA256` (of its program) for one that brought
its code. Meets from clients outside the place have no identity: they see public cabinets
only. The administrator's `tacoma cabinet` command reads the database directly.

The ag_cabinet briefcase: OP (one of list, folders, read, append, replace, remove),
CABINET (its name), FOLDER (folder names, for read and remove), PRIVATE (on a write: make a
new cabinet private), and for append and replace the folders to write: every other folder
of the briefcase (CODE excepted).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from ..wire._briefcase import CABINET_REQUEST_FOLDERS, Briefcase
from ..wire._errors import CabinetError

__all__ = ["Cabinets", "Store"]

OPS = ("list", "folders", "read", "append", "replace", "remove")
_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,200}$")

SCHEMA = """
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

T = TypeVar("T")


def check_name(name: str, what: str = "cabinet") -> str:
    if not _NAME.match(name):
        raise CabinetError(f"bad {what} name {name!r}: 1 to 200 letters, digits and _.:@-")
    return name


class Store:
    """The database itself, used from one thread at a time (the place's SQLite thread, or
    the `tacoma cabinet` command)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # The place's alone (0600; SQLite gives its -wal and -shm files the same mode):
        # agents, whatever their uid, reach cabinets only through ag_cabinet.
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(path, 0o600)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def _allowed(self, cabinet: str, who: str | None, admin: bool) -> bool:
        """Whether the cabinet exists; raises CabinetError if it is private to another
        (the administrator's `tacoma cabinet` may do anything)."""
        row = self.db.execute("SELECT owner FROM cabinets WHERE name = ?", (cabinet,)).fetchone()
        if row is not None and not admin and row[0] is not None and row[0] != who:
            raise CabinetError(f"cabinet {cabinet!r} is private to its owner")
        return row is not None

    def names(self, who: str | None, everything: bool = False) -> list[str]:
        rows = self.db.execute("SELECT name, owner FROM cabinets ORDER BY name").fetchall()
        return [name for name, owner in rows if everything or owner is None or owner == who]

    def folders(self, cabinet: str, who: str | None = None, admin: bool = False) -> list[str]:
        self._allowed(cabinet, who, admin)
        rows = self.db.execute("SELECT DISTINCT folder FROM elements WHERE cabinet = ? "
                               "ORDER BY folder", (cabinet,)).fetchall()
        return [row[0] for row in rows]

    def read(self, cabinet: str, folder: str, who: str | None = None,
             admin: bool = False) -> list[bytes]:
        self._allowed(cabinet, who, admin)
        rows = self.db.execute("SELECT data FROM elements WHERE cabinet = ? AND folder = ? "
                               "ORDER BY position", (cabinet, folder)).fetchall()
        return [bytes(row[0]) for row in rows]

    def info(self, cabinet: str) -> tuple[str | None, float, float] | None:
        row = self.db.execute("SELECT owner, created, updated FROM cabinets WHERE name = ?",
                              (cabinet,)).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def write(self, cabinet: str, folders: dict[str, list[bytes]], replace: bool,
              who: str | None, private: bool = False, admin: bool = False) -> None:
        """Append to (or replace) folders of a cabinet, creating it; one transaction."""
        if private and who is None and not admin:
            raise CabinetError("only an agent at the place can own a private cabinet")
        now = time.time()
        with self._transaction():
            if not self._allowed(cabinet, who, admin):
                self.db.execute("INSERT INTO cabinets VALUES (?, ?, ?, ?)",
                                (cabinet, who if private else None, now, now))
            else:
                self.db.execute("UPDATE cabinets SET updated = ? WHERE name = ?", (now, cabinet))
            for folder, elements in folders.items():
                if replace:
                    self.db.execute("DELETE FROM elements WHERE cabinet = ? AND folder = ?",
                                    (cabinet, folder))
                    start = 0
                else:
                    row = self.db.execute("SELECT MAX(position) FROM elements WHERE cabinet = ? "
                                          "AND folder = ?", (cabinet, folder)).fetchone()
                    start = 0 if row[0] is None else row[0] + 1
                self.db.executemany("INSERT INTO elements VALUES (?, ?, ?, ?)",
                                    [(cabinet, folder, start + i, e)
                                     for i, e in enumerate(elements)])

    def remove(self, cabinet: str, folders: list[str] | None, who: str | None,
               admin: bool = False) -> None:
        """Remove folders of a cabinet, or (folders None) the whole cabinet."""
        with self._transaction():
            self._allowed(cabinet, who, admin)
            if folders is None:
                self.db.execute("DELETE FROM cabinets WHERE name = ?", (cabinet,))
            else:
                self.db.executemany("DELETE FROM elements WHERE cabinet = ? AND folder = ?",
                                    [(cabinet, f) for f in folders])
                self.db.execute("UPDATE cabinets SET updated = ? WHERE name = ?",
                                (time.time(), cabinet))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")


class Cabinets:
    """The place's cabinets: `ag_cabinet` meets run here, on SQLite's own thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "tacoma-cabinets")
        self._store: Store | None = None

    async def _run(self, call: Callable[[Store], T]) -> T:
        def in_thread() -> T:
            if self._store is None:
                self._store = Store(self.path)
            return call(self._store)

        return await asyncio.get_running_loop().run_in_executor(self._executor, in_thread)

    async def open(self) -> None:
        await self._run(lambda store: None)

    async def count(self) -> int:
        """How many cabinets the place has, private ones included (for its status)."""
        return len(await self._run(lambda store: store.names(None, everything=True)))

    async def serve(self, briefcase: Briefcase, who: str | None) -> Briefcase:
        """Answer one ag_cabinet meet made by `who` (None: a client outside the place)."""
        op = _one(briefcase, "OP", f"one of {', '.join(OPS)}")
        if op not in OPS:
            raise CabinetError(f"unknown cabinet operation {op!r}; one of {', '.join(OPS)}")
        result = Briefcase()
        if op == "list":
            result.replace("CABINETS", await self._run(lambda s: s.names(who)))
            return result
        cabinet = check_name(_one(briefcase, "CABINET", "the cabinet's name"))
        wanted = [check_name(f, "folder") for f in briefcase.text("FOLDER")] \
            if "FOLDER" in briefcase else None
        if op == "folders":
            result.replace("FOLDERS", await self._run(lambda s: s.folders(cabinet, who)))
        elif op == "read":
            if not wanted:
                raise CabinetError("read needs the folders to read in FOLDER")
            names = wanted

            def read(store: Store) -> None:
                for folder in names:
                    result.replace(folder, store.read(cabinet, folder, who))

            await self._run(read)
        elif op in ("append", "replace"):
            data = {check_name(name, "folder"): briefcase.folder(name)
                    for name in briefcase.folders() if name not in CABINET_REQUEST_FOLDERS}
            private = bool(briefcase.get("PRIVATE"))
            await self._run(lambda s: s.write(cabinet, data, op == "replace", who, private))
        else:  # remove
            await self._run(lambda s: s.remove(cabinet, wanted, who))
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
