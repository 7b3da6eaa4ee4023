"""The one migration history (parley/storage/schema.py), in this process: a new SQLite file and a
new PostgreSQL schema reach the same version with the same tables and columns; databases of
earlier releases (the committed fixtures, tests/upgrade/) land on it; a database newer than this
parley, or at a version no parley writes, is refused saying which and what to do; a step that
fails leaves the database as it was; the released legacy steps are never edited."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from parley.errors import StorageError
from parley.storage import schema
from parley.storage.schema import DATA_TABLES, LATEST, Migration, migrate_postgres, migrate_sqlite, steps
from parley.storage.schema_postgres_legacy import POSTGRES_LEGACY
from parley.storage.schema_sqlite_legacy import SQLITE_LEGACY
from tests.postgres_support import PgSchema, schema_for_test
from tests.upgrade.world import WAVE1, WAVE2_POSTGRES, WAVE2_SQLITE

pytestmark = pytest.mark.anyio

# (column, NOT NULL) of each table; a primary key counts as NOT NULL (SQLite's table_info does
# not say so of a TEXT key).
Columns = dict[str, set[tuple[str, bool]]]


@contextmanager
def _sqlite(path: Path) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(path, isolation_level=None)  # autocommit, as the store opens it
    try:
        yield db
    finally:
        db.close()


@asynccontextmanager
async def _postgres(url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        yield conn


def _sqlite_versions(db: sqlite3.Connection) -> list[int]:
    return [r[0] for r in db.execute("SELECT version FROM schema_version ORDER BY version")]


def _pg_versions(pg: PgSchema) -> list[int]:
    return [r[0] for r in pg.rows("SELECT version FROM schema_version ORDER BY version")]


def _sqlite_columns(db: sqlite3.Connection) -> Columns:
    tables = [
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    return {t: {(r[1], bool(r[3] or r[5])) for r in db.execute(f"PRAGMA table_info({t})")} for t in tables}


def _pg_columns(pg: PgSchema) -> Columns:
    columns: Columns = {}
    for table, column, nullable in pg.rows(
        "SELECT table_name, column_name, is_nullable FROM information_schema.columns WHERE table_schema = %s",
        (pg.schema,),
    ):
        columns.setdefault(table, set()).add((column, nullable == "NO"))
    return columns


def _sqlite_file(tmp_path: Path, fixture: Path | None = None, name: str = "parley.db") -> Path:
    path = tmp_path / name
    if fixture is not None:
        shutil.copy(fixture, path)
    return path


# ---------------------------------------------------------------------------- the history


def test_the_versions_run_the_legacy_steps_then_the_shared_ones_from_18() -> None:
    assert (len(SQLITE_LEGACY), len(POSTGRES_LEGACY), schema.FIRST_SHARED) == (17, 6, 18)
    assert [v for v, _ in steps("sqlite")] == list(range(1, LATEST + 1))
    assert [v for v, _ in steps("postgres")] == [1, 2, 3, 4, 5, 6, *range(18, LATEST + 1)]
    # A wave-2 database of either kind goes on from the schema both reached: 18, then on.
    assert (
        [v for v, _ in steps("sqlite", 17)]
        == [v for v, _ in steps("postgres", 6)]
        == list(range(18, LATEST + 1))
    )
    assert [v for v, _ in steps("sqlite", 10)] == list(range(11, LATEST + 1))
    assert steps("sqlite", LATEST) == steps("postgres", LATEST) == []


def test_the_released_legacy_steps_are_as_their_releases_shipped_them() -> None:
    """Never edit a released migration: a database that ran it would differ from one that runs
    the edited text. (If this fails, put the change in a new shared migration instead.)"""
    shipped = {
        "sqlite": "dfb7ac0e84b6d3ec72ad6a261e0680571190792f76df9b1a99f26ffbc5795a1a",
        "postgres": "8b46f1b9de0de2bf9108e6d1b34ba92287b60c4e1386065c9f1d37a955b85b2b",
    }
    for dialect, legacy in (("sqlite", SQLITE_LEGACY), ("postgres", POSTGRES_LEGACY)):
        assert hashlib.sha256("\x00".join(legacy).encode()).hexdigest() == shipped[dialect], dialect


def test_a_migration_gives_its_ddl_once_or_once_per_dialect() -> None:
    assert Migration("same", both="CREATE INDEX i ON t (c)").ddl("postgres") == "CREATE INDEX i ON t (c)"
    own = Migration(
        "own", sqlite="ALTER TABLE t ADD COLUMN c TEXT", postgres="ALTER TABLE t ADD COLUMN c json"
    )
    assert (own.ddl("sqlite"), own.ddl("postgres")) == (
        "ALTER TABLE t ADD COLUMN c TEXT",
        "ALTER TABLE t ADD COLUMN c json",
    )
    for wrong in ({}, {"sqlite": "x"}, {"both": "x", "postgres": "y"}):
        with pytest.raises(ValueError, match="needs `both`, or `sqlite` and `postgres`"):
            Migration("wrong", **wrong)


# ---------------------------------------------------------------------------- new databases


async def test_a_new_sqlite_file_and_a_new_postgres_schema_reach_the_same_tables_and_columns(
    tmp_path: Path, postgres_url: str
) -> None:
    path = _sqlite_file(tmp_path)
    with _sqlite(path) as db:
        migrate_sqlite(db, path)
        assert _sqlite_versions(db)[-1] == LATEST
        lite = _sqlite_columns(db)
    with schema_for_test(postgres_url, "same") as pg:
        async with _postgres(pg.url) as conn:
            assert await migrate_postgres(conn, pg.schema, pg.label) == (0, LATEST)
        assert _pg_versions(pg)[-1] == LATEST
        post = _pg_columns(pg)
    assert set(lite) == set(post) == {*DATA_TABLES, "schema_version"}
    for table in DATA_TABLES:
        assert lite[table] == post[table], (table, lite[table] ^ post[table])
    assert {c for c, _ in lite["schema_version"]} <= {c for c, _ in post["schema_version"]}


async def test_migrating_again_changes_nothing(tmp_path: Path, postgres_url: str) -> None:
    path = _sqlite_file(tmp_path)
    with _sqlite(path) as db:
        migrate_sqlite(db, path)
        migrate_sqlite(db, path)
        assert _sqlite_versions(db) == list(range(1, LATEST + 1))
    with schema_for_test(postgres_url, "again") as pg:
        async with _postgres(pg.url) as conn:
            await migrate_postgres(conn, pg.schema, pg.label)
            assert await migrate_postgres(conn, pg.schema, pg.label) == (LATEST, LATEST)
        assert _pg_versions(pg) == [v for v, _ in steps("postgres")]


# ---------------------------------------------------------------------------- earlier releases


@pytest.mark.parametrize("fixture", [WAVE1.database, WAVE2_SQLITE.database], ids=["wave1", "wave2"])
def test_a_sqlite_file_of_an_earlier_release_lands_on_the_latest_version_with_its_data(
    tmp_path: Path, fixture: Path
) -> None:
    path = _sqlite_file(tmp_path, fixture)
    with _sqlite(path) as db:
        before = _sqlite_versions(db)
        sessions = db.execute("SELECT id, status FROM sessions ORDER BY id").fetchall()
        migrate_sqlite(db, path)
        assert _sqlite_versions(db) == [*before, *range(before[-1] + 1, LATEST + 1)]
        assert db.execute("SELECT id, status FROM sessions ORDER BY id").fetchall() == sessions
        landed = _sqlite_columns(db)
    fresh = _sqlite_file(tmp_path, name="fresh.db")
    with _sqlite(fresh) as db:
        migrate_sqlite(db, fresh)
        assert landed == _sqlite_columns(db)


async def test_a_postgres_schema_of_wave_2_lands_on_the_latest_version_with_its_data(
    postgres_url: str,
) -> None:
    with schema_for_test(postgres_url, "wave2") as old, schema_for_test(postgres_url, "new") as new:
        old.restore(WAVE2_POSTGRES.database)
        assert _pg_versions(old) == [1, 2, 3, 4, 5, 6]
        sessions = old.rows("SELECT id, status, title, tags::text FROM sessions ORDER BY id")
        [(audit,)] = old.rows("SELECT max(id) FROM audit")
        async with _postgres(old.url) as conn:
            assert await migrate_postgres(conn, old.schema, old.label) == (6, LATEST)
        assert _pg_versions(old) == [1, 2, 3, 4, 5, 6, *range(18, LATEST + 1)]
        assert old.rows("SELECT id, status, title, tags::text FROM sessions ORDER BY id") == sessions
        # The audit trail's identity goes on after the release's entries.
        assert old.rows("SELECT nextval(pg_get_serial_sequence('audit', 'id'))") == [(audit + 1,)]
        async with _postgres(new.url) as conn:
            await migrate_postgres(conn, new.schema, new.label)
        assert _pg_columns(old) == _pg_columns(new)


# ---------------------------------------------------------------------------- refusals


def test_a_sqlite_file_newer_than_this_parley_is_refused_naming_it_and_the_fix(tmp_path: Path) -> None:
    path = _sqlite_file(tmp_path)
    with _sqlite(path) as db:
        migrate_sqlite(db, path)
        db.execute("INSERT INTO schema_version (version) VALUES (?)", (LATEST + 3,))
        with pytest.raises(StorageError) as refused:
            migrate_sqlite(db, path)
        assert str(refused.value) == (
            f"{path} has schema version {LATEST + 3}, newer than this parley knows ({LATEST}); "
            "upgrade parley, or point --db at another file"
        )
        assert not db.in_transaction and _sqlite_versions(db)[-1] == LATEST + 3


async def test_a_postgres_schema_newer_than_this_parley_or_at_no_version_of_it_is_refused(
    postgres_url: str,
) -> None:
    with schema_for_test(postgres_url, "refused") as pg:
        async with _postgres(pg.url) as conn:
            await migrate_postgres(conn, pg.schema, pg.label)
            pg.rows("INSERT INTO schema_version (version) VALUES (%s)", (LATEST + 3,))
            with pytest.raises(StorageError) as newer:
                await migrate_postgres(conn, pg.schema, pg.label)
            assert str(newer.value) == (
                f"the PostgreSQL database {pg.label} has schema version {LATEST + 3}, newer than this "
                f"parley knows ({LATEST}); upgrade parley, or point storage.url or storage.schema at "
                "another database"
            )
            # 7-17 are SQLite's alone: a PostgreSQL schema there was written by no parley.
            pg.rows("DELETE FROM schema_version WHERE version > 6")
            pg.rows("INSERT INTO schema_version (version) VALUES (9)")
            with pytest.raises(StorageError) as unknown:
                await migrate_postgres(conn, pg.schema, pg.label)
            assert (
                f"has schema version 9, which no parley writes on PostgreSQL (its versions are 1-6 and 18-{LATEST})"
                in str(unknown.value)
            )
        assert _pg_versions(pg) == [1, 2, 3, 4, 5, 6, 9]


# ---------------------------------------------------------------------------- later shared steps


def _next(sqlite: str, postgres: str) -> tuple[Migration, ...]:
    return (*schema.MIGRATIONS, Migration("a later step", sqlite=sqlite, postgres=postgres))


async def test_a_later_shared_step_runs_its_own_ddl_on_each_database(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _sqlite_file(tmp_path)
    with schema_for_test(postgres_url, "later") as pg:
        with _sqlite(path) as db:
            migrate_sqlite(db, path)
        async with _postgres(pg.url) as conn:
            await migrate_postgres(conn, pg.schema, pg.label)
        monkeypatch.setattr(
            schema,
            "MIGRATIONS",
            _next("ALTER TABLE sessions ADD COLUMN later TEXT", "ALTER TABLE sessions ADD COLUMN later json"),
        )
        monkeypatch.setattr(schema, "LATEST", LATEST + 1)
        with _sqlite(path) as db:
            migrate_sqlite(db, path)
            assert _sqlite_versions(db)[-2:] == [LATEST, LATEST + 1]
            assert [r[2] for r in db.execute("PRAGMA table_info(sessions)") if r[1] == "later"] == ["TEXT"]
        async with _postgres(pg.url) as conn:
            assert await migrate_postgres(conn, pg.schema, pg.label) == (LATEST, LATEST + 1)
        assert pg.rows(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = %s AND column_name = 'later'",
            (pg.schema,),
        ) == [("json",)]


async def test_a_step_that_fails_leaves_the_database_as_it_was(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _sqlite_file(tmp_path)
    with schema_for_test(postgres_url, "failed") as pg:
        with _sqlite(path) as db:
            migrate_sqlite(db, path)
            before = _sqlite_columns(db)
        async with _postgres(pg.url) as conn:
            await migrate_postgres(conn, pg.schema, pg.label)
        columns = _pg_columns(pg)
        half = "ALTER TABLE sessions ADD COLUMN half TEXT; ALTER TABLE no_such_table ADD COLUMN x TEXT"
        monkeypatch.setattr(schema, "MIGRATIONS", _next(half, half))
        monkeypatch.setattr(schema, "LATEST", LATEST + 1)
        with _sqlite(path) as db:
            with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
                migrate_sqlite(db, path)
            assert not db.in_transaction
            assert _sqlite_versions(db)[-1] == LATEST and _sqlite_columns(db) == before
        async with _postgres(pg.url) as conn:
            with pytest.raises(psycopg.errors.UndefinedTable):
                await migrate_postgres(conn, pg.schema, pg.label)
        assert _pg_versions(pg)[-1] == LATEST and _pg_columns(pg) == columns
