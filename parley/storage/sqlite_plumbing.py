"""The connection plumbing every part of the SQLite store shares: one connection per process,
and each transaction a plain function of it that runs whole, inline or on the store's thread
(`_read`, `_write`): loading a snapshot, deciding and writing a step is one call, not one
hand-off per statement. A function that has started always runs to its end, commit or rollback
included, even when its caller is cancelled meanwhile, so a transaction never stays open.
See docs/design.md#sqlite.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

from parley.errors import StorageCondition, StorageError, StorageUnavailable
from parley.storage.db_thread import DatabaseThread
from parley.storage.status import StorageHealth, Synchronous

logger = logging.getLogger(__name__)


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


T = TypeVar("T")

Connection = sqlite3.Connection

# Another process's lock is never waited for inside SQLite (busy_timeout 0): a call that finds
# it taken pauses (from BUSY_FIRST_PAUSE_S, doubling up to BUSY_MAX_PAUSE_S) and tries again,
# for BUSY_WAIT_S at most, then fails as "busy". Between attempts the caller can be cancelled:
# a cancelled write never runs later.
BUSY_FIRST_PAUSE_S = 0.001
BUSY_MAX_PAUSE_S = 0.05
BUSY_WAIT_S = 10.0
# With inline transactions SQLite's automatic checkpoint (run by a commit) is off; the store
# checkpoints on its thread after this many commits instead.
CHECKPOINT_EVERY_COMMITS = 200


class _Busy(Exception):
    """Another process holds the lock: nothing was done, try again."""

    def __init__(self, error: sqlite3.Error) -> None:
        super().__init__(str(error))
        self.error = error


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class SqliteBase:
    """The connection and its transactions; the store's parts build on it.

    Where a commit does not wait for the disk (`synchronous = normal`, WAL), a transaction runs
    inline on the event loop when the connection is free: a step's transaction takes tens of
    microseconds there, less than handing it to a thread and back. What may wait for the disk
    runs on the store's thread instead: every transaction under `synchronous = full`, the sync
    of a durable commit, checkpoints, and reads that may be large (`inline=False`). Another
    process's lock is never waited for in either place (see BUSY_WAIT_S)."""

    def __init__(self, db: Connection, path: Path, synchronous: Synchronous = "full") -> None:
        self._db = db
        self.path = path
        self.synchronous = synchronous
        self.health = StorageHealth()
        self._thread = DatabaseThread(f"sqlite {path.name}")
        # Held by whoever uses the connection now, the event loop or the thread: never both.
        self._in_use = threading.Lock()
        self._inline = synchronous == "normal"
        self._commits = 0

    async def _run(self, fn: Callable[[], T], *, inline: bool = True) -> T:
        """Run `fn` with the connection: inline when allowed and the connection is free, else on
        the store's thread. While another process holds the lock, pause and try again until
        BUSY_WAIT_S have passed."""
        started: float | None = None  # of the first wait for another process's lock
        pause = BUSY_FIRST_PAUSE_S
        while True:
            try:
                if inline and self._inline and self._in_use.acquire(blocking=False):
                    try:
                        return fn()
                    finally:
                        self._in_use.release()
                return await self._thread.run(lambda: self._holding(fn))
            except _Busy as busy:
                now = anyio.current_time()
                started = now if started is None else started
                if now - started >= BUSY_WAIT_S:
                    raise self._write_failed(busy.error, "waited for another process's lock") from None
                await anyio.sleep(pause)  # a cancelled caller stops here, nothing done
                pause = min(pause * 2, BUSY_MAX_PAUSE_S)

    def _holding(self, fn: Callable[[], T]) -> T:
        with self._in_use:
            return fn()

    async def _read(self, fn: Callable[[Connection], T], *, inline: bool = True) -> T:
        """`fn`'s reads, in one read transaction (so several statements see one state)."""
        return await self._run(lambda: self._reading(fn), inline=inline)

    async def _write(self, fn: Callable[[Connection], T], after: Callable[[], None] | None = None) -> T:
        """`fn`'s writes, in one `BEGIN IMMEDIATE` transaction: all committed or none. `after`
        runs once it is committed, still holding the connection (whatever the caller does)."""
        return await self._run(lambda: self._writing(fn, after))

    async def _sync(self) -> None:
        """Put every commit so far on disk (see _make_durable), off the event loop."""
        if self.synchronous != "full":
            await self._run(self._make_durable, inline=False)

    async def close(self) -> None:
        await self._thread.run(lambda: self._holding(self._db.close))
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

    def _writing(self, fn: Callable[[Connection], T], after: Callable[[], None] | None = None) -> T:
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
        if after is not None:
            after()
        self._commits += 1
        if self._inline and self._commits % CHECKPOINT_EVERY_COMMITS == 0:
            self._thread.post(lambda: self._holding(self._checkpoint))
        return result

    def _checkpoint(self) -> None:
        # PASSIVE: copies what no reader still needs, waits for nobody; a failure is harmless
        # (the WAL grows until the next one).
        try:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            logger.warning("checkpoint of %s failed: %s", self.path, exc)

    def _make_durable(self) -> None:
        """Under `synchronous = NORMAL` a WAL commit reaches the operating system but is synced
        only at checkpoints; syncing the WAL file makes it (and every commit before it) survive a
        power loss. Under FULL each commit is synced already."""
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
