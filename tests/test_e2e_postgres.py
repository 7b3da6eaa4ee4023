"""PostgreSQL through the real command line: `parley db migrate`, `parley db copy` of a SQLite
database a real `parley serve` filled, and `parley serve --http` on PostgreSQL whose /healthz
follows the database away and back, with the password nowhere in its output.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.core.ids import SessionId, TurnId, new_task_id
from parley.core.records import TaskRecord
from parley.storage.ports import Store
from parley.storage.postgres import open_postgres_store
from parley.storage.schema import LATEST, steps
from parley.storage.sqlite import open_sqlite_store
from parley.tls import http_client
from tests.postgres_support import DatabaseProxy, PgSchema, schema_for_test
from tests.store_support import list_steps
from tests.support import (
    FAST_RUNTIME,
    TEST_DEADLINE_S,
    ServerProcess,
    call,
    eventually,
    running_server,
    write_config,
)

pytestmark = pytest.mark.anyio

PASSWORD_VAR = "PARLEY_TEST_PG_PASSWORD"


def _parley(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "PARLEY_DB"}
    return subprocess.run(
        [sys.executable, "-m", "parley", *args],
        capture_output=True,
        text=True,
        timeout=TEST_DEADLINE_S,
        env={**environment, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def fresh(postgres_url: str, request: pytest.FixtureRequest) -> Iterator[PgSchema]:
    """A schema of its own for a test (these tests need an empty one each)."""
    with schema_for_test(postgres_url, request.node.name.removeprefix("test_")[:20]) as schema:
        yield schema


def _pg_config(directory: Path, url: str, schema: str, **storage: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "parley.yaml"
    config = {"storage": {"url": url, "schema": schema, **storage}, "runtime": FAST_RUNTIME}
    path.write_text(yaml.safe_dump(config))
    return path


# ---------------------------------------------------------------------------- parley db migrate


def test_db_migrate_creates_the_schema_once_and_refuses_a_newer_one(fresh: PgSchema, tmp_path: Path) -> None:
    config = _pg_config(tmp_path, fresh.url, fresh.schema)
    first = _parley("db", "migrate", "--config", str(config))
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"{fresh.label}: migrated from schema version 0 to {LATEST}"
    again = _parley("db", "migrate", "--config", str(config))
    assert again.stdout.strip() == f"{fresh.label}: schema version {LATEST}, nothing to migrate"
    assert fresh.rows("SELECT version FROM schema_version") == [(v,) for v, _ in steps("postgres")]

    fresh.rows("INSERT INTO schema_version (version) VALUES (%s)", (LATEST + 1,))
    newer = _parley("db", "migrate", "--db", fresh.url, "--config", str(config))
    assert newer.returncode == 3 and newer.stdout == ""
    [line] = newer.stderr.strip().splitlines()
    assert f"newer than this parley knows ({LATEST})" in line and fresh.schema in line


# ---------------------------------------------------------------------------- parley db copy


async def _fill_sqlite(directory: Path) -> Path:
    """A SQLite database written by a real `parley serve`: chat turns with a tool call, an
    answered question, a task session, a compacted conversation; then an MCP task through the
    store API (a task handle needs a task-capable client otherwise)."""
    squeezed = {"compaction": {"enabled": True, "context_window": 200}}
    config = write_config(directory, agents={"squeezed": squeezed})
    async with running_server(config) as (_, client):
        chat = await call(client, "start_session", agent="demo", message="hello a\x00b, with a NUL")
        sid = chat["session_id"]
        await call(
            client, "send_message", session_id=sid, message='/tool write_todos {"todos":[{"content":"x"}]}'
        )
        asked = await call(client, "send_message", session_id=sid, message="/ask Ship it? | yes | no")
        await call(
            client, "answer_question", session_id=sid, interrupt_id=asked["pending"][0]["id"], answer="yes"
        )
        await call(client, "start_session", agent="demo", kind="task", message='/result {"summary": "done"}')
        long_text = "a fairly long message that fills the small context window " * 6
        # A picture in the compacted conversation: its bytes are copied too.
        picture = {"type": "image", "data": PIXEL_B64, "mimeType": "image/png"}
        squeezed_sid = (
            await call(client, "start_session", agent="squeezed", message=long_text, attachments=[picture])
        )["session_id"]
        await call(client, "send_message", session_id=squeezed_sid, message="and one more")
    db = directory / "parley.db"
    async with open_sqlite_store(db) as store:
        await store.create_task(
            TaskRecord(
                id=new_task_id(),
                owner="local",
                generation="2025-11-25",
                tool="send_message",
                session_id=SessionId(sid),
                queued_message_id=None,
                turn_id=TurnId(str(chat["turn_id"])),
                status="completed",
                status_message="Answered: yes\x00",
                result={"content": [], "structuredContent": {"status": "answered"}},
                ttl_ms=None,
                poll_interval_ms=1000,
                created_at=1.0,
                updated_at=2.0,
                expires_at=None,
            )
        )
    return db


# A 1x1 PNG.
PIXEL_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def _sqlite_counts(db: Path) -> dict[str, int]:
    tables = {
        "sessions": "sessions",
        "turns": "turns",
        "tool calls": "tool_calls",
        "interrupts": "interrupts",
        "queued messages": "queued_messages",
        "transcript messages": "messages",
        "summaries": "summaries",
        "steps": "steps",
        "events": "events",
        "tasks": "tasks",
        "audit entries": "audit",
        "agent versions": "agent_versions",
        "attachments": "attachments",
        "attachment references": "attachment_refs",
        "schedules": "schedules",
        "schedule ticks": "schedule_ticks",
        "credentials": "credentials",
        "pending authorizations": "oauth_flows",
        "registered OAuth clients": "oauth_clients",
    }
    with sqlite3.connect(db) as conn:
        return {
            name: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            for name, table in tables.items()
        }


async def _everything(store: Store, db: Path) -> dict[str, Any]:
    """Every record the store API reads back, for every session and task of the SQLite file `db`."""
    with sqlite3.connect(db) as conn:
        sids = [SessionId(r[0]) for r in conn.execute("SELECT id FROM sessions ORDER BY id")]
        queued = [r[0] for r in conn.execute("SELECT id FROM queued_messages ORDER BY id")]
        tasks = [r[0] for r in conn.execute("SELECT id FROM tasks ORDER BY id")]
        blobs = [r[0] for r in conn.execute("SELECT sha256 FROM attachments")]
    seen: dict[str, Any] = {"attachments": await store.attachment_data(blobs)}
    for sid in sids:
        turns = await store.list_turns(sid)
        seen[sid] = {
            "session": await store.get_session(sid),
            "turns": turns,
            "calls": [await store.list_tool_calls(t.id) for t in turns],
            "messages": await store.list_messages(sid, None, None),
            "interrupts": await store.list_interrupts(sid, pending_only=False),
            "events": await store.list_events(sid, 0, 100_000),
            "steps": await list_steps(store, sid),
            "summary": await store.latest_summary(sid),
            "first": await store.first_message(sid),
        }
    seen["queued"] = [await store.get_queued(q) for q in queued]
    seen["tasks"] = [await store.get_task(t, 0.0) for t in tasks]
    seen["page"] = (await store.list_sessions("local", None, None, None, 100)).sessions
    seen["audit"] = await store.list_audit(None, None, None, 100_000)
    return seen


async def test_db_copy_copies_everything_a_server_wrote_and_refuses_a_target_with_data(
    fresh: PgSchema, tmp_path: Path
) -> None:
    db = await _fill_sqlite(tmp_path / "sqlite")
    config = _pg_config(tmp_path / "pg", fresh.url, fresh.schema)
    expected = _sqlite_counts(db)
    # The run wrote some of everything but schedules, credentials, authorizations and registered
    # clients (the server has none; their copy is counted).
    unwritten = ("schedule", "credentials", "pending authorizations", "registered OAuth clients")
    assert all(n for name, n in expected.items() if not name.startswith(unwritten)), expected

    copied = _parley("db", "copy", "--from", str(db), "--to", fresh.url, "--config", str(config))
    assert copied.returncode == 0, copied.stderr
    lines = copied.stdout.strip().splitlines()
    assert lines[0] == f"copied {db} to {fresh.label}:"
    printed = {
        m.group(2): int(m.group(1)) for m in (re.match(r"\s*(\d+)\s+(.+)$", line) for line in lines[1:]) if m
    }
    assert printed == expected

    async with open_sqlite_store(db) as sqlite_store:
        before = await _everything(sqlite_store, db)
    async with open_postgres_store(fresh.url, schema=fresh.schema) as pg_store:
        after = await _everything(pg_store, db)
        # The next audit entry comes after the copied ones.
        await pg_store.record_audit(replace(before["audit"][0], id=0, action="after the copy"))
        [newest] = await pg_store.list_audit(None, None, None, 1)
    assert after == before
    assert newest.action == "after the copy" and newest.id > before["audit"][0].id
    assert [(r[0],) for r in fresh.rows("SELECT text FROM queued_messages WHERE text::text LIKE '%%u0000%%'")]

    # The copy is usable as it is: the command line reads it, a second copy is refused.
    listed = _parley("sessions", "--config", str(config), "list")
    assert listed.returncode == 0 and len(listed.stdout.strip().splitlines()) == expected["sessions"]
    refused = _parley("db", "copy", "--from", str(db), "--config", str(config))
    assert refused.returncode == 3, refused.stdout
    [line] = refused.stderr.strip().splitlines()
    assert "already holds parley data" in line and f"{expected['sessions']} sessions" in line
    assert "nothing was copied" in line
    assert fresh.rows("SELECT count(*) FROM sessions") == [(expected["sessions"],)]


def test_db_copy_needs_an_existing_sqlite_file_and_a_postgresql_target(
    fresh: PgSchema, tmp_path: Path
) -> None:
    missing = _parley("db", "copy", "--from", str(tmp_path / "none.db"), "--to", fresh.url)
    assert missing.returncode == 3 and "there is no SQLite database at" in missing.stderr
    assert not (tmp_path / "none.db").exists()
    not_pg = _parley("db", "copy", "--from", str(tmp_path / "none.db"), "--to", str(tmp_path / "other.db"))
    assert not_pg.returncode == 2 and "--to must be a PostgreSQL URL" in not_pg.stderr


# ---------------------------------------------------------------------------- serve on PostgreSQL


def _with_password_reference(url: str) -> tuple[str, str]:
    """`url` with its password (or a made-up one: the test server trusts local connections) given
    as ${PARLEY_TEST_PG_PASSWORD}, and the value that variable must hold."""
    parts = re.match(r"^(?P<scheme>[a-z]+://)(?P<user>[^:@/]*)(?::(?P<password>[^@/]*))?@(?P<rest>.*)$", url)
    assert parts is not None, f"PARLEY_TEST_POSTGRES must name a user: {url}"
    secret = parts.group("password") or os.environ.get("PGPASSWORD") or "pw-" + os.urandom(8).hex()
    reference = f"{parts.group('scheme')}{parts.group('user')}:${{{PASSWORD_VAR}}}@{parts.group('rest')}"
    return reference, secret


async def test_serve_on_postgresql_reports_the_database_and_answers_503_while_it_is_away(
    fresh: PgSchema, tmp_path: Path
) -> None:
    async with DatabaseProxy(fresh.url) as proxy:
        url, secret = _with_password_reference(proxy.url)
        config = _pg_config(tmp_path, url, fresh.schema, connect_retry_s=1)
        server = ServerProcess(config, http=True, env={PASSWORD_VAR: secret})
        bodies: list[str] = []
        async with server, server.client() as client, http_client() as http:
            assert server.url is not None
            health_url = server.url.replace("/mcp", "/healthz")

            async def health(code: int, status: str) -> bool:
                answer = await http.get(health_url)
                bodies.append(answer.text)
                report = answer.json()
                return answer.status_code == code and report["status"] == status

            assert await health(200, "ok")
            report = json.loads(bodies[-1])
            assert report["storage"] == "ok"
            database = report["database"]
            assert (database["backend"], database["schema"], database["reachable"]) == (
                "postgresql",
                fresh.schema,
                True,
            )
            assert database["schema_version"] == LATEST and database["pool"]["max"] == 10
            started = await call(client, "start_session", agent="demo", message="hello")
            assert started["status"] == "answered"

            await proxy.cut()
            await eventually(lambda: health(503, "unavailable"), "/healthz to answer 503")
            away = json.loads(bodies[-1])
            assert away["storage"] == "unreachable" and away["database"]["reachable"] is False
            assert away["leased_sessions"] is None

            await proxy.restore()
            await eventually(lambda: health(200, "ok"), "/healthz to answer 200 again")
            again = await call(client, "send_message", session_id=started["session_id"], message="back")
            assert again["status"] == "answered"
        log = server.log()
    assert "started as" in log and fresh.schema in log
    assert secret not in log
    assert all(secret not in body for body in bodies)
    assert "[redacted]" in log  # the URL is logged, masked
    assert fresh.rows("SELECT count(*) FROM sessions") == [(1,)]
