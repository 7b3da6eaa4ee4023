"""A database written by an earlier release (tests/upgrade/wave1.db, made by
tests/upgrade/make_fixture.py) is migrated by this release, and everything that was waiting in
it resumes: a parked approval with a message queued behind it, a durable timer, a downstream
MCP task being polled, and an open MCP task waiting for an approval."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from parley.storage.migrations import MIGRATIONS
from tests.support import ServerProcess, call, db_rows, eventually
from tests.task_client import get_task, server_target, task_client, task_result
from tests.upgrade.world import DATABASE, HANDLES, write_world

pytestmark = pytest.mark.anyio


async def _at_rest(client: Client, session_id: str, turns: int) -> dict[str, Any]:
    """The session once it rests after `turns` turns."""
    seen: dict[str, Any] = {}

    async def resting() -> bool:
        seen.update(await call(client, "get_session", session_id=session_id))
        return seen["status"] in ("idle", "waiting_for_input") and seen["turn_count"] >= turns

    await eventually(resting, f"session {session_id} to rest after {turns} turn(s)")
    return seen


async def test_a_database_of_the_first_release_upgrades_and_everything_in_it_resumes(tmp_path: Path) -> None:
    handles = json.loads(HANDLES.read_text())
    config = write_world(tmp_path, poll_s=0.1)
    db = tmp_path / "parley.db"
    shutil.copy(DATABASE, db)
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
        parked = await call(client, "get_session", session_id=handles["approval_session"])
        assert parked["status"] == "waiting_for_input", parked
        assert [q["id"] for q in parked["queued_messages"]] == [handles["queued_message_id"]]
        (approval,) = parked["pending"]
        decided = await call(
            client,
            "approve",
            session_id=handles["approval_session"],
            decisions=[{"interrupt_id": approval["id"], "approved": True}],
        )
        assert decided["status"] == "answered", decided
        after = await _at_rest(client, handles["approval_session"], 2)
        assert after["last_turn"]["status"] == "answered" and after["queued_messages"] == []
        assert "waits behind the approval" in json.dumps(after["messages"])

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
        for line in (tmp_path / "fixture.jsonl").read_text().splitlines()
    ]
    assert sorted(notes) == ["approved later", "task"], "each approved write ran exactly once"
    assert db_rows(db, "SELECT MAX(version) FROM schema_version")[0][0] == len(MIGRATIONS)
    assert handles["schema_version"] <= len(MIGRATIONS)
