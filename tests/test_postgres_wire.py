"""One round trip of statements below psycopg's cursors (parley/storage/postgres_wire.py), on the
server PARLEY_TEST_POSTGRES names: what it returns must be what a cursor returns, a statement sent
again is prepared, and a failure leaves the connection usable and nothing written."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import AsyncConnection

from parley.storage.postgres_wire import numbered, round_trip
from parley.storage.sql.dialect import POSTGRES
from parley.storage.sql.program import Stmt
from parley.testing import eventually
from tests.postgres_support import PgSchema

pytestmark = pytest.mark.anyio

SELECT = Stmt(
    "SELECT ?::text AS word, ?::int + 1 AS number, ? AS nothing, ?::json AS doc, ? AS percent",
    ("a?b", 41, None, POSTGRES.json({"k": [1, "é"]}), "100%"),
)


@pytest.fixture
async def conn(postgres_url: str) -> AsyncIterator[AsyncConnection[Any]]:
    async with await AsyncConnection.connect(postgres_url, autocommit=True) as opened:
        await round_trip(opened, [Stmt("CREATE TEMP TABLE things (id int PRIMARY KEY, name text)")])
        yield opened


async def _prepared(conn: AsyncConnection[Any]) -> list[str]:
    cursor = await conn.execute("SELECT statement FROM pg_prepared_statements WHERE name LIKE 'parley_%'")
    return sorted(str(row[0]) for row in await cursor.fetchall())


def test_placeholders_are_numbered_in_order() -> None:
    assert numbered("SELECT ? WHERE a = ? AND b LIKE '%x'") == b"SELECT $1 WHERE a = $2 AND b LIKE '%x'"
    assert numbered("SELECT 1") == b"SELECT 1"


async def test_rows_and_types_come_back_as_a_cursor_reads_them(conn: AsyncConnection[Any]) -> None:
    (result,) = await round_trip(conn, [SELECT])
    cursor = await conn.execute(POSTGRES.render(SELECT.sql), SELECT.params)
    assert result.rows == await cursor.fetchall()
    assert result.rows == [("a?b", 42, None, {"k": [1, "é"]}, "100%")]
    assert result.count == 1


async def test_a_statement_sent_again_is_prepared_and_answers_the_same(conn: AsyncConnection[Any]) -> None:
    first = await round_trip(conn, [SELECT])
    assert await _prepared(conn) == []
    second = await round_trip(conn, [SELECT, SELECT])
    third = await round_trip(conn, [SELECT])
    assert first == [second[0]] == [second[1]] == third
    assert await _prepared(conn) == [numbered(SELECT.sql).decode()]


async def test_writes_count_their_rows_and_a_many_counts_them_all(conn: AsyncConnection[Any]) -> None:
    insert = Stmt("INSERT INTO things (id, name) VALUES (?, ?)", many=[(1, "a"), (2, "b"), (3, "c")])
    rename = Stmt("UPDATE things SET name = 'x' WHERE id >= ?", (2,))
    listed = Stmt("SELECT id, name FROM things ORDER BY id")
    inserted, renamed, rows = await round_trip(conn, [insert, rename, listed])
    assert (inserted.count, renamed.count) == (3, 2)
    assert rows.rows == [(1, "a"), (2, "x"), (3, "x")]


async def test_a_failed_statement_raises_its_error_and_its_pipeline_writes_nothing(
    conn: AsyncConnection[Any],
) -> None:
    insert = Stmt("INSERT INTO things (id, name) VALUES (?, ?)", (1, "a"))
    for _ in range(3):  # the third time, each statement is sent prepared
        with pytest.raises(psycopg.errors.UniqueViolation):
            await round_trip(conn, [insert, Stmt("SELECT 1"), insert, Stmt("SELECT 2")])
    # The connection is idle and usable, and the pipeline's implicit transaction wrote nothing.
    (count,) = await round_trip(conn, [Stmt("SELECT count(*) FROM things")])
    assert count.rows == [(0,)]


async def test_a_statement_that_cannot_be_prepared_fails_the_same_every_time(
    conn: AsyncConnection[Any],
) -> None:
    broken = Stmt("SELECT nothing_here FROM things WHERE id = ?", (1,))
    for _ in range(3):
        with pytest.raises(psycopg.errors.UndefinedColumn):
            await round_trip(conn, [broken])
    assert await _prepared(conn) == []
    assert (await round_trip(conn, [SELECT]))[0].rows[0][1] == 42


async def test_an_explicit_transaction_stays_open_until_its_commit(conn: AsyncConnection[Any]) -> None:
    await round_trip(conn, [Stmt("BEGIN"), Stmt("INSERT INTO things (id, name) VALUES (?, ?)", (7, "t"))])
    assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    await round_trip(conn, [Stmt("ROLLBACK")])
    (count,) = await round_trip(conn, [Stmt("SELECT count(*) FROM things")])
    assert count.rows == [(0,)]


async def test_a_round_trip_cancelled_while_it_waits_for_a_lock_keeps_its_connection(
    conn: AsyncConnection[Any], postgres_url: str, pg_schema: PgSchema
) -> None:
    # In this module's own schema (not public, which other tests watch), seen by both connections.
    table = f"{pg_schema.schema}.wire_locked"
    await round_trip(conn, [Stmt(f"CREATE SCHEMA IF NOT EXISTS {pg_schema.schema}")])
    await round_trip(conn, [Stmt(f"CREATE TABLE IF NOT EXISTS {table} (id int PRIMARY KEY)")])
    await round_trip(conn, [Stmt(f"INSERT INTO {table} VALUES (1) ON CONFLICT DO NOTHING")])
    backend = conn.info.backend_pid
    locked = [Stmt("BEGIN"), Stmt(f"SELECT id FROM {table} WHERE id = ? FOR UPDATE", (1,))]
    try:
        async with await AsyncConnection.connect(postgres_url, autocommit=True) as holder:
            await holder.execute("BEGIN")
            await holder.execute(f"SELECT id FROM {table} WHERE id = 1 FOR UPDATE".encode())

            async def waiting_for_the_lock() -> bool:
                cursor = await holder.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                    (backend,),
                )
                row = await cursor.fetchone()
                return row is not None and row[0] == 1

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(round_trip, conn, locked)
                await eventually(waiting_for_the_lock, "the round trip to wait for the row lock")
                tasks.cancel_scope.cancel()
            await holder.execute("ROLLBACK")
        # The same connection, no longer busy: its transaction (aborted by the cancel) rolls back,
        # and the next round trip answers.
        assert not conn.closed and conn.info.backend_pid == backend
        await round_trip(conn, [Stmt("ROLLBACK")])
        (row,) = await round_trip(conn, [Stmt(f"SELECT id FROM {table}")])
        assert row.rows == [(1,)]
    finally:
        await round_trip(conn, [Stmt(f"DROP TABLE IF EXISTS {table}")])


async def test_a_round_trip_the_server_works_on_leaves_the_cpu_free(conn: AsyncConnection[Any]) -> None:
    # Waiting for the answer must sleep on the socket: psycopg's wait, as parley first called it,
    # kept the event loop spinning (a full core) until the server answered, a lock wait included.
    cpu_before, wall_before = time.thread_time(), time.monotonic()
    (result,) = await round_trip(conn, [Stmt("SELECT pg_sleep(0.5), 7")])
    cpu, wall = time.thread_time() - cpu_before, time.monotonic() - wall_before
    assert result.rows == [("", 7)]
    assert wall >= 0.5
    assert cpu < 0.1, f"{cpu:.3f} s of CPU while the server worked for {wall:.3f} s"


async def test_other_tasks_run_while_a_round_trip_waits_for_its_answer(conn: AsyncConnection[Any]) -> None:
    # A round trip may block the event loop's thread for a fraction of a millisecond (when nothing
    # else is ready to run), never for as long as the server works.
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        await anyio.sleep(0.005)  # the other task is asleep: nothing is ready to run as the trip starts
        ticks = 0
        (result,) = await round_trip(conn, [Stmt("SELECT pg_sleep(0.5), 1")])
        during = ticks
        tg.cancel_scope.cancel()
    assert result.rows == [("", 1)]
    assert during >= 5, f"another task ran {during} times while the server worked for 0.5 s"
