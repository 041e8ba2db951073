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

Rows are keyed by principal and meet id: a client may choose its meet's id, and one
principal's id never finds, hides or takes another's meet. Every byte of briefcases and
results the journal keeps is charged to its principal, who may keep at most its --share
of --journal-bytes (LimitExceeded, naming the setting, before the disk is full); a result
that does not fit its principal's share is recorded as a failure saying so. A write the
disk cannot take is a typed error (LimitExceeded for a full disk, PlaceUnavailable
otherwise) to its own caller, and leaves the database as it was.

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
import collections
import concurrent.futures
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from ...wire._briefcase import Briefcase
from ...wire._errors import LimitExceeded, PlaceUnavailable, TacomaError, kind_of
from ..stores._statedir import Disk, disk_full

__all__ = ["STATES", "Journal", "Record"]

log = logging.getLogger("tacoma.place")

#: Seconds before the journal is asked again to write an outcome it could not (doubled up
#: to 30 s).
RECORD_PAUSE = 0.5

#: What `tacoma status` says of a meet.
STATES = ("queued", "running", "done", "failed", "unknown")

#: The schema's version, in SQLite's user_version: 0 was one row per id (before ids were
#: per principal); 2 keys a row by principal and id; 3 adds the agents' passports and the
#: paths of trips' ends.
SCHEMA_VERSION = 3
#: The columns version 3 added, as ALTER TABLE adds them.
_ADDED = ("papers BLOB", "passport TEXT", "path BLOB")

_TABLE = """
CREATE TABLE IF NOT EXISTS meets (
    id TEXT NOT NULL,
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
    error TEXT,                  -- [kind, message, detail] in JSON, when failed
    papers BLOB,                 -- an async meet's passport (see trust._passport)
    passport TEXT,               -- the digest of its agent's passport, if it had one
    path BLOB,                   -- a trip's: the hand-overs its end took (msgpack)
    PRIMARY KEY (principal, id)
)"""
SCHEMA = f"""{_TABLE};
CREATE INDEX IF NOT EXISTS meets_ended ON meets(ended);
CREATE INDEX IF NOT EXISTS meets_trip ON meets(trip);
"""
#: What every row holds of briefcases, results and failures, as the shares count it.
_HELD = ("COALESCE(length(briefcase), 0) + COALESCE(length(result), 0) "
         "+ COALESCE(length(error), 0)")


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
    papers: bytes = b""  # an async meet's passport, to hand on after a restart
    passport: str = ""  # the digest of its agent's passport ("": it had none)
    path: list[list[Any]] | None = None  # a trip's, as its home checked it (PathStep.to_wire)

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Record:
        """A record from a row of `_SELECT` (the fields in order)."""
        *head, result, error, papers, passport, path = row
        return cls(*head,  # type: ignore[call-arg]  # the columns, in the fields' order
                   Briefcase.from_wire(msgpack.unpackb(result, raw=False))
                   if result is not None else None,
                   tuple(json.loads(error)) if error is not None else None,
                   papers or b"", passport or "",
                   msgpack.unpackb(path, raw=False) if path is not None else None)


_SELECT = ("SELECT id, kind, agent, principal, via, caller, timeout, state, runs, accepted, "
           "ended, trip, deadline, result, error, papers, passport, path FROM meets")


def pack(briefcase: Briefcase) -> bytes:
    packed: bytes = msgpack.packb(briefcase.to_wire(), use_bin_type=True)
    return packed


#: The most characters of a failure's message and of its detail (a traceback) the journal
#: keeps: an agent chooses its own failure's text, and it is kept for --keep-results.
ERROR_MESSAGE, ERROR_DETAIL = 16 * 1024, 64 * 1024


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else f"{text[:most]}... ({len(text) - most:,} more)"


