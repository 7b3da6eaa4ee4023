"""Agents use the tools of other MCP servers: our fixture server, served in the test's process
over streamable HTTP, behind parley in the same process. What needs a downstream process of its
own (a server that dies, a process per session, stdio start-up, a server from PyPI) is in
tests/test_e2e_mcp_tools.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from parley.runtime.mcp.naming import exposed_name
from tests.mcp_servers.fixture_server import LONG_NAME
from tests.support import (
    TEST_DEADLINE_S,
    call,
    db_rows,
    fixture_calls,
    fixture_in_process,
    running_server,
    write_config,
)

pytestmark = pytest.mark.anyio


@dataclass
class World:
    client: Client
    db: Path
    logs: Path

    def calls(self, server: str) -> list[dict[str, Any]]:
        return fixture_calls(self.logs / f"{server}.jsonl")


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("mcp")
    logs = directory / "logs"
    logs.mkdir()
    async with AsyncExitStack() as stack:

        async def fixture(name: str, *args: str, **settings: Any) -> dict[str, Any]:
            return await stack.enter_async_context(
                fixture_in_process(logs / f"{name}.jsonl", *args, **settings)
            )

        servers = {
            "fixture": await fixture(
                "fixture", max_result_chars=1000, tools={"crash": {"approval": "never"}}
            ),
            "fixture_http": await fixture("fixture_http"),
            "alpha": await fixture("alpha"),
            "beta": await fixture("beta"),
            "untrusted": await fixture("untrusted", trust_annotations=False),
            "down": {"command": str(directory / "no-such-server")},
            "hanging": await fixture("hanging", "--hang-list", list_timeout_s=0.5, connect_timeout_s=5),
            "slowcall": await fixture("slowcall", call_timeout_s=0.5),
        }
        agents: dict[str, dict[str, Any]] = {
            "worker": {"mcp_servers": ["fixture"], "mcp_resources": True},
            "web": {"mcp_servers": ["fixture_http"]},
            "pair": {
                "mcp_servers": [
                    {"server": "alpha", "include": ["read_thing"]},
                    {"server": "beta", "include": ["read_thing"]},
                ]
            },
            "untrusted": {"mcp_servers": ["untrusted"]},
            "broken": {"mcp_servers": ["fixture", "down", "hanging"]},
            "slow": {"mcp_servers": ["slowcall"]},
            "policed": {
                "mcp_servers": [
                    {
                        "server": "fixture",
                        "tools": {"bare": {"effect": "read"}, "read_thing": {"approval": "always"}},
                    }
                ]
            },
        }
        config = write_config(directory, agents=agents, mcp_servers=servers)
        async with running_server(config, http=True) as (_, client):
            yield World(client, directory / "parley.db", logs)


async def _run(world: World, agent: str, message: str, **extra: Any) -> dict[str, Any]:
    return await call(world.client, "start_session", agent=agent, message=message, **extra)


def _calls(outcome: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["tool"]: c for c in outcome["tool_calls"]}


async def test_list_agents_shows_mcp_tools_and_which_need_approval(world: World) -> None:
    agents = {a["name"]: a for a in (await call(world.client, "list_agents"))["agents"]}
    worker = agents["worker"]
    for tool in (
        "fixture__read_thing",
        "fixture__set_flag",
        "fixture__wipe",
        "fixture__append_note",
        "fixture__bare",
    ):
        assert tool in worker["tools"]
    assert {"fixture__wipe", "fixture__append_note", "fixture__bare"} <= set(worker["tools_needing_approval"])
    assert not {"fixture__read_thing", "fixture__set_flag"} & set(worker["tools_needing_approval"])
    assert {"mcp_list_resources", "mcp_read_resource", "mcp_get_prompt"} <= set(worker["tools"])


async def test_effects_and_approval_needs_follow_the_annotations(world: World) -> None:
    message = "\n".join(
        [
            '/tool fixture__read_thing {"name": "a"}',
            '/tool fixture__set_flag {"flag": "f", "value": true}',
            '/tool fixture__wipe {"target": "t"}',
            '/tool fixture__append_note {"note": "n"}',
            '/tool fixture__bare {"text": "b"}',
        ]
    )
    before = len(world.calls("fixture"))
    outcome = await _run(world, "worker", message)
    assert outcome["status"] == "waiting_for_input"
    calls = _calls(outcome)
    expected = {
        "fixture__read_thing": ("read", False, "succeeded"),
        "fixture__set_flag": ("idempotent_write", False, "succeeded"),
        "fixture__wipe": ("idempotent_write", True, "pending_approval"),
        "fixture__append_note": ("non_idempotent_write", True, "pending_approval"),
        "fixture__bare": ("unclassified", True, "pending_approval"),
    }
    assert {name: (c["effect"], c["requires_approval"], c["status"]) for name, c in calls.items()} == expected
    assert sorted(p["tool"] for p in outcome["pending"]) == [
        "fixture__append_note",
        "fixture__bare",
        "fixture__wipe",
    ]
    ran = [c["tool"] for c in world.calls("fixture")[before:]]
    assert sorted(ran) == ["read_thing", "set_flag"], (
        "calls that need approval wait; they do not reach the server"
    )
    decisions = [
        {"interrupt_id": p["id"], "approved": False, "reason": "not today"} for p in outcome["pending"]
    ]
    done = await call(world.client, "approve", session_id=outcome["session_id"], decisions=decisions)
    assert done["status"] == "answered"
    assert "thing a is fine" in done["answer"] and "A person declined this call: not today" in done["answer"]
    assert sorted(c["tool"] for c in world.calls("fixture")[before:]) == ["read_thing", "set_flag"]


async def test_agent_policy_wins_over_annotations(world: World) -> None:
    outcome = await _run(
        world, "policed", '/tool fixture__bare {"text": "x"}\n/tool fixture__read_thing {"name": "y"}'
    )
    calls = _calls(outcome)
    assert (calls["fixture__bare"]["effect"], calls["fixture__bare"]["requires_approval"]) == ("read", False)
    assert calls["fixture__bare"]["status"] == "succeeded"
    assert calls["fixture__read_thing"]["requires_approval"] is True
    assert calls["fixture__read_thing"]["status"] == "pending_approval"


async def test_untrusted_annotations_make_every_tool_unclassified(world: World) -> None:
    outcome = await _run(world, "untrusted", '/tool untrusted__read_thing {"name": "a"}')
    call_ = _calls(outcome)["untrusted__read_thing"]
    assert (call_["effect"], call_["requires_approval"], call_["status"]) == (
        "unclassified",
        True,
        "pending_approval",
    )
    assert world.calls("untrusted") == []


async def test_images_stay_media_and_oversized_text_is_cut_with_a_note(world: World) -> None:
    outcome = await _run(world, "worker", '/tool fixture__picture {}\n/tool fixture__big_text {"size": 5000}')
    calls = _calls(outcome)
    assert "[image: image/png" in calls["fixture__picture"]["result"]
    assert "iVBOR" not in calls["fixture__picture"]["result"], "no base64 inlined as text"
    rows = db_rows(
        world.db,
        "SELECT result FROM tool_calls WHERE session_id = ? AND tool = 'picture'",
        (outcome["session_id"],),
    )
    stored = json.loads(rows[0][0])
    assert stored["media"][0]["mime_type"] == "image/png" and stored["media"][0]["data"].startswith("iVBOR")
    big = calls["fixture__big_text"]["result"]
    assert "[truncated: the result has 5000 characters; only the first 1000 are shown]" in big


async def test_idempotency_key_reaches_the_server_in_meta(world: World) -> None:
    outcome = await _run(world, "worker", '/tool fixture__read_thing {"name": "key"}')
    call_id = outcome["tool_calls"][0]["id"]
    logged = [c for c in world.calls("fixture") if c["arguments"] == {"name": "key"}]
    assert [c["key"] for c in logged] == [f"{outcome['session_id']}/{outcome['turn_id']}/{call_id}"]


async def test_a_hanging_read_times_out_and_the_turn_still_answers(world: World) -> None:
    outcome = await _run(world, "slow", "/tool slowcall__hang {}")
    assert outcome["status"] == "answered"
    call_ = _calls(outcome)["slowcall__hang"]
    assert call_["status"] == "failed"
    assert "3 attempts" in call_["result"]
    assert len(world.calls("slowcall")) == 3


async def test_down_and_hanging_servers_leave_the_others_usable(world: World) -> None:
    outcome = await _run(world, "broken", '/tool fixture__read_thing {"name": "ok"}\n/tool down__anything {}')
    assert outcome["status"] == "answered"
    calls = _calls(outcome)
    assert calls["fixture__read_thing"]["status"] == "succeeded"
    assert calls["down__anything"]["status"] == "failed"
    assert "could not be reached" in calls["down__anything"]["result"]
    warnings = db_rows(
        world.db,
        "SELECT data FROM events WHERE session_id = ? AND kind = 'tool_source_warning'",
        (outcome["session_id"],),
    )
    text = " ".join(w for (w,) in warnings)
    assert "'down'" in text and "'hanging'" in text
    agents = {a["name"]: a for a in (await call(world.client, "list_agents"))["agents"]}
    assert any("down" in note for note in agents["broken"]["notes"])


async def test_two_servers_with_the_same_tool_name_are_both_reachable(world: World) -> None:
    outcome = await _run(
        world, "pair", '/tool alpha__read_thing {"name": "1"}\n/tool beta__read_thing {"name": "2"}'
    )
    calls = _calls(outcome)
    assert calls["alpha__read_thing"]["status"] == calls["beta__read_thing"]["status"] == "succeeded"
    assert [c["arguments"] for c in world.calls("alpha")] == [{"name": "1"}]
    assert [c["arguments"] for c in world.calls("beta")] == [{"name": "2"}]


async def test_a_long_tool_name_is_shortened_stably(world: World) -> None:
    assert len(LONG_NAME) == 90
    assert len(LONG_NAME) == 90
    name = exposed_name("fixture", LONG_NAME)
    assert len(name) == 64 and name == exposed_name("fixture", LONG_NAME)
    agents = {a["name"]: a for a in (await call(world.client, "list_agents"))["agents"]}
    assert name in agents["worker"]["tools"]
    outcome = await _run(world, "worker", f"/tool {name} {{}}")
    assert _calls(outcome)[name]["status"] == "succeeded"
    assert "long name reached" in outcome["answer"]


async def test_tool_progress_becomes_events_and_progress_for_the_waiting_caller(world: World) -> None:
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    sid = (await call(world.client, "start_session", agent="worker"))["session_id"]
    with anyio.fail_after(TEST_DEADLINE_S):
        result = await world.client.call_tool(
            "send_message",
            {"session_id": sid, "message": '/tool fixture__slow_progress {"steps": 3}'},
            progress_callback=on_progress,
        )
    assert result.structured_content is not None and result.structured_content["status"] == "answered"
    assert any("step 3 of 3" in m for m in messages), messages
    events = db_rows(
        world.db, "SELECT COUNT(*) FROM events WHERE session_id = ? AND kind = 'tool_progress'", (sid,)
    )
    assert events == [(3,)]


async def test_arguments_that_do_not_match_the_schema_are_not_sent(world: World) -> None:
    before = len(world.calls("fixture"))
    outcome = await _run(world, "worker", '/tool fixture__read_thing {"name": 5}')
    call_ = _calls(outcome)["fixture__read_thing"]
    assert call_["status"] == "failed" and "not sent" in call_["result"]
    assert len(world.calls("fixture")) == before


async def test_resources_and_prompts_can_be_read(world: World) -> None:
    message = "\n".join(
        [
            '/tool mcp_list_resources {"server": "fixture"}',
            '/tool mcp_read_resource {"server": "fixture", "uri": "fixture://notes/today"}',
            '/tool mcp_get_prompt {"server": "fixture", "name": "greet", "arguments": {"person": "Ada"}}',
            '/tool mcp_read_resource {"server": "elsewhere", "uri": "x://y"}',
        ]
    )
    calls = _calls(await _run(world, "worker", message))
    assert "fixture://notes/today" in calls["mcp_list_resources"]["result"]
    assert "greet(person)" in calls["mcp_list_resources"]["result"]
    assert calls["mcp_read_resource"]["status"] in ("succeeded", "failed")
    rows = [
        c for c in (await _run(world, "worker", message))["tool_calls"] if c["tool"] == "mcp_read_resource"
    ]
    assert rows[0]["result"] == "buy milk"
    assert rows[1]["status"] == "failed" and "must be one of: fixture" in rows[1]["result"]
    assert "Say hello to Ada." in calls["mcp_get_prompt"]["result"]


async def test_streamable_http_tool_source(world: World) -> None:
    outcome = await _run(world, "web", '/tool fixture_http__read_thing {"name": "remote"}')
    assert _calls(outcome)["fixture_http__read_thing"]["status"] == "succeeded"
    assert "thing remote is fine" in outcome["answer"]
