"""Streamable HTTP under abuse: abandoned MCP sessions do not lock anyone out and expire, a
full server says what to do, slow or endless requests are cut off, the DNS-rebinding guard
compares exactly and covers /healthz, and binding problems are one line with the fix."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx2
import pytest

from tests.auth_support import SigningKey, auth_server, bearer, claims, token_client
from tests.support import (
    INITIALIZE,
    MCP_HEADERS,
    TEST_DEADLINE_S,
    ServerProcess,
    call,
    eventually,
    tokens_auth,
    write_config,
)

pytestmark = pytest.mark.anyio

MAX_SESSIONS = 10
MAX_CONNECTIONS = 30
# More than the SDK's own cap of 2 x max_sessions (the table in front of it evicts at 1 x).
ABANDONED = 5 * MAX_SESSIONS
LIMITS = {
    "max_sessions": MAX_SESSIONS,
    "session_idle_timeout_s": 2.0,
    "max_connections": MAX_CONNECTIONS,
    "header_read_timeout_s": 1.0,
    "body_read_timeout_s": 0.5,
    "keep_alive_timeout_s": 1.0,
}


@pytest.fixture(scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServerProcess]:
    config = write_config(tmp_path_factory.mktemp("limits"), http=LIMITS)
    async with ServerProcess(config, name="limits", http=True) as server:
        yield server
        assert "Traceback" not in server.log(), server.log()


def _url(server: ServerProcess, path: str = "/mcp") -> str:
    return server.base_url + path


def _port(server: ServerProcess) -> int:
    assert server.url is not None
    return int(server.url.rsplit(":", 1)[1].split("/")[0])


async def _open_sessions(server: ServerProcess, token: str | None = None) -> int:
    async with httpx2.AsyncClient(timeout=TEST_DEADLINE_S) as http:
        response = await http.get(_url(server, "/healthz"), headers=bearer(token) if token else None)
    assert response.status_code == 200, response.text
    return int(response.json()["mcp_sessions"])


# ------------------------------------------------------------------ MCP sessions

OAUTH_RESOURCE = "https://parley.example.test/mcp"


@pytest.fixture(scope="module", params=["none", "tokens", "oauth"])
async def abandoning(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, server: ServerProcess
) -> AsyncIterator[tuple[ServerProcess, str | None]]:
    """A server with the session limits in each auth mode, and the token of its one user (who may
    read the full /healthz): with auth on, the SDK binds each transport session to its creator."""
    if request.param == "none":
        yield server, None
        return
    directory = tmp_path_factory.mktemp(f"abandoning_{request.param}")
    # Sessions expire sooner than on the shared server: the test waits for it.
    limits = {**LIMITS, "session_idle_timeout_s": 1.0}
    async with AsyncExitStack() as stack:
        if request.param == "tokens":
            token = "abandoning-user-token-0001"
            config = write_config(
                directory, http=limits, auth=tokens_auth({"alice": token}, ("parley:use", "parley:metrics"))
            )
        else:
            key = SigningKey.ec()
            issuer = stack.enter_context(auth_server(key))
            token = key.sign(claims(issuer.url, OAUTH_RESOURCE, "alice", scope="parley:use parley:metrics"))
            oauth = {"issuer": issuer.url, "jwks_url": f"{issuer.url}/jwks.json"}
            config = write_config(
                directory,
                http={**limits, "public_url": OAUTH_RESOURCE},
                auth={"mode": "oauth", "oauth": oauth},
            )
        authed = await stack.enter_async_context(ServerProcess(config, name=request.param, http=True))
        yield authed, token
        assert "Traceback" not in authed.log(), authed.log()


async def test_abandoned_sessions_do_not_lock_out_a_new_client_and_then_expire(
    abandoning: tuple[ServerProcess, str | None],
) -> None:
    server, token = abandoning
    headers = {**MCP_HEADERS, **(bearer(token) if token else {})}
    statuses: list[int] = []
    async with httpx2.AsyncClient(timeout=TEST_DEADLINE_S) as http:
        # Initialize, then never come back: more than the SDK's own cap (twice max_sessions), so
        # a session parley evicts but the SDK keeps would lock the next client out.
        for _ in range(ABANDONED):
            response = await http.post(_url(server), json=INITIALIZE, headers=headers)
            statuses.append(response.status_code)
    assert set(statuses) == {200}, f"a client was refused while the others sat idle: {set(statuses)}"
    assert await _open_sessions(server, token) <= MAX_SESSIONS

    async with token_client(server.url or "", token) as client:
        outcome = await call(client, "start_session", agent="demo", message="let me in")
        assert outcome["answer"] == "You said: let me in (message 1 of this session)"

    async def expired() -> bool:
        return await _open_sessions(server, token) == 0

    await eventually(expired, "the abandoned sessions to expire")


async def test_when_every_session_is_busy_a_new_one_gets_503_saying_what_to_do(server: ServerProcess) -> None:
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx2.AsyncClient(timeout=TEST_DEADLINE_S))
        for _ in range(MAX_SESSIONS):  # each session holds a GET stream open: busy, not idle
            opened = await http.post(_url(server), json=INITIALIZE, headers=MCP_HEADERS)
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "Accept": "text/event-stream"}
            stream = await stack.enter_async_context(http.stream("GET", _url(server), headers=session))
            assert stream.status_code == 200

        refused = await http.post(_url(server), json=INITIALIZE, headers=MCP_HEADERS)
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        error = refused.json()["error"]
        assert "retry" in error["message"] and "http.max_sessions" in error["message"], error

    # The streams are closed: their sessions are idle again and make room.
    async with server.client() as client:
        assert (await call(client, "list_sessions"))["sessions"] is not None


# ------------------------------------------------------------------ connections


async def test_over_the_connection_cap_a_request_gets_503_saying_what_to_do(server: ServerProcess) -> None:
    port = _port(server)
    idle: list[anyio.abc.SocketStream] = []
    try:
        for _ in range(MAX_CONNECTIONS):
            idle.append(await anyio.connect_tcp("127.0.0.1", port))
        async with httpx2.AsyncClient(timeout=TEST_DEADLINE_S) as http:
            refused = await http.get(_url(server, "/healthz"))
        assert refused.status_code == 503, refused.text
        assert "http.max_connections" in refused.json()["error"]["message"]
    finally:
        for stream in idle:
            await stream.aclose()

    async def served() -> bool:
        async with httpx2.AsyncClient(timeout=TEST_DEADLINE_S) as http:
            return (await http.get(_url(server, "/healthz"))).status_code == 200

    await eventually(served, "the server to serve again once the connections closed")


async def _read_until_closed(stream: anyio.abc.SocketStream) -> bytes:
    received = b""
    with anyio.fail_after(TEST_DEADLINE_S):
        try:
            while True:
                received += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return received


async def test_a_connection_that_never_finishes_its_headers_is_closed(server: ServerProcess) -> None:
    stream = await anyio.connect_tcp("127.0.0.1", _port(server))
    async with stream:
        await stream.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        assert await _read_until_closed(stream) == b""


async def test_a_body_that_never_arrives_gets_408(server: ServerProcess) -> None:
    port = _port(server)
    stream = await anyio.connect_tcp("127.0.0.1", port)
    async with stream:
        await stream.send(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{" % port
        )
        answer = await _read_until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"http.body_read_timeout_s" in answer, answer


# ------------------------------------------------------------------ DNS-rebinding guard


async def test_an_origin_that_only_starts_like_localhost_is_refused(server: ServerProcess) -> None:
    port = _port(server)
    async with httpx2.AsyncClient(timeout=TEST_DEADLINE_S) as http:
        evil = await http.post(
            _url(server),
            json=INITIALIZE,
            headers={**MCP_HEADERS, "Origin": f"http://localhost:{port}.evil.com"},
        )
        assert evil.status_code == 403, evil.text
        own = await http.post(
            _url(server), json=INITIALIZE, headers={**MCP_HEADERS, "Origin": f"http://localhost:{port}"}
        )
        assert own.status_code == 200, own.text


@pytest.mark.parametrize(
    "headers,status",
    [({"Host": "evil.example"}, 421), ({"Origin": "http://evil.example"}, 403)],
    ids=["foreign-host", "foreign-origin"],
)
async def test_healthz_refuses_a_foreign_host_or_origin(
    server: ServerProcess, headers: dict[str, str], status: int
) -> None:
    async with httpx2.AsyncClient(timeout=TEST_DEADLINE_S) as http:
        refused = await http.get(_url(server, "/healthz"), headers=headers)
    assert refused.status_code == status, refused.text
    assert "DNS rebinding" in refused.text


# ------------------------------------------------------------------ binding


@pytest.mark.parametrize("host", ["::1", "[::1]"])
async def test_serving_on_ipv6_loopback_works_and_prints_a_bracketed_url(tmp_path: Path, host: str) -> None:
    async with ServerProcess(write_config(tmp_path), name="ipv6", http=True, host=host) as server:
        assert server.url is not None and server.url.startswith("http://[::1]:"), server.url
        assert "serving MCP at http://[::1]:" in server.log()
        async with server.client() as client:
            assert (await call(client, "start_session", agent="demo", message="v6"))["status"] == "answered"


def test_a_port_in_use_is_one_line_with_the_fix(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PARLEY_DB", None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = str(write_config(tmp_path))
        result = subprocess.run(
            [sys.executable, "-m", "parley", "serve", "--config", config, "--http", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=TEST_DEADLINE_S,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"parley: port {port} is in use; pick another with --port or stop the other server"
    ], result.stderr
    assert not (tmp_path / "parley.db").exists(), "nothing should have started"
