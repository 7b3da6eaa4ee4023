"""Databases written by earlier releases (tests/upgrade/, made by tests/upgrade/make_fixture.py)
are migrated by this release, and everything that was waiting in them resumes: a parked
approval with a message queued behind it, a durable timer, a downstream MCP task being polled,
and an open MCP task waiting for an approval; from wave 2 on also the queued message's
attachment, the session's title and tags, and the audit trail (kept, and written on).

One test per fixture: wave1.db (SQLite, schema 10), wave2.db (SQLite, schema 17) and
wave2_postgres.sql (PostgreSQL, schema 6, restored into a fresh schema)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from parley.storage.schema import LATEST, steps
from tests.postgres_support import schema_for_test
from tests.support import ServerProcess, call, db_rows, eventually
from tests.task_client import get_task, server_target, task_client, task_result
from tests.upgrade.world import WAVE1, WAVE2_POSTGRES, WAVE2_SQLITE, write_world

pytestmark = pytest.mark.anyio

Rows = Callable[[str], list[tuple[Any, ...]]]


async def _at_rest(client: Client, session_id: str, turns: int) -> dict[str, Any]:
    """The session once it rests after `turns` turns."""
    seen: dict[str, Any] = {}

    async def resting() -> bool:
        seen.update(await call(client, "get_session", session_id=session_id))
        return seen["status"] in ("idle", "waiting_for_input") and seen["turn_count"] >= turns

    await eventually(resting, f"session {session_id} to rest after {turns} turn(s)")
    return seen


async def _everything_resumes(config: Path, handles: dict[str, Any], rows: Rows) -> None:
    """Serve the upgraded database of `config` and resume each thing waiting in it. `handles`
    names them; a fixture with an `audit_entries` handle (wave 2 on) also has the attachment,
    the title and tags and the audit trail checked."""
    labelled = "audit_entries" in handles
    async with (
        ServerProcess(config) as server,
        task_client(server_target(server), mode="legacy", elicitation_callback=None) as (client, _),
    ):
        # The timer was due long ago: its turn goes on and answers.
        timer = await _at_rest(client, handles["timer_session"], 1)
        assert timer["status"] == "idle", timer
        assert timer["last_turn"]["status"] == "answered", timer["last_turn"]
        assert [c["status"] for c in timer["last_turn"]["tool_calls"]] == ["succeeded"]

        # The downstream task died with its server process: the call is recorded by its effect
        # (it may have happened), and the turn ends instead of waiting for ever.
        downstream = await _at_rest(client, handles["downstream_session"], 1)
        assert downstream["status"] == "idle", downstream
        (ask,) = downstream["last_turn"]["tool_calls"]
        assert ask["tool"] == "echo__ask" and ask["status"] == "outcome_unknown", ask

        # The parked approval still waits; approving it runs the write once, then the message
        # queued behind it gets its own turn.
        session_id = handles["approval_session"]
        parked = await call(client, "get_session", session_id=session_id)
        assert parked["status"] == "waiting_for_input", parked
        assert [q["id"] for q in parked["queued_messages"]] == [handles["queued_message_id"]]
        if labelled:
            assert (parked["title"], parked["tags"]) == (handles["title"], handles["tags"]), parked
            found = await call(client, "list_sessions", tag=handles["tags"][0])
            assert [s["session_id"] for s in found["sessions"]] == [session_id], found
            [ref] = parked["queued_messages"][0]["attachments"]
            assert ref["sha256"] == handles["attachment_sha256"], ref
        (approval,) = parked["pending"]
        decided = await call(
            client,
            "approve",
            session_id=session_id,
            decisions=[{"interrupt_id": approval["id"], "approved": True}],
        )
        assert decided["status"] == "answered", decided
        after = await _at_rest(client, session_id, 2)
        assert after["last_turn"]["status"] == "answered" and after["queued_messages"] == []
        assert "waits behind the approval" in json.dumps(after["messages"])
        if labelled:
            # The queued message's attachment went with it into its turn, and its bytes are there.
            assert f"[attached document '{ref['name']}'" in json.dumps(after["messages"])
            read = await client.call_tool(
                "get_session", {"session_id": session_id, "attachment": ref["sha256"]}
            )
            assert not read.is_error, read
            [document] = [b for b in read.content if b.type == "resource"]
            assert document.resource.text == handles["attachment_text"]  # type: ignore[union-attr]

        # The open MCP task is still there, waiting for its approval; resolving it completes it.
        task = await get_task(client, handles["task_id"])
        assert task["status"] == "input_required", task
        task_session = await call(client, "list_sessions", status="waiting_for_input")
        (waiting,) = task_session["sessions"]
        pending = (await call(client, "get_session", session_id=waiting["session_id"]))["pending"]
        await call(
            client,
            "approve",
            session_id=waiting["session_id"],
            decisions=[{"interrupt_id": pending[0]["id"], "approved": True}],
        )
        result = await task_result(client, handles["task_id"])
        assert result["structuredContent"]["status"] == "answered", result

    notes = [
        json.loads(line)["arguments"]["note"]
        for line in (config.parent / "fixture.jsonl").read_text().splitlines()
    ]
    assert sorted(notes) == ["approved later", "task"], "each approved write ran exactly once"
    if labelled:
        # The release's trail is kept as it was, and this release writes on after it.
        trail = rows("SELECT id, action, session_id FROM audit ORDER BY id")
        kept = handles["audit_entries"]
        assert [r[0] for r in trail[:kept]] == list(range(1, kept + 1)), trail
        assert (kept + 1, "approve", session_id) in trail[kept:], trail


async def test_a_database_of_the_first_release_upgrades_and_everything_in_it_resumes(tmp_path: Path) -> None:
    handles = json.loads(WAVE1.handles.read_text())
    config = write_world(tmp_path, poll_s=0.1)
    db = tmp_path / "parley.db"
    shutil.copy(WAVE1.database, db)
    await _everything_resumes(config, handles, lambda query: db_rows(db, query))
    assert handles["schema_version"] == 10
    assert db_rows(db, "SELECT version FROM schema_version ORDER BY version") == [
        (v,) for v in range(1, LATEST + 1)
    ]


async def test_a_sqlite_database_of_wave_2_upgrades_and_everything_in_it_resumes(tmp_path: Path) -> None:
    handles = json.loads(WAVE2_SQLITE.handles.read_text())
    assert handles["schema_version"] == 17
    config = write_world(tmp_path, poll_s=0.1)
    db = tmp_path / "parley.db"
    shutil.copy(WAVE2_SQLITE.database, db)
    await _everything_resumes(config, handles, lambda query: db_rows(db, query))
    assert db_rows(db, "SELECT version FROM schema_version ORDER BY version") == [
        (v,) for v in range(1, LATEST + 1)
    ]


async def test_a_postgres_schema_of_wave_2_upgrades_and_everything_in_it_resumes(
    tmp_path: Path, postgres_url: str
) -> None:
    handles = json.loads(WAVE2_POSTGRES.handles.read_text())
    assert handles["schema_version"] == 6
    with schema_for_test(postgres_url, "wave2") as schema:
        schema.restore(WAVE2_POSTGRES.database)
        assert schema.rows("SELECT max(version) FROM schema_version") == [(6,)]
        storage = {"url": schema.url, "schema": schema.schema}
        config = write_world(tmp_path, poll_s=0.1, storage=storage)
        await _everything_resumes(config, handles, schema.rows)
        # The legacy steps 1-6 as the release applied them, then the shared ones from 18.
        recorded = schema.rows("SELECT version FROM schema_version ORDER BY version")
        assert recorded == [(v,) for v, _ in steps("postgres")]
