"""The page for people at /ui, in a real browser: Debian's chromium (/usr/bin/chromium), driven by
Playwright, against parley served over HTTP in the test's process (auth: none) and, for signing
in, one with tokens and one with OAuth.

Sessions are started, answered, steered and cancelled from the page; their answers arrive live
(streamed text from a real-HTTP fake provider, piece by piece); an approval is decided from the
inbox, another rejected with a reason and a question answered in the transcript; a reload in the
middle of a turn shows the turn complete and nothing twice; markup in a message or a tool's
arguments stays text and runs nothing; without authentication, the page's decisions are refused
for an agent that takes decisions only from a person, and the page says so. Screenshots of the
session view and the inbox at laptop and phone widths are written to tests/screenshots/.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from parley.tls import http_client
from tests.auth_support import SigningKey, auth_server, claims
from tests.fake_providers import STALLED_TEXT, serving_fake_providers
from tests.support import (
    CALL_DEADLINE_S,
    FIXTURE_LOG,
    REPO,
    TEST_DEADLINE_S,
    InProcessServer,
    eventually,
    fixture_in_process,
    fixture_runs,
    fixture_server,
    tokens_auth,
    write_config,
)

pytestmark = pytest.mark.anyio

CHROMIUM = Path("/usr/bin/chromium")
# As root (CI), without a GPU or anything the browser would fetch by itself.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-quic",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = REPO / "tests" / "screenshots"
LAPTOP = {"width": 1280, "height": 800}
# Visible elements whose right edge is past the screen's (a phone's page must not scroll sideways;
# what scrolls inside its own box, like a wide table, is fine).
WIDER_THAN_THE_SCREEN = """() => {
  const width = document.documentElement.clientWidth;
  const inScroller = (node) => {
    for (let up = node.parentElement; up; up = up.parentElement) {
      const style = getComputedStyle(up);
      if (['auto', 'scroll', 'hidden'].includes(style.overflowX) && up !== document.body) return true;
    }
    return false;
  };
  return [...document.querySelectorAll('body *')]
    .filter((node) => node.getClientRects().length && node.getBoundingClientRect().right > width + 1)
    .filter((node) => !inScroller(node))
    .map((node) => node.id || node.className || node.tagName)
    .slice(0, 10);
}"""
PHONE = {"width": 390, "height": 844}
MARKUP = '<img src=x onerror="window.__pwned = 1"><script>window.__pwned = 2</script><b>bold</b>'

expect.set_options(timeout=TEST_DEADLINE_S * 1000)

if not CHROMIUM.exists():
    # Skipped on a developer's machine without it; on CI (.ci/run installs it) a missing browser fails.
    WHY = "Debian's chromium is not installed (/usr/bin/chromium): apt-get install chromium"
    if os.environ.get("CI") == "true":
        pytest.fail(WHY, pytrace=False)
    pytest.skip(WHY, allow_module_level=True)


@dataclass
class World:
    server: InProcessServer
    directory: Path
    browser: Browser
    # Uncaught script errors of each page opened (by id(page)).
    script_errors: dict[int, list[str]] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return self.server.base_url

    async def page(self, viewport: dict[str, int] = LAPTOP, base: str | None = None) -> Page:
        """A page of a fresh browser context (its own storage), at /ui; a script error fails the test."""
        context = await self.browser.new_context(viewport=viewport)  # type: ignore[arg-type]
        page = await context.new_page()
        errors = self.script_errors.setdefault(id(page), [])
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto((base or self.base) + "/ui/")
        return page

    async def pending(self) -> list[dict[str, Any]]:
        async with http_client(timeout=CALL_DEADLINE_S) as http:
            response = await http.get(self.base + "/v1/pending")
        return list(response.json()["pending"])


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        # A new browser profile in a temporary folder, gone with the browser.
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        await chromium.close()


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("ui")
    # Not emptied first: the other ui test files write theirs there too, maybe at the same time.
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    async with (
        serving_fake_providers() as fake,
        fixture_in_process(directory / FIXTURE_LOG) as fixture,
    ):
        config = write_config(
            directory,
            agents={
                "worker": {"mcp_servers": ["fixture"], "tools": ["ask_user"]},
                "guarded": {"mcp_servers": ["fixture"], "approver": "human"},
                "claude": {"model": fake.anthropic_model()},
            },
            runtime={"model_retry_backoff_s": 0.1},
            mcp_servers={"fixture": fixture},
            http={"stream_heartbeat_s": 0.2},
        )
        async with InProcessServer(config, http=True, env={"FAKE_PROVIDER_KEY": "sk-fake"}) as server:
            yield World(server, directory, browser)
            assert "Traceback" not in server.log(), server.log()


async def start(page: Page, agent: str, message: str) -> str:
    """Start a session from the page's form; its id (the page opens it)."""
    await expect(page.locator("#new-agent option", has_text=agent)).to_have_count(1)
    await page.select_option("#new-agent", agent)
    await page.fill("#new-message", message)
    # With a session open the URL already names one: wait for another (the new session's).
    before = page.url.rpartition("#/s/")[2] if "#/s/" in page.url else None
    await page.click("#new-session button[type=submit]")
    other = "(?!" + re.escape(before) + "$)" if before else ""
    await expect(page).to_have_url(re.compile(r"#/s/" + other + r"ses_\w+$"))
    return page.url.rpartition("#/s/")[2]


