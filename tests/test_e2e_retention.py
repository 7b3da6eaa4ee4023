"""`parley db vacuum` (the command line, a process of its own) on the SQLite file of a parley that
serves (in the test's process), and its answer on PostgreSQL. Retention itself is
tests/test_retention.py."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.conftest import database_for
from tests.support import REPO, TEST_DEADLINE_S, InProcessServer, call, write_config
from tests.test_retention import AGENTS, World

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
async def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    """A parley serving on SQLite or PostgreSQL, with a session and a closed one in its database."""
    directory: Path = tmp_path_factory.mktemp(f"vacuum_{request.param}")
    with database_for(request.param, directory, "vacuum") as database:
        config = write_config(directory, agents=AGENTS, database=database)
        async with InProcessServer(config, db=database.db_arg) as server:
            async with server.client() as client:
                for _ in range(2):
                    started = await call(client, "start_session", agent="helper", message="hello")
                await call(client, "close_session", session_id=started["session_id"])
            yield World(server, database)
            assert "Traceback" not in server.log(), server.log()


async def test_db_vacuum_gives_a_sqlite_files_free_pages_back_and_explains_itself_on_postgresql(
    world: World,
) -> None:
    db = ["--db", world.database.db_arg] if world.database.db_arg else []
    # In a thread: the event loop goes on serving the parley meanwhile.
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "parley", "db", "vacuum", "--config", str(world.server.config_path), *db],
            capture_output=True,
            text=True,
            timeout=TEST_DEADLINE_S,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
        )
    )
    if world.database.kind == "sqlite":
        assert done.returncode == 0, done.stderr
        before, after = (float(x) for x in re.findall(r"([\d.]+) MB", done.stdout))
        assert after <= before, done.stdout
    else:
        assert done.returncode == 1 and "autovacuum" in done.stderr, done.stderr
