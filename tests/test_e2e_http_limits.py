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
from typing import Any

import anyio
import pytest

from parley.tls import http_client
from tests.auth_support import SigningKey, auth_server, bearer, claims, token_client
from tests.support import (
    INITIALIZE,
    MCP_HEADERS,
    TEST_DEADLINE_S,
    ServerProcess,
    call,
    eventually,
    read_response,
    read_until_closed,
    tokens_auth,
    write_config,
)

pytestmark = pytest.mark.anyio

MAX_SESSIONS = 10
MAX_CONNECTIONS = 30
PROXY = "127.0.0.9"
PER_ADDRESS = 20
# More than the SDK's own cap of 2 x max_sessions (the table in front of it evicts at 1 x).
ABANDONED = 5 * MAX_SESSIONS
LIMITS = {
    "max_sessions": MAX_SESSIONS,
    "session_idle_timeout_s": 2.0,
    "max_connections": MAX_CONNECTIONS,
    "header_read_timeout_s": 1.0,
    "body_read_timeout_s": 0.5,
    "keep_alive_timeout_s": 1.0,
    # Behind this (pretend) proxy, unauthenticated requests count against their X-Forwarded-For address.
    "trusted_proxies": [PROXY],
    "max_connections_per_address": PER_ADDRESS,
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
    async with http_client(timeout=TEST_DEADLINE_S) as http:
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
    async with http_client(timeout=TEST_DEADLINE_S) as http:
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
        http = await stack.enter_async_context(http_client(timeout=TEST_DEADLINE_S))
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
        for i in range(MAX_CONNECTIONS):  # from two addresses, each under its own cap
            idle.append(await anyio.connect_tcp("127.0.0.1", port, local_host=f"127.0.0.{2 + i % 2}"))
        async with http_client(timeout=TEST_DEADLINE_S) as http:
            refused = await http.get(_url(server, "/healthz"))
        assert refused.status_code == 503, refused.text
        assert "http.max_connections" in refused.json()["error"]["message"]
    finally:
        for stream in idle:
            await stream.aclose()

    async def served() -> bool:
        async with http_client(timeout=TEST_DEADLINE_S) as http:
            return (await http.get(_url(server, "/healthz"))).status_code == 200

    await eventually(served, "the server to serve again once the connections closed")


async def test_a_connection_that_never_finishes_its_headers_is_closed(server: ServerProcess) -> None:
    stream = await anyio.connect_tcp("127.0.0.1", _port(server))
    async with stream:
        await stream.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        assert await read_until_closed(stream) == b""


async def test_a_body_that_never_arrives_gets_408(server: ServerProcess) -> None:
    port = _port(server)
    stream = await anyio.connect_tcp("127.0.0.1", port)
    async with stream:
        await stream.send(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{" % port
        )
        answer = await read_until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"http.body_read_timeout_s" in answer, answer


async def test_behind_a_trusted_proxy_unauthenticated_requests_count_per_forwarded_address(
    server: ServerProcess,
) -> None:
    def forwarded(client: str) -> tuple[str, ...]:
        return (f"X-Forwarded-For: {client}",)

    async with AsyncExitStack() as held:
        for _ in range(PER_ADDRESS):  # all through the proxy, for one client behind it
            stream = await _send_head(server, EVENTS, source=PROXY, headers=forwarded("203.0.113.7"))
            assert (await read_response(await held.enter_async_context(stream)))[0] == 200
        same = await held.enter_async_context(
            await _send_head(server, EVENTS, source=PROXY, headers=forwarded("203.0.113.7"))
        )
        status, answer = await read_response(same)
        assert status == 429, answer
        assert b"http.max_connections_per_address" in answer, answer
        other = await held.enter_async_context(
            await _send_head(server, EVENTS, source=PROXY, headers=forwarded("203.0.113.8"))
        )
        assert (await read_response(other))[0] == 200


# ------------------------------------------------------------------ DNS-rebinding guard


async def test_an_origin_that_only_starts_like_localhost_is_refused(server: ServerProcess) -> None:
    port = _port(server)
    async with http_client(timeout=TEST_DEADLINE_S) as http:
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
    async with http_client(timeout=TEST_DEADLINE_S) as http:
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


async def test_a_server_bound_to_another_loopback_address_answers_that_host(tmp_path: Path) -> None:
    async with ServerProcess(write_config(tmp_path), name="loopback2", http=True, host="127.0.0.2") as server:
        assert server.url is not None and server.url.startswith("http://127.0.0.2:"), server.url
        async with http_client(timeout=TEST_DEADLINE_S) as http:
            health = await http.get(_url(server, "/healthz"))  # Host: 127.0.0.2:PORT
            assert health.status_code == 200, health.text
            origin = {"Origin": server.base_url}
            assert (await http.get(_url(server, "/healthz"), headers=origin)).status_code == 200


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


# ------------------------------------------------------------------ one caller cannot lock out others

FAIR_MAX_CONNECTIONS = 10
FAIR: dict[str, Any] = {
    "max_connections": FAIR_MAX_CONNECTIONS,
    "connection_reserve": 2,
    "max_connections_per_principal": 4,
    "max_streams_per_principal": 2,
    "max_connections_per_address": 6,
    "header_read_timeout_s": TEST_DEADLINE_S,
    # Long enough that a body refused before it is read cannot be mistaken for one timed out.
    "body_read_timeout_s": TEST_DEADLINE_S,
}
ALICE, BOB = "fair-alice-token-0001", "fair-bob-token-0001"


@pytest.fixture(scope="module")
async def fair(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServerProcess]:
    config = write_config(
        tmp_path_factory.mktemp("fair"), http=FAIR, auth=tokens_auth({"alice": ALICE, "bob": BOB})
    )
    async with ServerProcess(config, name="fair", http=True) as server:
        yield server
        assert "Traceback" not in server.log(), server.log()


async def _send_head(
    server: ServerProcess,
    request_line: str,
    token: str | None = None,
    source: str = "127.0.0.1",
    headers: tuple[str, ...] = (),
) -> anyio.abc.SocketStream:
    """A connection from `source` that has sent a request's headers (and nothing of its body)."""
    port = _port(server)
    stream = await anyio.connect_tcp("127.0.0.1", port, local_host=source)
    lines = [request_line, f"Host: 127.0.0.1:{port}", *headers]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    await stream.send(("\r\n".join(lines) + "\r\n\r\n").encode())
    return stream


EVENTS = "GET /v1/events HTTP/1.1"
TRICKLED_POST = "POST /v1/sessions HTTP/1.1"
BODY_FOLLOWS = ("Content-Type: application/json", "Content-Length: 100000")


async def test_a_principal_at_its_stream_cap_gets_429_while_others_and_healthz_are_served(
    fair: ServerProcess,
) -> None:
    async with AsyncExitStack() as held:
        for _ in range(FAIR["max_streams_per_principal"]):
            stream = await held.enter_async_context(await _send_head(fair, EVENTS, ALICE))
            assert (await read_response(stream))[0] == 200
        refused = await held.enter_async_context(await _send_head(fair, EVENTS, ALICE))
        status, answer = await read_response(refused)
        assert status == 429, answer
        assert b"retry-after: 1" in answer.lower(), answer
        assert b"http.max_streams_per_principal" in answer, answer
        bobs = await held.enter_async_context(await _send_head(fair, EVENTS, BOB))
        assert (await read_response(bobs))[0] == 200
        async with http_client(timeout=TEST_DEADLINE_S) as http:
            assert (await http.get(_url(fair, "/healthz"))).status_code == 200


async def test_a_principal_at_its_request_cap_gets_429_saying_which_limit(fair: ServerProcess) -> None:
    async with AsyncExitStack() as held:
        # Four requests in flight: two event streams and two bodies still arriving.
        for line, extra in [
            (EVENTS, ()),
            (EVENTS, ()),
            (TRICKLED_POST, BODY_FOLLOWS),
            (TRICKLED_POST, BODY_FOLLOWS),
        ]:
            stream = await held.enter_async_context(await _send_head(fair, line, ALICE, "127.0.0.5", extra))
            if line == EVENTS:
                assert (await read_response(stream))[0] == 200
        async with http_client(timeout=TEST_DEADLINE_S) as http:

            async def alice_refused() -> bool:
                return (await http.get(_url(fair, "/v1/sessions"), headers=bearer(ALICE))).status_code == 429

            await eventually(alice_refused, "alice's fifth request to be refused")
            refused = await http.get(_url(fair, "/v1/sessions"), headers=bearer(ALICE))
            assert "http.max_connections_per_principal" in refused.json()["detail"], refused.text
            assert refused.headers["retry-after"] == "1"
            assert (await http.get(_url(fair, "/v1/sessions"), headers=bearer(BOB))).status_code == 200


async def test_one_address_cannot_hold_every_connection_and_healthz_keeps_a_reserve(
    fair: ServerProcess,
) -> None:
    port = _port(fair)
    per_address = FAIR["max_connections_per_address"]
    async with AsyncExitStack() as held:
        for _ in range(per_address):  # idle connections that never send a request
            await held.enter_async_context(await anyio.connect_tcp("127.0.0.1", port, local_host="127.0.0.3"))
        over = await held.enter_async_context(
            await anyio.connect_tcp("127.0.0.1", port, local_host="127.0.0.3")
        )
        answer = await read_until_closed(over)
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert b"http.max_connections_per_address" in answer, answer

        # Another address takes what is left for ordinary requests.
        ordinary = FAIR_MAX_CONNECTIONS - FAIR["connection_reserve"]
        for _ in range(ordinary - per_address):
            await held.enter_async_context(await anyio.connect_tcp("127.0.0.1", port, local_host="127.0.0.4"))
        async with http_client(timeout=TEST_DEADLINE_S) as http:

            async def full() -> bool:
                return (await http.get(_url(fair, "/v1/sessions"), headers=bearer(BOB))).status_code == 503

            await eventually(full, "an ordinary request to be refused at the connection cap")
            health = await http.get(_url(fair, "/healthz"))
            assert health.status_code == 200, health.text


async def test_an_unauthenticated_body_is_refused_401_before_it_is_sent(fair: ServerProcess) -> None:
    for token in (None, "not-a-token-of-this-server"):
        stream = await _send_head(
            fair,
            "POST /mcp HTTP/1.1",
            token,
            headers=(*BODY_FOLLOWS, "Accept: application/json, text/event-stream"),
        )
        async with stream:
            await stream.send(b"{")  # and the rest never comes
            answer = await read_until_closed(stream)  # closed: it holds no slot
        assert answer.startswith(b"HTTP/1.1 401"), answer
        assert b"www-authenticate: bearer" in answer.lower(), answer
