"""The connection plumbing every part of the SQLite store shares: one connection per process,
used by one thread at a time, and one hand-off to that thread per transaction.

Each read or write is a plain function of the connection that runs whole on a worker thread
(`_read`, `_write`): loading a snapshot, deciding and writing a step is one hand-off, not one
per statement (with a driver per statement, the hand-offs cost more than SQLite's work). A
function that has started always runs to its end, commit or rollback included, even when its
caller is cancelled meanwhile, so a transaction never stays open.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import anyio.lowlevel

from parley.errors import StorageCondition, StorageError, StorageUnavailable
from parley.storage.db_thread import DatabaseThread

logger = logging.getLogger(__name__)

# How SQLite syncs commits (storage.synchronous): "full" syncs every commit, "normal" syncs the
# WAL at checkpoints only (a process crash loses nothing; a power loss may lose the last commits).
Synchronous = Literal["normal", "full"]


def sync_file(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # no WAL: everything is in the database file, synced by the last checkpoint
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Primary SQLite result codes that describe the file's condition rather than our SQL. Any other
# error (a constraint, a misuse) is a bug and is left as it is.
_CONDITIONS: dict[int, StorageCondition] = {
    sqlite3.SQLITE_FULL: "full",
    sqlite3.SQLITE_READONLY: "read_only",
    sqlite3.SQLITE_PERM: "read_only",
    sqlite3.SQLITE_CANTOPEN: "read_only",
    sqlite3.SQLITE_BUSY: "busy",
    sqlite3.SQLITE_LOCKED: "busy",
    sqlite3.SQLITE_IOERR: "error",
    sqlite3.SQLITE_CORRUPT: "error",
    sqlite3.SQLITE_NOTADB: "error",
    sqlite3.SQLITE_NOLFS: "error",
    sqlite3.SQLITE_NOMEM: "error",
}


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def unavailable(path: Path, exc: sqlite3.Error) -> StorageUnavailable | None:
    """The typed error for a failure caused by the file's condition, else None."""
    code = getattr(exc, "sqlite_errorcode", None)
    condition = _CONDITIONS.get(code & 0xFF) if isinstance(code, int) else None
    if condition is None:
        return None
    return StorageUnavailable(str(path), condition, str(exc))


class StorageHealth:
    """How the latest write transaction ended, for /healthz: "ok", "full", "read_only", "busy"
    or "error: <SQLite's message>". It turns back to "ok" with the next write that commits."""

    def __init__(self) -> None:
        self.status = "ok"

    def record(self, failure: StorageUnavailable | None) -> None:
        if failure is None:
            self.status = "ok"
        elif failure.condition == "error":
            self.status = f"error: {failure.detail}"
        else:
            self.status = failure.condition


T = TypeVar("T")

Connection = sqlite3.Connection

# How long one attempt waits for another process's lock on the connection's thread (SQLite's
# busy_timeout), and how long a call keeps trying before it fails as "busy". Between attempts
# the thread is free and the caller can be cancelled: a cancelled write never runs later.
BUSY_ATTEMPT_MS = 50
BUSY_WAIT_S = 10.0


class _Busy(Exception):
    """Another process holds the lock: nothing was done, try again."""

    def __init__(self, error: sqlite3.Error) -> None:
        super().__init__(str(error))
        self.error = error


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class SqliteBase:
    """The connection and its transactions; the store's parts build on it."""

    def __init__(self, db: Connection, path: Path, synchronous: Synchronous = "full") -> None:
        self._db = db
        self.path = path
        self.synchronous = synchronous
        self.health = StorageHealth()
        # One connection serves every task of the process, one function at a time, in order.
        self._thread = DatabaseThread(f"sqlite {path.name}")

    async def _run(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the connection's thread (the one hand-off of a transaction); while another
        process holds the lock, try again until BUSY_WAIT_S have passed."""
        started = anyio.current_time()
        while True:
            try:
                return await self._thread.run(fn)
            except _Busy as busy:
                if anyio.current_time() - started >= BUSY_WAIT_S:
                    raise self._write_failed(busy.error, "waited for another process's lock") from None
                await anyio.lowlevel.checkpoint()  # a cancelled caller stops here, nothing done

    async def _read(self, fn: Callable[[Connection], T]) -> T:
        """`fn`'s reads, in one read transaction (so several statements see one state)."""
        return await self._run(lambda: self._reading(fn))

    async def _write(self, fn: Callable[[Connection], T]) -> T:
        """`fn`'s writes, in one `BEGIN IMMEDIATE` transaction: all committed or none."""
        return await self._run(lambda: self._writing(fn))

    async def _fetchall(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return await self._run(lambda: self._reading(lambda db: db.execute(sql, params).fetchall()))

    async def _fetchone(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        row: sqlite3.Row | None = await self._run(
            lambda: self._reading(lambda db: db.execute(sql, params).fetchone())
        )
        return row

    async def close(self) -> None:
        await self._thread.run(self._db.close)
        await self._thread.close()

    # ------------------------------------------------------------------ on the connection's thread

    def _reading(self, fn: Callable[[Connection], T]) -> T:
        db = self._db
        try:
            db.execute("BEGIN")
            try:
                return fn(db)
            finally:
                if db.in_transaction:
                    db.execute("COMMIT")  # a read transaction: nothing to write, nothing to sync
        except sqlite3.Error as exc:
            if _is_busy(exc):
                raise _Busy(exc) from exc  # a read changes nothing: try it again
            failure = unavailable(self.path, exc)
            if failure is None:
                raise
            raise failure from exc

    def _writing(self, fn: Callable[[Connection], T]) -> T:
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if _is_busy(exc):
                raise _Busy(exc) from exc  # nothing begun: try again
            raise self._write_failed(exc, "cannot start a transaction") from exc
        try:
            result = fn(db)
        except sqlite3.Error as exc:
            self._end_failed_tx()
            failure = unavailable(self.path, exc)
            if failure is None:
                raise
            self._note(failure)
            raise failure from exc
        except BaseException:
            self._end_failed_tx()
            raise
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._end_failed_tx()
            raise self._write_failed(exc, "cannot commit") from exc
        self.health.record(None)
        return result

    def _make_durable(self) -> None:
        """Put every commit so far on disk. Under `synchronous = NORMAL` a WAL commit reaches the
        operating system but is synced only at checkpoints; syncing the WAL file makes it (and
        every commit before it) survive a power loss. Under FULL each commit is synced already."""
        if self.synchronous != "full":
            sync_file(Path(f"{self.path}-wal"))

    def _write_failed(self, exc: sqlite3.Error, what: str) -> StorageError:
        failure = unavailable(self.path, exc)
        if failure is None:
            return StorageError(f"{what} on {self.path}: {exc}")
        self._note(failure)
        return failure

    def _note(self, failure: StorageUnavailable) -> None:
        if self.health.status == "ok":
            logger.error("writing to %s failed: %s (%s)", self.path, failure.condition, failure.detail)
        self.health.record(failure)

    def _end_failed_tx(self) -> None:
        # On SQLITE_FULL, IOERR, NOMEM or BUSY SQLite may have rolled the transaction back already;
        # a second ROLLBACK would fail with "no transaction is active" and hide the real error.
        if not self._db.in_transaction:
            return
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.OperationalError:
            if self._db.in_transaction:
                raise
