"""Managing sessions on the page for people (/ui), in Chromium driven by Playwright (the browser,
fixtures and helpers of tests/test_e2e_ui.py, which skips without /usr/bin/chromium), against
parley over HTTP in the test's process on the demo model.

From the open session's header a person renames it, edits its tags, closes it, and deletes it
after a confirmation step in the page (keeping it is the first choice); a message waiting for its
turn is removed from beside it; the session list is searched by title and filtered by tag, agent
and status, and paged with "Show more". What people saw is fixed: a failed turn shows failed with
its error in the list and the header, the header shows tags and the plan, inbox cards name the
session by its title and agent, an approval's effect is in plain words (its class in a tooltip),
the "New session" form stays small enough for the list to show, and the warning banner takes one
line on a phone. Each change is checked on the page and through /v1; titles and tags are text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from playwright.async_api import Browser, Page, expect

from parley.tls import http_client
from tests.support import CALL_DEADLINE_S, FIXTURE_LOG, InProcessServer, fixture_in_process, write_config
from tests.test_e2e_ui import MARKUP, PHONE, SCREENSHOTS, World, compose, no_script_failed, shoot, start
from tests.test_e2e_ui import browser as browser  # the module's Chromium, a fixture

pytestmark = pytest.mark.anyio

PAGE_SIZE = 20  # the page's list asks for this many sessions at a time (app.js)
TALL_LAPTOP = {"width": 1280, "height": 900}


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("ui_manage")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    async with fixture_in_process(directory / FIXTURE_LOG) as fixture:
        config = write_config(
            directory,
            agents={
                "worker": {"mcp_servers": ["fixture"]},
                "pager": {},
                "planner": {"tools": ["write_todos"], "plan_mode": True},
            },
            mcp_servers={"fixture": fixture},
            runtime={"model_retry_backoff_s": 0.05},
            http={"stream_heartbeat_s": 0.2},
        )
        async with InProcessServer(config, http=True) as server:
            yield World(server, directory, browser)
            assert "Traceback" not in server.log(), server.log()


async def v1(world: World, method: str, path: str, body: dict[str, Any] | None = None) -> httpx2.Response:
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        return await http.request(method, world.base + path, json=body)


async def v1_json(world: World, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = await v1(world, method, path, body)
    assert response.is_success, (response.status_code, response.text)
    return dict(response.json())


async def done(world: World, *pages: Page) -> None:
    """No script failed on `pages`; their contexts are closed (their streams end with them)."""
    for page in pages:
        no_script_failed(world, page)
        await page.context.close()


def item(page: Page, session_id: str) -> Any:
    return page.locator(f"#session-list li[data-session-id='{session_id}']")


async def test_a_session_is_renamed_tagged_closed_and_deleted_from_its_header(world: World) -> None:
    page = await world.page()
    session_id = await start(page, "demo", "manage me")
    await expect(page.locator("#transcript .turn[data-status=answered]")).to_have_count(1)

    await page.click("#rename")
    await expect(page.locator("#rename-input")).to_be_focused()
    await page.fill("#rename-input", MARKUP)
    await page.click("#rename-form button[type=submit]")
    await expect(page.locator("#session-title")).to_have_text(f"{MARKUP} · demo")
    await expect(item(page, session_id).locator(".title")).to_have_text(MARKUP)
    await expect(page.locator("#rename-form")).to_be_hidden()

    await page.click("#edit-tags")
    await page.fill("#tags-input", "billing, #urgent")
    await page.press("#tags-input", "Enter")
    await expect(page.locator("#session-tags .tag")).to_have_text(["#billing", "#urgent"])
    await expect(item(page, session_id).locator(".tags")).to_have_text("#billing #urgent")
    stored = await v1_json(world, "GET", f"/v1/sessions/{session_id}")
    assert (stored["title"], stored["tags"]) == (MARKUP, ["billing", "urgent"])
    await shoot(page, "manage-header")

    await page.click("#close-session")
    await expect(page.locator("#session-status")).to_have_text("closed")
    await expect(item(page, session_id).locator(".status")).to_have_text("closed")
    assert (await v1_json(world, "GET", f"/v1/sessions/{session_id}"))["status"] == "closed"

    # Delete asks first, in the page; keeping it is the first choice and changes nothing.
    await page.click("#delete-session")
    await expect(page.locator("#delete-confirm")).to_be_visible()
    await expect(page.locator("#delete-no")).to_be_focused()
    await page.click("#delete-no")
    await expect(page.locator("#delete-confirm")).to_be_hidden()
    assert (await v1(world, "GET", f"/v1/sessions/{session_id}")).status_code == 200
    await page.click("#delete-session")
    await page.click("#delete-yes")
    await expect(page).to_have_url(f"{world.base}/ui/#/")
    await expect(item(page, session_id)).to_have_count(0)
    assert (await v1(world, "GET", f"/v1/sessions/{session_id}")).status_code == 404
    assert await page.evaluate("window.__pwned") is None
    await done(world, page)


async def test_a_waiting_message_is_removed_from_beside_it(world: World) -> None:
    page = await world.page()
    session_id = await start(page, "demo", "/sleep 60\nstill going")
    await expect(page.locator("#session-view")).to_have_attribute("data-status", "running")
    await compose(page, "take me back")
    await compose(page, "keep me")
    queued = page.locator("#queued li")
    await expect(queued).to_have_count(2)
    await (
        queued.filter(has_text="take me back")
        .get_by_role("button", name="Remove this waiting message")
        .click()
    )
    await expect(queued.locator(".text")).to_have_text(["keep me"])
    stored = await v1_json(world, "GET", f"/v1/sessions/{session_id}")
    assert [q["message"] for q in stored["queued_messages"]] == ["keep me"]

    await page.click("#cancel")
    transcript = page.locator("#transcript")
    await expect(transcript.locator(".msg.assistant .text").last).to_have_text(
        "You said: keep me (message 2 of this session)"
    )
    await expect(transcript.locator(".msg.user .text")).to_have_text(["/sleep 60\nstill going", "keep me"])
    await expect(page.locator("#queued")).to_be_hidden()
    await done(world, page)


async def test_the_session_list_is_searched_filtered_and_paged(world: World) -> None:
    pagers = [
        (await v1_json(world, "POST", "/v1/sessions", {"agent": "pager", "message": f"page {n}"}))[
            "session_id"
        ]
        for n in range(PAGE_SIZE + 1)
    ]
    alpha = (await v1_json(world, "POST", "/v1/sessions", {"agent": "demo", "message": "one"}))["session_id"]
    beta = (await v1_json(world, "POST", "/v1/sessions", {"agent": "worker", "message": "two"}))["session_id"]
    await v1_json(world, "PATCH", f"/v1/sessions/{alpha}", {"title": "Alpha report", "tags": ["blue"]})
    await v1_json(world, "PATCH", f"/v1/sessions/{beta}", {"title": "Beta notes", "tags": ["green"]})
    await v1_json(world, "POST", f"/v1/sessions/{beta}/close", {})

    page = await world.page(TALL_LAPTOP)
    sessions = page.locator("#session-list li")
    await page.select_option("#filter-agent", "pager")
    await expect(sessions).to_have_count(PAGE_SIZE)
    await expect(sessions.locator(".agent")).to_have_text(["pager"] * PAGE_SIZE)
    await page.click("#more-sessions")
    await expect(sessions).to_have_count(PAGE_SIZE + 1)
    await expect(page.locator("#more-sessions")).to_be_hidden()
    listed = {await s.get_attribute("data-session-id") for s in await sessions.all()}
    assert listed == set(pagers)

    await page.select_option("#filter-agent", "")
    await page.fill("#filter-title", "alpha")
    await expect(sessions.locator(".title")).to_have_text(["Alpha report"])
    await page.fill("#filter-title", "")
    await page.fill("#filter-tag", "#green")
    await expect(sessions.locator(".title")).to_have_text(["Beta notes"])
    await page.fill("#filter-tag", "")
    await page.select_option("#filter-status", "closed")
    await expect(sessions).to_have_count(1)
    await expect(item(page, beta)).to_have_count(1)
    await shoot(page, "manage-filter")
    await page.fill("#filter-title", "no such title")
    await expect(sessions).to_have_count(0)
    await expect(page.locator("#session-list-none")).to_be_visible()
    await expect(page.locator("#session-list-empty")).to_be_hidden()
    await done(world, page)


async def test_a_failed_turn_shows_failed_with_its_error_and_the_header_shows_the_plan(world: World) -> None:
    page = await world.page()
    failed = await start(page, "demo", "please fail\n/fail forever")
    await expect(page.locator("#transcript .turn[data-status=failed]")).to_have_count(1)
    await expect(page.locator("#session-failure")).to_contain_text("Last turn failed: ")
    await expect(item(page, failed).locator(".failure")).to_contain_text("Last turn failed: ")
    summary = next(
        s
        for s in (await v1_json(world, "GET", "/v1/sessions?agent=demo"))["sessions"]
        if s["session_id"] == failed
    )
    assert summary["last_error"]
    await expect(page.locator("#session-failure .text")).to_have_text(summary["last_error"])
    await shoot(page, "manage-failed")
    # A reload shows the same; the next turn that answers clears the header's failure.
    await page.reload()
    await expect(page.locator("#session-failure .text")).to_have_text(summary["last_error"])
    await compose(page, "fine now")
    await expect(page.locator("#transcript .turn[data-status=answered]")).to_have_count(1)
    await expect(page.locator("#session-failure")).to_be_hidden()
    await expect(item(page, failed).locator(".failure")).to_have_count(0)
    # The server cleared it too: a reload lists the session without a failure.
    await page.reload()
    await expect(item(page, failed)).to_have_count(1)
    await expect(item(page, failed).locator(".failure")).to_have_count(0)
    sessions = (await v1_json(world, "GET", "/v1/sessions?agent=demo"))["sessions"]
    assert next(s for s in sessions if s["session_id"] == failed)["last_error"] is None

    planned = await start(page, "planner", '/tool write_todos {"todos": [{"content": "look around"}]}')
    await expect(page.locator("#session-plan")).to_have_text("plan to review")
    await expect(item(page, planned).locator(".plan-badge")).to_have_text("plan to review")
    await done(world, page)


async def test_inbox_cards_name_the_session_and_say_the_effect_in_plain_words(world: World) -> None:
    page = await world.page()
    session_id = await start(page, "worker", 'Tidy the shelf\n/tool fixture__bare {"text": "tidy"}')
    await expect(page.locator("#session-title")).to_have_text("Tidy the shelf · worker")
    await page.click("#nav-inbox")
    card = page.locator(f"#inbox li.decision[data-session-id='{session_id}']")
    await expect(card.locator(".decision-session")).to_have_text("Tidy the shelf")
    await expect(card.locator(".decision-agent")).to_have_text(" · worker")
    effect = card.locator(".effect")
    await expect(effect).to_have_text("not classified: may change data; runs once")
    await expect(effect).to_have_attribute("title", "effect: unclassified")
    await shoot(page, "manage-inbox")
    await card.locator("button.approve").click()
    await expect(card).to_have_count(0)

    # A page opened afresh, before its list is read, still names the session on its card.
    await v1_json(
        world,
        "POST",
        f"/v1/sessions/{session_id}/messages",
        {"message": '/tool fixture__bare {"text": "again"}'},
    )
    fresh = await world.page()
    await fresh.goto(world.base + "/ui/#/inbox")
    await expect(fresh.locator(f"#inbox li[data-session-id='{session_id}'] .decision-session")).to_have_text(
        "Tidy the shelf"
    )
    await fresh.locator("#inbox button.approve").click()
    await done(world, page, fresh)


async def test_the_list_stays_in_view_and_the_banner_takes_one_line_on_a_phone(world: World) -> None:
    listed = len((await v1_json(world, "GET", "/v1/sessions?limit=8"))["sessions"])
    for n in range(8 - listed):  # enough to fill the list (run alone, this test makes them)
        await v1_json(world, "POST", "/v1/sessions", {"agent": "demo", "message": f"filler {n}"})
    for viewport, cards in ((TALL_LAPTOP, 4), (PHONE, 3)):
        page = await world.page(viewport)
        await expect(page.locator("#session-list li").first).to_be_visible()
        form = await page.locator("#new-session").bounding_box()
        assert form is not None and form["height"] < 120, form
        # At least this many session cards are in view below the form and the filter.
        shown = await page.evaluate(
            "[...document.querySelectorAll('#session-list li')]"
            ".filter((li) => li.getBoundingClientRect().bottom <= innerHeight).length"
        )
        name = "phone" if viewport is PHONE else "laptop"
        await page.screenshot(path=SCREENSHOTS / f"manage-list-{name}.png")
        assert shown >= cards, (viewport, shown)
        notice = await page.locator("#notice").bounding_box()
        assert notice is not None
        if viewport is PHONE:
            assert notice["height"] < 40, notice  # one line of 13 px text and its padding
        # Using the form opens it up (the agent's description, a taller message box).
        await page.click("#new-message")
        grown = await page.locator("#new-message").bounding_box()
        assert grown is not None and grown["height"] > 60
        await done(world, page)
