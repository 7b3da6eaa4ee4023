"""The connection plumbing every part of the SQLite store shares: one aiosqlite connection per
process, a lock so transactions never interleave, and `BEGIN IMMEDIATE` transactions that
end cleanly even when cancelled, or when SQLite has already rolled them back itself."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import aiosqlite
import anyio

from parley.errors import StorageCondition, StorageError, StorageUnavailable

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


class SqliteBase:
    """The connection and its transactions; the store's parts build on it."""

    def __init__(self, db: aiosqlite.Connection, path: Path, synchronous: Synchronous = "full") -> None:
        self._db = db
        self.path = path
        self.synchronous = synchronous
        self.health = StorageHealth()
        # One connection serves every task of the process; transactions must not interleave.
        self._lock = anyio.Lock()

    async def _make_durable(self) -> None:
        """Put every commit so far on disk. Under `synchronous = NORMAL` a WAL commit reaches the
        operating system but is synced only at checkpoints; syncing the WAL file makes it (and
        every commit before it) survive a power loss. Under FULL each commit is synced already."""
        if self.synchronous == "full":
            return
        await anyio.to_thread.run_sync(sync_file, Path(f"{self.path}-wal"))

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock:
            try:
                await self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._write_failed(exc, "cannot start a transaction") from exc
            except BaseException:
                # Cancelled while waiting: the BEGIN still runs in aiosqlite's thread. Without this
                # ROLLBACK (queued behind it on that thread) the connection would keep the write
                # lock, and every process would find the database locked.
                with anyio.CancelScope(shield=True):
                    await self._rollback_quietly()
                raise
            try:
                yield self._db
            except sqlite3.Error as exc:
                with anyio.CancelScope(shield=True):
                    await self._end_failed_tx()
                failure = unavailable(self.path, exc)
                if failure is None:
                    raise
                self._note(failure)
                raise failure from exc
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._end_failed_tx()
                raise
            else:
                with anyio.CancelScope(shield=True):
                    try:
                        await self._db.execute("COMMIT")
                    except sqlite3.Error as exc:
                        await self._end_failed_tx()
                        raise self._write_failed(exc, "cannot commit") from exc
                self.health.record(None)

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

    async def _end_failed_tx(self) -> None:
        # On SQLITE_FULL, IOERR, NOMEM or BUSY SQLite may have rolled the transaction back already;
        # a second ROLLBACK would fail with "no transaction is active" and hide the real error.
        if not self._db.in_transaction:
            return
        try:
            await self._db.execute("ROLLBACK")
        except sqlite3.OperationalError:
            if self._db.in_transaction:
                raise

    async def _rollback_quietly(self) -> None:
        # An error here means the BEGIN had not happened: there is no transaction to end.
        with contextlib.suppress(sqlite3.OperationalError):
            await self._db.execute("ROLLBACK")

    async def _fetchall(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        async with self._lock, self._reading(), self._db.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def _fetchone(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        async with self._lock, self._reading(), self._db.execute(sql, params) as cur:
            return await cur.fetchone()

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            failure = unavailable(self.path, exc)
            if failure is None:
                raise
            raise failure from exc
