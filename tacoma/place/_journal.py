"""The journal: what a place promised about its meets, in SQLite, so that it outlives the place.

One row per meet id, in `STATE/journal.sqlite3` (WAL, synchronous=FULL, the place's alone):

- every accepted **async** meet, written (and synced) before the place answers Accepted: its
  agent, briefcase, principal and timeout. A place that restarts after a crash or a short
  grace runs again those that had not ended (at least once), and the agent can tell from its
  RERUN folder; an async meet over --max-meets waits here (`queued`) until a slot frees;
- a meet whose agent went on a **trip** from here (the trip's id and deadline): a home that
  restarts waits for the trip's end again, and records it;
- a **sync** meet whose caller's connection was lost before the answer: it runs on to its
  end and its outcome is recorded, for the caller to ask by id rather than run it again;
- each one's outcome (result briefcase, or error) for --keep-results seconds after it ended.

Sync meets whose callers stay connected are not written at all: the meet path pays nothing.
A meet id the place knows nothing of is *unknown*: wrong, expired, or a sync meet the place
was killed during (sync meets are at most once and leave no record until answered).

SQLite runs on one thread of its own (as for the cabinets), and writes are batched: all
writes queued while one transaction commits go into the next (group commit), so a burst of
async meets pays one fsync, not one each. Written here because the standard library's
sqlite3 has no group commit, and aiosqlite (a thread per connection) would not add one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from ..wire._briefcase import Briefcase

__all__ = ["STATES", "Journal", "Record"]

#: What `tacoma status` says of a meet.
STATES = ("queued", "running", "done", "failed", "unknown")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meets (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,          -- async, or sync (a trip from here, or its caller lost)
    agent TEXT NOT NULL,
    principal TEXT NOT NULL,
    via TEXT NOT NULL,
    caller TEXT,                 -- the agent here that made it (its identity), if one did
    timeout REAL,
    briefcase BLOB,              -- an async meet's, until it ends
    state TEXT NOT NULL,         -- queued, running, done, failed
    runs INTEGER NOT NULL DEFAULT 0,
    accepted REAL NOT NULL,
    ended REAL,
    trip TEXT,                   -- the trip its agent went on from here
    deadline REAL,               -- the trip's, in time.time()
    result BLOB,                 -- the result briefcase, when done
    error TEXT                   -- [kind, message, detail] in JSON, when failed
);
CREATE INDEX IF NOT EXISTS meets_ended ON meets(ended);
CREATE INDEX IF NOT EXISTS meets_trip ON meets(trip);
"""


@dataclass(slots=True)
class Record:
    """One meet as the journal has it."""

    id: str
    kind: str
    agent: str
    principal: str
    via: str
    caller: str | None
    timeout: float | None
    state: str
    runs: int
    accepted: float
    ended: float | None
    trip: str | None
    deadline: float | None
    result: Briefcase | None
    error: tuple[str, str, str] | None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Record:
        """A record from a row of `_SELECT` (the fields in order)."""
        *head, result, error = row
        return cls(*head,  # type: ignore[call-arg]  # the columns, in the fields' order
                   Briefcase.from_wire(msgpack.unpackb(result, raw=False))
                   if result is not None else None,
                   tuple(json.loads(error)) if error is not None else None)


_SELECT = ("SELECT id, kind, agent, principal, via, caller, timeout, state, runs, accepted, "
           "ended, trip, deadline, result, error FROM meets")


def pack(briefcase: Briefcase) -> bytes:
    packed: bytes = msgpack.packb(briefcase.to_wire(), use_bin_type=True)
    return packed


def _outcome(result: Briefcase | None, error: tuple[str, str, str] | None
             ) -> tuple[str, bytes | None, str | None]:
    """A meet's outcome as its columns: state, result, error."""
    if error is not None:
        return "failed", None, json.dumps(error)
    return "done", pack(result) if result is not None else None, None


class _Store:
    """The database, used from the journal's thread only."""

    def __init__(self, path: Path) -> None:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(path, 0o600)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)


