"""Crash safety, step by step: the server kills itself (SIGKILL) at a named point of a step
(python -m parley.testing.serve --fault), restarts on the same database, and the documented outcome holds."""

from __future__ import annotations

import contextlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import MCPError

from tests.support import (
    FAST_RUNTIME,
    TEST_DEADLINE_S,
    Database,
    ServerProcess,
    call,
    fixture_calls,
    fixture_server,
    running_server,
)

pytestmark = pytest.mark.anyio


@dataclass
class Setup:
    config: Path
    db: Database
    log: Path

    def tool_runs(self, tool: str) -> list[dict[str, Any]]:
        return [line for line in fixture_calls(self.log) if line["tool"] == tool]


@pytest.fixture
def setup(tmp_path: Path, database: Database) -> Setup:
    log = tmp_path / "fixture.jsonl"
    fixture = fixture_server(log, tools={"append_note": {"approval": "never"}})
    # A short lease: the restarted server takes over the killed one's session sooner.
    runtime = {**FAST_RUNTIME, "lease_ttl_s": 0.3}
    config = {"storage": database.storage(), "runtime": runtime, "mcp_servers": {"fixture": fixture}}
    (tmp_path / "parley.yaml").write_text(yaml.safe_dump(config))
    agents = tmp_path / "configs" / "agents"
    agents.mkdir(parents=True)
    (agents / "worker.yaml").write_text(yaml.safe_dump({"name": "worker", "mcp_servers": ["fixture"]}))
    squeezed = {"name": "squeezed", "compaction": {"enabled": True, "context_window": 200}}
    (agents / "squeezed.yaml").write_text(yaml.safe_dump(squeezed))
    return Setup(tmp_path / "parley.yaml", database, log)


async def _crash_at(setup: Setup, fault: str, message: str) -> str:
    """Send `message` to a server armed to die at `fault`; return the session id once it died."""
    doomed = ServerProcess(setup.config, name="doomed", fault=fault, db=setup.db.db_arg)
    mark = uuid.uuid4().hex
    async with doomed as server, server.client() as client:
        # The turn runs as soon as the message is stored, and the server may die at `fault`
        # before its answer to this call is written: the session is found by its message id.
        with contextlib.suppress(MCPError):
            await call(
                client,
                "start_session",
                agent="worker",
                message=message,
                wait_seconds=0,
                client_message_id=mark,
            )
        code = await server.wait_exit()
    assert code == -9, f"the server should have stopped itself at {fault}:\n{server.log()}"
    [(session_id,)] = setup.db.rows("SELECT id FROM sessions WHERE start_client_message_id = ?", (mark,))
    return str(session_id)


async def _after_restart(setup: Setup, sid: str) -> dict[str, Any]:
    async with running_server(setup.config, name="restarted", db=setup.db.db_arg) as (_, client):
        return await call(
            client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S, messages_from=1
        )


async def test_crash_after_the_model_step_runs_the_calls_once_after_restart(setup: Setup) -> None:
    sid = await _crash_at(setup, "model_committed", '/tool fixture__append_note {"note": "once"}')
    assert setup.tool_runs("append_note") == [], "the call had not started"
    snapshot = await _after_restart(setup, sid)
    assert snapshot["last_turn"]["status"] == "answered"
    assert snapshot["last_turn"]["tool_calls"][0]["status"] == "succeeded"
    assert len(setup.tool_runs("append_note")) == 1
    assert setup.db.rows("SELECT COUNT(*) FROM steps WHERE session_id = ?", (sid,)) == [(2,)]


# Also on PostgreSQL: the step whose outcome is unknown is the one crash point that must hold there too.
@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_crash_after_a_non_idempotent_write_ran_is_outcome_unknown_and_never_repeated(
    setup: Setup,
) -> None:
    sid = await _crash_at(setup, "tool_ran:append_note", '/tool fixture__append_note {"note": "maybe"}')
    assert len(setup.tool_runs("append_note")) == 1
    snapshot = await _after_restart(setup, sid)
    call_ = snapshot["last_turn"]["tool_calls"][0]
    assert call_["status"] == "outcome_unknown"
    assert "may or may not have taken effect" in call_["result"]
    assert snapshot["last_turn"]["status"] == "answered"
    assert len(setup.tool_runs("append_note")) == 1, "a write that may have happened is never repeated"


