"""Connecting an account with no public URL (parley over stdio, say): the connect link and the
OAuth callback are served by parley on 127.0.0.1, as command line OAuth clients do. In the test's
process, with the client bound in memory (what stdio carries), against the tests' authlib
authorization server (dynamic registration of the loopback redirect URI) and a protected MCP
server that records whose token each call carried."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest

from parley.cli import main as parley_main
from parley.core.scopes import LOCAL
from parley.runtime.credentials import new_key
from parley.tls import http_client
from tests.mcp_servers.oauth_protected_server import OAuthProtectedServer, oauth_protected_in_process
from tests.oauth_server import OAuthState, oauth_server
from tests.support import TEST_DEADLINE_S, InProcessServer, call, eventually, write_config
from tests.test_user_oauth import KEY_ENV, CallsNamedTool

pytestmark = pytest.mark.anyio


@dataclass
class World:
    server: InProcessServer
    wiki: OAuthProtectedServer
    auth: OAuthState


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory: Path = tmp_path_factory.mktemp("user_oauth_loopback")
    with oauth_server() as auth:
        auth.open_registration = True
        async with oauth_protected_in_process(auth.url, auth.key.public_jwk) as wiki:
            auth.resources.add(wiki.url)
            config = write_config(
                directory,
                agents={"reader": {"mcp_servers": ["wiki"]}},
                mcp_servers={"wiki": {"url": wiki.url, "auth": {"mode": "user_oauth"}}},
                credentials={"key_env": KEY_ENV},
            )
            async with InProcessServer(config, env={KEY_ENV: new_key()}, model=CallsNamedTool()) as server:
                yield World(server, wiki, auth)
                assert "Traceback" not in server.log(), server.log()


def _browser() -> httpx2.AsyncClient:
    return http_client(timeout=TEST_DEADLINE_S, follow_redirects=False)


async def _parked(world: World, project: str) -> tuple[str, str]:
    """A session whose call parks for want of the local person's account (revoked first, so
    each test starts unconnected)."""
    argv = ["credentials", "revoke", LOCAL, "wiki", "--config", str(world.server.config_path)]
    assert await anyio.to_thread.run_sync(parley_main, argv) == 0
    async with world.server.client() as client:
        message = f"use wiki__list_issues {json.dumps({'project': project})}"
        outcome = await call(client, "start_session", agent="reader", message=message)
    assert outcome["status"] == "waiting_for_input", outcome
    (pending,) = outcome["pending"]
    assert pending["kind"] == "authorization_required" and pending["server"] == "wiki", pending
    link = urlsplit(pending["connect_url"])
    assert link.scheme == "http" and link.hostname == "127.0.0.1" and link.path.startswith("/connect/flow_")
    assert world.auth.url not in str(outcome)
    return outcome["session_id"], pending["connect_url"]


async def test_the_link_on_127_0_0_1_connects_the_account_and_the_call_runs_once(world: World) -> None:
    session_id, link = await _parked(world, "by-loopback")
    async with _browser() as browser:
        opened = await browser.get(link)
        assert opened.status_code == 302, opened.text
        authorize_url = opened.headers["location"]
        # parley registered itself for the loopback callback, never a metadata document.
        query = dict(p.split("=", 1) for p in urlsplit(authorize_url).query.split("&"))
        assert query["client_id"].startswith("dyn-"), query
        assert urlsplit(link).netloc in httpx2.URL(authorize_url).params["redirect_uri"]
        assert (await browser.get(authorize_url)).status_code == 200
        allowed = await browser.post(authorize_url, data={"subject": "local-person"})
        assert allowed.status_code == 302, allowed.text
        back = await browser.get(allowed.headers["location"])
    assert back.status_code == 200 and "close this tab" in back.text, back.text

    async def ran() -> bool:
        return any(s.arguments == {"project": "by-loopback"} for s in world.wiki.calls("list_issues"))

    await eventually(ran, "the parked call to run after the callback")
    calls = [(s.user, s.arguments) for s in world.wiki.calls("list_issues")]
    assert calls == [("local-person", {"project": "by-loopback"})]
    async with world.server.client() as client:
        session: dict[str, Any] = await call(client, "get_session", session_id=session_id)
    assert session["pending"] == [], session


async def test_a_link_without_its_code_is_refused_and_nothing_starts(world: World) -> None:
    _, link = await _parked(world, "forged")
    forged = link.split("?", 1)[0] + "?code=" + "0" * 64
    async with _browser() as browser:
        for attempt in (forged, link.split("?", 1)[0]):
            refused = await browser.get(attempt)
            assert refused.status_code == 403, refused.text
            assert "not one parley made" in refused.text
        # The real link still works: the refusals changed nothing.
        opened = await browser.get(link)
    assert opened.status_code == 302 and opened.headers["location"].startswith(world.auth.url)
