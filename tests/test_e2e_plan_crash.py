"""Plan mode survives a crash: the server kills itself (SIGKILL) as execute_plan commits the
approval, or right after it (on SQLite and PostgreSQL), in the middle of a planning turn, or in
the middle of the executing turn; a restarted server on the same database finishes the planning turn
still planning (its draft written, the write it names not run), runs the executing turn exactly
once, never runs a write twice, and answers a retried approval without running the plan twice."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
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

# A plan whose second todo the demo model carries out when it executes: a write that must run once.
PLAN = "/tool write_todos " + json.dumps(
    {"todos": [{"content": "note it"}, {"content": '/tool fixture__append_note {"note": "executed"}'}]}
)


@dataclass
class Setup:
    config: Path
    db: Database
    log: Path

    def notes(self) -> list[dict[str, Any]]:
        return [line for line in fixture_calls(self.log) if line["tool"] == "append_note"]


@pytest.fixture
def setup(tmp_path: Path, database: Database) -> Setup:
    log = tmp_path / "fixture.jsonl"
    fixture = fixture_server(log, tools={"append_note": {"approval": "never"}})
    runtime = {**FAST_RUNTIME, "lease_ttl_s": 0.3}
    config = {"storage": database.storage(), "runtime": runtime, "mcp_servers": {"fixture": fixture}}
    (tmp_path / "parley.yaml").write_text(yaml.safe_dump(config))
    agents = tmp_path / "configs" / "agents"
    agents.mkdir(parents=True)
    planner = {"name": "planner", "tools": ["write_todos"], "plan_mode": True, "mcp_servers": ["fixture"]}
    (agents / "planner.yaml").write_text(yaml.safe_dump(planner))
    return Setup(tmp_path / "parley.yaml", database, log)


async def _approve_and_die(setup: Setup, fault: str) -> str:
    """Plan in a server armed to die at `fault`, approve revision 1 there; the session's id."""
    doomed = ServerProcess(setup.config, name="doomed", fault=fault, db=setup.db.db_arg)
    async with doomed as server, server.client() as client:
        planned = await call(client, "start_session", agent="planner", message=PLAN)
        assert planned["plan"]["status"] == "draft", planned
        with contextlib.suppress(MCPError):
            await call(client, "execute_plan", session_id=planned["session_id"], revision=1, wait_seconds=0)
        code = await server.wait_exit()
    assert code == -9, f"the server should have stopped itself at {fault}:\n{server.log()}"
    return str(planned["session_id"])


def _executions(setup: Setup, sid: str) -> int:
    [(count,)] = setup.db.rows(
        "SELECT COUNT(*) FROM events WHERE session_id = ? AND kind = 'plan_execution_started'", (sid,)
    )
    return int(count)


async def test_a_crash_before_the_approval_commits_leaves_the_draft_and_a_retry_runs_it_once(
    setup: Setup,
) -> None:
    sid = await _approve_and_die(setup, "plan_approving")
    assert _executions(setup, sid) == 0 and setup.notes() == []
    async with running_server(setup.config, name="restarted", db=setup.db.db_arg) as (_, client):
        before = await call(client, "get_session", session_id=sid)
        assert before["plan"]["status"] == "draft", "the approval was never committed"
        done = await call(client, "execute_plan", session_id=sid, revision=1)
    assert done["status"] == "answered" and done["plan"]["status"] == "completed", done
    assert len(setup.notes()) == 1 and _executions(setup, sid) == 1


@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
async def test_a_crash_right_after_the_approval_commits_runs_the_executing_turn_once(setup: Setup) -> None:
    sid = await _approve_and_die(setup, "plan_approved")
    assert _executions(setup, sid) == 1, "the approval was committed before the crash"
    async with running_server(setup.config, name="restarted", db=setup.db.db_arg) as (_, client):
        # The restarted server finds the executing turn's message and runs it.
        with anyio.fail_after(TEST_DEADLINE_S):
            after = await call(client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
            while after["status"] != "idle" or after["plan"]["status"] != "completed":
                # get_session waits for the turn: each call returns when the session changed.
                after = await call(client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
        # The client that never heard back retries: answered, and nothing runs twice.
        retried = await client.call_tool("execute_plan", {"session_id": sid, "revision": 1})
    assert retried.is_error and "already approved" in str(retried.content[0])
    assert len(setup.notes()) == 1 and _executions(setup, sid) == 1
    assert after["turn_count"] == 2


async def _settled(client: Any, sid: str, done: Any) -> dict[str, Any]:
    """get_session until `done(view)` (each call returns when the session changed)."""
    with anyio.fail_after(TEST_DEADLINE_S):
        view: dict[str, Any] = await call(client, "get_session", session_id=sid)
        while not done(view):
            view = await call(client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
    return view


async def test_a_crash_in_the_middle_of_a_planning_turn_resumes_it_still_planning(setup: Setup) -> None:
    doomed = ServerProcess(setup.config, name="doomed", fault="tool_ran:write_todos", db=setup.db.db_arg)
    async with doomed as server, server.client() as client:
        with contextlib.suppress(MCPError):
            await call(client, "start_session", agent="planner", message=PLAN, wait_seconds=0)
        assert await server.wait_exit() == -9, server.log()
    [(sid,)] = setup.db.rows("SELECT id FROM sessions")
    async with running_server(setup.config, name="restarted", db=setup.db.db_arg) as (_, client):
        planned = await _settled(client, sid, lambda v: v["status"] == "idle" and v["plan"] is not None)
        # The resumed turn was still a planning turn: it left a draft and ran none of its writes.
        assert planned["plan"]["status"] == "draft" and planned["plan"]["revision"] == 1, planned
        assert setup.notes() == [] and _executions(setup, str(sid)) == 0
        done = await call(client, "execute_plan", session_id=sid, revision=1)
    assert done["plan"]["status"] == "completed", done
    assert len(setup.notes()) == 1 and _executions(setup, str(sid)) == 1


async def test_a_crash_in_the_middle_of_the_executing_turn_never_runs_its_write_twice(setup: Setup) -> None:
    doomed = ServerProcess(setup.config, name="doomed", fault="tool_ran:append_note", db=setup.db.db_arg)
    async with doomed as server, server.client() as client:
        planned = await call(client, "start_session", agent="planner", message=PLAN)
        with contextlib.suppress(MCPError):
            await call(client, "execute_plan", session_id=planned["session_id"], revision=1)
        assert await server.wait_exit() == -9, server.log()
    sid = str(planned["session_id"])
    assert len(setup.notes()) == 1, "the write ran before the crash"
    async with running_server(setup.config, name="restarted", db=setup.db.db_arg) as (_, client):
        after = await _settled(client, sid, lambda v: v["status"] == "idle" and v["turn_count"] == 2)
    # The write's outcome was unknown after the crash: it was not sent again.
    assert len(setup.notes()) == 1 and _executions(setup, sid) == 1
    (note,) = [c for c in after["last_turn"]["tool_calls"] if c["tool"] == "fixture__append_note"]
    assert note["status"] == "outcome_unknown" and "check before calling it again" in note["result"], note
