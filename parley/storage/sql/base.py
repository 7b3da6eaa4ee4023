"""The shared store's footing: a backend runs programs (parley/storage/sql/program.py) on its own
connections; every part of the store reads and writes through these few methods."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from parley.storage.sql.dialect import Dialect
from parley.storage.sql.program import Announce, Program, Result, Row, Stmt, reads, writes
from parley.storage.sql.rows import Codec

T = TypeVar("T")
R = TypeVar("R", bound="Paged")


class Paged(Protocol):
    """A record listed a page at a time, by creation time and id."""

    @property
    def id(self) -> str: ...

    @property
    def created_at(self) -> float: ...


def page(rows: Sequence[Row], limit: int, record: Callable[[Row], R]) -> tuple[list[R], str | None]:
    """The records of a page read with one row more than `limit`, and the cursor of the next page
    (None when that extra row was not there): "<created_at>|<id>" of the page's last record."""
    records = [record(row) for row in rows[:limit]]
    if len(rows) <= limit:
        return records, None
    last = records[-1]
    return records, f"{last.created_at!r}|{last.id}"


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
