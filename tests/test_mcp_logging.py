"""MCP logging end to end: a client receives parley's log records about its own sessions as
`notifications/message` (2025-11-25 after `logging/setLevel`, 2026-07-28 per request), at or
above its level, and never a record about another client's session."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
import yaml
from mcp import Client

from tests.support import FAST_RUNTIME, InProcessServer, call, eventually, http_mcp_client

pytestmark = pytest.mark.anyio


@dataclass
class Lines:
    """What one client's log pane would show."""

    received: list[types.LoggingMessageNotificationParams] = field(default_factory=list)

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        self.received.append(params)

    def about(self, session_id: str) -> list[str]:
        return [str(p.data["message"]) for p in self.received if p.data.get("session_id") == session_id]

    def text(self) -> str:
        return json.dumps([p.model_dump(mode="json") for p in self.received])


@dataclass
class World:
    server: InProcessServer
    directory: Path

    @asynccontextmanager
    async def client(self, lines: Lines, mode: str, **options: Any) -> AsyncIterator[Client]:
        assert self.server.url is not None
        async with http_mcp_client(self.server.url, mode=mode, logging_callback=lines, **options) as client:
            yield client


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("logging")
    config = {
        "storage": {"path": "parley.db"},
        "runtime": FAST_RUNTIME,
        "mcp_servers": {"down": {"command": str(directory / "no-such-server")}},
    }
    (directory / "parley.yaml").write_text(yaml.safe_dump(config))
    agents = directory / "configs" / "agents"
    agents.mkdir(parents=True)
    (agents / "broken.yaml").write_text(
        yaml.safe_dump({"name": "broken", "mcp_servers": ["down"], "tools": ["write_todos"]})
    )
    async with InProcessServer(directory / "parley.yaml", http=True) as server:
        yield World(server, directory)


async def test_a_legacy_client_gets_lines_about_its_sessions_and_none_about_another_clients(
    world: World,
) -> None:
    mine, theirs = Lines(), Lines()
    async with world.client(mine, "legacy") as me, world.client(theirs, "legacy") as other:
        await me.set_logging_level("info")
        await other.set_logging_level("info")
        started = await call(me, "start_session", agent="demo", message="first words")
        # Another client's session, while mine is followed: its lines must not reach me.
        foreign = await call(other, "start_session", agent="demo", message="their private words")
        await call(me, "send_message", session_id=started["session_id"], message="second words")
        session_id, foreign_id = started["session_id"], foreign["session_id"]

        async def my_second_turn_logged() -> bool:
            return sum("answered" in line for line in mine.about(session_id)) >= 2

        await eventually(my_second_turn_logged, "the log line of my second turn")
        await eventually(lambda: _true(theirs.about(foreign_id)), "the other client's own lines")
        # Trying to follow a foreign session by naming it changes nothing: it is not mine to read.
        await me.call_tool("get_session", {"session_id": "ses_" + "0" * 32})

    lines = mine.about(session_id)
    assert any(f"session {session_id} started with agent demo" in line for line in lines), lines
    assert any("turn" in line and "answered" in line for line in lines), lines
    assert all(p.level in ("info", "notice", "warning", "error") for p in mine.received), mine.text()
    assert foreign_id not in mine.text()
    assert "their private words" not in mine.text()
    assert session_id not in theirs.text()
    assert all(p.logger and p.logger.startswith("parley") for p in mine.received)


async def test_lines_below_the_level_are_not_sent_and_a_failing_tool_and_server_are_reported(
    world: World,
) -> None:
    lines = Lines()
    async with world.client(lines, "legacy") as client:
        await client.set_logging_level("warning")
        outcome = await call(client, "start_session", agent="broken", message="/tool down__anything {}")
        session_id = outcome["session_id"]

        async def failure_logged() -> bool:
            return any("down__anything" in line for line in lines.about(session_id))

        await eventually(failure_logged, "the failed tool call's log line")
    about = lines.about(session_id)
    assert any("down" in line and "could not be reached" in line for line in about), about
    assert any("MCP server" in line or "'down'" in line for line in about), about
    assert {p.level for p in lines.received} <= {"warning", "error", "critical"}, lines.text()
    assert not any("started with agent" in line for line in about), "info lines were sent at warning"


async def test_a_2026_client_opts_in_per_request_and_gets_lines_on_that_request(world: World) -> None:
    lines, silent = Lines(), Lines()
    async with world.client(lines, "auto", log_level="info") as client:
        assert client.protocol_version == "2026-07-28"
        outcome = await call(client, "start_session", agent="demo", message="modern words")
    session_id = outcome["session_id"]
    about = lines.about(session_id)
    # The lines of the call travel on its own stream, so they are in before its result.
    assert any("started with agent demo" in line for line in about), lines.text()
    assert any("answered" in line for line in about), lines.text()
    async with world.client(silent, "auto") as client:
        await call(client, "send_message", session_id=session_id, message="no opt-in")
    assert silent.received == [], "a request without the log-level opt-in got log lines"


async def test_logging_is_advertised_and_set_level_refuses_an_unknown_level(world: World) -> None:
    async with world.client(Lines(), "legacy") as client:
        assert client.server_capabilities is not None
        assert client.server_capabilities.logging is not None
        with pytest.raises(Exception, match=r"(?i)invalid|level"):
            await client.set_logging_level("loud")  # type: ignore[arg-type]
        # The server keeps serving after the refused request.
        await call(client, "list_agents")


async def _true(value: object) -> bool:
    return bool(value)
