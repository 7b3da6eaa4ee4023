"""Reviewing plans on the page for people (/ui), in Chromium driven by Playwright (the browser,
fixtures and helpers of tests/test_e2e_ui.py, which skips without /usr/bin/chromium), against
parley over HTTP in the test's process on the demo model.

A plan-mode agent's draft is shown in the session with its todos and listed in the inbox; Execute
plan approves the revision shown and the page follows the executing turn to the completed plan. A
revision written after the page showed the draft is not swapped in: executing the one shown is
refused, the page says why in plain words and shows the new revision. Feedback sent from the page
shows the draft it brings; Discard plan drops it, and a reload shows the same. A call the planning
turn refused shows failed, with why; todos are text, never HTML.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from parley.tls import http_client
from tests.npm_servers import axe_source  # noqa: F401  (a fixture)
from tests.support import CALL_DEADLINE_S, InProcessServer, write_config
from tests.test_e2e_ui import MARKUP, SCREENSHOTS, World, compose, no_script_failed, shoot, start
from tests.test_e2e_ui import browser as browser  # the module's Chromium, a fixture
from tests.test_e2e_ui_a11y import serious

pytestmark = pytest.mark.anyio

PLANNER = {"tools": ["write_todos", "ask_user"], "plan_mode": True}


def todos(*contents: str) -> str:
    """A message the demo model answers by writing these todos as the plan."""
    return "/tool write_todos " + json.dumps({"todos": [{"content": c} for c in contents]})


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("ui_plan")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    config = write_config(directory, agents={"planner": PLANNER}, http={"stream_heartbeat_s": 0.2})
    async with InProcessServer(config, http=True) as server:
        yield World(server, directory, browser)
        assert "Traceback" not in server.log(), server.log()


async def v1(world: World, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        response = await http.request(method, world.base + path, json=body)
    assert response.is_success, (response.status_code, response.text)
    return dict(response.json())


async def draft_shown(page: Page, revision: int, contents: list[str]) -> None:
    plan = page.locator("#plan")
    await expect(plan.locator(".plan-revision")).to_have_text(f"revision {revision} · draft")
    await expect(plan.locator(".todo-content")).to_have_text(contents)
    await expect(plan.locator(".todo[data-status=pending]")).to_have_count(len(contents))


async def test_a_draft_is_listed_opened_executed_and_followed_to_completed(
    world: World,
    axe_source: str,  # noqa: F811
) -> None:
    page = await world.page()
    session_id = await start(page, "planner", todos("step one", "step two"))
    await draft_shown(page, 1, ["step one", "step two"])
    transcript = page.locator("#transcript")
    await expect(transcript.locator(".turn[data-mode=planning] .turn-mode")).to_contain_text("Planning")
    await expect(
        page.locator(f"#session-list li[data-session-id='{session_id}'] .plan-badge")
    ).to_be_visible()
    await shoot(page, "plan-draft")
    assert await serious(page, axe_source) == []

    # The inbox lists it with its todos; its link opens the session, where it is executed.
    await page.click("#nav-inbox")
    card = page.locator(f"#inbox-drafts li.draft[data-session-id='{session_id}']")
    await expect(card.locator(".todo-content")).to_have_text(["step one", "step two"])
    await expect(card.locator("button.execute-plan")).to_be_visible()
    await expect(page.locator("#inbox-count")).to_be_visible()
    await shoot(page, "plan-inbox")
    await card.locator("a.decision-session").click()
    await draft_shown(page, 1, ["step one", "step two"])
    await page.locator("#plan button.execute-plan").click()

    # The executing turn (the demo model completes every todo) is followed live.
    plan = page.locator("#plan")
    await expect(plan).to_have_attribute("data-status", "completed")
    await expect(plan.locator(".todo[data-status=completed] .todo-content")).to_have_text(
        ["step one", "step two"]
    )
    await expect(plan.locator("button")).to_have_count(0)
    await expect(transcript.locator(".note.plan-approved")).to_have_text(
        "Revision 1 of the plan was approved by local; the agent carries it out."
    )
    await expect(transcript.locator(".turn[data-mode=executing] .turn-mode")).to_contain_text("approved plan")
    assert (await v1(world, "GET", f"/v1/sessions/{session_id}"))["plan"]["status"] == "completed"
    await page.click("#nav-inbox")
    await expect(card).to_have_count(0)
    no_script_failed(world, page)


async def test_a_revision_written_meanwhile_is_refused_then_shown_and_feedback_and_discard_work(
    world: World,
) -> None:
    page = await world.page()
    refused_call = '/tool durable_wait {"duration_seconds": 1}'
    session_id = await start(page, "planner", refused_call + "\n" + todos(MARKUP, "step two"))
    await draft_shown(page, 1, [MARKUP, "step two"])
    failed = page.locator("#transcript .turn[data-mode=planning] .tool.failed")
    await expect(failed.locator(".tool-status")).to_have_text(" failed")
    await expect(failed.locator(".result")).to_contain_text("not run: this is a planning turn")
    await expect(failed.locator(".result")).to_be_visible()

    # Feedback from elsewhere revises the draft: the page says so, and keeps the one shown.
    revised = await v1(world, "POST", f"/v1/sessions/{session_id}/messages", {"message": todos("one", "two")})
    assert revised["plan"]["revision"] == 2, revised
    plan = page.locator("#plan")
    await expect(plan.locator(".plan-newer")).to_contain_text("revision 2")
    await draft_shown(page, 1, [MARKUP, "step two"])
    await plan.locator("button.execute-plan").click()
    await expect(plan.locator(".error")).to_contain_text(
        "the agent changed the plan while you were reading it"
    )
    await draft_shown(page, 2, ["one", "two"])
    await shoot(page, "plan-refused")
    after = await v1(world, "GET", f"/v1/sessions/{session_id}")
    assert (after["plan"]["status"], after["plan"]["revision"], after["turn_count"]) == ("draft", 2, 2)

    # Feedback sent here brings its draft into view; Discard plan drops it.
    await compose(page, todos("only step"))
    await draft_shown(page, 3, ["only step"])
    await plan.locator("button.discard-plan").click()
    await expect(plan).to_be_hidden()
    await expect(page.locator("#transcript .note", has_text="discarded")).to_have_count(1)
    assert (await v1(world, "GET", f"/v1/sessions/{session_id}"))["plan"]["status"] == "cleared"
    # A reload tells the same story, with no draft to act on.
    await page.reload()
    await expect(page.locator("#transcript .turn[data-mode=planning]")).to_have_count(3)
    await expect(page.locator("#transcript .note", has_text="discarded")).to_have_count(1)
    await expect(failed.locator(".result")).to_be_visible()
    await expect(plan).to_be_hidden()
    assert await page.evaluate("window.__pwned") is None
    assert await page.locator("img, #app b").count() == 0
    no_script_failed(world, page)
