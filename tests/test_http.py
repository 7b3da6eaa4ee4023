"""Streamable HTTP as a user meets it: /healthz, DNS-rebinding protection, the exact /mcp path,
many concurrent sessions, waiting with progress, and callers that give up. parley runs in the
test's process and is served by uvicorn on a loopback socket, through the same HTTP app, limits
and guards as `parley serve --http`; the bind safety check of `parley serve` itself is in
tests/test_e2e_http.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from parley.testing import HeldModel, Hold
from parley.tls import http_client
from tests.support import (
    INITIALIZE,
    MCP_HEADERS,
    TEST_DEADLINE_S,
    InProcessServer,
    call,
    db_rows,
    eventually,
    http_mcp_client,
    write_config,
)

pytestmark = pytest.mark.anyio


# A web app served elsewhere that may call /v1 from the browser (and nothing else).
WEB_APP = "https://app.example.test"


@pytest.fixture(scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[InProcessServer]:
    config = write_config(tmp_path_factory.mktemp("http"), http={"cors_origins": [WEB_APP]})
    # The model holds a turn in its model call for as long as a test needs to see it running.
    async with InProcessServer(config, name="http", http=True, model=HeldModel()) as server:
        yield server


def _hold(server: InProcessServer, word: str) -> Hold:
    """Hold this server's model calls for messages containing `word` until the test releases them."""
    assert isinstance(server.model, HeldModel)
    return server.model.hold(word)


def _base(server: InProcessServer) -> str:
    return server.base_url


async def _health(server: InProcessServer) -> dict[str, Any]:
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        response = await http.get(_base(server) + "/healthz")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return dict(response.json())


def _assert_clean_log(server: InProcessServer) -> None:
    log = server.log()
    assert "already responded" not in log, log
    assert "Traceback" not in log, log


# ------------------------------------------------------------------ /healthz


async def test_healthz_reports_ok_with_integer_counts(server: InProcessServer) -> None:
    health = await _health(server)
    assert health["status"] == "ok"
    for key in ("running_turns", "leased_sessions", "downstream_connections"):
        assert isinstance(health[key], int) and not isinstance(health[key], bool), (key, health)
        assert health[key] >= 0


async def test_healthz_counts_a_running_turn_until_it_ends(server: InProcessServer) -> None:
    async with server.client() as client:
        held = _hold(server, "busy")
        started = await call(client, "start_session", agent="demo", message="busy", wait_seconds=0)
        assert started["status"] == "running"

        async def counted() -> bool:
            return int((await _health(server))["running_turns"]) >= 1

        await eventually(counted, "/healthz to count the running turn")
        held.release()
        done = await call(
            client, "get_session", session_id=started["session_id"], wait_seconds=TEST_DEADLINE_S
        )
        assert done["last_turn"]["status"] == "answered"

    async def released() -> bool:
        return int((await _health(server))["running_turns"]) == 0

    await eventually(released, "/healthz to stop counting the finished turn")


# ------------------------------------------------------------------ the HTTP surface


@pytest.mark.parametrize(
    "headers",
    [{"Host": "evil.example"}, {"Origin": "http://evil.example"}],
    ids=["foreign-host", "foreign-origin"],
)
async def test_requests_from_a_foreign_host_or_origin_are_refused_and_the_server_keeps_serving(
    server: InProcessServer, headers: dict[str, str]
) -> None:
    assert server.url is not None
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        refused = await http.post(server.url, json=INITIALIZE, headers={**MCP_HEADERS, **headers})
    assert 400 <= refused.status_code < 500, (refused.status_code, refused.text)
    assert (await _health(server))["status"] == "ok"
    async with server.client() as client:
        outcome = await call(client, "start_session", agent="demo", message="still here")
        assert outcome["answer"] == "You said: still here (message 1 of this session)"


async def test_a_cors_origin_may_call_v1_but_never_mcp(server: InProcessServer) -> None:
    assert server.url is not None
    origin = {"Origin": WEB_APP}
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        refused = await http.post(server.url, json=INITIALIZE, headers={**MCP_HEADERS, **origin})
        assert refused.status_code == 403, refused.text
        assert "Origin" in refused.text
        listed = await http.get(_base(server) + "/v1/sessions", headers=origin)
        assert listed.status_code == 200, listed.text
        assert listed.headers["access-control-allow-origin"] == WEB_APP


