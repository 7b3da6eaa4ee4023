from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.postgres_support import PgSchema, require_postgres, schema_for_test
from tests.support import Database

# Modules named test_e2e_* start real processes (parley serve, MCP servers, npm tools). Everything
# else is the fast layer: `pytest -m "not e2e"` runs it alone, with no subprocess.
E2E_PREFIX = "test_e2e_"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name.startswith(E2E_PREFIX):
            item.add_marker(pytest.mark.e2e)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers a core. Most of a test's time is spent waiting (on a turn, a
    process, a socket), so a core runs two workers' tests in about the time it runs one's."""
    return 2 * (os.cpu_count() or 1)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test PostgreSQL server (PARLEY_TEST_POSTGRES); its tests skip without one, except on CI."""
    return require_postgres()


@pytest.fixture(scope="module")
def pg_schema(request: pytest.FixtureRequest, postgres_url: str) -> Iterator[PgSchema]:
    """A schema of the test server that the tests of one module share, dropped after them."""
    with schema_for_test(
        postgres_url, request.module.__name__.rpartition(".")[2].removeprefix("test_")
    ) as schema:
        yield schema


@pytest.fixture
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """The database of one test's parley: a SQLite file in its folder, or, for a test parametrized
    with `indirect=["database"]` and "postgres", a schema of its own on the test server."""
    with database_for(getattr(request, "param", "sqlite"), tmp_path, request.node.name) as chosen:
        yield chosen


@contextmanager
def database_for(kind: str, directory: Path, tag: str) -> Iterator[Database]:
    if kind == "sqlite":
        yield Database(path=directory / "parley.db")
        return
    assert kind == "postgres", kind
    url = require_postgres()
    with schema_for_test(url, re.sub(r"[^a-z0-9_]", "_", tag.lower().removeprefix("test_"))[:20]) as schema:
        yield Database(url=url, schema=schema.schema)
