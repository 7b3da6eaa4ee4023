"""GET /v1/sessions/{id}/events end to end against parley served over HTTP (in this process): every
position of a finished turn resumes with exactly the rest, a reconnect in the middle of a running
turn loses and repeats nothing (another process's events reaching the stream is
tests/test_e2e_event_stream.py), a position older than what is kept
gets `reset` and the current state, a failed model attempt's streamed text is followed by
`attempt_discarded`, and streamed reasoning arrives as `reasoning_delta`."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from parley.tls import http_client
from tests.fake_providers import STALLED_TEXT, FakeProviders, serving_fake_providers
from tests.sse_support import Frame, events, heartbeat, read_until
from tests.support import (
    FIXTURE_LOG,
    TEST_DEADLINE_S,
    Gate,
    InProcessServer,
    Served,
    call,
    fixture_in_process,
    write_config,
)

pytestmark = pytest.mark.anyio

HEARTBEAT_S = 0.2


@dataclass
class World(Served):
    fake: FakeProviders | None = None

    @property
    def base(self) -> str:
        return self.server.base_url

    def stream_url(self, session_id: str) -> str:
        return f"{self.base}/v1/sessions/{session_id}/events"

    async def read(self, session_id: str, after: int | str | None, stop: Any) -> list[Frame]:
        headers = {"Last-Event-ID": str(after)} if after is not None else None
        return await read_until(self.stream_url(session_id), stop, headers=headers)


def _ended(frame: Frame) -> bool:
    return frame.kind == "turn_ended"


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("event_stream")
    async with (
        serving_fake_providers() as fake,
        fixture_in_process(directory / FIXTURE_LOG) as fixture,
    ):
        config = write_config(
            directory,
            agents={
                "worker": {"mcp_servers": ["fixture"], "tools": ["write_todos", "ask_user"]},
                "claude": {
                    "model": fake.anthropic_model(),
                },
            },
            runtime={"model_retry_backoff_s": 0.1},
            mcp_servers={"fixture": fixture},
            http={"stream_heartbeat_s": HEARTBEAT_S},
        )
        async with InProcessServer(config, http=True, env={"FAKE_PROVIDER_KEY": "sk-fake"}) as server:
            world = World(server, directory, None, fake)
            yield world
            assert "Traceback" not in server.log(), server.log()


async def _finished_session(world: World, message: str) -> tuple[str, list[Frame]]:
    async with world.server.client() as client:
        outcome = await call(client, "start_session", agent="worker", message=message)
    assert outcome["status"] == "answered", outcome
    full = events(await world.read(outcome["session_id"], None, _ended))
    return outcome["session_id"], full


async def test_every_position_of_a_finished_turn_resumes_with_exactly_the_events_after_it(
    world: World,
) -> None:
    sid, full = await _finished_session(world, 'plan it\n/tool write_todos {"todos": [{"content": "a"}]}')
    seqs = [f.id for f in full]
    assert seqs == list(range(1, len(full) + 1)), "a session's events are numbered from 1 without a gap"
    kinds = [f.kind for f in full]
    assert kinds == [
        "session_created",
        "message_queued",
        "turn_started",
        "model_step",
        "tool_started",
        "tool_finished",
        "plan_updated",
        "model_step",
        "turn_ended",
    ], kinds
    assert full[3].data["calls"][0]["tool"] == "write_todos", "a model step shows the calls it asked for"
    assert full[5].data["call"]["status"] == "succeeded", "a tool event shows its call"
    for position in range(0, len(full) + 1):
        # After the last event the stream is idle: its next frame is a heartbeat.
        seen = await world.read(sid, position, heartbeat)
        assert [f.data for f in events(seen)] == [f.data for f in full[position:]], position
        assert [f.id for f in events(seen)] == seqs[position:], position


async def test_after_query_parameter_resumes_like_last_event_id(world: World) -> None:
    sid, full = await _finished_session(world, "hello")
    seen = await read_until(world.stream_url(sid) + "?after=2", heartbeat)
    assert [f.id for f in events(seen)] == [f.id for f in full[2:]]


async def test_a_reconnect_in_the_middle_of_a_running_turn_loses_and_repeats_nothing(world: World) -> None:
    gate = Gate(world.directory / "stream-gate")
    async with world.server.client() as client:
        started = await call(
            client, "start_session", agent="worker", message=f"gated\n{gate.tool_line()}", wait_seconds=0
        )
    sid = started["session_id"]
    first = events(await world.read(sid, None, lambda f: f.kind == "tool_started"))
    gate.open()
    rest = events(await world.read(sid, first[-1].id, _ended))
    whole = events(await world.read(sid, 0, _ended))
    assert [f.id for f in first + rest] == [f.id for f in whole]
    assert [f.data for f in first + rest] == [f.data for f in whole]
    assert [f.kind for f in rest] == ["tool_finished", "model_step", "turn_ended"]


async def test_a_position_older_than_what_is_kept_gets_reset_and_the_current_state(world: World) -> None:
    sid, full = await _finished_session(world, "keep me short")
    # Retention (a later issue) deletes the oldest events; here the test does it by hand.
    db = sqlite3.connect(world.db)
    with db:
        db.execute("DELETE FROM events WHERE session_id = ? AND seq <= 3", (sid,))
    db.close()
    seen = await world.read(sid, 1, heartbeat)
    assert seen[0].kind == "reset" and seen[0].id is None, seen
    assert seen[0].data["oldest_kept_seq"] == 4
    state = seen[1]
    assert state.kind == "state" and state.id == len(full), state
    assert state.data["session"]["session_id"] == sid and state.data["session"]["status"] == "idle"
    assert events(seen[2:]) == [], "nothing after the state: the stream goes on from its position"
    # A position at or past the oldest kept event is served as usual.
    kept = await world.read(sid, 3, heartbeat)
    assert [f.id for f in events(kept)] == [f.id for f in full[3:]]
    # A position the session never reached (another database?) starts over as well.
    future = await world.read(sid, len(full) + 5, heartbeat)
    assert future[0].kind == "reset" and future[1].kind == "state"


async def test_text_of_a_failed_attempt_is_followed_by_attempt_discarded_and_reasoning_streams(
    world: World,
) -> None:
    async with world.server.client() as client:
        outcome = await call(client, "start_session", agent="claude", message="stall please")
        assert outcome["answer"] == "echo: stall please", outcome
        thought = await call(client, "start_session", agent="claude", message="think first")
    seen = events(await world.read(outcome["session_id"], 0, _ended))
    kinds = [f.kind for f in seen]
    discarded = kinds.index("attempt_discarded")
    streamed = "".join(f.data["data"]["text"] for f in seen[:discarded] if f.kind == "text_delta")
    assert streamed and STALLED_TEXT.startswith(streamed), streamed
    assert kinds[discarded + 1] == "model_retry", kinds
    after = seen[discarded + 1 :]
    final = "".join(f.data["data"]["text"] for f in after if f.kind == "text_delta") or next(
        f.data["data"]["text"] for f in after if f.kind == "model_step"
    )
    assert final == "echo: stall please"
    thinking = events(await world.read(thought["session_id"], 0, _ended))
    reasoning = [f.data["data"]["text"] for f in thinking if f.kind == "reasoning_delta"]
    assert reasoning == ["let me think"], [f.kind for f in thinking]


async def test_unknown_sessions_and_bad_positions_are_refused_as_problem_details(world: World) -> None:
    sid, _ = await _finished_session(world, "hello")
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        unknown = await http.get(world.stream_url("ses_" + "0" * 32))
        bad = await http.get(world.stream_url(sid), headers={"Last-Event-ID": "yesterday"})
    assert unknown.status_code == 404 and unknown.headers["content-type"] == "application/problem+json"
    assert unknown.json()["type"] == "urn:parley:problem:session-not-found"
    assert bad.status_code == 400 and "Last-Event-ID" in bad.json()["detail"]
    # int() would take each of these; a position is plain ASCII digits only. (Streamed, so a
    # position taken opens a stream instead of hanging the test.)
    loose = [({"Last-Event-ID": "1_000"}, None)] + [
        (None, {"after": after}) for after in ("1_000", " 3", "\u0663", "+3", "3 ")
    ]
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        for headers, params in loose:
            async with http.stream("GET", world.stream_url(sid), headers=headers, params=params) as refused:
                assert refused.status_code == 400, (headers, params)
                detail = json.loads(await refused.aread())["detail"]
            assert "digits" in detail, detail
