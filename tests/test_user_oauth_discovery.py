"""What parley refuses to discover for a user_oauth server, through the connect link (in-process,
its links on 127.0.0.1): a protected resource metadata document for another resource, an
authorization server whose metadata names another issuer, one without PKCE S256, and one whose
endpoints are plain http to another host. Each time the owner's browser is told why on a 502 page,
nothing is stored, nobody is sent to the authorization server, and the call keeps waiting."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from parley.runtime.credentials import new_key
from parley.server.http import QuietUvicorn
from parley.testing import eventually
from parley.tls import http_client
from tests.support import TEST_DEADLINE_S, InProcessServer, call, db_rows, write_config
from tests.test_user_oauth import KEY_ENV, CallsNamedTool

pytestmark = pytest.mark.anyio

# Each broken server, and what parley says about it.
BROKEN = {
    "other_resource": "is for",
    "other_issuer": "names issuer",
    "no_s256": "PKCE with S256",
    "plain_http": "not https",
}


def _app(base: list[str]) -> Starlette:
    """MCP servers at /{name}/mcp that answer 401, and the metadata each one's flaw is in."""

    async def mcp(request: Request) -> Response:
        name = request.path_params["name"]
        challenge = f'Bearer resource_metadata="{base[0]}/{name}/prm"'
        return Response(status_code=401, headers={"www-authenticate": challenge})

    async def prm(request: Request) -> Response:
        name = request.path_params["name"]
        resource = f"{base[0]}/elsewhere/mcp" if name == "other_resource" else f"{base[0]}/{name}/mcp"
        return JSONResponse({"resource": resource, "authorization_servers": [f"{base[0]}/{name}/as"]})

    async def metadata(request: Request) -> Response:
        name = request.path_params["name"]
        issuer = f"{base[0]}/{name}/as"
        endpoint = "http://auth.example.test/authorize" if name == "plain_http" else f"{issuer}/authorize"
        return JSONResponse(
            {
                "issuer": f"{base[0]}/someone-else" if name == "other_issuer" else issuer,
                "authorization_endpoint": endpoint,
                "token_endpoint": f"{issuer}/token",
                "registration_endpoint": f"{issuer}/register",
                "code_challenge_methods_supported": ["plain"] if name == "no_s256" else ["S256"],
            }
        )

    return Starlette(
        routes=[
            Route("/{name}/mcp", mcp, methods=["GET", "POST", "DELETE"]),
            Route("/{name}/prm", prm),
            Route("/.well-known/oauth-authorization-server/{name}/as", metadata),
        ]
    )


@dataclass
class World:
    server: InProcessServer
    db: Path


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("user_oauth_discovery")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    base = [f"http://127.0.0.1:{listener.getsockname()[1]}"]
    web = QuietUvicorn(uvicorn.Config(_app(base), log_level="warning", lifespan="off"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(web.serve, [listener])

        async def started() -> bool:
            return web.started

        await eventually(started, "the broken metadata server to listen")
        servers = {name: {"url": f"{base[0]}/{name}/mcp", "auth": {"mode": "user_oauth"}} for name in BROKEN}
        config = write_config(
            directory,
            agents={"broken": {"mcp_servers": list(BROKEN)}},
            mcp_servers=servers,
            credentials={"key_env": KEY_ENV},
        )
        async with InProcessServer(config, env={KEY_ENV: new_key()}, model=CallsNamedTool()) as server:
            yield World(server, directory / "parley.db")
        web.should_exit = True
    listener.close()


@pytest.mark.parametrize("name", list(BROKEN))
async def test_a_flawed_discovery_is_refused_with_its_reason_and_nothing_changes(
    world: World, name: str
) -> None:
    async with world.server.client() as client:
        message = f"use {name}__connect_account {json.dumps({})}"
        outcome = await call(client, "start_session", agent="broken", message=message)
    assert outcome["status"] == "waiting_for_input", outcome
    (pending,) = outcome["pending"]
    async with http_client(timeout=TEST_DEADLINE_S, follow_redirects=False) as browser:
        opened = await browser.get(pending["connect_url"])
    assert opened.status_code == 502, opened.text
    assert BROKEN[name] in opened.text, opened.text
    assert "location" not in opened.headers
    assert db_rows(world.db, "SELECT COUNT(*) FROM credentials") == [(0,)]
    started: Any = db_rows(world.db, "SELECT state_digest FROM oauth_flows WHERE server = ?", (name,))
    assert started == [(None,)], started  # no authorization was started
    async with world.server.client() as client:
        session = await call(client, "get_session", session_id=outcome["session_id"])
    assert session["status"] == "waiting_for_input", session
