"""Plan mode over the AI SDK chat protocol (`POST /v1/chat`), against parley served over HTTP in
this process (parley.testing.parley_app), read as raw UI message stream chunks: a planning turn's
stream carries the plan as a `data-parley-plan` part, a user message with a
`data-parley-execute-plan` part approves that revision and streams the executing turn, and bad
input (revision missing, not a whole number, stale) is a clear error that changes nothing. The same
through the AI SDK's own parser (versions 6 and 7) is in tests/test_e2e_ai_sdk.py."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from parley.testing import parley_app
from tests.sse_support import frames
from tests.support import TEST_DEADLINE_S, db_rows

pytestmark = pytest.mark.anyio

PLAN = "/tool write_todos " + json.dumps({"todos": [{"content": "look"}, {"content": "then act"}]})


_MESSAGE_IDS = itertools.count(1)


def _body(chat_id: str, parts: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """The SDK's request: the chat's id and its messages, the last a new user message."""
    message = {"id": f"u{next(_MESSAGE_IDS)}", "role": "user", "parts": parts, **extra}
    return {"id": chat_id, "trigger": "submit-message", "messages": [message]}


@dataclass
class World:
    http: httpx2.AsyncClient
    directory: Path

    async def chunks(
        self, chat_id: str, parts: list[dict[str, Any]], agent: str = "planner", **extra: Any
    ) -> list[dict[str, Any]]:
        """The chunks of the stream a user message answers with (up to [DONE])."""
        body = _body(chat_id, parts, **extra)
        seen: list[dict[str, Any]] = []
        with anyio.fail_after(TEST_DEADLINE_S):
            async with self.http.stream("POST", f"/v1/chat?agent={agent}", json=body) as response:
                assert response.status_code == 200, await response.aread()
                async for frame in frames(response):
                    if frame.data == "[DONE]":
                        return seen
                    if isinstance(frame.data, dict):
                        seen.append(frame.data)
        raise AssertionError(f"the stream ended without [DONE]: {seen}")

    async def refused(self, chat_id: str, parts: list[dict[str, Any]], **extra: Any) -> httpx2.Response:
        return await self.http.post("/v1/chat?agent=planner", json=_body(chat_id, parts, **extra))


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    agents: dict[str, dict[str, Any]] = {
        "planner": {"tools": ["write_todos", "ask_user"], "plan_mode": True},
        "worker": {"tools": ["write_todos"]},
    }
    async with parley_app(agents=agents, directory=tmp_path) as parley:
        endpoint = await parley.http()
        async with endpoint.client() as http:
            yield World(http, tmp_path)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def execute(revision: Any) -> dict[str, Any]:
    return {"type": "data-parley-execute-plan", "data": {"revision": revision}}


def plan_parts(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in chunks if c["type"] == "data-parley-plan"]


def parley_metadata(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    [start] = [c for c in chunks if c["type"] == "start"]
    return dict(start["messageMetadata"]["parley"])


async def session_row(world: World, session_id: str) -> tuple[Any, ...]:
    [row] = db_rows(
        world.directory / "parley.db",
        "SELECT plan_status, plan_revision, turn_count FROM sessions WHERE id = ?",
        (session_id,),
    )
    return row


async def test_a_planning_turn_streams_its_plan_and_a_data_part_approves_it(world: World) -> None:
    planned = await world.chunks("plan-1", [text(PLAN)])
    meta = parley_metadata(planned)
    sid = meta["sessionId"]
    [draft] = plan_parts(planned)
    assert meta["mode"] == "planning"
    assert draft == {
        "type": "data-parley-plan",
        "id": sid,
        "data": {
            "revision": 1,
            "status": "draft",
            "todos": [{"content": "look", "status": "pending"}, {"content": "then act", "status": "pending"}],
        },
    }
    executed = await world.chunks("plan-1", [execute(1)])
    types = [c["type"] for c in executed]
    assert parley_metadata(executed)["mode"] == "executing"
    # The approval's parts come first, then the executing turn's.
    assert types[:4] == ["start", "start-step", "data-parley-plan-execution", "data-parley-plan"], types
    [started] = [c for c in executed if c["type"] == "data-parley-plan-execution"]
    assert started["data"]["revision"] == 1
    statuses = [(p["id"], p["data"]["status"], p["data"]["revision"]) for p in plan_parts(executed)]
    assert statuses == [(sid, "active", 1), (sid, "completed", 2)], "the same part, updated in place"
    assert executed[-1] == {"type": "finish", "finishReason": "stop"}
    assert await session_row(world, sid) == ("completed", 2, 2)
    [(detail,)] = db_rows(
        world.directory / "parley.db",
        "SELECT detail FROM audit WHERE action = 'execute_plan' AND outcome = 'ok'",
    )
    assert json.loads(detail)["via"] == "ai_sdk"


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        ({"type": "data-parley-execute-plan", "data": {}}, "got null"),
        (execute("1"), 'got "1"'),
        (execute(True), "got true"),
        (execute(0), "got 0"),
        ({"type": "data-parley-execute-plan"}, "got null"),
    ],
    ids=["missing", "string", "bool", "zero", "no-data"],
)
async def test_a_bad_revision_is_a_400_naming_the_field_and_changes_nothing(
    world: World, part: dict[str, Any], expected: str
) -> None:
    chat = f"bad-{expected}"
    sid = parley_metadata(await world.chunks(chat, [text(PLAN)]))["sessionId"]
    answer = await world.refused(chat, [part])
    assert answer.status_code == 400, answer.text
    detail = answer.json()["detail"]
    assert "'data.revision'" in detail and expected in detail and "nothing was approved" in detail
    assert await session_row(world, sid) == ("draft", 1, 1)


async def test_a_stale_revision_is_a_409_plan_refused_and_changes_nothing(world: World) -> None:
    sid = parley_metadata(await world.chunks("stale", [text(PLAN)]))["sessionId"]
    # Feedback on a draft plans again: revision 2.
    revised = await world.chunks("stale", [text(PLAN)])
    assert [p["data"]["revision"] for p in plan_parts(revised)] == [2]
    answer = await world.refused("stale", [execute(1)])
    assert answer.status_code == 409, answer.text
    assert answer.json()["type"] == "urn:parley:problem:plan-refused"
    assert "revision 2, not 1" in answer.json()["detail"]
    assert await session_row(world, sid) == ("draft", 2, 2)
    # A chat with no conversation has no plan to approve.
    fresh = await world.refused("never-started", [execute(1)])
    assert fresh.status_code == 400 and "no conversation yet" in fresh.json()["detail"]


async def test_metadata_parley_plan_says_whether_a_message_plans(world: World) -> None:
    # false on a plan-mode agent's first message: an ordinary turn, whose plan is active at once.
    ordinary = await world.chunks("meta", [text(PLAN)], metadata={"parley": {"plan": False}})
    assert "mode" not in parley_metadata(ordinary)
    assert [p["data"]["status"] for p in plan_parts(ordinary)] == ["active"]
    planned = await world.chunks("meta", [text(PLAN)], metadata={"parley": {"plan": True}})
    assert parley_metadata(planned)["mode"] == "planning"
    assert [p["data"]["status"] for p in plan_parts(planned)] == ["draft"]
    bad = await world.refused("meta", [text("hi")], metadata={"parley": {"plan": "yes"}})
    assert bad.status_code == 400 and "'metadata.parley.plan'" in bad.json()["detail"], bad.text
    # An agent without plan mode refuses plan: true, naming the field.
    body = {
        "id": "no-plan-mode",
        "messages": [
            {"id": "u1", "role": "user", "parts": [text("hi")], "metadata": {"parley": {"plan": True}}}
        ],
    }
    refused = await world.http.post("/v1/chat?agent=worker", json=body)
    assert refused.status_code == 400 and "plan_mode: true" in refused.json()["detail"], refused.text