async def compose(page: Page, message: str) -> None:
    await page.fill("#composer-text", message)
    await page.press("#composer-text", "Enter")
    await expect(page.locator("#composer-text")).to_have_value("")


async def shoot(page: Page, name: str) -> None:
    """The page at laptop and phone widths, as tests/screenshots/<name>-laptop.png and -phone.png;
    on the phone nothing may stick out sideways (the page scrolls only down)."""
    await page.set_viewport_size(LAPTOP)  # type: ignore[arg-type]
    await page.screenshot(path=SCREENSHOTS / f"{name}-laptop.png")
    await page.set_viewport_size(PHONE)  # type: ignore[arg-type]
    await page.screenshot(path=SCREENSHOTS / f"{name}-phone.png")
    wider = await page.evaluate(WIDER_THAN_THE_SCREEN)
    assert wider == [], f"{name}: on a phone these stick out of the screen: {wider}"
    await page.set_viewport_size(LAPTOP)  # type: ignore[arg-type]


def no_script_failed(world: World, page: Page) -> None:
    assert world.script_errors[id(page)] == [], world.script_errors[id(page)]


async def test_the_page_is_served_with_a_strict_policy_behind_the_host_guard(world: World) -> None:
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        page = await http.get(world.base + "/ui/")
        module = await http.get(world.base + "/ui/app.js")
        other_host = await http.get(world.base + "/ui", headers={"Host": "evil.example"})
        other_origin = await http.get(world.base + "/ui", headers={"Origin": "http://evil.example"})
        missing = await http.get(world.base + "/ui/../parley.yaml")
        posted = await http.post(world.base + "/ui")
        agents = await http.get(world.base + "/v1/agents")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy and "unsafe" not in policy
    assert "frame-ancestors 'none'" in policy and page.headers["x-content-type-options"] == "nosniff"
    assert '<script type="module" src="app.js">' in page.text and "<script>" not in page.text
    assert module.headers["content-type"].startswith("text/javascript")
    assert "access-control-allow-origin" not in page.headers
    assert (other_host.status_code, other_origin.status_code) == (421, 403)
    assert (missing.status_code, posted.status_code) == (404, 405)
    # What the page's agent picker offers: list_agents over /v1.
    assert {a["name"] for a in agents.json()["agents"]} == {"demo", "worker", "guarded", "claude"}


