"""Connecting an account at a downstream server from the page at /ui, in a real browser
(Debian's chromium, driven by Playwright): parley with `auth: none` (the local person owns the
sessions) in front of a protected MCP server with `auth: user_oauth`, and the tests' authlib
authorization server. The session's call parks; the inbox shows a Connect card; the person opens
it, allows at the authorization server's consent page, and lands back on the session, whose call
then ran once as them."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect

from parley.runtime.credentials import new_key
from tests.mcp_servers.fixture_server import VISIT_TICKET
from tests.mcp_servers.oauth_protected_server import OAuthProtectedServer, oauth_protected_in_process
from tests.oauth_server import oauth_server
from tests.support import InProcessServer, call, eventually, fixture_calls, fixture_in_process, write_config
from tests.test_e2e_ui import CHROMIUM, CHROMIUM_ARGS, LAPTOP
from tests.test_user_oauth import CLIENT_ID, KEY_ENV, CallsNamedTool, free_port

pytestmark = pytest.mark.anyio

# The browser's checks (skipped without chromium, failed on CI) and expect's timeout come with
# tests/test_e2e_ui.py's import.


@dataclass
class World:
    server: InProcessServer
    tracker: OAuthProtectedServer
    browser: Browser
    pages_log: Path


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory: Path = tmp_path_factory.mktemp("ui_connect")
    port = free_port()
    public_base = f"http://127.0.0.1:{port}"
    with oauth_server() as auth:
        async with (
            oauth_protected_in_process(auth.url, auth.key.public_jwk) as tracker,
            fixture_in_process(directory / "pages.jsonl", protocol="legacy") as pages,
            async_playwright() as playwright,
        ):
            auth.resources.add(tracker.url)
            auth.register(CLIENT_ID, [public_base + "/oauth/callback"], scope="tracker:read")
            config = write_config(
                directory,
                agents={"triage": {"mcp_servers": ["tracker", "pages"]}},
                mcp_servers={
                    "pages": pages,
                    "tracker": {
                        "url": tracker.url,
                        "auth": {"mode": "user_oauth", "client_id": CLIENT_ID, "scopes": ["tracker:read"]},
                    },
                },
                http={"public_url": public_base + "/mcp"},
                credentials={"key_env": KEY_ENV},
            )
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            env = {KEY_ENV: new_key()}
            async with InProcessServer(
                config, http=True, port=port, env=env, model=CallsNamedTool()
            ) as server:
                yield World(server, tracker, browser, directory / "pages.jsonl")
            await browser.close()


async def _page(world: World) -> tuple[BrowserContext, Page, list[str]]:
    """A fresh laptop-sized page, and the script errors it reports."""
    context = await world.browser.new_context(viewport=LAPTOP)  # type: ignore[arg-type]
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    return context, page, errors


async def test_the_owner_connects_from_the_inbox_and_the_call_runs_once(world: World) -> None:
    async with world.server.client() as client:
        arguments = {"project": "from-the-page"}
        outcome = await call(
            client,
            "start_session",
            agent="triage",
            message=f"use tracker__list_issues {json.dumps(arguments)}",
        )
    assert outcome["status"] == "waiting_for_input", outcome
    session_id = outcome["session_id"]

    context, page, errors = await _page(world)
    await page.goto(world.server.base_url + "/ui/#/inbox")
    card = page.locator("#inbox li.decision.authorization_required")
    await expect(card).to_have_count(1)
    await expect(card).to_contain_text("tracker")
    await card.locator("a.connect").click()
    # The authorization server's consent page, then back to the session in parley.
    await expect(page.get_by_role("button", name="Allow")).to_be_visible()
    await page.fill("#subject", "local-person")
    await page.get_by_role("button", name="Allow").click()
    await expect(page).to_have_url(re.compile(re.escape(f"/ui/#/s/{session_id}") + "$"))
    await expect(page.locator("#transcript")).to_contain_text("done")
    calls = [(s.user, s.arguments) for s in world.tracker.calls("list_issues")]
    assert calls == [("local-person", arguments)]
    assert errors == []
    await context.close()


async def test_the_owner_opens_a_page_a_server_asks_for_from_the_inbox_after_seeing_its_host(
    world: World,
) -> None:
    """A server's URL-mode elicitation: the inbox card names the page's host; its link shows the
    question again with "Open <host>"; only that button gets the page's address from parley and
    goes there (here parley's own /healthz, a page on this machine), and the server hears accept."""
    page_url = world.server.base_url + "/healthz"
    host = page_url.split("/")[2]
    async with world.server.client() as client:
        outcome = await call(
            client,
            "start_session",
            agent="triage",
            message=f"use pages__visit {json.dumps({'url': page_url})}",
            wait_seconds=0,
        )
    session_id = outcome["session_id"]

    context, page, errors = await _page(world)
    await page.goto(world.server.base_url + "/ui/#/inbox")
    card = page.locator("#inbox li.decision.question")
    await expect(card).to_have_count(1)
    await expect(card).to_contain_text(f"Page at {host}, asked for by pages")
    await card.get_by_role("link", name=f"Open {host}").click()
    opening = page.get_by_role("group", name="A page to open")
    await expect(opening).to_contain_text("Sign the form there.")
    await opening.get_by_role("button", name=f"Open {host}").click()
    await expect(page).to_have_url(re.compile(re.escape(f"/healthz?{VISIT_TICKET}") + "$"))

    def visits() -> list[str]:
        return [r["arguments"]["action"] for r in fixture_calls(world.pages_log) if r["tool"] == "visit"]

    async def told() -> bool:
        return visits() == ["accept"]

    await eventually(told, "the server to hear that the person opened the page")
    async with world.server.client() as client:
        session = await call(client, "get_session", session_id=session_id)
    assert session["pending"] == [], session
    assert errors == []
    await context.close()
