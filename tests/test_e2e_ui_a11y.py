"""Accessibility of the page for people (/ui), in Chromium driven by Playwright (the browser,
fixtures and helpers of tests/test_e2e_ui.py, which skips without /usr/bin/chromium): axe-core
(pinned in tests/npm_servers.py, installed by npm on first use) finds no serious or critical
violation of WCAG 2 A/AA (contrast included) on the session list, an open session with an
approval waiting, the inbox and the task form; live updates are announced politely; every
control is reached by the keyboard."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, FilePayload, Page, expect

from tests.npm_servers import axe_source  # noqa: F401  (a fixture)
from tests.support import FIXTURE_LOG, InProcessServer, fixture_in_process, write_config
from tests.test_e2e_ui import World, no_script_failed, start
from tests.test_e2e_ui import browser as browser  # the module's Chromium, a fixture

pytestmark = pytest.mark.anyio

RUN_AXE = """async () => {
  const result = await axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21aa']}});
  return result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => ({id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5)}));
}"""


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("ui_a11y")
    async with fixture_in_process(directory / FIXTURE_LOG) as fixture:
        config = write_config(
            directory,
            agents={
                "worker": {"mcp_servers": ["fixture"]},
                "tasker": {
                    "kinds": ["chat", "task"],
                    "input_schema": {
                        "type": "object",
                        "properties": {"topic": {"type": "string"}, "depth": {"type": "integer"}},
                    },
                },
            },
            mcp_servers={"fixture": fixture},
            http={"stream_heartbeat_s": 0.2},
        )
        async with InProcessServer(config, http=True) as server:
            yield World(server, directory, browser)
            assert "Traceback" not in server.log(), server.log()


async def serious(page: Page, axe: str) -> list[dict[str, Any]]:
    # Evaluated through the driver, so the page's own policy (scripts from itself only) stays on.
    if not await page.evaluate("typeof axe !== 'undefined'"):
        await page.evaluate(axe)
    return list(await page.evaluate(RUN_AXE))


FOCUSED = """() => {
  const node = document.activeElement;
  if (!node || node === document.body) return null;  // past the last control
  const style = getComputedStyle(node);
  const visible = style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0 || style.boxShadow !== 'none';
  return {id: node.id || node.className || node.tagName, visible};
}"""
# Every control a person can see and use now (visible, enabled, not taken out of the tab order).
CONTROLS = """() => [...document.querySelectorAll(
    'a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex]')]
  .filter((n) => n.getClientRects().length && !n.disabled && n.tabIndex >= 0
    && getComputedStyle(n).visibility !== 'hidden' && !n.closest('[inert]'))
  .map((n) => n.id || n.className || n.tagName)"""


async def tabbed(page: Page, presses: int) -> dict[str, bool]:
    """What Tab reaches from the top of the page, and whether each shows that it has focus."""
    await page.evaluate("document.activeElement && document.activeElement.blur()")
    reached: dict[str, bool] = {}
    for _ in range(presses):
        await page.keyboard.press("Tab")
        shown = await page.evaluate(FOCUSED)
        if shown is not None:
            reached.setdefault(shown["id"], shown["visible"])
    return reached


async def test_axe_finds_no_serious_violation_and_the_keyboard_reaches_every_control(
    world: World,
    axe_source: str,  # noqa: F811
) -> None:
    page = await world.page()
    await expect(page.locator("#new-agent option")).not_to_have_count(0)
    assert await serious(page, axe_source) == []
    await start(page, "worker", '/tool fixture__bare {"text": "a11y"}')
    await expect(page.locator("#transcript .decision")).to_have_count(1)
    assert await serious(page, axe_source) == []
    await expect(page.locator("#transcript")).to_have_attribute("aria-live", "polite")
    controls = await page.evaluate(CONTROLS)
    reached = await tabbed(page, len(controls) + 10)
    assert set(controls) <= set(reached), sorted(set(controls) - set(reached))
    for control in (
        "new-agent",
        "new-message",
        "attach",
        "composer-text",
        "send",
        "rename",
        "delete-session",
    ):
        assert control in reached, (control, reached)
    assert all(reached.values()), [c for c, seen in reached.items() if not seen]
    # A file waiting in the composer, and the delete confirmation.
    notes: FilePayload = {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"n"}
    await page.locator("#attach-input").set_input_files([notes])
    await expect(page.locator("#attach-list .name")).to_have_text(["notes.txt"])
    await page.click("#delete-session")
    await expect(page.locator("#delete-confirm")).to_be_visible()
    assert await serious(page, axe_source) == []
    await page.click("#delete-no")
    await page.click("#attach-list .remove-file")
    await page.click("#nav-inbox")
    await expect(page.locator("#inbox li.decision")).to_have_count(1)
    assert await serious(page, axe_source) == []
    await page.click("#nav-sessions")
    await page.select_option("#new-agent", "tasker")
    await page.click("#new-message")
    await page.select_option("#new-kind", "task")
    await expect(page.locator("#task-inputs")).to_be_visible()
    assert await serious(page, axe_source) == []
    no_script_failed(world, page)
    await page.context.close()
