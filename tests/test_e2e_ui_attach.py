"""Attachments on the page for people (/ui), in Chromium driven by Playwright (the browser,
fixtures and helpers of tests/test_e2e_ui.py, which skips without /usr/bin/chromium), against
parley over HTTP in the test's process on the demo model.

A person picks files for a message: each is checked against the server's limits (`attachments:`,
which /v1/agents tells the page) before anything is sent, and a file over the size or of a type
the server does not take is refused with the reason; a file whose bytes are not what its type
says (a renamed file) is refused by the server, with its reason; what was sent shows in the
transcript, the image inline and the other file as a link. File names are text, never markup.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, FilePayload, expect

from tests.support import InProcessServer, write_config
from tests.test_e2e_ui import MARKUP, SCREENSHOTS, World, compose, no_script_failed, shoot, start
from tests.test_e2e_ui import browser as browser  # the module's Chromium, a fixture

pytestmark = pytest.mark.anyio

MAX_BYTES = 2048
# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("ui_attach")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    config = write_config(
        directory,
        attachments={"max_bytes": MAX_BYTES, "max_count": 3, "mime_types": ["image/png", "text/plain"]},
        http={"stream_heartbeat_s": 0.2},
    )
    async with InProcessServer(config, http=True) as server:
        yield World(server, directory, browser)
        assert "Traceback" not in server.log(), server.log()


def upload(name: str, mime: str, data: bytes) -> FilePayload:
    return {"name": name, "mimeType": mime, "buffer": data}


async def test_files_are_checked_sent_and_shown_in_the_transcript(world: World) -> None:
    page = await world.page()
    await start(page, "demo", "hello")
    await expect(page.locator("#transcript .turn[data-status=answered]")).to_have_count(1)
    picker = page.locator("#attach-input")

    # Checked on the page first: too large, and a type the server does not take.
    await picker.set_input_files([upload("big.txt", "text/plain", b"x" * (MAX_BYTES + 1))])
    await expect(page.locator("#attach-error")).to_contain_text(f"at most {MAX_BYTES}")
    await picker.set_input_files([upload("song.mp3", "audio/mpeg", b"ID3")])
    await expect(page.locator("#attach-error")).to_contain_text(
        "audio/mpeg; this server takes image/png, text/plain"
    )
    await expect(page.locator("#attach-list")).to_be_hidden()

    # A renamed file passes the page's check; the server looks at its bytes and refuses it.
    await picker.set_input_files([upload("fake.png", "image/png", b"not a picture")])
    await expect(page.locator("#attach-list .name")).to_have_text(["fake.png"])
    await page.fill("#composer-text", "a fake")
    await page.press("#composer-text", "Enter")
    await expect(page.locator("#composer-error")).to_contain_text(
        "'fake.png': is not a image/png image (its first bytes say otherwise)"
    )
    await expect(page.locator("#transcript .turn")).to_have_count(1)
    await page.click("#attach-list .remove-file")
    await expect(page.locator("#attach-list")).to_be_hidden()

    name = f"{MARKUP}.txt"
    await picker.set_input_files(
        [upload("dot.png", "image/png", PIXEL), upload(name, "text/plain", b"notes")]
    )
    await expect(page.locator("#attach-list .name")).to_have_text(["dot.png", name])
    await compose(page, "with files")
    await expect(page.locator("#attach-list")).to_be_hidden()
    turn = page.locator("#transcript .turn").nth(1)
    await expect(turn.locator(".attachments img[alt='dot.png']")).to_have_js_property("naturalWidth", 1)
    await expect(turn.locator(".attachments a.file")).to_have_text(name)
    await shoot(page, "attachments")
    assert await page.evaluate("window.__pwned") is None
    no_script_failed(world, page)
    await page.context.close()


# A DataTransfer holding one file, as a drop or a paste brings it.
FILE_TRANSFER = """([name, type, text]) => {
  const transfer = new DataTransfer();
  transfer.items.add(new File([text], name, { type }));
  return transfer;
}"""


async def test_a_dropped_file_and_a_pasted_one_are_checked_and_sent_like_picked_ones(world: World) -> None:
    page = await world.page()
    await start(page, "demo", "hello")
    await expect(page.locator("#transcript .turn[data-status=answered]")).to_have_count(1)
    dropped = await page.evaluate_handle(FILE_TRANSFER, ["dropped.txt", "text/plain", "from the desktop"])
    await page.dispatch_event("#composer", "dragover", {"dataTransfer": dropped})
    await page.dispatch_event("#composer", "drop", {"dataTransfer": dropped})
    await expect(page.locator("#attach-list .name")).to_have_text(["dropped.txt"])
    # A paste of a type the server does not take is refused with the reason, like a picked one.
    await page.evaluate(
        """([transfer]) => document.getElementById('composer-text').dispatchEvent(
             new ClipboardEvent('paste', { clipboardData: transfer, bubbles: true }))""",
        [await page.evaluate_handle(FILE_TRANSFER, ["clip.mp3", "audio/mpeg", "ID3"])],
    )
    await expect(page.locator("#attach-error")).to_contain_text("audio/mpeg; this server takes")
    await page.evaluate(
        """([transfer]) => document.getElementById('composer-text').dispatchEvent(
             new ClipboardEvent('paste', { clipboardData: transfer, bubbles: true }))""",
        [await page.evaluate_handle(FILE_TRANSFER, ["pasted.txt", "text/plain", "from the clipboard"])],
    )
    await expect(page.locator("#attach-list .name")).to_have_text(["dropped.txt", "pasted.txt"])
    await compose(page, "two files")
    turn = page.locator("#transcript .turn").nth(1)
    await expect(turn.locator(".attachments a.file")).to_have_text(["dropped.txt", "pasted.txt"])
    no_script_failed(world, page)
    await page.context.close()