async def test_a_session_started_on_the_page_answers_live_and_is_steered_and_cancelled(world: World) -> None:
    page = await world.page()
    session_id = await start(page, "demo", "hello from the page")
    transcript = page.locator("#transcript")
    await expect(transcript.locator(".msg.user .text")).to_have_text(["hello from the page"])
    await expect(transcript.locator(".msg.assistant .text")).to_have_text(
        ["You said: hello from the page (message 1 of this session)"]
    )
    await expect(page.locator(f"#session-list li[data-session-id='{session_id}'] .status")).to_have_text(
        "idle"
    )
    await expect(page.locator("#stream-state")).to_have_text("live")
    # The title proposed from the first message names the session in the list and the header.
    await expect(page.locator(f"#session-list li[data-session-id='{session_id}'] .title")).to_have_text(
        "hello from the page"
    )
    await expect(page.locator("#session-title")).to_have_text("hello from the page · demo")

    # A long turn, cancelled from the page; what was sent meanwhile waits, then gets its turn.
    await compose(page, "/sleep 60\nnever answered")
    await expect(page.locator("#session-view")).to_have_attribute("data-status", "running")
    await compose(page, "sent while it ran")
    await expect(page.locator("#queued")).to_contain_text("sent while it ran")
    await page.click("#cancel")
    await expect(transcript.locator(".turn[data-status=cancelled]")).to_have_count(1)
    await expect(transcript.locator(".msg.assistant .text").last).to_have_text(
        "You said: sent while it ran (message 3 of this session)"
    )
    await expect(page.locator("#queued")).to_be_hidden()
    await expect(page.locator("#session-view")).to_have_attribute("data-status", "idle")

    # A turn steered: it stops after its step, and the steer is answered next.
    await compose(page, "/sleep 1\nfirst")
    await expect(page.locator("#session-view")).to_have_attribute("data-status", "running")
    await page.fill("#composer-text", "instead")
    await page.click("#steer")
    await expect(transcript.locator(".msg.assistant .text").last).to_have_text(
        "You said: instead (message 5 of this session)"
    )
    await shoot(page, "session")
    no_script_failed(world, page)


async def test_streamed_text_appears_piece_by_piece_and_a_discarded_attempt_is_dropped(world: World) -> None:
    page = await world.page()
    await start(page, "claude", "stall then echo")
    # The first attempt's text shows while it streams (the provider sends it slowly, then breaks).
    await page.wait_for_function(
        "() => [...document.querySelectorAll('#transcript .msg.assistant.streaming .text')]"
        ".some((n) => n.textContent.length > 0)",
        polling="raf",
        timeout=TEST_DEADLINE_S * 1000,
    )
    await expect(page.locator("#transcript .msg.assistant .text")).to_have_text(["echo: stall then echo"])
    assert STALLED_TEXT not in await page.locator("#transcript").inner_text()
    no_script_failed(world, page)