def _outcome(result: Briefcase | None, error: tuple[str, str, str] | None
             ) -> tuple[str, bytes | None, str | None]:
    """A meet's outcome as its columns: state, result, error (its texts cut)."""
    if error is not None:
        kind, message, detail = error
        return "failed", None, json.dumps([kind[:64], _cut(message, ERROR_MESSAGE),
                                           _cut(detail, ERROR_DETAIL)])
    return "done", pack(result) if result is not None else None, None


class _Store:
    """The database, used from the journal's thread only."""

    def __init__(self, path: Path) -> None:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(path, 0o600)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        old = self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                              "name = 'meets'").fetchone()
        if old is not None and version < 2:
            self._upgrade()
        elif old is not None and version < SCHEMA_VERSION:
            have = {row[1] for row in self.db.execute("PRAGMA table_info(meets)")}
            for column in _ADDED:
                if column.split()[0] not in have:
                    self.db.execute(f"ALTER TABLE meets ADD COLUMN {column}")
        self.db.executescript(SCHEMA)
        self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _upgrade(self) -> None:
        """A journal of ids shared by all principals, moved to per-principal keys in one
        transaction (SQLite cannot change a table's key in place)."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("ALTER TABLE meets RENAME TO meets_old")
            db.execute("DROP INDEX IF EXISTS meets_ended")
            db.execute("DROP INDEX IF EXISTS meets_trip")
            db.execute(_TABLE)
            columns = ("id, kind, agent, principal, via, caller, timeout, briefcase, state, "
                       "runs, accepted, ended, trip, deadline, result, error")
            db.execute(f"INSERT INTO meets ({columns}) "  # noqa: S608 - constants only
                       f"SELECT {columns} FROM meets_old")
            db.execute("DROP TABLE meets_old")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise


    def commit(self, batch: list[Callable[[sqlite3.Connection], Any]]) -> list[Any]:
        """Run a batch of writes in one transaction; each one's value or exception (each in
        a savepoint of its own, so that one failing write does not undo the others).

        A full disk or an I/O error makes SQLite roll the whole transaction back, the
        savepoints with it: then each write runs again in a transaction of its own, so
        that those that fit are kept and each failure reaches its own caller only.
        """
        db = self.db
        outcomes: list[Any] = []
        db.execute("BEGIN IMMEDIATE")
        try:
            for write in batch:
                db.execute("SAVEPOINT one")
                try:
                    outcomes.append(write(db))
                except Exception as exc:  # noqa: BLE001 - handed to that write's caller
                    if not db.in_transaction:  # rolled back whole: see above
                        return self._one_by_one(batch)
                    db.execute("ROLLBACK TO one")
                    outcomes.append(exc)
                db.execute("RELEASE one")
            db.execute("COMMIT")
        except sqlite3.Error:
            if db.in_transaction:
                db.execute("ROLLBACK")
            return self._one_by_one(batch)
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return outcomes

    def _one_by_one(self, batch: list[Callable[[sqlite3.Connection], Any]]) -> list[Any]:
        db = self.db
        outcomes: list[Any] = []
        for write in batch:
            try:
                db.execute("BEGIN IMMEDIATE")
                outcome = write(db)
                db.execute("COMMIT")
            except Exception as exc:  # noqa: BLE001 - handed to that write's caller
                if db.in_transaction:
                    db.execute("ROLLBACK")
                outcome = exc
            outcomes.append(outcome)
        return outcomes


class Journal:
    """The place's journal of meets (see the module's docstring)."""

    def __init__(self, path: Path, keep_seconds: float) -> None:
        self.path = path
        self.keep_seconds = keep_seconds
        #: The bytes of briefcases and results kept (--journal-bytes), any one principal's
        #: part of them (its --share), and the disk they are on (see `bound`).
        self.limit = 1 << 62
        self.share = self.limit
        self.disk: Disk | None = None
        self.held: collections.Counter[str] = collections.Counter()  # by principal
        self.total = 0
        self._rows: dict[tuple[str, str], int] = {}  # what each row holds, as charged
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "tacoma-journal")
        self._store: _Store | None = None
        self._pending: list[tuple[Callable[[sqlite3.Connection], Any],
                                  asyncio.Future[Any]]] = []
        self._committing = False
        #: Futures of callers waiting for a meet to end (`tacoma status --wait`), by id: a
        #: set, so that adding and removing one is O(1) however many wait.
        self._watchers: dict[str, set[asyncio.Future[None]]] = {}

    def bound(self, limit: int, share: float, disk: Disk) -> None:
        """Keep at most `limit` bytes of briefcases and results, `share` of them for any one
        principal, and leave `disk`'s reserve free."""
        self.limit = limit
        self.share = max(1, int(limit * share))
        self.disk = disk

    # -- the thread
    def _open_store(self) -> _Store:
        if self._store is None:
            self._store = _Store(self.path)
        return self._store

    def _typed(self, exc: BaseException) -> BaseException:
        """A database error as the place's callers take it (map_exceptions at the journal's
        boundary): a full disk is LimitExceeded, any other PlaceUnavailable."""
        if not isinstance(exc, sqlite3.Error):
            return exc
        if disk_full(exc):
            typed: TacomaError = LimitExceeded(
                f"the place's disk is full: its journal ({self.path}) cannot keep more; try "
                "again later, or ask the place's operator for room")
        else:
            typed = PlaceUnavailable(f"the place's journal ({self.path}) cannot be "
                                     f"written: {exc}")
        typed.__cause__ = exc
        return typed

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
        done = loop.run_in_executor(self._executor,
                                    lambda: self._open_store().commit([w for w, _ in batch]))

        def committed(outcomes: asyncio.Future[list[Any]]) -> None:
            self._committing = False
            failure = outcomes.exception() if not outcomes.cancelled() else None
            for i, (_, future) in enumerate(batch):
                if future.done():
                    continue
                if outcomes.cancelled() or failure is not None:
                    future.set_exception(self._typed(failure) if failure is not None
                                         else RuntimeError("the journal closed"))
                elif isinstance(value := outcomes.result()[i], Exception):
                    future.set_exception(self._typed(value))
                else:
                    future.set_result(value)
            self._flush()

        done.add_done_callback(committed)

    async def _read(self, read: Callable[[sqlite3.Connection], Any]) -> Any:
        def in_thread() -> Any:
            return read(self._open_store().db)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor,
                                                                    in_thread)
        except sqlite3.Error as exc:
            raise self._typed(exc) from exc

    # -- what each principal keeps
    def _charge(self, principal: str, meet_id: str, size: int, what: str) -> None:
        """Count `size` more bytes of `principal`'s meet against the journal's shares (and
        the disk's room); LimitExceeded, naming the setting, if they do not fit."""
        freed = self._rows.get((principal, meet_id), 0)
        if self.held[principal] - freed + size > self.share:
            raise LimitExceeded(
                f"{principal or 'anonymous'} keeps {self.held[principal]:,} bytes of "
                f"briefcases and results at this place, and {what} ({size:,} bytes) would "
                f"pass its share of {self.share:,} (--share of --journal-bytes); ask for "
                "results by id (tacoma status) to let them go, or wait for them to expire")
        if self.total - freed + size > self.limit:
            raise LimitExceeded(f"this place keeps its most of {self.limit:,} bytes of "
                                f"briefcases and results (--journal-bytes): {what} "
                                f"({size:,} bytes) cannot be kept now; try again later")
        if self.disk is not None and size > freed:
            self.disk.room(size - freed, what)
        self._set(principal, meet_id, size)

    def _set(self, principal: str, meet_id: str, size: int) -> None:
        key = (principal, meet_id)
        change = size - self._rows.pop(key, 0)
        if size:
            self._rows[key] = size
        self.total += change
        self.held[principal] += change
        if self.held[principal] <= 0:
            del self.held[principal]

    # -- the place's side
    async def open(self) -> list[Record]:
        """Open the journal, forget outcomes older than --keep-results, and return the meets
        that had not ended when the place last stopped (oldest first). On a full disk the
        old outcomes stay until a later prune."""
        try:
            await self.prune()
        except LimitExceeded as exc:
            log.warning("cannot forget old outcomes now: %s", exc)
        held = await self._read(lambda db: db.execute(
            f"SELECT principal, id, {_HELD} FROM meets "  # noqa: S608 - constants only
            f"WHERE {_HELD} > 0").fetchall())
        for principal, meet_id, size in held:
            self._set(principal, meet_id, int(size))
        rows = await self._read(lambda db: db.execute(
            f"{_SELECT} WHERE ended IS NULL ORDER BY accepted").fetchall())
        return [Record.from_row(row) for row in rows]

    async def prune(self) -> None:
        """Forget the outcomes older than --keep-results."""
        cutoff = time.time() - self.keep_seconds

        def write(db: sqlite3.Connection) -> list[tuple[str, str]]:
            gone = db.execute("SELECT principal, id FROM meets WHERE ended IS NOT NULL AND "
                              "ended < ?", (cutoff,)).fetchall()
            db.execute("DELETE FROM meets WHERE ended IS NOT NULL AND ended < ?", (cutoff,))
            return gone

        for principal, meet_id in await self._write(write):
            self._set(principal, meet_id, 0)

    async def accept(self, meet_id: str, agent: str, principal: str, via: str,
                     caller: str | None, timeout: float | None, briefcase: Briefcase,
                     state: str, papers: bytes = b"", passport: str = "") -> str:
        """Write an accepted async meet: "new", or "same" if the journal has the id from
        the same principal (sent again: it is taken once; ids are per principal).
        LimitExceeded if its briefcase is more than its principal may keep here."""
        key = (principal, meet_id)
        packed = pack(briefcase)

        def write(db: sqlite3.Connection) -> str:
            row = db.execute("SELECT 1 FROM meets WHERE principal = ? AND id = ?",
                             key[::-1]).fetchone()
            if row is not None:
                return "same"
            db.execute("INSERT INTO meets (id, kind, agent, principal, via, caller, timeout, "
                       "briefcase, state, accepted, papers, passport) VALUES (?, 'async', ?, "
                       "?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (meet_id, agent, principal, via, caller, timeout, packed, state,
                        time.time(), papers or None, passport or None))
            return "new"

        if key in self._rows:
            # Sent again while (or after) the first is written: writes run in order, so
            # this one finds the first's row, unless the first failed.
            again: str = await self._write(write)
            if again == "new":
                self._set(principal, meet_id, len(packed))
            return again
        self._charge(principal, meet_id, len(packed), "an async meet's briefcase")
        try:
            outcome: str = await self._write(write)
        except BaseException:
            self._set(principal, meet_id, 0)
            raise
        if outcome == "same":  # a row without a briefcase any more: nothing held
            self._set(principal, meet_id, 0)
        return outcome

    async def briefcase(self, meet_id: str, principal: str) -> Briefcase:
        """A journaled async meet's briefcase (empty if it has none any more)."""
        row = await self._read(lambda db: db.execute(
            "SELECT briefcase FROM meets WHERE principal = ? AND id = ?",
            (principal, meet_id)).fetchone())
        if row is None or row[0] is None:
            return Briefcase()
        return Briefcase.from_wire(msgpack.unpackb(row[0], raw=False))

    async def started(self, meet_id: str, principal: str) -> int:
        """Count one more start of a journaled meet; how many it has had, this one included."""
        def write(db: sqlite3.Connection) -> int:
            db.execute("UPDATE meets SET state = 'running', runs = runs + 1 WHERE "
                       "principal = ? AND id = ?", (principal, meet_id))
            row = db.execute("SELECT runs FROM meets WHERE principal = ? AND id = ?",
                             (principal, meet_id)).fetchone()
            return int(row[0]) if row else 1

        runs: int = await self._write(write)
        return runs

    async def trip(self, meet_id: str, agent: str, principal: str, via: str,
                   timeout: float | None, trip: str, deadline: float,
                   passport: str = "") -> None:
        """A meet's agent goes on a trip from here: its home waits for the end even if it
        restarts meanwhile (an end is taken for the trip's passport, `passport`, only)."""
        def write(db: sqlite3.Connection) -> None:
            updated = db.execute("UPDATE meets SET trip = ?, deadline = ?, passport = ? WHERE "
                                 "id = ? AND principal = ?",
                                 (trip, deadline, passport or None, meet_id,
                                  principal)).rowcount
            if not updated:
                db.execute("INSERT INTO meets (id, kind, agent, principal, via, timeout, state, "
                           "runs, accepted, trip, deadline, passport) VALUES (?, 'sync', ?, ?, "
                           "?, ?, 'running', 1, ?, ?, ?, ?)",
                           (meet_id, agent, principal, via, timeout, time.time(), trip,
                            deadline, passport or None))

        await self._write(write)

    async def trip_not_begun(self, meet_id: str, principal: str) -> None:
        """The trip `trip` wrote did not begin after all (the first go failed): the meet is
        what it was, an async meet to run again after a restart, say."""
        await self._write(lambda db: db.execute(
            "UPDATE meets SET trip = NULL, deadline = NULL WHERE id = ? AND principal = ?",
            (meet_id, principal)))

    async def ended_when_room(self, meet_id: str, agent: str, principal: str, via: str,
                              result: Briefcase | None, error: tuple[str, str, str] | None,
                              stopping: Callable[[], bool], path: bytes | None = None) -> None:
        """`ended`, tried again while the journal cannot write it (a full disk, most
        likely, that frees as outcomes expire): the outcome is kept in memory meanwhile (its
        meet holds its slot), and if the place stops first (`stopping`), the journal still
        has the meet unended: an async one runs again at the next start."""
        pause = RECORD_PAUSE
        while True:
            try:
                await self.ended(meet_id, agent, principal, via, result, error, path)
                return
            except TacomaError as exc:
                if stopping():
                    log.error("the outcome of meet %s is lost: the journal cannot write it "
                              "and the place stops: %s", meet_id, exc)
                    return
                log.warning("cannot record the outcome of meet %s yet (trying again in "
                            "%g s): %s", meet_id, pause, exc)
            except Exception:
                log.exception("cannot record the outcome of meet %s in the journal", meet_id)
                return
            await asyncio.sleep(pause)
            pause = min(pause * 2, 30.0)

    async def prune_while_open(self) -> None:
        """Forget outcomes older than --keep-results, every so often, until cancelled."""
        while True:
            await asyncio.sleep(min(3600.0, max(1.0, self.keep_seconds / 4)))
            try:
                await self.prune()
            except Exception:
                log.exception("pruning the journal failed")

    def _keep(self, meet_id: str, principal: str, result: Briefcase | None,
              error: tuple[str, str, str] | None
              ) -> tuple[str, bytes | None, str | None, int]:
        """A meet's outcome as its columns (state, result, error), charged to `principal`
        (and the bytes it held before, to give back if the write fails): a result more
        than the principal may keep is recorded as a failure saying so."""
        before = self._rows.get((principal, meet_id), 0)
        state, packed, failure = _outcome(result, error)
        try:
            self._charge(principal, meet_id, len(packed or b"") + len(failure or ""),
                         "the meet's result" if packed is not None else "the meet's failure")
        except LimitExceeded as exc:
            state, packed, failure = _outcome(None, (
                kind_of(exc), f"the meet ended, but its outcome is not kept: {exc}", ""))
            self._set(principal, meet_id, len(failure or ""))  # a line: always kept
        return state, packed, failure, before

    async def ended(self, meet_id: str, agent: str, principal: str, via: str,
                    result: Briefcase | None, error: tuple[str, str, str] | None,
                    path: bytes | None = None) -> None:
        """Record how a meet ended (for a sync meet not yet in the journal, its row too;
        `path`: a trip's, see trust._passport.PathStep)."""
        state, packed, failure, before = self._keep(meet_id, principal, result, error)

        def write(db: sqlite3.Connection) -> None:
            now = time.time()
            updated = db.execute("UPDATE meets SET state = ?, ended = ?, result = ?, error = ?, "
                                 "briefcase = NULL, papers = NULL, "
                                 "path = COALESCE(?, path) WHERE id = ? AND principal = ?",
                                 (state, now, packed, failure, path, meet_id,
                                  principal)).rowcount
            if not updated:
                db.execute("INSERT INTO meets (id, kind, agent, principal, via, state, runs, "
                           "accepted, ended, result, error) VALUES (?, 'sync', ?, ?, ?, ?, 1, "
                           "?, ?, ?, ?)",
                           (meet_id, agent, principal, via, state, now, now, packed, failure))

        try:
            await self._write(write)
        except BaseException:
            self._set(principal, meet_id, before)
            raise
        self._ended(meet_id)

    async def trip_ended(self, trip: str, principal: str, result: Briefcase | None,
                         error: tuple[str, str, str] | None, passport: str = "",
                         path: bytes | None = None) -> str | None:
        """Record the end of `principal`'s trip that began here and that nobody waits for
        any more (its caller's deadline passed, its connection was lost, or the place
        restarted): the meet's id, or None if the journal has no such trip of that
        principal's under `passport` (a trip without one: of any principal, its end coming
        from a place as itself). An end that comes after the trip was recorded as failed
        (timed out, lost) replaces that record: the agent did end, and this is how."""
        if passport:
            row = await self._read(lambda db: db.execute(
                "SELECT id, state, principal FROM meets WHERE trip = ? AND principal = ? AND "
                "passport = ?", (trip, principal, passport)).fetchone())
        else:
            row = await self._read(lambda db: db.execute(
                "SELECT id, state, principal FROM meets WHERE trip = ? AND passport IS NULL",
                (trip,)).fetchone())
        if row is None or row[1] == "done":
            return str(row[0]) if row else None
        meet_id, principal = str(row[0]), str(row[2])
        state, packed, failure, before = self._keep(meet_id, principal, result, error)
        try:
            await self._write(lambda db: db.execute(
                "UPDATE meets SET state = ?, ended = ?, result = ?, error = ?, briefcase = NULL, "
                "path = ? WHERE principal = ? AND id = ? AND state != 'done'",
                (state, time.time(), packed, failure, path, principal, meet_id)))
        except BaseException:
            self._set(principal, meet_id, before)
            raise
        self._ended(meet_id)
        return meet_id

    def _ended(self, meet_id: str) -> None:
        """Wake whoever waits for meet `meet_id` to end (of any principal: each waiter looks
        again, and waits on if its own meet has not ended)."""
        for watcher in self._watchers.pop(meet_id, ()):
            if not watcher.done():
                watcher.set_result(None)

    async def has_trip(self, trip: str) -> bool:
        """Whether the journal has a meet whose agent went on trip `trip` from here."""
        row = await self._read(lambda db: db.execute(
            "SELECT 1 FROM meets WHERE trip = ? LIMIT 1", (trip,)).fetchone())
        return row is not None

    async def get(self, meet_id: str, principal: str) -> Record | None:
        """Meet `meet_id` of `principal` (ids are per principal, for everyone: an
        administrator asks for another's meet by naming its principal)."""
        row = await self._read(lambda db: db.execute(
            f"{_SELECT} WHERE principal = ? AND id = ?", (principal, meet_id)).fetchone())
        return Record.from_row(row) if row is not None else None

    def watch(self, meet_id: str) -> asyncio.Future[None]:
        """A future done when meet `meet_id` ends (its outcome is then in the journal); its
        caller `unwatch`es it when it stops waiting. O(1) whatever the number of waiters."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._watchers.setdefault(meet_id, set()).add(future)
        return future

    def unwatch(self, meet_id: str, future: asyncio.Future[None]) -> None:
        watchers = self._watchers.get(meet_id)
        if watchers is not None:
            watchers.discard(future)
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