async def test_v1_refuses_a_body_that_is_not_json_with_415_and_starts_nothing(
    server: InProcessServer,
) -> None:
    body = '{"agent": "demo", "message": "sent as text/plain, which a page may post without a preflight"}'
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        before = (await http.get(_base(server) + "/v1/sessions")).json()
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"Content-Type": content_type} if content_type else {}
            refused = await http.post(_base(server) + "/v1/sessions", content=body, headers=headers)
            assert refused.status_code == 415, (content_type, refused.status_code, refused.text)
            assert "application/json" in refused.json()["detail"], refused.text
        assert (await http.get(_base(server) + "/v1/sessions")).json() == before
        sent = await http.post(
            _base(server) + "/v1/sessions",
            content=body,
            headers={"Content-Type": "application/json; charset=utf-8"},
        )
        assert sent.status_code < 300, sent.text


async def test_initialize_posted_to_exactly_slash_mcp_is_served_without_a_redirect(
    server: InProcessServer,
) -> None:
    assert server.url is not None and server.url.endswith("/mcp")
    async with http_client(timeout=TEST_DEADLINE_S, follow_redirects=False) as http:
        response = await http.post(server.url, json=INITIALIZE, headers=MCP_HEADERS)
        assert response.status_code == 200, (response.status_code, response.text)
        assert "mcp-session-id" in response.headers
        assert '"serverInfo"' in response.text
        # End the protocol session this raw request opened.
        await http.delete(server.url, headers={"mcp-session-id": response.headers["mcp-session-id"]})


# ------------------------------------------------------------------ many sessions at once


async def test_fifty_concurrent_sessions_each_keep_their_own_history(tmp_path: Path) -> None:
    # Its own server: a server wedged by this load must not fail the module's other tests too.
    config = write_config(tmp_path)
    outcomes: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}

    async def converse(client: Client, n: int) -> None:
        first = await call(
            client, "start_session", agent="demo", message=f"first from {n}", wait_seconds=TEST_DEADLINE_S
        )
        second = await call(
            client,
            "send_message",
            session_id=first["session_id"],
            message=f"second from {n}",
            wait_seconds=TEST_DEADLINE_S,
        )
        outcomes[n] = (first, second)

    async with InProcessServer(config, name="fifty", http=True) as server:
        async with server.client() as a, server.client() as b, anyio.create_task_group() as tg:
            for n in range(50):
                tg.start_soon(converse, a if n % 2 else b, n)
        log = server.log()

    assert sorted(outcomes) == list(range(50))
    assert len({first["session_id"] for first, _ in outcomes.values()}) == 50
    for n, (first, second) in outcomes.items():
        assert second["session_id"] == first["session_id"]
        assert first["answer"] == f"You said: first from {n} (message 1 of this session)", first
        assert second["answer"] == f"You said: second from {n} (message 2 of this session)", (
            second,
            log[-3000:],
        )


