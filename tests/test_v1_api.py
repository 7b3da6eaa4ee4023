"""The /v1 JSON endpoints and the owner-wide stream end to end: the same service calls as the MCP
tools (the same results, checks, errors as problem details, client_message_id idempotency), and
`GET /v1/events` showing the caller's sessions' events and the interrupts waiting for it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from parley.testing import HeldModel
from parley.tls import http_client
from tests.sse_support import Frame, read_until
from tests.support import (
    CALL_DEADLINE_S,
    FIXTURE_LOG,
    STATE_WINDOW_S,
    InProcessServer,
    Served,
    db_rows,
    eventually,
    fixture_in_process,
    fixture_runs,
    write_config,
)

pytestmark = pytest.mark.anyio

# A web app served elsewhere that calls /v1 from the browser (http.cors_origins).
WEB_APP = "http://localhost:3000"


class World(Served):
    @property
    def base(self) -> str:
        return self.server.base_url

    async def post(self, path: str, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
        async with http_client(timeout=CALL_DEADLINE_S) as http:
            response = await http.post(self.base + path, json=body)
        assert response.status_code == status, (response.status_code, response.text)
        return dict(response.json())

    async def get(self, path: str, status: int = 200) -> dict[str, Any]:
        async with http_client(timeout=CALL_DEADLINE_S) as http:
            response = await http.get(self.base + path)
        assert response.status_code == status, (response.status_code, response.text)
        return dict(response.json())

    @property
    def model(self) -> HeldModel:
        """The model every agent calls: it holds calls a test steers or cancels around."""
        server = self.server
        assert isinstance(server, InProcessServer) and isinstance(server.model, HeldModel)
        return server.model


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("v1_api")
    async with fixture_in_process(directory / FIXTURE_LOG) as fixture:
        config = write_config(
            directory,
            agents={
                "worker": {"mcp_servers": ["fixture"], "tools": ["ask_user"]},
                "planner": {"tools": ["write_todos", "ask_user"], "plan_mode": True},
            },
            mcp_servers={"fixture": fixture},
            http={"stream_heartbeat_s": 0.2, "cors_origins": [WEB_APP]},
        )
        async with InProcessServer(config, http=True, model=HeldModel()) as server:
            yield World(server, directory)
            assert "Traceback" not in server.log(), server.log()


async def test_start_send_read_and_list_like_the_tools_with_idempotent_client_message_ids(
    world: World,
) -> None:
    body = {"agent": "worker", "message": "hello", "client_message_id": "start-1"}
    started = await world.post("/v1/sessions", body, 201)
    assert (
        started["status"] == "answered" and started["answer"] == "You said: hello (message 1 of this session)"
    )
    again = await world.post("/v1/sessions", body, 201)
    assert (again["session_id"], again["turn_id"]) == (started["session_id"], started["turn_id"])
    sid = started["session_id"]
    sent = await world.post(f"/v1/sessions/{sid}/messages", {"message": "more", "client_message_id": "m-2"})
    repeat = await world.post(f"/v1/sessions/{sid}/messages", {"message": "more", "client_message_id": "m-2"})
    assert sent["turn_id"] == repeat["turn_id"] and sent["answer"].endswith("(message 2 of this session)")
    view = await world.get(f"/v1/sessions/{sid}?messages_from=1")
    assert view["status"] == "idle" and view["total_messages"] == 4 and view["turn_count"] == 2
    listed = await world.get("/v1/sessions?limit=100")
    assert sid in [s["session_id"] for s in listed["sessions"]]


async def test_bad_bodies_and_unknown_sessions_are_problem_details_naming_the_field(world: World) -> None:
    unknown_field = await world.post("/v1/sessions", {"agent": "worker", "mesage": "typo"}, 400)
    assert "mesage" in unknown_field["detail"] and unknown_field["status"] == 400
    wrong_type = await world.post("/v1/sessions", {"agent": "worker", "message": 5}, 400)
    assert "'message'" in wrong_type["detail"]
    empty = await world.post("/v1/sessions", {"agent": "worker", "message": "   "}, 400)
    assert empty["type"] == "urn:parley:problem:invalid-argument" and empty["field"] == "message"
    missing = await world.post("/v1/sessions/ses_" + "0" * 32 + "/messages", {"message": "hi"}, 404)
    assert missing["type"] == "urn:parley:problem:session-not-found"
    agent = await world.post("/v1/sessions", {"agent": "nobody"}, 404)
    assert "worker" in agent["detail"]


async def test_approve_reject_answer_decline_cancel_and_steer(world: World) -> None:
    parked = await world.post(
        "/v1/sessions", {"agent": "worker", "message": '/tool fixture__bare {"text": "json yes"}'}, 201
    )
    assert parked["status"] == "waiting_for_input"
    sid, iid = parked["session_id"], parked["pending"][0]["id"]
    pending = await world.get("/v1/pending")
    assert iid in [p["interrupt"]["id"] for p in pending["pending"]]
    approved = await world.post(
        f"/v1/sessions/{sid}/approve", {"decisions": [{"interrupt_id": iid, "approved": True}]}
    )
    assert approved["status"] == "answered" and fixture_runs(world.directory, "bare", text="json yes") == 1
    rejected = await world.post(
        f"/v1/sessions/{sid}/messages", {"message": '/tool fixture__bare {"text": "json no"}'}
    )
    decision = {"interrupt_id": rejected["pending"][0]["id"], "approved": False, "reason": "no"}
    done = await world.post(f"/v1/sessions/{sid}/approve", {"decisions": [decision]})
    assert (
        done["tool_calls"][0]["status"] == "rejected"
        and fixture_runs(world.directory, "bare", text="json no") == 0
    )
    asked = await world.post(f"/v1/sessions/{sid}/messages", {"message": "/ask Pick | a | b"})
    question = asked["pending"][0]["id"]
    wrong = await world.post(f"/v1/sessions/{sid}/answer", {"interrupt_id": question, "answer": "c"}, 400)
    assert "a" in wrong["detail"]
    answered = await world.post(f"/v1/sessions/{sid}/answer", {"interrupt_id": question, "answer": "b"})
    assert answered["answer"].endswith("The user answered: b")
    declined_q = (await world.post(f"/v1/sessions/{sid}/messages", {"message": "/ask Again?"}))["pending"][0][
        "id"
    ]
    declined = await world.post(f"/v1/sessions/{sid}/answer", {"interrupt_id": declined_q, "decline": True})
    assert declined["status"] == "answered"
    # The model call is held until the steer is recorded, so the steer meets a running turn.
    held_slow = world.model.hold("slow step")
    slow = await world.post(f"/v1/sessions/{sid}/messages", {"message": "slow step", "wait_seconds": 0})
    assert slow["status"] == "running"
    await held_slow.wait_held()
    outcome: list[dict[str, Any]] = []

    async def steer() -> None:
        outcome.append(
            await world.post(
                f"/v1/sessions/{sid}/steer", {"message": "instead", "wait_seconds": STATE_WINDOW_S * 3}
            )
        )

    async def steer_recorded() -> bool:
        query = "SELECT COUNT(*) FROM queued_messages WHERE session_id = ? AND steer = 1"
        return db_rows(world.db, query, (sid,)) == [(1,)]

    async with anyio.create_task_group() as tg:
        tg.start_soon(steer)
        await eventually(steer_recorded, "the server to record the steer")
        held_slow.release()
    [steered] = outcome
    assert steered["answer"].startswith("You said: instead"), steered
    # This one is held until it is cancelled.
    held_long = world.model.hold("long step")
    long = await world.post(f"/v1/sessions/{sid}/messages", {"message": "long step", "wait_seconds": 0})
    await held_long.wait_held()
    cancelled = await world.post(
        f"/v1/sessions/{sid}/cancel", {"turn_id": long["turn_id"]} if long["turn_id"] else {}
    )
    held_long.release()
    assert cancelled["status"] == "cancelled", cancelled
    closed = await world.post(f"/v1/sessions/{sid}/close", {})
    assert closed["status"] == "closed"
    refused = await world.post(f"/v1/sessions/{sid}/messages", {"message": "still there?"}, 409)
    assert refused["type"] == "urn:parley:problem:session-closed"


def _watched(data: dict[str, Any]) -> bool:
    return dict(data.get("interrupt") or {}).get("arguments") == {"text": "watched"}


async def test_the_owner_wide_stream_shows_a_snapshot_then_every_session_and_its_interrupts(
    world: World,
) -> None:
    seen: list[Frame] = []
    started: dict[str, Any] = {}

    async def start_when_open() -> None:
        started.update(
            await world.post(
                "/v1/sessions", {"agent": "worker", "message": '/tool fixture__bare {"text": "watched"}'}, 201
            )
        )

    async with anyio.create_task_group() as tg:

        def stop(frame: Frame) -> bool:
            seen.append(frame)
            if frame.kind == "snapshot":
                tg.start_soon(start_when_open)
            # Ours: a session that changed within the stream's late slack of its opening (an earlier
            # test's) may show its recent events too.
            return frame.kind == "interrupt_raised" and bool(frame.data) and _watched(frame.data)

        await read_until(world.base + "/v1/events", stop)
    assert seen[0].kind == "snapshot" and isinstance(seen[0].data["pending"], list)
    mine = [f for f in seen if f.data and f.data.get("session_id") == started["session_id"]]
    kinds = [f.kind for f in mine]
    assert kinds[:3] == ["session_created", "message_queued", "turn_started"], kinds
    assert mine[-1].data["interrupt"]["tool"] == "fixture__bare"
    assert all(isinstance(f.id, str) and f.id.startswith("o1.") for f in mine), "positions to resume by"
    # Reconnecting shows the waiting session and its interrupt in the snapshot.
    snapshot = (await read_until(world.base + "/v1/events", lambda f: f.kind == "snapshot"))[-1]
    assert started["session_id"] in [s["session_id"] for s in snapshot.data["sessions"]]
    assert started["pending"][0]["id"] in [p["interrupt"]["id"] for p in snapshot.data["pending"]]


async def test_the_owner_wide_stream_resumes_after_a_reconnect_with_no_gap_and_no_repeat(
    world: World,
) -> None:
    seen: list[Frame] = []
    body = {"agent": "worker", "message": '/tool fixture__bare {"text": "resumed"}', "wait_seconds": 0}
    async with anyio.create_task_group() as tg:

        def stop(frame: Frame) -> bool:
            seen.append(frame)
            if frame.kind == "snapshot":
                tg.start_soon(world.post, "/v1/sessions", body, 201)
            interrupt = dict(frame.data.get("interrupt") or {}) if frame.kind == "interrupt_raised" else {}
            return interrupt.get("arguments") == {"text": "resumed"}

        await read_until(world.base + "/v1/events", stop)
    sid = seen[-1].data["session_id"]
    mine = [f for f in seen if f.data and f.data.get("session_id") == sid and f.kind != "snapshot"]
    # The client goes away after the turn started; the session goes on without it.
    [cut] = [f for f in mine if f.kind == "turn_started"]
    interrupt = mine[-1].data["interrupt"]["id"]
    await world.post(
        f"/v1/sessions/{sid}/approve", {"decisions": [{"interrupt_id": interrupt, "approved": True}]}
    )

    def ended(frame: Frame) -> bool:
        return frame.kind == "turn_ended" and frame.data.get("session_id") == sid

    assert isinstance(cut.id, str)
    resumed = await read_until(world.base + "/v1/events", ended, headers={"Last-Event-ID": cut.id})
    assert "snapshot" not in [f.kind for f in resumed], "a resumed stream sends no new snapshot"
    again = [f.data["seq"] for f in resumed if f.data and f.data.get("session_id") == sid]
    assert again == list(range(cut.data["seq"] + 1, again[-1] + 1)), again
    kinds = [f.kind for f in resumed if f.data and f.data.get("session_id") == sid]
    assert kinds[0] == "model_step" and "interrupt_resolved" in kinds and kinds[-1] == "turn_ended", kinds
    # Resuming at the last frame sends nothing of it again: only what comes after.
    last = resumed[-1].id
    assert isinstance(last, str)
    async with anyio.create_task_group() as tg:
        tg.start_soon(world.post, f"/v1/sessions/{sid}/messages", {"message": "after", "wait_seconds": 0})
        later = await read_until(world.base + "/v1/events", ended, headers={"Last-Event-ID": last})
    seqs = [f.data["seq"] for f in later if f.data and f.data.get("session_id") == sid]
    assert seqs == list(range(resumed[-1].data["seq"] + 1, seqs[-1] + 1)), seqs


async def test_a_bad_last_event_id_on_the_owner_wide_stream_is_a_400_naming_it(world: World) -> None:
    too_many = "_".join(f"{n:032x}-1" for n in range(101))
    for bad in ("42", "o1.12.zz-1", "o1.x.", "o1.1." + too_many):
        async with http_client(timeout=CALL_DEADLINE_S) as http:
            response = await http.get(world.base + "/v1/events", headers={"Last-Event-ID": bad})
        assert response.status_code == 400 and "Last-Event-ID" in response.json()["detail"], bad


async def test_the_owner_wide_streams_snapshot_lists_the_drafts_waiting_for_review(world: World) -> None:
    todos = {"todos": [{"content": "step one"}, {"content": "<b>step two</b>"}]}
    started = await world.post(
        "/v1/sessions", {"agent": "planner", "message": f"/tool write_todos {json.dumps(todos)}"}, 201
    )
    sid = started["session_id"]
    assert started["plan"]["status"] == "draft", started

    async def snapshot() -> dict[str, Any]:
        frames = await read_until(world.base + "/v1/events", lambda f: f.kind == "snapshot")
        return dict(frames[-1].data)

    # The same entry as /v1/pending, so a page shows the inbox from the snapshot alone.
    listed = [d for d in (await world.get("/v1/pending"))["drafts"] if d["session_id"] == sid]
    drafts = [d for d in (await snapshot())["drafts"] if d["session_id"] == sid]
    assert drafts == listed and len(drafts) == 1, (drafts, listed)
    assert drafts[0]["plan"]["revision"] == 1 and drafts[0]["may_decide"] is True
    assert [t["content"] for t in drafts[0]["plan"]["todos"]] == ["step one", "<b>step two</b>"]

    executed = await world.post(f"/v1/sessions/{sid}/plan/execute", {"revision": 1})
    assert executed["plan"]["status"] == "completed", executed
    assert sid not in [d["session_id"] for d in (await snapshot())["drafts"]]


async def test_a_configured_web_app_may_call_v1_from_the_browser_and_no_other_origin(world: World) -> None:
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        preflight = await http.options(
            world.base + "/v1/chat",
            headers={
                "Origin": WEB_APP,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        listed = await http.get(world.base + "/v1/sessions", headers={"Origin": WEB_APP})
        foreign = await http.get(world.base + "/v1/sessions", headers={"Origin": "http://evil.example"})
        mcp = await http.options(
            world.base + "/mcp", headers={"Origin": WEB_APP, "Access-Control-Request-Method": "POST"}
        )
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == WEB_APP
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == WEB_APP
    assert foreign.status_code == 403
    assert "access-control-allow-origin" not in mcp.headers, "/mcp is not opened to web apps"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"agent": "worker", "message": "hi \ud800"}, "message"),
        ({"agent": "worker\udc00", "message": "hi"}, "agent"),
    ],
    ids=["message", "agent"],
)
async def test_a_lone_surrogate_in_a_body_is_a_400_naming_the_field(
    world: World, body: dict[str, Any], field: str
) -> None:
    # json.dumps writes the surrogate as the escape \ud800: valid JSON, text no UTF-8 can hold.
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        answer = await http.post(
            world.base + "/v1/sessions",
            content=json.dumps(body),
            headers={"content-type": "application/json"},
        )
    assert answer.status_code == 400, answer.text
    assert f"'{field}'" in answer.json()["detail"] and "surrogate" in answer.json()["detail"], answer.text


async def test_a_queued_message_is_deleted_once_and_a_bad_id_is_a_400(world: World) -> None:
    parked = await world.post(
        "/v1/sessions", {"agent": "worker", "message": '/tool fixture__bare {"text": "hold the turn"}'}, 201
    )
    sid = parked["session_id"]
    assert parked["status"] == "waiting_for_input", parked
    queued = await world.post(f"/v1/sessions/{sid}/messages", {"message": "later", "wait_seconds": 0})
    qid = queued["queued_message_id"]
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        first = await http.delete(f"{world.base}/v1/sessions/{sid}/queue/{qid}")
        again = await http.delete(f"{world.base}/v1/sessions/{sid}/queue/{qid}")
        bad = await http.delete(f"{world.base}/v1/sessions/{sid}/queue/not-an-id")
    assert first.json() == {"session_id": sid, "queued_message_id": qid, "status": "deleted"}
    assert again.json()["status"] == "already deleted"
    assert bad.status_code == 400 and bad.json()["field"] == "queued_message_id"
    session = await world.get(f"/v1/sessions/{sid}")
    assert session["queued_messages"] == []
    await world.post(f"/v1/sessions/{sid}/close", {})


async def test_a_session_started_while_the_owner_stream_was_away_is_sent_whole_on_resume(
    world: World,
) -> None:
    [snapshot] = [
        f
        for f in await read_until(world.base + "/v1/events", lambda f: f.kind == "snapshot")
        if f.kind == "snapshot"
    ]
    assert isinstance(snapshot.id, str)
    # While no stream is open, a new session runs a whole turn.
    started = await world.post("/v1/sessions", {"agent": "demo", "message": "while you were away"}, 201)
    sid = started["session_id"]

    def ended(frame: Frame) -> bool:
        return frame.kind == "turn_ended" and frame.data.get("session_id") == sid

    resumed = await read_until(world.base + "/v1/events", ended, headers={"Last-Event-ID": snapshot.id})
    assert "snapshot" not in [f.kind for f in resumed]
    seqs = [f.data["seq"] for f in resumed if f.data and f.data.get("session_id") == sid]
    # Every event of the new session, from its first, with no gap.
    assert seqs == list(range(1, seqs[-1] + 1)), seqs
    kinds = [f.kind for f in resumed if f.data and f.data.get("session_id") == sid]
    assert kinds[0] == "session_created" and kinds[-1] == "turn_ended", kinds
