"""Changing agents while sessions run, through real `parley serve` processes: an agent file edited
while a session waits for approval (the resumed turn finishes on the old version, the next turn
takes the new one, get_session shows both), an invalid edit (the old version keeps serving), and a
second process that resumes a turn on its old version after a SIGTERM and a restart. A removed
agent runs in the test's process: tests/test_agent_reload.py.

The versions are told apart by their memory mode, which the demo model's message count shows:
full memory counts every message of the session, no memory only the turn's own."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.support import ServerProcess, call, eventually
from tests.test_agent_reload import deployer, setup, until_version_changes, version_of

pytestmark = pytest.mark.anyio

APPEND = '/tool fixture__append_note {"note": "%s"}'


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
        # Both codes, waited for together: a reload that reads the file half written (write_text
        # truncates, then writes) reports another problem first, and the next reload this one.
        await eventually(
            lambda: _logged_all(first, "PARLEY-C020", "PARLEY-C002"), "the invalid edit to be reported"
        )
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


async def _logged(server: ServerProcess, text: str) -> bool:
    return text in server.log()


async def _logged_all(server: ServerProcess, *texts: str) -> bool:
    log = server.log()
    return all(text in log for text in texts)
