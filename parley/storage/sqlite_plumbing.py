"""The connection plumbing every part of the SQLite store shares: one aiosqlite connection per
process, a lock so transactions never interleave, and `BEGIN IMMEDIATE` transactions that
end cleanly even when cancelled."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import anyio

from parley.errors import StorageError


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class SqliteBase:
    """The connection and its transactions; the store's parts build on it."""

    def __init__(self, db: aiosqlite.Connection, path: Path) -> None:
        self._db = db
        self.path = path
        # One connection serves every task of the process; transactions must not interleave.
        self._lock = anyio.Lock()

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock:
            try:
                await self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StorageError(f"cannot start a transaction on {self.path}: {exc}") from exc
            except BaseException:
                # Cancelled while waiting: the BEGIN still runs in aiosqlite's thread. Without this
                # ROLLBACK (queued behind it on that thread) the connection would keep the write
                # lock, and every process would find the database locked.
                with anyio.CancelScope(shield=True):
                    await self._rollback_quietly()
                raise
            try:
                yield self._db
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._db.execute("ROLLBACK")
                raise
            else:
                with anyio.CancelScope(shield=True):
                    try:
                        await self._db.execute("COMMIT")
                    except sqlite3.Error as exc:
                        await self._db.execute("ROLLBACK")
                        raise StorageError(f"cannot commit to {self.path}: {exc}") from exc

    async def _rollback_quietly(self) -> None:
        # An error here means the BEGIN had not happened: there is no transaction to end.
        with contextlib.suppress(sqlite3.OperationalError):
            await self._db.execute("ROLLBACK")

    async def _fetchall(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        async with self._lock, self._db.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def _fetchone(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        async with self._lock, self._db.execute(sql, params) as cur:
            return await cur.fetchone()
