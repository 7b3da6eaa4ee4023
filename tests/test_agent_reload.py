"""A removed agent, in the test's process: its sessions stay readable and refuse new messages.
Edits while sessions run and a restart: tests/test_e2e_agent_reload.py, which uses these helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.support import (
    FIXTURE_LOG,
    InProcessServer,
    call,
    call_error,
    eventually,
    fixture_in_process,
    fixture_server,
    write_config,
)

pytestmark = pytest.mark.anyio


def deployer(memory: str, description: str) -> str:
    """A Claude Code-style agent file whose one tool (an MCP write) needs approval."""
    return (
        "---\n"
        "name: deployer\n"
        f"description: {description}\n"
        "tools: mcp__fixture__append_note\n"
        "model: inherit\n"
        f"memory: {{mode: {memory}}}\n"
        "---\n"
        "Deploy carefully.\n"
    )


def setup(directory: Path, fixture: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """parley.yaml and agent files in `directory`, with `fixture` (its parley.yaml entry; by
    default the stdio one) as the fixture MCP server."""
    config = write_config(
        directory,
        runtime={"agent_reload_s": 0.1},
        mcp_servers={"fixture": fixture or fixture_server(directory / FIXTURE_LOG)},
        agents={"leaving": {"description": "Will be removed.", "tools": ["ask_user"]}},
    )
    agent_file = directory / "configs" / "agents" / "deployer.md"
    agent_file.write_text(deployer("full", "Version one."))
    return config, agent_file


async def version_of(client: Client, name: str) -> str | None:
    agents = {a["name"]: a for a in (await call(client, "list_agents"))["agents"]}
    return agents[name]["version"] if name in agents else None


async def until_version_changes(client: Client, name: str, old: str | None) -> str | None:
    seen: list[str | None] = []

    async def changed() -> bool:
        seen.append(await version_of(client, name))
        return seen[-1] != old

    await eventually(changed, f"agent {name} to be reloaded")
    return seen[-1]


async def test_a_removed_agents_sessions_stay_readable_and_refuse_new_messages(tmp_path: Path) -> None:
    async with fixture_in_process(tmp_path / FIXTURE_LOG) as fixture:
        config, _ = setup(tmp_path, fixture)
        async with InProcessServer(config) as server, server.client() as client:
            v1 = await version_of(client, "leaving")
            sid = (await call(client, "start_session", agent="leaving", message="hello"))["session_id"]
            (tmp_path / "configs" / "agents" / "leaving.yaml").unlink()
            assert await until_version_changes(client, "leaving", v1) is None
            error = await call_error(client, "send_message", session_id=sid, message="still there?")
            assert "its agent 'leaving' is no longer configured" in error and "Nothing was sent" in error
            snapshot = await call(client, "get_session", session_id=sid)
            assert [m["text"] for m in snapshot["messages"]][:1] == ["hello"]
            assert [t["agent_version"] for t in snapshot["turns"]] == [v1]
            assert "agent leaving is no longer configured" in server.log()
