"""Signing in to /ui with `auth: oauth` in a real browser (Debian's chromium via Playwright; the
fixtures of tests/test_e2e_ui.py, which skips without /usr/bin/chromium), with parley served
under /parley/ behind a reverse proxy that passes the prefix on.

A person clicks "Sign in", allows at the authorization server (tests/oauth_server.py, authlib:
PKCE S256, `resource`, exact redirect, `iss`) and is back at /parley/ui/ with their sessions.
The token lives in the tab's sessionStorage (no cookie anywhere); the refresh token rotates
before the access token expires; a reload keeps the person signed in; signing out revokes the
refresh token and forgets everything. An answer with another issuer's `iss` or a forged `state`
is refused with the reason, and no code is exchanged. One page session for all of it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from playwright.async_api import Browser, Page, expect

from parley.tls import http_client
from tests.auth_support import bearer, claims
from tests.http_balancer import Balancer
from tests.oauth_server import Misbehaviour, OAuthState
from tests.support import CALL_DEADLINE_S, InProcessServer, eventually
from tests.test_e2e_ui import LAPTOP, SCREENSHOTS, shoot
from tests.test_e2e_ui import browser as browser  # the module's Chromium, a fixture
from tests.test_ui_signin import PREFIX, prefixed_world

pytestmark = pytest.mark.anyio

# Short, so the page refreshes during the test (a second before its end, for a token this short).
ACCESS_TOKEN_S = 2


@dataclass
class Signed:
    server: InProcessServer
    proxy: Balancer
    auth: OAuthState
    browser: Browser

    @property
    def root(self) -> str:
        return self.proxy.url.removesuffix("/mcp")

    @property
    def public_url(self) -> str:
        return self.root + PREFIX + "/mcp"


@pytest.fixture(scope="module")
async def signed(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> AsyncIterator[Signed]:
    async with prefixed_world(tmp_path_factory.mktemp("ui_signin_browser"), strip_prefix=False) as world:
        world.auth.access_token_s = ACCESS_TOKEN_S
        # The page calls the authorization server's token endpoint from the proxy's origin.
        world.auth.cors_origins.add(world.root)
        yield Signed(world.server, world.proxy, world.auth, browser)


async def storage(page: Page) -> dict[str, str]:
    items: dict[str, str] = await page.evaluate("() => Object.fromEntries(Object.entries(sessionStorage))")
    return items


def posts(signed: Signed, path: str) -> list[dict[str, str]]:
    return [r.params for r in signed.auth.requests if r.method == "POST" and r.path == path]


async def allow(page: Page, subject: str = "alice") -> None:
    """Sign in from the page's card, as `subject` at the authorization server."""
    await page.click("#oauth-sign-in-button")
    await expect(page.locator("h1")).to_have_text("Sign in to the test authorization server")
    await page.fill("#subject", subject)
    await page.click("text=Allow")


async def test_a_person_signs_in_sees_their_sessions_stays_signed_in_and_signs_out(signed: Signed) -> None:
    # alice has a session already, started with a token of hers.
    alice = signed.auth.key.sign(claims(signed.auth.url, signed.public_url, "alice"))
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        started = await http.post(
            signed.root + PREFIX + "/v1/sessions",
            json={"agent": "demo", "message": "Quarterly numbers", "wait_seconds": 0},
            headers=bearer(alice),
        )
    assert started.status_code in (200, 201, 202), started.text
    context = await signed.browser.new_context(viewport=LAPTOP)  # type: ignore[arg-type]
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    await page.goto(signed.root + PREFIX + "/ui")
    await expect(page.locator("#oauth-sign-in-button")).to_be_visible()
    await expect(page.locator("#sign-in-form")).to_be_hidden()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    await shoot(page, "sign-in-oauth")

    await allow(page)
    await expect(page.locator("#app")).to_be_visible()
    await expect(page.locator("#session-list")).to_contain_text("Quarterly numbers")
    assert page.url == signed.root + PREFIX + "/ui/"  # the code is gone from the address bar
    kept = await storage(page)
    # The first token, or a refreshed one already (they live two seconds here).
    assert kept["parley.token"] in {t["access_token"] for t in signed.auth.issued}
    assert "parley.signin.flow" not in kept
    assert await context.cookies() == []
    exchange = posts(signed, "/token")[0]
    assert exchange["grant_type"] == "authorization_code" and exchange["resource"] == signed.public_url
    assert exchange["redirect_uri"] == signed.root + PREFIX + "/ui/callback" and exchange["code_verifier"]

    # Before the access token expires the page refreshes it, spending each refresh token once.
    async def rotated_twice() -> bool:
        return len(signed.auth.issued) >= 3

    await eventually(rotated_twice, "the page refreshes its token twice")
    refreshes = [p for p in posts(signed, "/token") if p["grant_type"] == "refresh_token"]
    assert [r["refresh_token"] for r in refreshes[:2]] == [t["refresh_token"] for t in signed.auth.issued[:2]]
    await page.reload()
    await expect(page.locator("#session-list")).to_contain_text("Quarterly numbers")
    grant = json.loads((await storage(page))["parley.signin.grant"])
    assert grant["refresh_token"] in {t["refresh_token"] for t in signed.auth.issued[-2:]}

    await page.click("#sign-out")
    await expect(page.locator("#oauth-sign-in-button")).to_be_visible()
    assert await storage(page) == {}
    revoked = posts(signed, "/revoke")
    assert len(revoked) == 1 and signed.auth.refresh_tokens[revoked[0]["token"]].revoked
    assert errors == []
    await context.close()


async def test_an_answer_from_another_issuer_or_for_another_request_is_refused(signed: Signed) -> None:
    context = await signed.browser.new_context(viewport=LAPTOP)  # type: ignore[arg-type]
    page = await context.new_page()
    await page.goto(signed.root + PREFIX + "/ui/")
    exchanges = len(posts(signed, "/token"))
    cases: list[tuple[Misbehaviour, str]] = [
        ("wrong_iss", "its iss differs"),
        ("no_iss", "its iss differs"),  # the server says it always sends iss
        ("wrong_state", "its state differs"),
    ]
    try:
        for misbehaviour, reason in cases:
            signed.auth.misbehave = misbehaviour
            await allow(page)
            await expect(page.locator("#oauth-sign-in-error")).to_contain_text(reason)
            assert await storage(page) == {}, misbehaviour
    finally:
        signed.auth.misbehave = None
    assert len(posts(signed, "/token")) == exchanges  # no code was exchanged
    await expect(page.locator("#app")).to_be_hidden()
    await context.close()
