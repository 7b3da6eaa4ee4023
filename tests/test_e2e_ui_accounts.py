"""The page's "Connected accounts" view (/ui#/accounts) and `/v1/accounts` behind it, in
Chromium driven by Playwright (the browser and helpers of tests/test_e2e_ui.py), against parley
over HTTP in the test's process with static tokens. Each person sees only their own accounts,
never a token, and revokes one behind a confirmation step; nobody else's is touched, and the
revocation is audited. The credentials are sealed into the real store with a real key, as the
OAuth flow stores them."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator

import httpx2
import pytest
from playwright.async_api import Browser, Page, expect

from parley.core.credentials import CredentialKey
from parley.runtime.credentials import CredentialVault, Keyring
from parley.tls import http_client
from tests.auth_support import bearer
from tests.npm_servers import axe_source  # noqa: F401  (a fixture)
from tests.support import InProcessServer, db_rows, tokens_auth, write_config
from tests.test_e2e_ui import SCREENSHOTS, World, no_script_failed, shoot
from tests.test_e2e_ui import browser as browser  # the module's Chromium, a fixture
from tests.test_e2e_ui_a11y import serious

pytestmark = pytest.mark.anyio

TOKENS = {name: "parley_" + secrets.token_urlsafe(24) for name in ("alice", "bob")}
ISSUER = "https://auth.example.test"
ACCESS = {(p, s): f"at-{p}-{s}-" + secrets.token_urlsafe(16) for p in TOKENS for s in ("tracker", "wiki")}


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("ui_accounts")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    config = write_config(directory, auth=tokens_auth(TOKENS))
    async with InProcessServer(config, http=True) as server:
        vault = CredentialVault(server.parley.app.store, Keyring(secrets.token_bytes(32)))
        for (principal, service), access in ACCESS.items():
            await vault.save(
                CredentialKey(principal, service, ISSUER),
                access=access,
                refresh="rt-" + access,
                expires_at=2_000_000_000.0,
                scopes=("issues:read", "issues:write") if service == "tracker" else ("pages:read",),
            )
        yield World(server, directory, browser)
        assert "Traceback" not in server.log(), server.log()


async def accounts_of(world: World, who: str) -> httpx2.Response:
    async with http_client(timeout=30) as http:
        return await http.get(world.base + "/v1/accounts", headers=bearer(TOKENS[who]))


async def signed_in(world: World, who: str, axe: str | None = None) -> Page:
    page = await world.page()
    if axe is not None:  # the sign-in card, before anyone signs in
        await expect(page.locator("#sign-in")).to_be_visible()
        assert await serious(page, axe) == []
    await page.fill("#token", TOKENS[who])
    await page.click("#sign-in-form button")
    await expect(page.locator("#app")).to_be_visible()
    await page.click("#nav-accounts")
    return page


async def test_each_person_lists_only_their_own_accounts_and_no_token(world: World) -> None:
    listed = await accounts_of(world, "bob")
    assert listed.status_code == 200
    accounts = listed.json()["accounts"]
    assert [(a["server"], a["issuer"]) for a in accounts] == [("tracker", ISSUER), ("wiki", ISSUER)]
    assert accounts[0]["scopes"] == ["issues:read", "issues:write"] and accounts[0]["expires_at"]
    for token in ACCESS.values():
        assert token not in listed.text
    async with http_client(timeout=30) as http:
        anonymous = await http.get(world.base + "/v1/accounts")
        nobody_there = await http.delete(world.base + "/v1/accounts/calendar", headers=bearer(TOKENS["bob"]))
    assert anonymous.status_code == 401
    assert nobody_there.status_code == 400 and "no connected account for 'calendar'" in nobody_there.text


async def test_a_person_revokes_their_own_account_after_confirming(
    world: World,
    axe_source: str,  # noqa: F811
) -> None:
    page = await signed_in(world, "alice", axe_source)
    rows = page.locator("#account-rows tr")
    await expect(rows).to_have_count(2)
    tracker = page.locator("#account-rows tr[data-server=tracker]")
    await expect(tracker).to_contain_text("issues:read issues:write")
    await shoot(page, "accounts")
    assert await serious(page, axe_source) == []
    await tracker.get_by_role("button", name="Revoke your account for tracker").click()
    # Nothing happens until the person confirms; "Keep" would put the button back.
    assert (await accounts_of(world, "alice")).json()["accounts"][0]["server"] == "tracker"
    await tracker.get_by_role("button", name="Revoke", exact=True).click()
    await expect(page.locator("#accounts-note")).to_have_text("Revoked your account for tracker.")
    await expect(rows).to_have_count(1)
    await expect(page.locator("#account-rows tr[data-server=wiki]")).to_be_visible()
    assert [a["server"] for a in (await accounts_of(world, "alice")).json()["accounts"]] == ["wiki"]
    # bob's tracker account is untouched, and the act is in the audit trail as alice's.
    assert [a["server"] for a in (await accounts_of(world, "bob")).json()["accounts"]] == ["tracker", "wiki"]
    trail = db_rows(
        world.directory / "parley.db",
        "SELECT principal, target, detail FROM audit WHERE action = 'revoke_credentials'",
    )
    assert [(p, t) for p, t, _ in trail] == [("alice", "alice")] and json.loads(trail[0][2]) == {
        "server": "tracker",
        "revoked": 1,
    }
    no_script_failed(world, page)
