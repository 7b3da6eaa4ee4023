"""Downstream input requests, against parley in the test's process: our fixture server's
`paint` (served in the test's process over streamable HTTP) asks for a colour by elicitation
(2025-11-25) or with an input-required result (2026-07-28); the user answers, declines, lets the
question expire, is slower than the call timeout, or cancels the turn while it waits.

Downstream tasks (server-everything from npm, over stdio and HTTP) and restarts of parley in the
middle of them are in tests/test_e2e_downstream.py, which shares this module's helpers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client

from parley.tls import http_client
from tests.support import (
    FAST_RUNTIME,
    TEST_DEADLINE_S,
    call,
    db_rows,
    eventually,
    fixture_calls,
    fixture_in_process,
    running_server,
)

pytestmark = pytest.mark.anyio

# How long a downstream question waits for the user: longer than any wait of a test, so a question
# expires only where a test configures it to, and a cancel that waited for it would fail.
QUESTION_WAIT_S = 4 * TEST_DEADLINE_S
NO_APPROVAL = {"approval": "never"}
# The call timeout of paint_short_call, and how long its user takes to answer (longer than that).
SHORT_CALL_TIMEOUT_S = 1.0
SLOW_USER_S = 1.5 * SHORT_CALL_TIMEOUT_S


def _write(directory: Path, servers: dict[str, Any], agents: dict[str, dict[str, Any]]) -> Path:
    config = {"storage": {"path": "parley.db"}, "runtime": FAST_RUNTIME, "mcp_servers": servers}
    (directory / "parley.yaml").write_text(yaml.safe_dump(config))
    agents_dir = directory / "configs" / "agents"
    agents_dir.mkdir(parents=True, exist_ok=True)
    for name, body in agents.items():
        (agents_dir / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, **body}))
    return directory / "parley.yaml"


@dataclass
class World:
    server: Any  # a ServerProcess or an InProcessServer
    client: Client
    db: Path
    paint_log: Path | None = None

    def painted(self, item: str) -> list[dict[str, Any]]:
        """The runs of `paint` the fixture server logged for this item."""
        assert self.paint_log is not None, "this world has no paint server"
        runs = fixture_calls(self.paint_log)
        return [r["arguments"] for r in runs if r["tool"] == "paint" and r["arguments"]["item"] == item]

    async def health(self) -> dict[str, Any]:
        assert self.server.url is not None
        base = self.server.url.rsplit("/mcp", 1)[0]
        async with http_client() as http:
            response = await http.get(f"{base}/healthz")
        response.raise_for_status()
        return dict(response.json())


PAINTERS = {
    # (protocol, answer wait) -> server name
    ("legacy", "patient"): "paint_legacy",
    ("modern", "patient"): "paint_modern",
    ("legacy", "impatient"): "paint_legacy_quick",
    ("modern", "impatient"): "paint_modern_quick",
}


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("downstream")
    paint_log = directory / "paint.jsonl"
    async with AsyncExitStack() as stack:

        async def paint_server(**settings: Any) -> dict[str, Any]:
            return await stack.enter_async_context(
                fixture_in_process(paint_log, tools={"paint": NO_APPROVAL}, **settings)
            )

        servers: dict[str, Any] = {}
        agents: dict[str, dict[str, Any]] = {}
        for (protocol, wait), name in PAINTERS.items():
            settings: dict[str, Any] = {"input_wait_s": 0.5 if wait == "impatient" else QUESTION_WAIT_S}
            if protocol == "legacy":
                settings["protocol"] = "legacy"
            servers[name] = await paint_server(**settings)
            agents[name] = {"mcp_servers": [name]}
        # A call timeout shorter than the user takes to answer: the question's time must not count.
        servers["paint_short_call"] = await paint_server(
            protocol="legacy", call_timeout_s=SHORT_CALL_TIMEOUT_S, input_wait_s=QUESTION_WAIT_S
        )
        agents["paint_short_call"] = {"mcp_servers": ["paint_short_call"]}
        config = _write(directory, servers, agents)
        async with running_server(config, http=True) as (server, client):
            yield World(server, client, directory / "parley.db", paint_log)
            assert "Traceback" not in server.log(), server.log()


def _calls(db: Path, session_id: str) -> list[tuple[str, dict[str, Any] | None, str | None]]:
    rows = db_rows(
        db,
        "SELECT status, remote, result FROM tool_calls WHERE session_id = ? ORDER BY created_at",
        (session_id,),
    )
    return [(status, json.loads(remote) if remote else None, result) for status, remote, result in rows]


def _events(db: Path, session_id: str, kind: str) -> list[dict[str, Any]]:
    rows = db_rows(
        db, "SELECT data FROM events WHERE session_id = ? AND kind = ? ORDER BY seq", (session_id, kind)
    )
    return [json.loads(data) for (data,) in rows]


def _only_call(outcome: dict[str, Any]) -> dict[str, Any]:
    [found] = outcome["tool_calls"]
    return dict(found)


async def _ended(world: World, session_id: str) -> dict[str, Any]:
    """The session's last turn, once it has ended (read from the database, then through parley)."""

    async def turn_ended() -> bool:
        rows = db_rows(
            world.db,
            "SELECT t.status FROM turns t JOIN sessions s ON t.id = s.last_turn_id WHERE s.id = ?",
            (session_id,),
        )
        current = db_rows(world.db, "SELECT current_turn_id FROM sessions WHERE id = ?", (session_id,))
        return bool(rows) and current == [(None,)]

    await eventually(turn_ended, f"the turn of {session_id} to end")
    snapshot = await call(world.client, "get_session", session_id=session_id)
    return dict(snapshot["last_turn"])