@pytest.mark.parametrize(
    "tool,arguments", [("read_thing", {"name": "r"}), ("set_flag", {"flag": "f", "value": True})]
)
async def test_crash_after_a_read_or_idempotent_call_retries_it_with_the_same_key(
    setup: Setup, tool: str, arguments: dict[str, Any]
) -> None:
    sid = await _crash_at(setup, f"tool_ran:{tool}", f"/tool fixture__{tool} {json.dumps(arguments)}")
    snapshot = await _after_restart(setup, sid)
    call_ = snapshot["last_turn"]["tool_calls"][0]
    assert call_["status"] == "succeeded"
    runs = setup.tool_runs(tool)
    assert len(runs) == 2 and runs[0]["key"] == runs[1]["key"], "retried once, with the same idempotency key"
    results = setup.db.rows("SELECT COUNT(*) FROM messages WHERE session_id = ? AND role = 'tool'", (sid,))
    assert results == [(1,)], "one result in the transcript"


async def test_crash_after_an_approval_was_raised_keeps_waiting_and_runs_once_when_approved(
    setup: Setup,
) -> None:
    sid = await _crash_at(setup, "interrupt_raised", '/tool fixture__bare {"text": "careful"}')
    async with running_server(setup.config, name="restarted", db=setup.db.db_arg) as (_, client):
        waiting = await call(client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
        assert waiting["status"] == "waiting_for_input"
        [pending] = waiting["pending"]
        done = await call(
            client, "approve", session_id=sid, decisions=[{"interrupt_id": pending["id"], "approved": True}]
        )
    assert done["status"] == "answered"
    assert len(setup.tool_runs("bare")) == 1


async def test_crash_before_the_turn_ended_ends_it_once(setup: Setup) -> None:
    sid = await _crash_at(setup, "turn_finishing", "plain words")
    snapshot = await _after_restart(setup, sid)
    assert snapshot["last_turn"]["status"] == "answered"
    assert [m["role"] for m in snapshot["messages"]] == ["user", "assistant"]
    assert setup.db.rows("SELECT COUNT(*) FROM steps WHERE session_id = ?", (sid,)) == [(1,)]


async def test_crash_during_compaction_repeats_only_the_summary(setup: Setup) -> None:
    long_text = "a fairly long message that fills the small context window " * 6
    async with running_server(setup.config, name="first", db=setup.db.db_arg) as (_, client):
        first = await call(client, "start_session", agent="squeezed", message=long_text)
    sid = first["session_id"]
    doomed = ServerProcess(setup.config, name="doomed", fault="compacting", db=setup.db.db_arg)
    async with doomed as server, server.client() as client:
        # The turn starts as soon as the message is stored, and the server may die at the summary
        # before its answer to this call is written: the restart below shows what was kept.
        with contextlib.suppress(MCPError):
            await call(client, "send_message", session_id=sid, message="and one more", wait_seconds=0)
        assert await server.wait_exit() == -9
    assert setup.db.rows("SELECT COUNT(*) FROM summaries WHERE session_id = ?", (sid,)) == [(0,)]
    snapshot = await _after_restart(setup, sid)
    assert snapshot["last_turn"]["status"] == "answered"
    assert setup.db.rows("SELECT COUNT(*) FROM summaries WHERE session_id = ?", (sid,)) == [(1,)]
    steps = setup.db.rows("SELECT turn_id, step_no FROM steps WHERE session_id = ?", (sid,))
    assert len(steps) == 2 and len(set(steps)) == 2, "one model step per turn; only the summary was redone"
    assert snapshot["total_messages"] == 4
