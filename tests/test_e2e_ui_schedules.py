"""The page's "Schedules" view (/ui#/schedules), in Chromium driven by Playwright (the browser and
helpers of tests/test_e2e_ui.py, which skips without /usr/bin/chromium), against parley over HTTP
in the test's process with static tokens: an admin sees each schedule with its last run (a link
to its session) and its next run; anyone else is told the view is for administrators."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, Page, expect

from tests.support import InProcessServer, tokens_auth, write_config
from tests.test_e2e_ui import SCREENSHOTS, World, no_script_failed, shoot
from tests.test_e2e_ui import browser as browser  # the module's Chromium, a fixture

pytestmark = pytest.mark.anyio

TOKENS = {"ops": "parley_" + secrets.token_urlsafe(24), "alice": "parley_" + secrets.token_urlsafe(24)}


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("ui_schedules")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    auth = tokens_auth({"alice": TOKENS["alice"]})
    auth["tokens"] += tokens_auth({"ops": TOKENS["ops"]}, ("parley:admin",))["tokens"]
    config = write_config(
        directory,
        runtime={"schedule_min_interval_s": 1},
        auth=auth,
        schedules={
            "tick": {"every": "1s", "agent": "demo", "message": "tick", "overlap": "allow"},
            "weekly": {
                "cron": "0 8 * * 1",
                "timezone": "Europe/Berlin",
                "agent": "demo",
                "message": "report",
            },
        },
    )
    async with InProcessServer(config, http=True) as server:
        yield World(server, directory, browser)
        assert "Traceback" not in server.log(), server.log()


async def signed_in(world: World, who: str) -> Page:
    page = await world.page()
    await page.fill("#token", TOKENS[who])
    await page.click("#sign-in-form button")
    await expect(page.locator("#app")).to_be_visible()
    await page.click("#nav-schedules")
    return page


async def test_an_admin_sees_each_schedule_with_its_last_and_next_run(world: World) -> None:
    page = await signed_in(world, "ops")
    rows = page.locator("#schedule-rows tr")
    await expect(rows).to_have_count(2)
    tick = page.locator("#schedule-rows tr[data-name=tick]")
    await expect(tick).to_contain_text("every 1 s")
    await expect(tick.locator(".schedule-last a")).to_have_text("open")
    await expect(page.locator("#schedule-rows tr[data-name=weekly]")).to_contain_text(
        "0 8 * * 1 (Europe/Berlin)"
    )
    await expect(page.locator("#schedule-rows tr[data-name=weekly] .schedule-next")).not_to_have_text("-")
    await shoot(page, "schedules")
    await tick.locator(".schedule-last a").click()
    await expect(page.locator("#transcript .msg.user").first).to_have_text("tick")
    no_script_failed(world, page)


async def test_anyone_else_is_told_schedules_are_for_administrators(world: World) -> None:
    page = await signed_in(world, "alice")
    await expect(page.locator("#schedules-note")).to_contain_text("administrators")
    await expect(page.locator("#schedules-table")).to_be_hidden()
    no_script_failed(world, page)
