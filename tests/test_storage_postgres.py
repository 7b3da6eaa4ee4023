"""What the PostgreSQL backend does beyond the storage contract (tests/test_storage_contract.py):
migrating once when replicas start together, the row lock and SKIP LOCKED claims, the work scan's
plan over many parked sessions, the database's conditions (unreachable, busy) and health, and
where the schema and the password go. No subprocess: these run in the fast layer, on the server
PARLEY_TEST_POSTGRES names.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from parley.config import ServerConfig, load_config
from parley.core.changes import CURRENT_TURN, Changes, SessionSnapshot
from parley.core.ids import SessionId, new_session_id
from parley.core.records import QueuedMessageRecord, SessionRecord
from parley.core.transitions import starting
from parley.errors import ConfigErrors, StorageError, StorageUnavailable
from parley.redaction import mask_url
from parley.storage.ports import Store
from parley.storage.postgres import PostgresStore, open_postgres_store
from parley.storage.schema import LATEST, steps
from parley.storage.sql.conditions import work_scan
from parley.storage.sql.dialect import POSTGRES
from parley.storage.sqlite import open_sqlite_store
from parley.stores import open_store
from tests.postgres_support import DatabaseProxy, PgSchema, require_postgres, schema_for_test
from tests.store_support import try_acquire_lease
from tests.support import TEST_DEADLINE_S, eventually

pytestmark = pytest.mark.anyio

T0 = 1_000_000.0
SECRET = "pw-" + os.urandom(6).hex()


@pytest.fixture
async def store(pg_schema: PgSchema) -> AsyncIterator[PostgresStore]:
    pg_schema.reset()
    # Named after its schema, so the tests that read pg_stat_activity see this store's
    # connections only, not those of other parley processes on the same server.
    url = f"{pg_schema.url}{'&' if '?' in pg_schema.url else '?'}application_name={app_name(pg_schema)}"
    async with open_postgres_store(url, schema=pg_schema.schema, pool_size=3) as opened:
        yield opened


def app_name(schema: PgSchema) -> str:
    return f"parley_{schema.schema}"[:63]


async def running_session(store: Store, text: str = "hello") -> SessionId:
    sid = new_session_id()
    first = QueuedMessageRecord.new(sid, text, now=T0)
    record = SessionRecord.new(sid, agent="demo", owner="local", kind="chat", now=T0)
    assert await store.create_session(starting(record, first), first, T0)
    return sid


def lock_waiters(schema: PgSchema) -> int:
    """Connections of parley waiting for a row lock right now (what a test waits on, not a sleep)."""
    rows = schema.rows(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
        (app_name(schema),),
    )
    return int(rows[0][0])


# ---------------------------------------------------------------------------- migrations


async def test_replicas_starting_at_once_on_a_fresh_schema_migrate_it_once(postgres_url: str) -> None:
    # The race is narrow, so it is run on several fresh schemas, four replicas each.
    for attempt in range(5):
        with schema_for_test(postgres_url, f"race{attempt}") as fresh:
            opened: list[tuple[int, int]] = []

            async def replica(fresh: PgSchema = fresh, opened: list[tuple[int, int]] = opened) -> None:
                async with open_postgres_store(fresh.url, schema=fresh.schema, pool_size=1) as store:
                    opened.append(store.migrated)
                    assert await store.get_session(SessionId("ses_none")) is None

            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(replica)
            # Exactly one replica found the schema empty; the others waited and found it done.
            assert sorted(opened) == [(0, LATEST)] + [(LATEST, LATEST)] * 3
            assert [r[0] for r in fresh.rows("SELECT version FROM schema_version")] == [
                v for v, _ in steps("postgres")
            ]


async def test_a_newer_schema_is_refused_in_one_line_naming_the_database_but_not_its_password(
    pg_schema: PgSchema, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg_schema.reset()
    async with open_postgres_store(pg_schema.url, schema=pg_schema.schema):
        pass
    pg_schema.rows("INSERT INTO schema_version (version) VALUES (%s)", (LATEST + 7,))
    try:
        # The test server trusts local connections, so any password gets in; it must show nowhere.
        url = pg_schema.url.replace("://root@", f"://root:{SECRET}@")
        with pytest.raises(StorageError) as refused:
            async with open_postgres_store(url, schema=pg_schema.schema):
                pytest.fail("a schema newer than this parley was opened")
        message = str(refused.value)
        assert "\n" not in message and SECRET not in message, message
        assert mask_url(url) in message and pg_schema.schema in message
        assert f"schema version {LATEST + 7}, newer than this parley knows ({LATEST})" in message
    finally:
        pg_schema.reset()


async def test_everything_lives_in_the_configured_schema(postgres_url: str) -> None:
    with schema_for_test(postgres_url, "alone") as mine:
        before = {r[0] for r in mine.rows("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        async with open_postgres_store(mine.url, schema=mine.schema) as store:
            await running_session(store)
            paths = await store._rows("SELECT current_setting('search_path')")
            assert paths == [(mine.schema,)]
        tables = {
            r[0] for r in mine.rows("SELECT tablename FROM pg_tables WHERE schemaname = %s", (mine.schema,))
        }
        assert {"sessions", "turns", "messages", "events", "tasks", "schema_version"} <= tables
        assert {
            r[0] for r in mine.rows("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        } == before


# ---------------------------------------------------------------------------- locks and claims


async def test_a_decision_waits_for_the_one_before_it_on_the_same_session_and_sees_its_changes(
    store: PostgresStore, pg_schema: PgSchema
) -> None:
    sid = await running_session(store)
    seen: list[int] = []

    def look(snapshot: SessionSnapshot | None) -> tuple[None, Changes]:
        assert snapshot is not None
        seen.append(snapshot.session.turn_count)
        return None, Changes()

    with psycopg.connect(pg_schema.url) as first:
        # Another decision's transaction: it changed the row and holds its lock until it commits.
        first.execute(f"UPDATE {pg_schema.schema}.sessions SET turn_count = 7 WHERE id = %s", (sid,))
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.decide, sid, CURRENT_TURN, look, T0)
            await eventually(
                lambda: _true(lock_waiters(pg_schema) == 1), "the second decision to wait for the lock"
            )
            assert seen == []
            first.commit()
    assert seen == [7]


async def _true(value: bool) -> bool:
    return value


async def test_a_lease_claim_skips_a_session_whose_row_is_locked_instead_of_waiting(
    store: PostgresStore, pg_schema: PgSchema
) -> None:
    sid = await running_session(store)
    with psycopg.connect(pg_schema.url) as holder:
        holder.execute(f"SELECT 1 FROM {pg_schema.schema}.sessions WHERE id = %s FOR UPDATE", (sid,))
        with anyio.fail_after(TEST_DEADLINE_S):
            assert await try_acquire_lease(store, sid, "proc_a", T0, 30) is None
        assert sid in await store.sessions_needing_work(T0, 10)
    assert await try_acquire_lease(store, sid, "proc_a", T0, 30) == "proc_a#1"


async def test_a_decision_cancelled_while_it_waits_for_the_lock_leaves_no_connection_behind(
    store: PostgresStore, pg_schema: PgSchema
) -> None:
    sid = await running_session(store)
    with psycopg.connect(pg_schema.url) as holder:
        holder.execute(f"SELECT 1 FROM {pg_schema.schema}.sessions WHERE id = %s FOR UPDATE", (sid,))
        async with anyio.create_task_group() as tg:

            def loaded(snapshot: SessionSnapshot | None) -> tuple[None, Changes]:
                pytest.fail("the snapshot was loaded while another transaction held the row")

            tg.start_soon(store.decide, sid, CURRENT_TURN, loaded, T0)
            await eventually(lambda: _true(lock_waiters(pg_schema) == 1), "the decision to wait for the lock")
            tg.cancel_scope.cancel()
    # Nothing is left in use or open in a transaction, and the session takes the next decision.
    await eventually(lambda: _true(store.pool_stats()["in_use"] == 0), "the connection back in the pool")

    def stuck() -> list[tuple[Any, ...]]:
        return pg_schema.rows(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND state IN ('idle in transaction', 'idle in transaction (aborted)')",
            (app_name(pg_schema),),
        )

    # When the cancel interrupts psycopg's own cancel request, it closes the connection; the server
    # ends that backend when it reads the close, a moment later, so this waits for it.
    await eventually(lambda: _true(stuck() == [(0,)]), "no transaction left open on the server")
    await store.record_event(sid, None, "progress", {}, T0)


async def test_a_statement_past_the_timeout_fails_as_busy_and_changes_nothing(pg_schema: PgSchema) -> None:
    pg_schema.reset()
    async with open_postgres_store(pg_schema.url, schema=pg_schema.schema, statement_timeout_s=0.2) as store:
        sid = await running_session(store)
        before = await store.list_events(sid, 0, 100)
        with psycopg.connect(pg_schema.url) as holder:
            holder.execute(f"SELECT 1 FROM {pg_schema.schema}.sessions WHERE id = %s FOR UPDATE", (sid,))
            with pytest.raises(StorageUnavailable) as busy:
                await store.record_event(sid, None, "progress", {}, T0)
        assert busy.value.condition == "busy" and "nothing was changed" in str(busy.value)
        assert store.health.status == "busy"
        assert await store.list_events(sid, 0, 100) == before
        await store.record_event(sid, None, "progress", {}, T0)
        assert store.health.status == "ok"


async def test_a_write_of_one_batch_that_fails_half_way_changes_nothing(pg_schema: PgSchema) -> None:
    """A program of one batch is sent without BEGIN: the pipeline's implicit transaction must undo
    what its first statements did when a later one fails."""
    pg_schema.reset()
    schema = pg_schema.schema
    async with open_postgres_store(pg_schema.url, schema=schema) as store:
        sid = await running_session(store)
        with psycopg.connect(pg_schema.url, autocommit=True) as admin:
            seq_of = f"SELECT event_seq FROM {schema}.sessions WHERE id = %s"
            before = admin.execute(seq_of, (sid,)).fetchone()
            assert before is not None
            # The number the next event takes is used already: the event's INSERT fails after the
            # UPDATE that took the number.
            admin.execute(
                f"INSERT INTO {schema}.events (session_id, seq, turn_id, kind, data, created_at) "
                "VALUES (%s, %s, NULL, 'squatter', '{}', 0)",
                (sid, before[0] + 1),
            )
            with pytest.raises(StorageError):
                await store.record_event(sid, None, "progress", {}, T0)
            assert admin.execute(seq_of, (sid,)).fetchone() == before


# ---------------------------------------------------------------------------- the work scan


async def test_the_work_scan_reads_indexes_not_100000_parked_sessions(postgres_url: str) -> None:
    # A schema of its own: 100,000 rows are dropped with it rather than deleted one by one.
    with schema_for_test(postgres_url, "scan") as schema:
        async with open_postgres_store(schema.url, schema=schema.schema) as store:
            # Parked: waiting for a person (no timer), waiting with a deadline hours away, and
            # running parked on a durable timer - none of them due. Then three that are.
            schema.rows(
                "INSERT INTO sessions (id, agent, owner, kind, status, created_at, updated_at, wake_at) "
                "SELECT 'ses_parked_' || i, 'demo', 'local', 'chat', "
                "CASE WHEN i %% 3 = 0 THEN 'running' ELSE 'waiting_for_input' END, %(t)s, %(t)s, "
                "CASE WHEN i %% 3 = 1 THEN NULL ELSE %(t)s + 3600 + i END "
                "FROM generate_series(1, 100000) AS i",
                {"t": T0},
            )
            due = [await running_session(store) for _ in range(3)]
            schema.rows("ANALYZE sessions")
            assert sorted(await store.sessions_needing_work(T0 + 1, 200)) == sorted(due)
        scan = POSTGRES.render(work_scan(POSTGRES))
        [[plan]] = schema.rows("EXPLAIN (FORMAT JSON) " + scan, (T0 + 1,) * 5 + (200,))
    nodes = _plan_nodes(plan[0]["Plan"])
    scans = {(n["Node Type"], n.get("Index Name")) for n in nodes if "Scan" in n["Node Type"]}
    assert ("Seq Scan", None) not in scans, json.dumps(plan, indent=1)
    assert {name for _, name in scans} == {"sessions_due", "sessions_waiting_leased"}, scans


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _plan_nodes(child))]


# ---------------------------------------------------------------------------- unreachable


async def test_an_unreachable_database_is_reported_and_refused_and_recovers_without_a_restart(
    pg_schema: PgSchema,
) -> None:
    pg_schema.reset()
    async with (
        DatabaseProxy(pg_schema.url) as proxy,
        open_postgres_store(proxy.url, schema=pg_schema.schema, pool_size=2, connect_retry_s=1) as store,
    ):
        sid = await running_session(store)
        healthy = await store.status()
        assert (healthy.condition, healthy.reachable) == ("ok", True)
        assert healthy.details is not None
        assert healthy.details["schema_version"] == LATEST and healthy.details["schema"] == pg_schema.schema

        await proxy.cut()
        gone = await store.status()
        assert (gone.condition, gone.reachable) == ("unreachable", False)
        assert gone.details is not None and gone.details["reachable"] is False
        with pytest.raises(StorageUnavailable) as refused:
            await store.get_session(sid)
        assert refused.value.condition == "unreachable"
        assert proxy.url.split("@")[1].split("/")[0] in str(refused.value)

        await proxy.restore()
        back = await store.status()
        assert (back.condition, back.reachable) == ("ok", True)
        session = await store.get_session(sid)
        assert session is not None and session.status == "running"


async def test_opening_a_database_that_does_not_answer_gives_up_after_connect_retry_s(
    postgres_url: str,
) -> None:
    async with DatabaseProxy(postgres_url) as proxy:
        await proxy.cut()
        with pytest.raises(
            StorageError, match=r"cannot connect to the PostgreSQL database .*storage.connect_retry_s"
        ):
            async with open_postgres_store(proxy.url, connect_retry_s=0.3):
                pytest.fail("opened a database that does not answer")


# ---------------------------------------------------------------------------- parley db copy


async def test_a_copy_refuses_a_table_whose_columns_differ_and_copies_nothing(
    store: PostgresStore, pg_schema: PgSchema, tmp_path: Path
) -> None:
    source = tmp_path / "drifted.db"
    async with open_sqlite_store(source) as sqlite_store:
        await running_session(sqlite_store)
    with sqlite3.connect(source) as conn:
        conn.execute("ALTER TABLE events ADD COLUMN only_in_sqlite TEXT")
    with pytest.raises(StorageError, match=r"table events differs .*only_in_sqlite.*nothing was copied"):
        await store.copy_from_sqlite(source)
    assert pg_schema.rows("SELECT count(*) FROM sessions") == [(0,)]


# ---------------------------------------------------------------------------- configuration


def _project(tmp_path: Path, storage: dict[str, Any]) -> Path:
    path = tmp_path / "parley.yaml"
    path.write_text(json.dumps({"storage": storage}))
    return path


def _errors(path: Path) -> list[tuple[str, str]]:
    with pytest.raises(ConfigErrors) as raised:
        load_config(path, None)
    return [(e.field, e.problem) for e in raised.value.errors]


def test_storage_path_and_url_together_are_refused_naming_both(tmp_path: Path) -> None:
    [(field, problem)] = _errors(_project(tmp_path, {"path": "x.db", "url": "postgresql://h/db"}))
    assert field == "storage.url" and "storage.path" in problem and "storage.url" in problem


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://root:hunter2@db.example/parley",
        "postgresql://root:${PGPASSWORD}x@db.example/parley",
        "postgresql://root@db.example/parley?sslmode=require&password=hunter2",
    ],
)
def test_a_clear_text_password_in_parley_yaml_is_refused_pointing_at_an_environment_variable(
    tmp_path: Path, url: str
) -> None:
    [(field, problem)] = _errors(_project(tmp_path, {"url": url}))
    assert field == "storage.url" and "${PGPASSWORD}" in problem
    assert "hunter2" not in problem


def test_a_password_reference_is_taken_from_the_environment_and_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_TEST_SECRET", "p@ss/w:rd")
    config = load_config(
        _project(
            tmp_path,
            {"url": "postgresql://root:${PARLEY_TEST_SECRET}@db.example:5433/parley", "schema": "app"},
        ),
        None,
    )
    assert config.db_path is None
    # Percent-encoded in the user part, so the password's @, / and : keep the URL whole.
    assert config.db_url == "postgresql://root:p%40ss%2Fw%3Ard@db.example:5433/parley"
    assert psycopg.conninfo.conninfo_to_dict(config.db_url)["password"] == "p@ss/w:rd"
    assert config.db_label == "postgresql://root:[redacted]@db.example:5433/parley (schema app)"


def test_the_listen_url_takes_its_password_from_the_environment_like_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clear = {"url": "postgresql://root@pooler/parley", "listen_url": "postgresql://root:hunter2@db/parley"}
    [(field, problem)] = _errors(_project(tmp_path, clear))
    assert field == "storage.listen_url" and "${PGPASSWORD}" in problem and "hunter2" not in problem
    monkeypatch.setenv("PARLEY_TEST_SECRET", "p@ss")
    referenced = {**clear, "listen_url": "postgresql://root:${PARLEY_TEST_SECRET}@db/parley"}
    config = load_config(_project(tmp_path, referenced), None)
    assert config.storage.listen_url == "postgresql://root:p%40ss@db/parley"
    # Fields of a PostgreSQL URL given with --db / PARLEY_DB need no url in parley.yaml.
    config = load_config(_project(tmp_path, {"schema": "app", "listen": False}), "postgresql://root@h/db")
    assert (config.db_url, config.storage.db_schema, config.storage.listen) == (
        "postgresql://root@h/db",
        "app",
        False,
    )


@pytest.mark.parametrize(
    ("storage", "field"),
    [
        ({"url": "postgresql://h/db", "listen_url": "db.example:5432"}, "storage.listen_url"),
        ({"path": "x.db", "listen": False}, "storage.listen"),
        ({"url": "postgresql://h/db", "listen_poll_interval_s": 0}, "storage.listen_poll_interval_s"),
        ({"url": "postgresql://h/db", "max_size_mb": 5}, "storage.max_size_mb"),
        ({"path": "x.db", "pool_size": 5}, "storage.pool_size"),
        ({"path": "x.db", "schema": "app"}, "storage.schema"),
        ({"url": "postgresql://h/db", "schema": "My-App"}, "storage.schema"),
        ({"url": "mysql://h/db"}, "storage.url"),
        ({"url": "postgresql://h/db", "pool_size": 0}, "storage.pool_size"),
        ({"url": "postgresql://h/db", "statement_timeout_s": 0}, "storage.statement_timeout_s"),
        ({"url": "postgresql://h/db", "connect_retry_s": -1}, "storage.connect_retry_s"),
    ],
)
def test_storage_fields_are_checked_with_messages_that_name_them(
    tmp_path: Path, storage: dict[str, Any], field: str
) -> None:
    [(named, _)] = _errors(_project(tmp_path, storage))
    assert named == field


def test_a_database_url_from_db_or_parley_db_chooses_postgresql_and_a_path_stays_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from parley.config import db_override_from_env

    monkeypatch.delenv("PARLEY_DB", raising=False)
    assert db_override_from_env("x.db") == Path("x.db")
    assert db_override_from_env("postgresql://root@h/db") == "postgresql://root@h/db"
    monkeypatch.setenv("PARLEY_DB", f"postgresql://root:{SECRET}@h/db")
    assert db_override_from_env(None) == f"postgresql://root:{SECRET}@h/db"  # the environment's own
    with pytest.raises(Exception, match=r"--db: holds a password") as refused:
        db_override_from_env(f"postgresql://root:{SECRET}@h/db")
    assert SECRET not in str(refused.value)
    config = load_config(_project(tmp_path, {"path": "x.db"}), "postgresql://root@h/db")
    assert (config.db_path, config.db_url) == (None, "postgresql://root@h/db")


async def test_the_composition_root_opens_the_configured_postgresql_schema(pg_schema: PgSchema) -> None:
    pg_schema.reset()
    config = ServerConfig(
        db_path=None, db_url=pg_schema.url, agents={}, runtime=load_config(None, None).runtime
    )
    config = _with_schema(config, pg_schema.schema)
    async with open_store(config) as opened:
        assert isinstance(opened.store, PostgresStore) and opened.label == pg_schema.label
        status = await opened.status()
        assert status.details is not None and status.details["backend"] == "postgresql"


def _with_schema(config: ServerConfig, schema: str) -> ServerConfig:
    from dataclasses import replace

    return replace(config, storage=config.storage.model_copy(update={"db_schema": schema}))


# ---------------------------------------------------------------------------- the test harness


def test_without_a_server_the_postgres_tests_skip_except_on_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.postgres_support as support

    monkeypatch.setattr(support, "POSTGRES_URL", "postgresql://root@127.0.0.1:1/none")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="PARLEY_TEST_POSTGRES"):
        require_postgres()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI runs the PostgreSQL tests"):
        require_postgres()
