"""Static tokens (`auth: tokens`) with the command line: the admin scope reads, lists, follows,
decides and deletes across owners, and only an agent's approver decides, each read back with
`parley audit` (a process of its own). The parley they talk to is served over HTTP in the test's
process (tests/test_auth_tokens_served.py, which checks the rest of tokens mode)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from tests.support import REPO, TEST_DEADLINE_S, call, call_error, fixture_runs
from tests.task_client import call_tool_as_task, get_task, task_result
from tests.test_auth_tokens_served import World, _park, auth_world, no_token_stored

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    async with auth_world(tmp_path_factory.mktemp("auth_tokens_cli")) as world:
        yield world


def cli(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "parley", *args[:1], "--config", str(world.server.config_path), *args[1:]],
        capture_output=True,
        text=True,
        timeout=TEST_DEADLINE_S,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
    )


async def test_the_admin_scope_reads_lists_follows_decides_and_deletes_across_owners(world: World) -> None:
    async with (
        world.task_client("alice") as alice_tasks,
        world.client("alice") as alice,
        world.client("ops") as ops,
    ):
        parked = await _park(alice, text="admin approves")
        sid, [pending] = parked["session_id"], parked["pending"]
        task = await call_tool_as_task(alice_tasks, "send_message", {"session_id": sid, "message": "later"})

        seen = await call(ops, "get_session", session_id=sid)
        assert seen["owner"] == "alice" and seen["status"] == "waiting_for_input"
        listed = await call(ops, "list_sessions", owner="alice")
        assert sid in [s["session_id"] for s in listed["sessions"]]
        assert all(s["owner"] == "alice" for s in listed["sessions"])
        assert pending["id"] in [p["interrupt"]["id"] for p in (await call(ops, "list_pending"))["pending"]]

        resumed = await call(
            ops, "approve", session_id=sid, decisions=[{"interrupt_id": pending["id"], "approved": True}]
        )
        assert resumed["status"] == "answered" and "bare admin approves" in resumed["answer"]
        async with world.task_client("ops") as ops_tasks:
            assert (await get_task(ops_tasks, task["taskId"]))["taskId"] == task["taskId"]
            await task_result(ops_tasks, task["taskId"])
        done = await call(ops, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
        assert done["status"] == "idle"
        deleted = await call(ops, "delete_session", session_id=sid)
        assert deleted["status"] == "deleted"
        assert "No session" in await call_error(alice, "get_session", session_id=sid)
        assert (await call(ops, "delete_session", session_id=sid))["status"] == "already deleted"
    entries = cli(world, "audit", "--session", sid)
    assert entries.returncode == 0, entries.stderr
    lines = entries.stdout.splitlines()
    assert any(" ops " in line and " delete_session " in line for line in lines), lines
    assert any(" ops " in line and " approve " in line for line in lines), lines
    assert any(" alice " in line and " message " in line for line in lines), lines


async def test_only_the_agents_approver_decides_and_the_audit_shows_both_attempts(world: World) -> None:
    async with world.client("alice") as alice, world.client("pat") as pat:
        parked = await _park(alice, agent="deployer", text="deploy it")
        sid, [pending] = parked["session_id"], parked["pending"]
        refused = await call_error(
            alice, "approve", session_id=sid, decisions=[{"interrupt_id": pending["id"], "approved": True}]
        )
        assert "only from its approvers" in refused
        assert fixture_runs(world.directory, "bare", text="deploy it") == 0

        waiting = await call(pat, "list_pending")
        [item] = [p for p in waiting["pending"] if p["session_id"] == sid]
        assert (item["agent"], item["owner"], item["interrupt"]["tool"]) == (
            "deployer",
            "alice",
            "fixture__bare",
        )
        assert item["interrupt"]["arguments"] == {"text": "deploy it"}
        # The person sees the interrupt, not the session.
        assert "No session" in await call_error(pat, "get_session", session_id=sid)
        assert "No session" in await call_error(pat, "send_message", session_id=sid, message="hello")
        assert sid not in [s["session_id"] for s in (await call(pat, "list_sessions"))["sessions"]]

        decided = await call(
            pat, "approve", session_id=sid, decisions=[{"interrupt_id": pending["id"], "approved": True}]
        )
        assert decided["answer"] is None and decided["tool_calls"] == [], "no more than the interrupt"
        assert any("approver of agent 'deployer'" in note for note in decided["notes"])

        done = await call(alice, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
        assert done["status"] == "idle" and "bare deploy it" in done["last_turn"]["answer"]
        assert fixture_runs(world.directory, "bare", text="deploy it") == 1
        decisions = [(d["principal"], d["action"], d["outcome"]) for d in done["decisions"]]
        assert decisions == [("pat", "approve", "ok"), ("alice", "approve", "refused")], decisions
    by_pat = cli(world, "audit", "--principal", "pat")
    assert re.search(rf" pat .* approve +ok +{sid} +{pending['id']}", by_pat.stdout), by_pat.stdout


async def test_no_token_reaches_the_log_or_the_database(world: World) -> None:
    """Last in the module: the tokens of the tests above were used by now."""
    no_token_stored(world)