# ---------------------------------------------------------------------- d. our fixture's paint


@pytest.mark.parametrize("protocol", ["legacy", "modern"])
async def test_paint_answered_paints_once_with_that_colour(world: World, protocol: str) -> None:
    server = PAINTERS[(protocol, "patient")]
    item = f"door-{protocol}"
    started = await call(
        world.client, "start_session", agent=server, message=f'/tool {server}__paint {{"item": "{item}"}}'
    )
    assert started["status"] == "waiting_for_input", started
    [pending] = started["pending"]
    assert pending["question"].startswith(f"Which colour for the {item}?")
    assert pending["choices"] == ["red", "green", "blue"]
    done = await call(
        world.client,
        "answer_question",
        session_id=started["session_id"],
        interrupt_id=pending["id"],
        answer="green",
    )
    assert done["status"] == "answered", done
    assert f"painted the {item} green" in done["answer"]
    assert world.painted(item) == [
        {"item": item, "answer": {"action": "accept", "data": {"colour": "green"}}}
    ]
    sid = started["session_id"]
    [(_, remote, _)] = _calls(world.db, sid)
    parked_for_input = [p for p in _events(world.db, sid, "turn_parked") if p["waiting_for_input"]]
    if protocol == "legacy":
        # 2025-11-25: the server asked by elicitation while the call was open.
        assert remote is None and parked_for_input == []
    else:
        # 2026-07-28: an input-required result; the turn parked until the answer, then the call
        # was sent again with it.
        assert remote is not None and remote["kind"] == "input" and remote["rounds"] == 1
        assert len(parked_for_input) == 1


async def test_a_user_slower_than_the_call_timeout_still_gets_the_answer_to_the_tool(world: World) -> None:
    server, item = "paint_short_call", "shed"
    started = await call(
        world.client, "start_session", agent=server, message=f'/tool {server}__paint {{"item": "{item}"}}'
    )
    assert started["status"] == "waiting_for_input", started
    await anyio.sleep(SLOW_USER_S)  # the scenario: the user thinks for longer than the call timeout
    done = await call(
        world.client,
        "answer_question",
        session_id=started["session_id"],
        interrupt_id=started["pending"][0]["id"],
        answer="red",
    )
    assert done["status"] == "answered", done
    assert f"painted the {item} red" in done["answer"]
    assert world.painted(item) == [{"item": item, "answer": {"action": "accept", "data": {"colour": "red"}}}]


@pytest.mark.parametrize("protocol", ["legacy", "modern"])
async def test_paint_declined_reaches_the_tool_as_a_decline(world: World, protocol: str) -> None:
    server = PAINTERS[(protocol, "patient")]
    item = f"fence-{protocol}"
    started = await call(
        world.client, "start_session", agent=server, message=f'/tool {server}__paint {{"item": "{item}"}}'
    )
    [pending] = started["pending"]
    done = await call(
        world.client,
        "answer_question",
        session_id=started["session_id"],
        interrupt_id=pending["id"],
        decline=True,
    )
    assert done["status"] == "answered", done
    assert f"did not paint the {item}: the user chose decline" in done["answer"]
    assert [p["answer"]["action"] for p in world.painted(item)] == ["decline"]


@pytest.mark.parametrize("protocol", ["legacy", "modern"])
async def test_paint_unanswered_goes_back_as_cancel(world: World, protocol: str) -> None:
    server = PAINTERS[(protocol, "impatient")]
    item = f"gate-{protocol}"
    started = await call(
        world.client, "start_session", agent=server, message=f'/tool {server}__paint {{"item": "{item}"}}'
    )
    assert started["status"] == "waiting_for_input", "the question waits for its 0.5 s"
    ended = await _ended(world, started["session_id"])
    assert ended["status"] == "answered", ended
    answer = ended["answer"]
    assert f"did not paint the {item}: the user chose cancel" in answer
    assert [p["answer"]["action"] for p in world.painted(item)] == ["cancel"]
    [(status,)] = db_rows(
        world.db, "SELECT status FROM interrupts WHERE session_id = ?", (started["session_id"],)
    )
    assert status == "expired"


# ---------------------------------------------------------------------- e. cancelling


@pytest.mark.parametrize(
    "protocol",
    ["legacy", "modern"],
)
async def test_cancelling_the_turn_while_a_downstream_question_waits_ends_it_at_once(
    world: World, protocol: str
) -> None:
    """The question waits QUESTION_WAIT_S for the user, longer than cancel_turn's wait: a cancel
    that waited for the question would come back 'running'."""
    server = PAINTERS[(protocol, "patient")]
    item = f"shed-{protocol}"
    started = await call(
        world.client, "start_session", agent=server, message=f'/tool {server}__paint {{"item": "{item}"}}'
    )
    assert started["status"] == "waiting_for_input", started
    sid = started["session_id"]
    try:
        cancelled = await call(world.client, "cancel_turn", session_id=sid, wait_seconds=TEST_DEADLINE_S)
    finally:
        ended = await _ended(world, sid)  # nothing is left running for the next tests
    assert cancelled["status"] == "cancelled", cancelled
    assert ended["status"] == "cancelled", ended
    [(status,)] = db_rows(world.db, "SELECT status FROM interrupts WHERE session_id = ?", (sid,))
    assert status in ("cancelled", "expired"), "the question is no longer open"
    # 2026-07-28: the call is never sent again; 2025-11-25: the open call is told 'cancel'.
    expected = ["cancel"] if protocol == "legacy" else []
    assert [p["answer"]["action"] for p in world.painted(item)] == expected
