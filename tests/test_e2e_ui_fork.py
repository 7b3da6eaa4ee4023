"""Forking from the page for people (/ui), in Chromium driven by Playwright (the browser, fixtures
and helpers of tests/test_e2e_ui.py, which skips without /usr/bin/chromium), against parley over
HTTP in the test's process on the demo model.

Each ended turn offers "Fork from here": it makes a fork of the session up to the end of that
turn and opens it, showing the turns it kept and where it came from; the next message continues
from there, and the original is not changed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, expect

from parley.tls import http_client
from tests.support import CALL_DEADLINE_S, InProcessServer, write_config
from tests.test_e2e_ui import SCREENSHOTS, World, compose, no_script_failed, shoot, start
from tests.test_e2e_ui import browser as browser  # the module's Chromium, a fixture

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("ui_fork")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    config = write_config(directory, http={"stream_heartbeat_s": 0.2})
    async with InProcessServer(config, http=True) as server:
        yield World(server, directory, browser)
        assert "Traceback" not in server.log(), server.log()


async def session(world: World, session_id: str) -> dict[str, Any]:
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        response = await http.get(f"{world.base}/v1/sessions/{session_id}?messages_from=1&messages_limit=200")
    assert response.is_success, response.text
    return dict(response.json())


async def test_fork_from_here_opens_a_fork_that_continues_from_that_turn(world: World) -> None:
    page = await world.page()
    original = await start(page, "demo", "first")
    transcript = page.locator("#transcript")
    await expect(transcript.locator(".turn[data-status=answered]")).to_have_count(1)
    for word in ("second", "third"):
        await compose(page, word)
    await expect(transcript.locator(".turn[data-status=answered]")).to_have_count(3)
    await expect(transcript.locator(".turn button.fork")).to_have_count(3)

    await transcript.locator(".turn").nth(1).locator("button.fork").click()
    await expect(page).not_to_have_url(f"{world.base}/ui/#/s/{original}")
    fork = page.url.rpartition("#/s/")[2]
    assert fork.startswith("ses_") and fork != original
    await expect(transcript.locator(".forked-from")).to_contain_text(f"from {original} at the end of turn 2")
    await expect(transcript.locator(".turn")).to_have_count(2)
    await expect(transcript.locator(".msg.user")).to_have_text(["first", "second"])
    await shoot(page, "fork")

    await compose(page, "another way")
    await expect(transcript.locator(".turn[data-status=answered]")).to_have_count(3)
    await expect(transcript.locator(".msg.assistant").last).to_contain_text("message 3 of this session")

    forked, before = await session(world, fork), await session(world, original)
    assert forked["forked_from"] == {"session_id": original, "turn": 2} and forked["turn_count"] == 3
    assert before["turn_count"] == 3 and [f["session_id"] for f in before["forks"]] == [fork]
    # The link back opens the original, unchanged.
    await transcript.locator(".forked-from a").click()
    await expect(page).to_have_url(f"{world.base}/ui/#/s/{original}")
    await expect(transcript.locator(".msg.user")).to_have_text(["first", "second", "third"])
    no_script_failed(world, page)
