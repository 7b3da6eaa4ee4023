"""`parley db copy`: everything of a SQLite database into an empty PostgreSQL one, row for row.

Rows are streamed with COPY in one transaction that holds the tables locked, so a parley
replica that starts on the target meanwhile finds either nothing or everything. Values are
passed as SQLite holds them (JSON as the text it wrote), except the outside text PostgreSQL
keeps as JSON strings (parley/storage/sql/rows.py) and the flags SQLite keeps as 0/1.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import psycopg

from parley.errors import StorageError
from parley.storage.postgres_plumbing import Conn, PostgresBase
from parley.storage.schema import DATA_TABLES
from parley.storage.sql.dialect import dumps
from parley.storage.sql.rows import BOOL_COLUMNS, TEXT_AS_JSON

# What each table holds, as `parley db copy` reports it.
TABLE_NAMES = {
    "sessions": "sessions",
    "turns": "turns",
    "tool_calls": "tool calls",
    "interrupts": "interrupts",
    "queued_messages": "queued messages",
    "messages": "transcript messages",
    "summaries": "summaries",
    "steps": "steps",
    "events": "events",
    "tasks": "tasks",
    "audit": "audit entries",
    "agent_versions": "agent versions",
    "attachments": "attachments",
    "attachment_refs": "attachment references",
    "schedules": "schedules",
    "schedule_ticks": "schedule ticks",
    "credentials": "credentials",
    "oauth_flows": "pending authorizations",
    "oauth_clients": "registered OAuth clients",
}
# Rows read from SQLite at a time (the copy never holds a whole table in memory).
CHUNK_ROWS = 1000


def _table_info(db: sqlite3.Connection, table: str) -> list[Any]:
    return db.execute(f"PRAGMA table_info({table})").fetchall()


def _converter(table: str, column: str) -> Any:
    if column in TEXT_AS_JSON.get(table, ()):
        return lambda value: dumps(value) if value is not None else None
    if column in BOOL_COLUMNS:
        return lambda value: bool(value) if value is not None else None
    return None


class PostgresCopy(PostgresBase):
    async def copy_from_sqlite(self, source: Path) -> dict[str, int]:
        """Copy every row of the SQLite database `source` (at this parley's schema version) into
        this database, which must hold no parley data; return the rows copied, by what they are.

        Raises:
            StorageError: this database already holds data, or a table does not match.
        """
        counts: dict[str, int] = {}
        uri = f"{(await anyio.Path(source).resolve()).as_uri()}?mode=ro"
        # Read in a worker thread, a chunk at a time, so the event loop keeps serving the pool.
        with closing(sqlite3.connect(uri, uri=True, check_same_thread=False)) as db:
            # One read transaction: the copy is of one moment, even while a server writes the file.
            db.execute("BEGIN")
            try:
                async with self._connection() as conn, conn.transaction():
                    await conn.execute(f"LOCK TABLE {', '.join(DATA_TABLES)} IN SHARE ROW EXCLUSIVE MODE")
                    await self._refuse_data(conn)
                    for table in DATA_TABLES:
                        counts[table] = await self._copy_table(db, conn, table)
                    # Audit ids were copied as they were: the next one comes after them.
                    await conn.execute(
                        "SELECT setval(pg_get_serial_sequence('audit', 'id'), coalesce(max(id), 0) + 1, false) "
                        "FROM audit"
                    )
                    for table in DATA_TABLES:
                        cur = await conn.execute(f"SELECT count(*) FROM {table}")
                        row = await cur.fetchone()
                        if row is None or row[0] != counts[table]:
                            raise StorageError(
                                f"copying {table} into {self.label} stored {row and row[0]} of {counts[table]} "
                                "rows; nothing was copied"
                            )
            except sqlite3.Error as exc:
                raise StorageError(f"cannot read {source}: {exc}; nothing was copied") from exc
            except psycopg.Error as exc:
                raise self._failed(exc, writing=True) from exc
        return {TABLE_NAMES[table]: counts[table] for table in TABLE_NAMES}

    async def _refuse_data(self, conn: Conn) -> None:
        anything = " OR ".join(f"EXISTS (SELECT 1 FROM {table})" for table in DATA_TABLES)
        cur = await conn.execute(
            f"SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM tasks), {anything}"
        )
        row = await cur.fetchone()
        sessions, tasks, found = row if row is not None else (0, 0, False)
        if found:
            raise StorageError(
                f"the PostgreSQL database {self.label} already holds parley data ({sessions} sessions, "
                f"{tasks} tasks); parley db copy fills only an empty one: name another database or "
                "storage.schema; nothing was copied"
            )

    async def _copy_table(self, db: sqlite3.Connection, conn: Conn, table: str) -> int:
        cur = await conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
            (table,),
        )
        columns = [str(r[0]) for r in await cur.fetchall()]
        # The same columns on both sides, or no copy: a column only one side has would be lost
        # (or missing) without a word.
        sqlite_columns = {str(r[1]) for r in await anyio.to_thread.run_sync(_table_info, db, table)}
        if sqlite_columns != set(columns):
            only_sqlite = ", ".join(sorted(sqlite_columns - set(columns))) or "none"
            only_postgres = ", ".join(sorted(set(columns) - sqlite_columns)) or "none"
            raise StorageError(
                f"table {table} differs between the SQLite database (columns only there: {only_sqlite}) and "
                f"{self.label} (only there: {only_postgres}): this parley's two schemas disagree, which is a bug; "
                "nothing was copied"
            )
        converters = [_converter(table, c) for c in columns]
        listing = ", ".join(columns)
        rows = await anyio.to_thread.run_sync(db.execute, f"SELECT {listing} FROM {table}")
        copied = 0
        async with conn.cursor() as pg, pg.copy(f"COPY {table} ({listing}) FROM STDIN") as copy:
            while chunk := await anyio.to_thread.run_sync(rows.fetchmany, CHUNK_ROWS):
                for values in chunk:
                    await copy.write_row([f(v) if f else v for f, v in zip(converters, values, strict=True)])
                copied += len(chunk)
        return copied
