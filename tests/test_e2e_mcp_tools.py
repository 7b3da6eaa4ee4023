"""Agents use the tools of MCP servers that need a process of their own: a stdio server that dies
mid-call or on its first read and is restarted, one process per session, a shared server started
with parley, and mcp-server-time from PyPI, behind a parley in the test's process. The rest of
the tool behaviour is tested in-process in tests/test_mcp_tools.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    call,
    db_rows,
    eventually,
    fixture_server,
    running_server,
    write_config,
)
from tests.test_mcp_tools import World

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("mcp")
    logs = directory / "logs"
    logs.mkdir()
    servers = {
        "fixture": fixture_server(
            logs / "fixture.jsonl", max_result_chars=1000, tools={"crash": {"approval": "never"}}
        ),
        "flaky": fixture_server(logs / "flaky.jsonl", "--crash-on-first-read"),
        "private": fixture_server(logs / "private.jsonl", scope="per_session"),
        "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
    }
    agents: dict[str, dict[str, Any]] = {
        "worker": {"mcp_servers": ["fixture"], "mcp_resources": True},
        "flaky": {"mcp_servers": ["flaky"]},
        "private": {"mcp_servers": ["private"]},
        "clock": {"mcp_servers": ["time"]},
    }
    config = write_config(directory, agents=agents, mcp_servers=servers)
    async with running_server(config, http=True) as (_, client):
        yield World(client, directory / "parley.db", logs)


async def _run(world: World, agent: str, message: str, **extra: Any) -> dict[str, Any]:
    return await call(world.client, "start_session", agent=agent, message=message, **extra)


def _calls(outcome: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["tool"]: c for c in outcome["tool_calls"]}


async def test_a_read_retried_after_a_dropped_connection_gives_one_result_with_one_key(world: World) -> None:
    outcome = await _run(world, "flaky", '/tool flaky__read_thing {"name": "retry"}')
    call_ = _calls(outcome)["flaky__read_thing"]
    assert call_["status"] == "succeeded"
    attempts = world.calls("flaky")
    assert len(attempts) == 2, "the first attempt died with the server, the second ran"
    assert attempts[0]["key"] == attempts[1]["key"]
    assert attempts[0]["pid"] != attempts[1]["pid"], "the retry went to a restarted server"
    results = db_rows(
        world.db,
        "SELECT COUNT(*) FROM messages WHERE session_id = ? AND role = 'tool'",
        (outcome["session_id"],),
    )
    assert results == [(1,)]


async def test_a_server_crash_mid_call_is_outcome_unknown_for_a_write(world: World) -> None:
    outcome = await _run(world, "worker", "/tool fixture__crash {}")
    assert outcome["status"] == "answered"
    call_ = _calls(outcome)["fixture__crash"]
    assert call_["status"] == "outcome_unknown"
    assert "may or may not have taken effect" in call_["result"]
    again = await _run(world, "worker", '/tool fixture__read_thing {"name": "after"}')
    assert _calls(again)["fixture__read_thing"]["status"] == "succeeded", "the server was restarted"


async def test_per_session_servers_get_their_own_connection(world: World) -> None:
    first = await _run(world, "private", '/tool private__read_thing {"name": "s1"}')
    await call(
        world.client,
        "send_message",
        session_id=first["session_id"],
        message='/tool private__read_thing {"name": "s1b"}',
    )
    await _run(world, "private", '/tool private__read_thing {"name": "s2"}')
    pids = {c["arguments"]["name"]: c["pid"] for c in world.calls("private")}
    assert pids["s1"] == pids["s1b"], "one session keeps its server process"
    assert pids["s1"] != pids["s2"], "another session gets its own"


async def test_a_server_from_the_package_registry_works_as_a_tool_source(world: World) -> None:
    message = '/tool time__get_current_time {"timezone": "UTC"}\n/tool time__convert_time {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}'
    outcome = await _run(world, "clock", message)
    calls = _calls(outcome)
    assert calls["time__get_current_time"]["status"] == "succeeded"
    assert calls["time__get_current_time"]["effect"] == "read"
    assert "UTC" in calls["time__get_current_time"]["result"]
    assert calls["time__convert_time"]["status"] == "succeeded"
    assert "21:00" in calls["time__convert_time"]["result"]


async def test_shared_tool_servers_start_with_parley_not_on_the_first_turn(tmp_path: Path) -> None:
    """The first turn after start does not wait for a shared MCP server's process to start: parley
    starts the servers its agents use (and lists their tools) as it starts, once."""
    started = tmp_path / "fixture.started"
    server = fixture_server(tmp_path / "calls.jsonl")
    server["env"]["FIXTURE_STARTED"] = str(started)
    config = write_config(
        tmp_path,
        agents={"worker": {"model": {"provider": "demo"}, "mcp_servers": [{"server": "fixture"}]}},
        mcp_servers={"fixture": server},
    )
    async with running_server(config) as (_, client):

        async def fixture_started() -> bool:
            return started.exists() and bool(started.read_text().strip())

        await eventually(fixture_started, "the fixture server to start without any call")
        outcome = await call(client, "start_session", agent="worker", message="hello")
        assert outcome["status"] == "answered"
    assert len(started.read_text().split()) == 1  # the turn used the process started at start-up
