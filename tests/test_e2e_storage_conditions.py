"""A database that is full or failing: the caller gets a tool error naming the file
and the fix, /healthz says so, and the next call after the condition clears succeeds without a
restart. Each condition is made from outside the server process."""

from __future__ import annotations

import contextlib
import resource
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from parley.tls import http_client
from tests.support import TEST_DEADLINE_S, Served, call, call_error, db_rows, serving, write_config

pytestmark = pytest.mark.anyio

MAX_SIZE_MB = 1
PAGE_SIZE = 4096
# More than one page, so storing it needs pages the full file cannot give.
LONG_MESSAGE = "a long message " * 300


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    config = write_config(tmp_path_factory.mktemp("storage"), storage={"max_size_mb": MAX_SIZE_MB})
    # A process of its own: a test puts a file-size limit on it.
    async with serving(config, name="storage", http=True, process=True) as served:
        yield served


async def _health(served: Served) -> dict[str, Any]:
    assert served.server.url is not None
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        response = await http.get(served.server.base_url + "/healthz")
    return dict(response.json())


def _session_count(db: Path) -> int:
    return int(db_rows(db, "SELECT COUNT(*) FROM sessions")[0][0])


@contextlib.contextmanager
def _outside(db: Path) -> Iterator[sqlite3.Connection]:
    """A second program writing to the same file, committing when the block ends."""
    with contextlib.closing(sqlite3.connect(db, timeout=TEST_DEADLINE_S)) as conn, conn:
        yield conn


@contextlib.contextmanager
def _filled_up(db: Path) -> Iterator[None]:
    """Another program fills the file up to the server's size limit, and deletes its data after."""
    cap_pages = MAX_SIZE_MB * 1024 * 1024 // PAGE_SIZE
    with _outside(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS filler (b BLOB)")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        conn.execute("INSERT INTO filler VALUES (zeroblob(?))", ((cap_pages - pages + free + 2) * PAGE_SIZE,))
    try:
        yield
    finally:
        # The pages go back to the file's free list: space for the server, as on a freed disk.
        with _outside(db) as conn:
            conn.execute("DELETE FROM filler")


def _assert_clean_log(served: Served) -> None:
    log = served.server.log()
    assert "cannot rollback" not in log, log
    assert "internal error" not in log, log


async def test_a_full_database_is_a_clear_error_and_the_server_recovers_when_space_returns(
    served: Served,
) -> None:
    assert (await _health(served))["storage"] == "ok"
    before = _session_count(served.db)
    with _filled_up(served.db):
        text = await call_error(served.client, "start_session", agent="demo", message=LONG_MESSAGE)
        assert f"The database {served.db} is full" in text, text
        assert "free space" in text and "nothing was changed" in text
        assert _session_count(served.db) == before
        health = await _health(served)
        assert health["storage"] == "full" and health["status"] == "degraded", health
    outcome = await call(served.client, "start_session", agent="demo", message=LONG_MESSAGE)
    assert outcome["status"] == "answered"
    health = await _health(served)
    assert health["storage"] == "ok" and health["status"] == "ok", health
    _assert_clean_log(served)


@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs prlimit (Linux)")
async def test_a_write_failing_at_commit_is_reported_and_the_next_call_after_it_clears_succeeds(
    served: Served,
) -> None:
    """The case the probe hit: SQLite rolls back by itself when the commit cannot be written, and
    our own ROLLBACK must not hide why. A file-size limit put on the server process makes every
    write past the first byte of a file fail, as a failing disk would. (Its log lines of that
    moment are lost too: the log is a file.)"""
    sid = (await call(served.client, "start_session", agent="demo"))["session_id"]
    pid = served.server.pid
    limits = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, limits[1]))
    try:
        text = await call_error(served.client, "send_message", session_id=sid, message="hello")
        assert f"The database {served.db} failed" in text and "nothing was changed" in text, text
        assert (await _health(served))["storage"].startswith("error: ")
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, limits)
    outcome = await call(served.client, "send_message", session_id=sid, message="hello again")
    assert outcome["status"] == "answered" and "message 1 of" in outcome["answer"]
    assert (await _health(served))["storage"] == "ok"
    _assert_clean_log(served)
