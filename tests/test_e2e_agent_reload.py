"""Changing agents while sessions run, through real `parley serve` processes: an agent file edited
while a session waits for approval (the resumed turn finishes on the old version, the next turn
takes the new one, get_session shows both), an invalid edit (the old version keeps serving), a
second process that resumes a turn on its old version after a restart, and a removed agent.

The versions are told apart by their memory mode, which the demo model's message count shows:
full memory counts every message of the session, no memory only the turn's own."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.support import (
    FIXTURE_LOG,
    ServerProcess,
    call,
    call_error,
    eventually,
    fixture_server,
    write_config,
)

pytestmark = pytest.mark.anyio

APPEND = '/tool fixture__append_note {"note": "%s"}'


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


def setup(directory: Path) -> tuple[Path, Path]:
    config = write_config(
        directory,
        runtime={"agent_reload_s": 0.1},
        mcp_servers={"fixture": fixture_server(directory / FIXTURE_LOG)},
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


async def send(client: Client, sid: str, message: str) -> dict[str, Any]:
    return await call(client, "send_message", session_id=sid, message=message)


async def approve(client: Client, sid: str, outcome: dict[str, Any]) -> dict[str, Any]:
    [pending] = outcome["pending"]
    decision = {"interrupt_id": pending["id"], "approved": True}
    return await call(client, "approve", session_id=sid, decisions=[decision])


async def test_edits_while_sessions_run_and_a_second_process_resuming_an_old_version(tmp_path: Path) -> None:
    config, agent_file = setup(tmp_path)
    async with ServerProcess(config, name="first") as first, first.client() as client:
        v1 = await version_of(client, "deployer")
        sid = (await call(client, "start_session", agent="deployer", message="hello"))["session_id"]

        # A turn on version one waits for approval while the file changes.
        waiting = await send(client, sid, APPEND % "one" + "\nsecond")
        assert (waiting["status"], waiting["agent_version"]) == ("waiting_for_input", v1)
        agent_file.write_text(deployer("none", "Version two."))
        v2 = await until_version_changes(client, "deployer", v1)
        resumed = await approve(client, sid, waiting)
        assert (resumed["status"], resumed["agent_version"]) == ("answered", v1)
        assert resumed["answer"].startswith("You said: second (message 2 of this session)")  # full memory
        nxt = await send(client, sid, "third")
        assert (nxt["agent_version"], nxt["answer"]) == (v2, "You said: third (message 1 of this session)")
        turns = (await call(client, "get_session", session_id=sid))["turns"]
        assert [t["agent_version"] for t in turns] == [v1, v1, v2]

        # An invalid edit is logged with its codes and leaves version two serving.
        agent_file.write_text("---\nname: deployer\nkinds: [nonsense]\n---\nBroken.\n")
        await eventually(lambda: _logged(first, "PARLEY-C020"), "the invalid edit to be reported")
        assert "PARLEY-C002" in first.log()
        assert await version_of(client, "deployer") == v2
        kept = await send(client, sid, "fourth")
        assert (kept["agent_version"], kept["answer"]) == (v2, "You said: fourth (message 1 of this session)")

        # A turn on version two waits for approval; the process stops, the file changes meanwhile.
        parked = await send(client, sid, APPEND % "five" + "\nfifth")
        assert (parked["status"], parked["agent_version"]) == ("waiting_for_input", v2)
        first.send_signal(signal.SIGTERM)
        assert await first.wait_exit() == 0
    agent_file.write_text(deployer("full", "Version three."))

    async with ServerProcess(config, name="second") as second, second.client() as client:
        v3 = await version_of(client, "deployer")
        assert v3 not in (v1, v2)
        resumed = await approve(client, sid, parked)
        # This process never served version two: it read it from the database.
        assert (resumed["status"], resumed["agent_version"]) == ("answered", v2)
        assert resumed["answer"].startswith("You said: fifth (message 1 of this session)")
        last = await send(client, sid, "sixth")
        assert (last["agent_version"], last["answer"]) == (v3, "You said: sixth (message 6 of this session)")
        turns = (await call(client, "get_session", session_id=sid))["turns"]
        assert [t["agent_version"] for t in turns] == [v1, v1, v2, v2, v2, v3]
        assert [t["status"] for t in turns] == ["answered"] * 6


async def test_a_removed_agents_sessions_stay_readable_and_refuse_new_messages(tmp_path: Path) -> None:
    config, _ = setup(tmp_path)
    async with ServerProcess(config) as server, server.client() as client:
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


async def _logged(server: ServerProcess, text: str) -> bool:
    return text in server.log()
