"""Task sessions on the page for people (/ui), in Chromium driven by Playwright (the browser,
fixtures and helpers of tests/test_e2e_ui.py, which skips without /usr/bin/chromium), against
parley over HTTP in the test's process on the demo model.

A person picks the kind; an agent's `input_schema` becomes a form (a string, an integer, a number,
a boolean, an enum, an array of strings, a nested object, and raw JSON for a schema the form does
not build); what the page can check is checked before anything is sent; what only the server
checks comes back as its refusal, shown beside the field it names; a completed task shows its
result as formatted JSON. Labels from the agent's schema are text, never markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, expect

from parley.tls import http_client
from tests.support import CALL_DEADLINE_S, InProcessServer, write_config
from tests.test_e2e_ui import MARKUP, SCREENSHOTS, World, no_script_failed, shoot
from tests.test_e2e_ui import browser as browser  # the module's Chromium, a fixture

pytestmark = pytest.mark.anyio

INPUTS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": MARKUP, "description": "Who asks."},
        "code": {"type": "string", "pattern": "^[a-z]+$"},
        "count": {"type": "integer", "minimum": 1},
        "ratio": {"type": "number"},
        "urgent": {"type": "boolean"},
        "color": {"enum": ["red", "green"]},
        "labels": {"type": "array", "items": {"type": "string"}},
        "owner": {
            "type": "object",
            "properties": {"team": {"type": "string"}},
            "required": ["team"],
        },
        "extra": {"oneOf": [{"type": "string"}, {"type": "object"}]},
    },
    "required": ["name", "count", "owner"],
}


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("ui_taskform")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    config = write_config(
        directory,
        agents={
            "tasker": {
                "kinds": ["chat", "task"],
                "default_kind": "chat",
                "input_schema": INPUTS,
                "result": {
                    "type": "object",
                    "properties": {"summary": {"type": "string"}, "n": {"type": "integer"}},
                    "required": ["summary"],
                },
            },
        },
        http={"stream_heartbeat_s": 0.2},
    )
    async with InProcessServer(config, http=True) as server:
        yield World(server, directory, browser)
        assert "Traceback" not in server.log(), server.log()


async def session_count(world: World) -> int:
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        listed = (await http.get(world.base + "/v1/sessions?limit=100")).json()
    return len(listed["sessions"])


async def test_a_task_is_started_from_its_input_form_checked_by_field_and_shows_its_result(
    world: World,
) -> None:
    page = await world.page()
    await expect(page.locator("#new-agent option", has_text="tasker")).to_have_count(1)
    await page.select_option("#new-agent", "tasker")
    # A chat takes no inputs; picking the task kind shows the form.
    await expect(page.locator("#task-inputs")).to_be_hidden()
    # The kind shows once the person is in the form (it folds away with it, like the agent's about).
    await page.click("#new-message")
    await page.select_option("#new-kind", "task")
    inputs = page.locator("#task-inputs")
    await expect(inputs).to_be_visible()
    await expect(inputs.locator("label[for=in-name]")).to_have_text(f"{MARKUP} *")
    await expect(inputs.locator("fieldset.nested legend")).to_have_text("owner")
    await expect(page.locator("#in-urgent")).to_have_attribute("type", "checkbox")
    await expect(page.locator("#in-count")).to_have_attribute("step", "1")
    await expect(page.locator("#in-color option")).to_have_text(["—", "red", "green"])
    await expect(page.locator("#in-extra")).to_have_attribute("placeholder", "JSON")

    # What the page can check stops the start: nothing is sent.
    before = await session_count(world)
    await page.fill("#in-count", "1.5")
    await page.fill("#in-extra", "{not json")
    await page.click("#new-session button[type=submit]")
    await expect(page.locator("#in-count-error")).to_have_text("Write a whole number.")
    await expect(page.locator("#in-name-error")).to_have_text("Fill this in.")
    await expect(page.locator("#in-owner-team-error")).to_have_text("Fill this in.")
    await expect(page.locator("#in-extra-error")).to_have_text("Write valid JSON.")
    await expect(page.locator("#in-count")).to_have_attribute("aria-invalid", "true")
    assert await session_count(world) == before
    await shoot(page, "taskform-checked")

    # What only the server checks (a pattern) is its refusal, shown by the field it names.
    await page.fill("#in-name", MARKUP)
    await page.fill("#in-count", "3")
    await page.fill("#in-ratio", "0.25")
    await page.check("#in-urgent")
    await page.select_option("#in-color", "green")
    await page.fill("#in-labels", "one\n<i>two</i>\n")
    await page.fill("#in-owner-team", "ops")
    await page.fill("#in-extra", '{"k": [1, 2]}')
    await page.fill("#in-code", "ABC")
    result = {"summary": "done <b>now</b>", "n": 3}
    await page.fill("#new-message", f"/result {json.dumps(result)}")
    await page.click("#new-session button[type=submit]")
    await expect(page.locator("#in-code-error")).to_contain_text("does not match")
    await expect(page.locator("#in-count-error")).to_be_hidden()
    assert await session_count(world) == before

    await page.fill("#in-code", "abc")
    await page.click("#new-session button[type=submit]")
    await expect(page).to_have_url(re.compile(r"#/s/ses_"))
    session_id = page.url.rpartition("#/s/")[2]
    shown = page.locator("#task-result pre")
    await expect(shown).to_have_text(json.dumps(result, indent=2))
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        stored = (await http.get(f"{world.base}/v1/sessions/{session_id}?messages_from=1")).json()
    assert stored["kind"] == "task" and stored["status"] == "completed" and stored["result"] == result
    first = stored["messages"][0]["text"]
    sent, _ = json.JSONDecoder().raw_decode(first[first.index("Inputs:") + len("Inputs:") :].lstrip())
    assert sent == {
        "name": MARKUP,
        "code": "abc",
        "count": 3,
        "ratio": 0.25,
        "urgent": True,
        "color": "green",
        "labels": ["one", "<i>two</i>"],
        "owner": {"team": "ops"},
        "extra": {"k": [1, 2]},
    }, sent
    await shoot(page, "taskform-result")
    assert await page.evaluate("window.__pwned") is None
    no_script_failed(world, page)
    await page.context.close()