class Journal:
    """The place's journal of meets (see the module's docstring)."""

    def __init__(self, path: Path, keep_seconds: float) -> None:
        self.path = path
        self.keep_seconds = keep_seconds
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "tacoma-journal")
        self._store: _Store | None = None
        self._pending: list[tuple[Callable[[sqlite3.Connection], Any],
                                  asyncio.Future[Any]]] = []
        self._committing = False
        #: Futures of callers waiting for a meet to end (`tacoma status --wait`), by id.
        self._watchers: dict[str, list[asyncio.Future[None]]] = {}

    # -- the thread
    def _open_store(self) -> _Store:
        if self._store is None:
            self._store = _Store(self.path)
        return self._store

    def _commit(self, batch: list[Callable[[sqlite3.Connection], Any]]) -> list[Any]:
        """Run a batch of writes in one transaction; each one's value or exception (each in
        a savepoint of its own, so that one failing write does not undo the others)."""
        db = self._open_store().db
        outcomes: list[Any] = []
        db.execute("BEGIN IMMEDIATE")
        try:
            for write in batch:
                db.execute("SAVEPOINT one")
                try:
                    outcomes.append(write(db))
                except Exception as exc:  # noqa: BLE001 - handed to that write's caller
                    db.execute("ROLLBACK TO one")
                    outcomes.append(exc)
                db.execute("RELEASE one")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return outcomes

    async def _write(self, write: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run `write` in a transaction; returns once it is durable (group commit)."""
        future = asyncio.get_running_loop().create_future()
        self._pending.append((write, future))
        self._flush()
        return await future

    def _flush(self) -> None:
        if self._committing or not self._pending:
            return
        self._committing = True
        batch, self._pending = self._pending, []
        loop = asyncio.get_running_loop()
        done = loop.run_in_executor(self._executor, self._commit, [w for w, _ in batch])

        def committed(outcomes: asyncio.Future[list[Any]]) -> None:
            self._committing = False
            failure = outcomes.exception() if not outcomes.cancelled() else None
            for i, (_, future) in enumerate(batch):
                if future.done():
                    continue
                if outcomes.cancelled() or failure is not None:
                    future.set_exception(failure or RuntimeError("the journal closed"))
                elif isinstance(value := outcomes.result()[i], Exception):
                    future.set_exception(value)
                else:
                    future.set_result(value)
            self._flush()

        done.add_done_callback(committed)

    async def _read(self, read: Callable[[sqlite3.Connection], Any]) -> Any:
        def in_thread() -> Any:
            return read(self._open_store().db)

        return await asyncio.get_running_loop().run_in_executor(self._executor, in_thread)

    # -- the place's side
    async def open(self) -> list[Record]:
        """Open the journal, forget outcomes older than --keep-results, and return the meets
        that had not ended when the place last stopped (oldest first)."""
        await self.prune()
        rows = await self._read(lambda db: db.execute(
            f"{_SELECT} WHERE ended IS NULL ORDER BY accepted").fetchall())
        return [Record.from_row(row) for row in rows]

    async def prune(self) -> None:
        """Forget the outcomes older than --keep-results."""
        cutoff = time.time() - self.keep_seconds
        await self._write(lambda db: db.execute(
            "DELETE FROM meets WHERE ended IS NOT NULL AND ended < ?", (cutoff,)))

    async def accept(self, meet_id: str, agent: str, principal: str, via: str,
                     caller: str | None, timeout: float | None, briefcase: Briefcase,
                     state: str) -> str:
        """Write an accepted async meet: "new", or for an id the journal has, "same" (the
        same principal sent it again: it is taken once) or "taken" (someone else's)."""
        packed = pack(briefcase)

        def write(db: sqlite3.Connection) -> str:
            row = db.execute("SELECT principal FROM meets WHERE id = ?", (meet_id,)).fetchone()
            if row is not None:
                return "same" if row[0] == principal else "taken"
            db.execute("INSERT INTO meets (id, kind, agent, principal, via, caller, timeout, "
                       "briefcase, state, accepted) VALUES (?, 'async', ?, ?, ?, ?, ?, ?, ?, ?)",
                       (meet_id, agent, principal, via, caller, timeout, packed, state,
                        time.time()))
            return "new"

        outcome: str = await self._write(write)
        return outcome

    async def briefcase(self, meet_id: str) -> Briefcase:
        """A journaled async meet's briefcase (empty if it has none any more)."""
        row = await self._read(lambda db: db.execute(
            "SELECT briefcase FROM meets WHERE id = ?", (meet_id,)).fetchone())
        if row is None or row[0] is None:
            return Briefcase()
        return Briefcase.from_wire(msgpack.unpackb(row[0], raw=False))

    async def started(self, meet_id: str) -> int:
        """Count one more start of a journaled meet; how many it has had, this one included."""
        def write(db: sqlite3.Connection) -> int:
            db.execute("UPDATE meets SET state = 'running', runs = runs + 1 WHERE id = ?",
                       (meet_id,))
            row = db.execute("SELECT runs FROM meets WHERE id = ?", (meet_id,)).fetchone()
            return int(row[0]) if row else 1

        runs: int = await self._write(write)
        return runs

    async def trip(self, meet_id: str, agent: str, principal: str, via: str,
                   timeout: float | None, trip: str, deadline: float) -> None:
        """A meet's agent goes on a trip from here: its home waits for the end even if it
        restarts meanwhile."""
        def write(db: sqlite3.Connection) -> None:
            updated = db.execute("UPDATE meets SET trip = ?, deadline = ? WHERE id = ? AND "
                                 "principal = ?", (trip, deadline, meet_id, principal)).rowcount
            if not updated:
                db.execute("INSERT INTO meets (id, kind, agent, principal, via, timeout, state, "
                           "runs, accepted, trip, deadline) VALUES (?, 'sync', ?, ?, ?, ?, "
                           "'running', 1, ?, ?, ?)",
                           (meet_id, agent, principal, via, timeout, time.time(), trip,
                            deadline))

        await self._write(write)

    async def trip_not_begun(self, meet_id: str, principal: str) -> None:
        """The trip `trip` wrote did not begin after all (the first go failed): the meet is
        what it was, an async meet to run again after a restart, say."""
        await self._write(lambda db: db.execute(
            "UPDATE meets SET trip = NULL, deadline = NULL WHERE id = ? AND principal = ?",
            (meet_id, principal)))

    async def ended(self, meet_id: str, agent: str, principal: str, via: str,
                    result: Briefcase | None, error: tuple[str, str, str] | None) -> None:
        """Record how a meet ended (for a sync meet not yet in the journal, its row too)."""
        state, packed, failure = _outcome(result, error)

        def write(db: sqlite3.Connection) -> None:
            now = time.time()
            updated = db.execute("UPDATE meets SET state = ?, ended = ?, result = ?, error = ?, "
                                 "briefcase = NULL WHERE id = ? AND principal = ?",
                                 (state, now, packed, failure, meet_id, principal)).rowcount
            if not updated:
                db.execute("INSERT INTO meets (id, kind, agent, principal, via, state, runs, "
                           "accepted, ended, result, error) VALUES (?, 'sync', ?, ?, ?, ?, 1, "
                           "?, ?, ?, ?)",
                           (meet_id, agent, principal, via, state, now, now, packed, failure))

        await self._write(write)
        self._ended(meet_id)

    async def trip_ended(self, trip: str, result: Briefcase | None,
                         error: tuple[str, str, str] | None) -> str | None:
        """Record the end of a trip that began here and that nobody waits for any more (its
        caller's deadline passed, its connection was lost, or the place restarted): the
        meet's id, or None if the journal has no such trip. An end that comes after the
        trip was recorded as failed (timed out, lost) replaces that record: the agent did
        end, and this is how."""
        state, packed, failure = _outcome(result, error)

        def write(db: sqlite3.Connection) -> str | None:
            row = db.execute("SELECT id, state FROM meets WHERE trip = ?", (trip,)).fetchone()
            if row is None or row[1] == "done":
                return row[0] if row else None
            db.execute("UPDATE meets SET state = ?, ended = ?, result = ?, error = ?, "
                       "briefcase = NULL WHERE id = ?",
                       (state, time.time(), packed, failure, row[0]))
            return str(row[0])

        meet_id: str | None = await self._write(write)
        if meet_id is not None:
            self._ended(meet_id)
        return meet_id

    def _ended(self, meet_id: str) -> None:
        """Wake whoever waits for meet `meet_id` to end."""
        for watcher in self._watchers.pop(meet_id, []):
            if not watcher.done():
                watcher.set_result(None)

    async def get(self, meet_id: str) -> Record | None:
        row = await self._read(lambda db: db.execute(
            f"{_SELECT} WHERE id = ?", (meet_id,)).fetchone())
        return Record.from_row(row) if row is not None else None

    def watch(self, meet_id: str) -> asyncio.Future[None]:
        """A future done when meet `meet_id` ends (its outcome is then in the journal)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watchers = self._watchers.setdefault(meet_id, [])
        watchers[:] = [w for w in watchers if not w.done()]
        watchers.append(future)
        return future

    def unwatch(self, meet_id: str, future: asyncio.Future[None]) -> None:
        watchers = self._watchers.get(meet_id)
        if watchers is not None and future in watchers:
            watchers.remove(future)
            if not watchers:
                del self._watchers[meet_id]

    async def close(self) -> None:
        while self._pending or self._committing:
            await asyncio.sleep(0.01)
        if self._store is not None:
            store = self._store
            try:
                await asyncio.get_running_loop().run_in_executor(self._executor,
                                                                 store.db.close)
            except RuntimeError:  # at interpreter exit the executor takes no more work
                store.db.close()
        self._executor.shutdown(wait=True)