async def test_an_approval_is_decided_from_the_inbox_and_others_in_the_transcript(world: World) -> None:
    page = await world.page()
    arguments = json.dumps({"text": MARKUP})
    session_id = await start(page, "worker", f"/tool fixture__bare {arguments}")
    await expect(page.locator("#inbox-count")).to_be_visible()
    # A screen reader hears of it once (a polite live region), as it does not see the badge.
    live = page.locator("#live")
    await expect(live).to_have_attribute("aria-live", "polite")
    await expect(live).to_contain_text(re.compile(r"waits? for you in the inbox"))
    await page.click("#nav-inbox")
    card = page.locator(f"#inbox li.decision[data-session-id='{session_id}']")
    await expect(card).to_have_count(1)
    await expect(card.locator(".decision-title code")).to_have_text("fixture__bare")
    # The arguments are shown as the text they are.
    assert json.loads(await card.locator("pre.arguments").inner_text()) == {"text": MARKUP}
    await shoot(page, "inbox")
    await card.locator("button.approve").click()
    await expect(card).to_have_count(0)

    async def ran() -> bool:
        return fixture_runs(world.directory, "bare", text=MARKUP) == 1

    await eventually(ran, "the approved call to run")

    await page.click(f"#session-list li[data-session-id='{session_id}'] a")
    transcript = page.locator("#transcript")
    await expect(transcript.locator(".note.resolved")).to_have_text(["fixture__bare: approved"])
    await expect(transcript.locator(".tool.done")).to_have_count(1)

    # Rejected with a reason, in the transcript's own card.
    await compose(page, '/tool fixture__bare {"text": "not this one"}')
    inline = transcript.locator(".inline-decision li.decision")
    await expect(inline).to_have_count(1)
    await inline.locator("input.reason").fill("not on Fridays")
    await inline.locator("button.reject").click()
    await expect(transcript.locator(".note.resolved").last).to_have_text(
        "fixture__bare: rejected: not on Fridays"
    )
    assert fixture_runs(world.directory, "bare", text="not this one") == 0

    # A question left unanswered leaves the inbox and the transcript when its turn is cancelled.
    await compose(page, "/ask Still there?")
    await expect(page.locator(f"#inbox li.decision[data-session-id='{session_id}']")).to_have_count(1)
    await page.click("#cancel")
    await expect(transcript.locator(".interrupt .note").last).to_have_text("No longer asked: the turn ended.")
    await expect(page.locator(f"#inbox li.decision[data-session-id='{session_id}']")).to_have_count(0)

    # A question, answered with one of its choices.
    await compose(page, "/ask Which colour? | red | blue")
    await transcript.locator(".inline-decision button.choice", has_text="blue").click()
    await expect(transcript.locator(".msg.assistant .text").last).to_contain_text("The user answered: blue")
    assert await page.evaluate("window.__pwned") is None
    assert await page.locator("img").count() == 0
    no_script_failed(world, page)


async def test_a_reload_in_the_middle_of_a_turn_shows_it_complete_and_nothing_twice(world: World) -> None:
    page = await world.page()
    await start(page, "demo", "/sleep 2\nslow answer")
    await expect(page.locator("#session-view")).to_have_attribute("data-status", "running")
    await page.reload()
    transcript = page.locator("#transcript")
    await expect(transcript.locator(".msg.assistant .text")).to_have_text(
        ["You said: slow answer (message 1 of this session)"]
    )
    await expect(transcript.locator(".msg.user .text")).to_have_text(["/sleep 2\nslow answer"])
    await expect(transcript.locator(".note", has_text="started")).to_have_count(1)
    # The stream read after the reload goes on live.
    await compose(page, "and after")
    await expect(transcript.locator(".msg.assistant .text")).to_have_text(
        [
            "You said: slow answer (message 1 of this session)",
            "You said: and after (message 2 of this session)",
        ]
    )
    await expect(transcript.locator(".msg.user")).to_have_count(2)
    no_script_failed(world, page)


async def test_a_broken_stream_resumes_after_the_last_event_it_showed(world: World, tmp_path: Path) -> None:
    config = write_config(tmp_path, http={"stream_heartbeat_s": 0.2})
    async with InProcessServer(config, http=True) as server:
        base = server.base_url
        page = await world.page(base=base)
        resumed_from: list[str | None] = []
        page.on(
            "request",
            lambda request: (
                resumed_from.append(request.headers.get("last-event-id"))
                if request.url.endswith("/events") and "/v1/sessions/" in request.url
                else None
            ),
        )
        session_id = await start(page, "demo", "before the break")
        answers = page.locator("#transcript .msg.assistant .text")
        await expect(answers).to_have_text(["You said: before the break (message 1 of this session)"])
        shown = await page.locator("#transcript").get_attribute("data-last-seq")
    # The server is gone (stopped), so is the stream; the page keeps trying.
    await expect(page.locator("#stream-state")).to_have_text("reconnecting…")
    assert server.url is not None
    port = int(server.url.rpartition(":")[2].removesuffix("/mcp"))
    async with InProcessServer(config, http=True, port=port):
        async with http_client(timeout=CALL_DEADLINE_S) as http:
            sent = await http.post(
                f"{base}/v1/sessions/{session_id}/messages", json={"message": "while the page was away"}
            )
            assert sent.status_code == 200, sent.text
        await expect(answers).to_have_text(
            [
                "You said: before the break (message 1 of this session)",
                "You said: while the page was away (message 2 of this session)",
            ]
        )
        await expect(page.locator("#transcript .msg.user")).to_have_count(2)
        await expect(page.locator("#stream-state")).to_have_text("live")
    assert resumed_from[0] is None and resumed_from[-1] == shown, (resumed_from, shown)
    no_script_failed(world, page)


