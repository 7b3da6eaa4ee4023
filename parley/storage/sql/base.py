"""The shared store's footing: a backend runs programs (parley/storage/sql/program.py) on its own
connections; every part of the store reads and writes through these few methods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from parley.storage.sql.dialect import Dialect
from parley.storage.sql.program import Announce, Program, Result, Row, Stmt, reads, writes
from parley.storage.sql.rows import Codec

T = TypeVar("T")


class SqlBase:
    """What each backend provides (`_execute`, `dialect`), and the reads and writes built on it."""

    dialect: Dialect
    codec: Codec

    async def _execute(self, program: Program[T], *, write: bool, inline: bool = True) -> T:
        """Run `program` in one transaction (`write`: one that may change something) and return
        its value. `inline=False`: its reads may be large (SQLite reads them off the event loop)."""
        raise NotImplementedError

    async def _rows(self, sql: str, params: Sequence[Any] = (), *, inline: bool = True) -> list[Row]:
        (result,) = await self._execute(reads(Stmt(sql, params)), write=False, inline=inline)
        return result.rows

    async def _row(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        rows = await self._rows(sql, params)
        return rows[0] if rows else None

    async def _count(self, sql: str, params: Sequence[Any] = ()) -> int:
        row = await self._row(sql, params)
        return int(row[0]) if row is not None else 0

    async def _change(self, *statements: Stmt, announce: Sequence[Announce] = ()) -> list[Result]:
        """Statements that write, committed together (one round trip on PostgreSQL)."""
        return await self._execute(writes(*statements, announce=announce), write=True)
