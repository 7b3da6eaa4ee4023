"""Make the upgrade fixtures of the release of the day: a SQLite file and a PostgreSQL dump, each
a database at rest holding a parked approval with a message queued behind it (carrying an
attachment), a title and tags on that session, a pending durable timer, a downstream MCP task
being polled, an open MCP task (2025-11-25) waiting for an approval, and the audit trail of all
that. Run once per release whose databases later releases must upgrade, with that release
checked out (add its Fixture entries in world.py and name them in RELEASE below); commit what it
writes. wave1.db was made by the first release's version of this script (no PostgreSQL, no
attachment, title, tags or audit yet).

The timer and the first poll are due 60 s after the stop: enough to stop cleanly first, and
long past whenever the test runs.

    python -m tests.upgrade.make_fixture          # PostgreSQL at PARLEY_TEST_POSTGRES, pg_dump on PATH
"""

from __future__ import annotations

import hashlib
import json
import secrets
import signal
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from parley import __version__
from tests.postgres_support import POSTGRES_URL, PgSchema
from tests.support import ServerProcess, call, db_rows, eventually
from tests.task_client import call_tool_as_task, get_task, server_target, task_client
from tests.upgrade.world import REPO, TASK_TTL_MS, WAVE2_POSTGRES, WAVE2_SQLITE, Fixture, write_world

# The release these fixtures are of: (its name, its SQLite fixture, its PostgreSQL fixture).
RELEASE = ("wave2", WAVE2_SQLITE, WAVE2_POSTGRES)

APPEND = '/tool fixture__append_note {"note": "%s"}'
NOTE_TEXT = "Notes kept across the upgrade.\n"
NOTE = {
    "type": "resource",
    "resource": {"uri": "file:///upgrade/notes.txt", "mimeType": "text/plain", "text": NOTE_TEXT},
}
TITLE = "the approval kept across the upgrade"
TAGS = ["upgrade", "parked"]

Rows = Callable[[str], list[tuple[Any, ...]]]


async def make(config: Path, rows: Rows) -> dict[str, Any]:
    """Fill the database of `config` and stop the server; the handles of what waits in it."""
    async with (
        ServerProcess(config) as server,
        task_client(server_target(server), mode="legacy", elicitation_callback=None) as (client, _),
    ):
        approval = await call(client, "start_session", agent="writer", message=APPEND % "approved later")
        assert approval["status"] == "waiting_for_input", approval
        queued = await call(
            client,
            "send_message",
            session_id=approval["session_id"],
            message="and this message waits behind the approval",
            attachments=[NOTE],
            wait_seconds=0,
        )
        assert queued["queued_message_id"], queued
        labelled = await call(
            client, "update_session", session_id=approval["session_id"], title=TITLE, tags=TAGS
        )
        assert labelled["title"] == TITLE and labelled["tags"] == TAGS, labelled
        timer = await call(
            client, "start_session", agent="demo", message="/wait 60 for the upgrade", wait_seconds=0
        )
        downstream = await call(
            client,
            "start_session",
            agent="asker",
            message='/tool echo__ask {"question": "colour?"}',
            wait_seconds=0,
        )
        task = await call_tool_as_task(
            client, "start_session", {"agent": "writer", "message": APPEND % "task"}, ttl_ms=TASK_TTL_MS
        )

        async def at_rest() -> bool:
            statuses = sorted(r[0] for r in rows("SELECT status FROM tool_calls"))
            return statuses == [
                "pending_approval",
                "pending_approval",
                "waiting_for_task",
                "waiting_for_timer",
            ]

        await eventually(at_rest, "every session to park")

        async def task_waits() -> bool:
            status: str = (await get_task(client, task["taskId"]))["status"]
            return status == "input_required"

        await eventually(task_waits, "the MCP task to wait for input")
        server.send_signal(signal.SIGTERM)
        assert await server.wait_exit() == 0
    [(audit_entries,)] = rows("SELECT count(*) FROM audit")
    assert audit_entries > 0
    [(schema_version,)] = rows("SELECT max(version) FROM schema_version")
    return {
        "release": __version__,
        "commit": _commit(),
        "schema_version": schema_version,
        "approval_session": approval["session_id"],
        "queued_message_id": queued["queued_message_id"],
        "attachment_sha256": hashlib.sha256(NOTE_TEXT.encode()).hexdigest(),
        "attachment_text": NOTE_TEXT,
        "title": TITLE,
        "tags": TAGS,
        "timer_session": timer["session_id"],
        "downstream_session": downstream["session_id"],
        "task_id": task["taskId"],
        "audit_entries": audit_entries,
    }


def _commit() -> str:
    """The commit these fixtures are made by (with `+` if the work tree has changes)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "parley"], cwd=REPO, capture_output=True, text=True
    )
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def make_sqlite(fixture: Fixture) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        db = directory / "parley.db"
        config = write_world(directory, poll_s=60)  # no poll of the downstream task before the stop
        handles = anyio.run(make, config, lambda query: db_rows(db, query))
        # One self-contained file: the WAL folded in.
        fixture.database.unlink(missing_ok=True)
        with sqlite3.connect(db) as source, sqlite3.connect(fixture.database) as target:
            source.backup(target)
    fixture.handles.write_text(json.dumps(handles, indent=2) + "\n")
    print(f"wrote {fixture.database} (schema {handles['schema_version']}) and {fixture.handles}")


def make_postgres(fixture: Fixture, release: str) -> None:
    schema = PgSchema(POSTGRES_URL, f"parley_fixture_{secrets.token_hex(6)}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            storage = {"url": POSTGRES_URL, "schema": schema.schema}
            config = write_world(directory, poll_s=60, storage=storage)
            handles = anyio.run(make, config, schema.rows)
        dump = dump_schema(POSTGRES_URL, schema.schema)
    finally:
        schema.drop()
        schema.close()
    header = (
        f"-- parley's upgrade fixture of {release} (release {handles['release']}, commit "
        f"{handles['commit']}): a PostgreSQL schema at version {handles['schema_version']}, made by\n"
        "-- tests/upgrade/make_fixture.py. Schema-neutral: restore it into an empty schema with\n"
        "-- search_path set to it (tests/test_e2e_upgrade.py).\n"
    )
    fixture.database.write_text(header + dump)
    fixture.handles.write_text(json.dumps(handles, indent=2) + "\n")
    print(f"wrote {fixture.database} (schema {handles['schema_version']}) and {fixture.handles}")


def dump_schema(url: str, schema: str) -> str:
    """pg_dump of `schema` as plain SQL without the schema's name (nor owners, privileges,
    comments or psql commands), so it restores into any schema named by search_path."""
    out = subprocess.run(
        [
            "pg_dump",
            "--schema",
            schema,
            "--no-owner",
            "--no-privileges",
            "--no-comments",
            "--no-tablespaces",
            "--column-inserts",
            "--dbname",
            url,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    kept: list[str] = []
    for line in out.splitlines():
        if line.startswith(("--", "\\")) or line in (
            f"CREATE SCHEMA {schema};",
            "SELECT pg_catalog.set_config('search_path', '', false);",
        ):
            continue
        if line or (kept and kept[-1]):
            kept.append(line.replace(f"{schema}.", ""))
    text = "\n".join(kept).strip() + "\n"
    assert schema not in text, f"the dump still names the schema {schema}"
    return text


def main() -> None:
    release, sqlite_fixture, postgres_fixture = RELEASE
    make_sqlite(sqlite_fixture)
    make_postgres(postgres_fixture, release)


if __name__ == "__main__":
    main()
