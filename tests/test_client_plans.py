"""Plan mode through parley.client, against parley served over HTTP in this process
(parley.testing.parley_app): a planning turn writes a draft the client reads, execute_plan approves
that revision and follows the executing turn to its end; a stale revision and a discard without a
draft come back as PlanRefused and change nothing; the blocking wrapper does the same."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

import parley.client as pc
from parley.client import sync
from parley.testing import ToolServer, parley_app
from tests.support import TEST_DEADLINE_S

pytestmark = pytest.mark.anyio

OPTIONS = pc.Options(wait_s=2.0, reconnect_s=TEST_DEADLINE_S)


def todos_line(*items: str) -> str:
    return "/tool write_todos " + json.dumps({"todos": [{"content": item} for item in items]})


MIGRATE = '/tool ops__migrate {"target": "db"}'


@dataclass
class World:
    url: str
    ops: ToolServer


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    ops = ToolServer("ops")

    @ops.tool(destructive=False, idempotent=True)
    async def migrate(target: str) -> str:
        """Change a target."""
        return f"{target}: migrated"

    planner = {"tools": ["write_todos", "ask_user"], "plan_mode": True, "mcp_servers": ["ops"]}
    chatty = {"tools": ["write_todos"], "plan_mode": False}
    async with ops.serve():
        config: dict[str, Any] = {"mcp_servers": {"ops": ops.entry}}
        agents = {"planner": planner, "chatty": chatty}
        async with parley_app(config, agents=agents, directory=tmp_path) as parley:
            endpoint = await parley.http()
            yield World(endpoint.url, ops)


async def test_a_plan_is_reviewed_approved_and_carried_out(world: World) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):
        async with pc.connect_http(world.url, options=OPTIONS) as p:
            s = await p.start("planner", todos_line("back up db", MIGRATE))
            drafted = s.last
            assert world.ops.ran("migrate") == [], "a planning turn does not act"
            [draft] = await p.drafts()
            summary = next(x for x in (await p.list_sessions()).sessions if x.session_id == s.id)
            done = await s.execute_plan(draft.plan.revision)
            state = await s.state()
    assert drafted is not None and drafted.mode == "planning" and drafted.status == "answered"
    assert drafted.plan == pc.Plan(
        status="draft",
        revision=1,
        todos=[{"content": "back up db", "status": "pending"}, {"content": MIGRATE, "status": "pending"}],
    )
    assert (draft.session_id, draft.agent, draft.may_decide) == (s.id, "planner", True)
    assert (summary.plan_status, summary.plan_revision) == ("draft", 1)
    assert done.status == "answered" and done.mode == "executing"
    assert [c.arguments for c in world.ops.ran("migrate")] == [{"target": "db"}]
    assert done.plan is not None and done.plan.status == "completed"
    assert all(t["status"] == "completed" for t in done.plan.todos)
    assert s.plan == done.plan and state.plan == done.plan


async def test_a_stale_revision_is_refused_and_changes_nothing(world: World) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):
        async with pc.connect_http(world.url, options=OPTIONS) as p:
            s = await p.start("planner", todos_line("one"), plan=True)
            # Feedback on a draft plans again: revision 2.
            revised = await s.send(todos_line("one", "two"))
            with pytest.raises(pc.PlanRefused) as stale:
                await s.execute_plan(1)
            state = await s.state()
    assert revised.mode == "planning" and revised.plan is not None and revised.plan.revision == 2
    assert stale.value.reason == "stale" and stale.value.current_revision == 2
    assert stale.value.tool == "execute_plan" and "Nothing was changed" in stale.value.text
    assert state.plan is not None and state.plan.status == "draft" and state.turn_count == 2


async def test_a_discarded_draft_leaves_an_ordinary_conversation(world: World) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):
        async with pc.connect_http(world.url, options=OPTIONS) as p:
            s = await p.start("planner", todos_line(MIGRATE))
            summary = await s.discard_plan()
            with pytest.raises(pc.PlanRefused) as again:
                await s.discard_plan()
            with pytest.raises(pc.PlanRefused) as nothing:
                await s.execute_plan(1)
            ordinary = await s.send("hello")
            drafts = await p.drafts()
    assert summary.plan_status == "cleared" and s.plan is not None and s.plan.status == "cleared"
    assert again.value.reason == "no_draft" and nothing.value.reason == "no_plan"
    assert ordinary.mode is None and ordinary.status == "answered"
    assert drafts == [] and world.ops.ran("migrate") == []


async def test_plan_on_an_agent_without_plan_mode_is_an_invalid_argument(world: World) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):
        async with pc.connect_http(world.url, options=OPTIONS) as p:
            with pytest.raises(pc.InvalidArgument) as refused:
                await p.start("chatty", "hi", plan=True)
            s = await p.start("chatty", "hi")
            with pytest.raises(pc.InvalidArgument) as on_send:
                await s.send("again", plan=True)
    assert refused.value.field == "plan" and on_send.value.field == "plan"


async def test_the_blocking_client_plans_and_executes(world: World) -> None:
    def converse() -> tuple[pc.Plan | None, pc.Outcome, list[pc.DraftItem]]:
        with sync.connect_http(world.url, options=OPTIONS) as p:
            s = p.start("planner", todos_line("only this"))
            drafted = s.plan
            drafts = p.drafts()
            return drafted, s.execute_plan(1), drafts

    with anyio.fail_after(TEST_DEADLINE_S):
        drafted, done, drafts = await anyio.to_thread.run_sync(converse)
    assert drafted is not None and drafted.status == "draft" and [d.plan for d in drafts] == [drafted]
    assert done.mode == "executing" and done.plan is not None and done.plan.status == "completed"


async def test_the_client_forks_and_replays(world: World) -> None:
    with anyio.fail_after(TEST_DEADLINE_S):
        async with pc.connect_http(world.url, options=OPTIONS) as p:
            first = await p.start("chatty", "one")
            await first.send("two")
            fork = await p.fork(first.id, 1, title="from one")
            continued = await fork.send("again")
            replay = await p.replay(first.id)
            state = await fork.state()
    assert "message 2 of this session" in (continued.answer or "")
    assert state.forked_from == pc.ForkedFrom(session_id=first.id, turn=1)
    assert replay.tags == ["eval", "replay"] and replay.forked_from is not None
