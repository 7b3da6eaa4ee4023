"""SQLite backend of the Store port: one connection per process, WAL mode.

Several parley processes may open the same file (every desktop client window starts its
own server). WAL lets readers run beside the one writer, `BEGIN IMMEDIATE` takes the
write lock up front so a transaction never fails half way on a lock upgrade, and a lock
another process holds is never waited for inside SQLite (`busy_timeout` is 0 once the file is
open): the store pauses and tries again itself (sqlite_plumbing.py), so no thread blocks.
See docs/design.md#sqlite.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import anyio

from parley.core.ids import SessionId
from parley.core.records import lease_token
from parley.errors import LeaseLost, StorageError
from parley.storage.schema import migrate_sqlite
from parley.storage.sql.conditions import DRIVEN, LEASE_OF_PROCESS, process_range
from parley.storage.sql.dialect import SQLITE
from parley.storage.sql.program import Announce, Batch, Program, Result, Stmt, finish
from parley.storage.sql.rows import Codec
from parley.storage.sql.store import SqlStore
from parley.storage.sqlite_file import prepare_database_file
from parley.storage.sqlite_plumbing import BUSY_WAIT_S, Connection, SqliteBase, unavailable
from parley.storage.sqlite_wakeups import SqliteChangeFeed, WakeFolder, wake_folder
from parley.storage.status import Synchronous
from parley.storage.wakeups import Wake

T = TypeVar("T")


class SqliteStore(SqlStore, SqliteBase):
    """The default Store. Open it with `open_sqlite_store`, which migrates the schema."""

    dialect = SQLITE
    codec = Codec(SQLITE)
    # The schema versions before and after opening (`parley db migrate` reports them).
    migrated: tuple[int, int] = (0, 0)

    def __init__(self, db: Connection, path: Path, synchronous: Synchronous = "full") -> None:
        super().__init__(db, path, synchronous)
        # Other processes on this file: told of each commit, heard by `feed` (sqlite_wakeups.py).
        # The folder beside the file itself, so processes that name it by different paths (a
        # symbolic link, a relative path) meet there.
        self.wakes = WakeFolder(wake_folder(path.resolve()))
        self.feed = SqliteChangeFeed(self.wakes)

    async def close(self) -> None:
        await super().close()
        self.wakes.close()

    async def try_acquire_leases(
        self, session_ids: Sequence[SessionId], owner: str, now: float, ttl_s: float
    ) -> dict[SessionId, str]:
        if session_ids and self.wakes.listening():
            # Other processes share the file, and each of them tries to claim a session another
            # one's wake-up names, which that one has nearly always claimed already. A claim is a
            # write transaction, holding the file's one write lock against the driver's steps; a
            # read finds the lease without it (a session freed meanwhile: the next wake or scan).
            session_ids = await self._claimable(session_ids, owner, now)
        return await super().try_acquire_leases(session_ids, owner, now, ttl_s)

    async def _claimable(self, session_ids: Sequence[SessionId], owner: str, now: float) -> list[SessionId]:
        among, params = self.dialect.in_list("id", session_ids)
        rows = await self._rows(
            f"SELECT id FROM sessions WHERE {among} AND {DRIVEN} "
            f"AND (lease_owner IS NULL OR lease_expires_at < ? OR {LEASE_OF_PROCESS})",
            (*params, now, *process_range(lease_token(owner, 0)[:-1])),
        )
        return [SessionId(row[0]) for row in rows]

    async def _execute(self, program: Program[T], *, write: bool, inline: bool = True) -> T:
        if not write:
            # A read is one batch, made again if another process's lock was in the way: so the
            # program itself runs here, and only its statements on the connection.
            batch = next(program)
            results = await self._read(lambda db: self._batch(db, batch), inline=inline)
            return finish(program, results)
        durable = False
        wakes: list[Wake] = []

        def run(db: Connection) -> T:
            # The whole program in one transaction: `BEGIN IMMEDIATE` holds the write lock.
            nonlocal durable
            batch = next(program)
            while True:
                results = self._batch(db, batch)
                durable = durable or batch.durable
                if batch.announce and self.wakes.listening():
                    wakes.extend(self._announced(db, batch.announce))
                try:
                    batch = program.send(results)
                except StopIteration as stop:
                    value: T = stop.value
                    return value

        # Other processes hear of the commit at once (sqlite_wakeups.py); their polls stay the net.
        value = await self._write(run, after=lambda: self.wakes.send(wakes))
        if durable:
            await self._sync()
        return value

    def _announced(self, db: Connection, announce: Sequence[Announce]) -> list[Wake]:
        """The wakes a batch announces, as its writes leave the database (see Announce)."""
        wakes = []
        for each in announce:
            if each.session_from is not None:
                rows = db.execute(f"SELECT session_id {each.session_from}", each.params).fetchall()
                wakes += [replace(each.wake, session_id=SessionId(row[0])) for row in rows]
            elif each.where is None or db.execute(f"SELECT 1 WHERE {each.where}", each.params).fetchone():
                wakes.append(each.wake)
        return wakes

    def _batch(self, db: Connection, batch: Batch) -> list[Result]:
        return [self._statement(db, statement, batch) for statement in batch.statements]

    def _statement(self, db: Connection, statement: Stmt, batch: Batch) -> Result:
        try:
            if statement.many is not None:
                cursor = db.executemany(statement.sql, statement.many)
                return Result([], cursor.rowcount)
            cursor = db.execute(statement.sql, statement.params)
            rows = cursor.fetchall()
            return Result(rows, cursor.rowcount)
        except sqlite3.IntegrityError as exc:
            if batch.step_of is not None and "steps." in str(exc):
                raise LeaseLost(batch.step_of) from exc  # another holding committed this very step
            raise StorageError(f"{self.path}: {exc}") from exc


# Switching a new file to WAL needs an exclusive lock that busy_timeout does not wait for;
# two processes opening a fresh database at once can collide there.
WAL_ATTEMPTS = 50
WAL_RETRY_S = 0.05


def _enable_wal(db: Connection) -> None:
    for attempt in range(WAL_ATTEMPTS):
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == WAL_ATTEMPTS - 1:
                raise
            time.sleep(WAL_RETRY_S)  # on the opening thread, before the store serves anyone


def _open_failed(path: Path, exc: sqlite3.Error) -> StorageError:
    failure = unavailable(path, exc)
    if failure is not None:
        return StorageError(f"cannot start: {failure.problem}, then start parley again")
    return StorageError(f"cannot open the database {path}: {exc}")


def _cap_size(db: Connection, max_size_mb: float) -> None:
    row = db.execute("PRAGMA page_size").fetchone()
    page_size = int(row[0]) if row is not None else 4096
    pages = max(1, int(max_size_mb * 1024 * 1024) // page_size)
    # SQLite keeps the cap per connection; a file already larger keeps its size and gains no pages.
    db.execute(f"PRAGMA max_page_count = {pages}")


def _open(
    path: Path, max_size_mb: float | None, synchronous: Synchronous
) -> tuple[Connection, tuple[int, int]]:
    try:
        # The connection is used from worker threads, one at a time (SqliteBase's limiter).
        db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise _open_failed(path, exc) from exc
    try:
        # Opening waits as long as a call would for another process's lock (a peer migrating).
        db.execute(f"PRAGMA busy_timeout = {int(BUSY_WAIT_S * 1000)}")
        _enable_wal(db)
        # FULL: every commit survives a power loss; NORMAL: a process crash loses nothing, a
        # power loss may lose the last commits, except those marked durable (see _make_durable).
        db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        db.execute("PRAGMA foreign_keys = ON")
        if max_size_mb is not None:
            _cap_size(db, max_size_mb)
        migrated = migrate_sqlite(db, path)
        db.execute("PRAGMA busy_timeout = 0")  # then SqliteBase pauses and tries again, see there
        if synchronous == "normal":
            db.execute("PRAGMA wal_autocheckpoint = 0")  # the store checkpoints off the event loop
    except sqlite3.Error as exc:
        db.close()
        raise _open_failed(path, exc) from exc
    except BaseException:
        db.close()
        raise
    return db, migrated


@asynccontextmanager
async def open_sqlite_store(
    path: Path, *, max_size_mb: float | None = None, synchronous: Synchronous = "full"
) -> AsyncIterator[SqliteStore]:
    """Open (creating and migrating as needed) the SQLite database at `path`.

    A new folder is created 0700 and a new file 0600 (see sqlite_file.py). With `max_size_mb`,
    writes that would grow the file beyond it fail as "full", and the data stays as it was.

    Raises:
        StorageError: the path cannot hold a database, or the file cannot be opened or migrated;
            the message names the file and the fix.
    """
    prepare_database_file(path)
    db, migrated = await anyio.to_thread.run_sync(_open, path, max_size_mb, synchronous)
    store = SqliteStore(db, path, synchronous)
    store.migrated = migrated
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()