# ------------------------------------------------------------------ waiting and progress


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_short_wait_returns_running_and_progress_arrives_while_waiting(
    server: InProcessServer, mode: str
) -> None:
    async with server.client(mode) as client:
        start = await call(client, "start_session", agent="demo")
        sid = start["session_id"]

        held = _hold(server, f"patient-{mode}")
        sent_progress: list[tuple[float, str | None]] = []

        async def on_sent(progress: float, total: float | None, message: str | None) -> None:
            sent_progress.append((progress, message))

        with anyio.fail_after(TEST_DEADLINE_S):
            sent = await client.call_tool(
                "send_message",
                {"session_id": sid, "message": f"patient-{mode}", "wait_seconds": 1},
                progress_callback=on_sent,
            )
        assert not sent.is_error
        assert sent.structured_content is not None
        assert sent.structured_content["status"] == "running"

        waited_progress: list[tuple[float, str | None]] = []

        async def on_waited(progress: float, total: float | None, message: str | None) -> None:
            waited_progress.append((progress, message))

        async def progress_while_waiting() -> bool:
            return bool(waited_progress)

        results: list[Any] = []

        async def wait_for_the_answer() -> None:
            results.append(
                await client.call_tool(
                    "get_session", {"session_id": sid, "wait_seconds": 10}, progress_callback=on_waited
                )
            )

        with anyio.fail_after(TEST_DEADLINE_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_for_the_answer)
                # The turn ends only once the wait has had progress.
                await eventually(progress_while_waiting, "progress while get_session waits")
                held.release()
        [waited] = results
        assert not waited.is_error
        snapshot = waited.structured_content
        assert snapshot is not None
        assert snapshot["status"] == "idle"
        assert snapshot["last_turn"]["status"] == "answered"
        assert snapshot["last_turn"]["answer"] == f"You said: patient-{mode} (message 1 of this session)"

    for received in (sent_progress, waited_progress):
        assert received, "a waiting call with a progress callback got no progress notification"
        values = [p for p, _ in received]
        assert values == sorted(set(values)), f"progress must strictly increase: {values}"
    messages = [m or "" for _, m in sent_progress + waited_progress]
    assert any("turn" in m for m in messages), messages


# ------------------------------------------------------------------ callers that give up


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_cancelled_wait_leaves_the_turn_running_to_its_answer(
    server: InProcessServer, mode: str
) -> None:
    async with server.client(mode) as client:
        start = await call(client, "start_session", agent="demo")
        sid = start["session_id"]
        db = server.config_path.parent / "parley.db"
        answered = anyio.Event()
        held = _hold(server, f"abandoned-{mode}")

        async def wait_for_the_answer() -> None:
            message = f"abandoned-{mode}"
            await client.call_tool(
                "send_message", {"session_id": sid, "message": message, "wait_seconds": TEST_DEADLINE_S}
            )
            answered.set()

        async def turn_started() -> bool:
            return db_rows(db, "SELECT COUNT(*) FROM turns WHERE session_id = ?", (sid,)) == [(1,)]

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_the_answer)
            await eventually(turn_started, "the message to be taken into a turn")
            # The caller gives up while its turn is in the model call.
            tg.cancel_scope.cancel()
        assert not answered.is_set(), "the wait should still have been running when the caller gave up"
        assert (await call(client, "get_session", session_id=sid))["status"] == "running"
        held.release()
        snapshot = await call(client, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
        assert snapshot["status"] == "idle"
        assert snapshot["last_turn"]["answer"] == f"You said: abandoned-{mode} (message 1 of this session)"
    assert (await _health(server))["status"] == "ok"
    _assert_clean_log(server)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_dropped_connection_leaves_the_turn_running_to_its_answer(
    server: InProcessServer, mode: str
) -> None:
    url = server.url
    assert url is not None
    async with server.client() as client:
        sid = (await call(client, "start_session", agent="demo"))["session_id"]

    waiting = anyio.Event()
    held = _hold(server, f"dropped-{mode}")

    async def wait_then_vanish() -> None:
        async with http_mcp_client(url, mode=mode) as doomed:
            waiting.set()
            await doomed.call_tool(
                "send_message",
                {
                    "session_id": sid,
                    "message": f"dropped-{mode}",
                    "wait_seconds": TEST_DEADLINE_S,
                },
            )

    db = server.config_path.parent / "parley.db"
    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_then_vanish)
        with anyio.fail_after(TEST_DEADLINE_S):
            await waiting.wait()

        async def message_taken() -> bool:
            return db_rows(db, "SELECT COUNT(*) FROM queued_messages WHERE session_id = ?", (sid,)) == [(1,)]

        await eventually(message_taken, "the message to reach the server")
        tg.cancel_scope.cancel()

    async with server.client() as fresh:
        assert (await call(fresh, "get_session", session_id=sid))["status"] == "running"
        held.release()
        snapshot = await call(fresh, "get_session", session_id=sid, wait_seconds=TEST_DEADLINE_S)
        assert snapshot["status"] == "idle"
        assert snapshot["last_turn"]["answer"] == f"You said: dropped-{mode} (message 1 of this session)"
    assert (await _health(server))["status"] == "ok"
    _assert_clean_log(server)