async def test_markup_in_a_message_is_shown_as_text_and_runs_nothing(world: World) -> None:
    page = await world.page()
    await start(page, "demo", MARKUP)
    transcript = page.locator("#transcript")
    await expect(transcript.locator(".msg.user .text")).to_have_text([MARKUP])
    await expect(transcript.locator(".msg.assistant .text")).to_have_text(
        [f"You said: {MARKUP} (message 1 of this session)"]
    )
    assert await page.evaluate("window.__pwned") is None
    assert await page.locator("img, #app script, #app b").count() == 0
    no_script_failed(world, page)


async def test_without_authentication_the_pages_decisions_are_not_a_persons(world: World) -> None:
    page = await world.page()
    await expect(page.locator("#notice")).to_contain_text("not a person")
    session_id = await start(page, "guarded", '/tool fixture__bare {"text": "a person must say yes"}')
    # The page offers no buttons the server would refuse: it says who decides instead.
    in_transcript = page.locator(f"#transcript li.decision[data-session-id='{session_id}']")
    await expect(in_transcript.locator(".decided-by")).to_contain_text("a person")
    await expect(in_transcript.locator("button")).to_have_count(0)
    await page.click("#nav-inbox")
    await expect(page.locator("#inbox-note")).to_be_visible()
    card = page.locator(f"#inbox li.decision[data-session-id='{session_id}']")
    await expect(card.locator(".decided-by")).to_contain_text("a person, answering where their MCP client")
    await expect(card.locator("button")).to_have_count(0)
    assert session_id in [p["session_id"] for p in await world.pending()]
    assert fixture_runs(world.directory, "bare", text="a person must say yes") == 0
    no_script_failed(world, page)


async def test_a_token_server_asks_for_the_token_and_works_with_it(world: World, tmp_path: Path) -> None:
    token, approver = ("parley_" + secrets.token_urlsafe(24) for _ in range(2))
    config = write_config(
        tmp_path,
        http={"stream_heartbeat_s": 0.2},
        agents={"deployer": {"mcp_servers": ["fixture"], "approvers": {"principals": ["pat"]}}},
        mcp_servers={"fixture": fixture_server(tmp_path / FIXTURE_LOG)},
        auth=tokens_auth({"alice": token, "pat": approver}),
    )
    async with InProcessServer(config, http=True) as server:
        base = server.base_url
        async with http_client(timeout=CALL_DEADLINE_S) as http:
            assert (await http.get(base + "/ui/")).status_code == 200
            assert (await http.get(base + "/v1/sessions")).status_code == 401
            assert (await http.get(base + "/v1/agents")).status_code == 401
        page = await world.page(PHONE, base=base)
        await expect(page.locator("#sign-in")).to_be_visible()
        await expect(page.locator("#sign-in-why")).to_contain_text("bearer token")
        await page.screenshot(path=SCREENSHOTS / "sign-in-phone.png")
        await page.fill("#token", "parley_not-the-token")
        await page.click("#sign-in-form button")
        await expect(page.locator("#sign-in-error")).to_contain_text("The token was refused")
        await page.fill("#token", token)
        await page.click("#sign-in-form button")
        await expect(page.locator("#app")).to_be_visible()
        await expect(page.locator("#notice")).to_be_hidden()
        await page.set_viewport_size(LAPTOP)  # type: ignore[arg-type]
        await start(page, "demo", "hello with a token")
        await expect(page.locator("#transcript .msg.assistant .text")).to_have_text(
            ["You said: hello with a token (message 1 of this session)"]
        )
        # The token lives in this tab's session storage only: no cookie, nothing kept for later.
        assert await page.evaluate("sessionStorage.getItem('parley.token')") == token
        assert await page.evaluate("document.cookie") == ""
        assert await page.evaluate("localStorage.length") == 0
        await page.reload()
        await expect(page.locator("#transcript .msg.assistant")).to_have_count(1)

        # Alice's session waits for an approver: her inbox says who decides, with no buttons.
        async with http_client(timeout=CALL_DEADLINE_S) as http:
            started = await http.post(
                base + "/v1/sessions",
                json={"agent": "deployer", "message": '/tool fixture__bare {"text": "deploy"}'},
                headers={"Authorization": f"Bearer {token}"},
            )
        session_id = started.json()["session_id"]
        await page.click("#nav-inbox")
        card = page.locator(f"#inbox li.decision[data-session-id='{session_id}']")
        await expect(card.locator(".decided-by")).to_have_text(
            "Decided by the approvers of agent 'deployer': pat."
        )
        await expect(card.locator("button")).to_have_count(0)
        await page.click("#sign-out")
        await expect(page.locator("#sign-in")).to_be_visible()
        assert await page.evaluate("sessionStorage.getItem('parley.token')") is None

        # Pat, signed in, finds it in the inbox and decides.
        await page.fill("#token", approver)
        await page.click("#sign-in-form button")
        await page.click("#nav-inbox")
        card = page.locator(f"#inbox li.decision[data-session-id='{session_id}']")
        await expect(card).to_contain_text("alice")
        await card.locator("button.approve").click()
        await expect(card).to_have_count(0)

        async def deployed() -> bool:
            return fixture_runs(tmp_path, "bare", text="deploy") == 1

        await eventually(deployed, "the approver's decision to run the call")
        no_script_failed(world, page)
        log = server.log()
        assert token not in log and approver not in log


async def test_an_oauth_server_takes_a_pasted_access_token_until_it_is_refused(
    world: World, tmp_path: Path
) -> None:
    key = SigningKey.ec()
    public_url = "https://parley.example.test/mcp"
    with auth_server(key) as auth:
        config = write_config(
            tmp_path,
            http={"stream_heartbeat_s": 0.2, "public_url": public_url},
            auth={
                "mode": "oauth",
                "oauth": {
                    "issuer": auth.url,
                    "jwks_url": f"{auth.url}/jwks.json",
                    # Opaque tokens are asked about on every request, so a revoked one stops at once.
                    "introspection": {"url": f"{auth.url}/introspect", "cache_s": 0},
                },
            },
        )
        async with InProcessServer(config, http=True) as server:
            page = await world.page(base=server.base_url)
            await expect(page.locator("#sign-in-why")).to_contain_text("OAuth access tokens")
            expired = key.sign(claims(auth.url, public_url, "ann", exp=int(time.time()) - 600))
            await page.fill("#token", expired)
            await page.click("#sign-in-form button")
            await expect(page.locator("#sign-in-error")).to_contain_text("The token was refused")
            await expect(page.locator("#sign-in-error")).to_contain_text("expired")

            opaque = "opaque-" + secrets.token_urlsafe(16)
            auth.introspected[opaque] = {
                "active": True,
                **claims(auth.url, public_url, "ann"),
                "aud": [public_url],
            }
            await page.fill("#token", opaque)
            await page.click("#sign-in-form button")
            await start(page, "demo", "hello with OAuth")
            await expect(page.locator("#transcript .msg.assistant .text")).to_have_text(
                ["You said: hello with OAuth (message 1 of this session)"]
            )
            # Revoked at the authorization server: the next call is refused and the page asks again.
            auth.introspected[opaque] = {"active": False}
            await page.fill("#composer-text", "still me?")
            await page.press("#composer-text", "Enter")
            await expect(page.locator("#sign-in")).to_be_visible()
            await expect(page.locator("#sign-in-error")).to_contain_text("The token was refused")
            assert await page.evaluate("sessionStorage.getItem('parley.token')") is None
            no_script_failed(world, page)
