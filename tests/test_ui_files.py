"""The page's files as the package ships them (parley/server/ui/), read without a browser: every
module the page imports is served, nothing is written as HTML, and the page has no inline script
or style for its Content-Security-Policy to allow."""

from __future__ import annotations

import re

import anyio
import pytest

from parley.server.ui_routes import CONTENT_SECURITY_POLICY, UI_PATH, UiFiles, load_assets

ASSETS = load_assets()
SCRIPTS = {path: asset.body.decode() for path, asset in ASSETS.items() if path.endswith(".js")}


def test_the_page_and_every_module_it_imports_are_served() -> None:
    page = ASSETS[f"{UI_PATH}/"].body.decode()
    assert ASSETS[f"{UI_PATH}/callback"].body == ASSETS[f"{UI_PATH}/index.html"].body == page.encode()
    # Relative only, so the page works under a proxy's prefix (http.base_path).
    assert not re.findall(r'(?:src|href)="/', page)
    referenced = {f"{UI_PATH}/{name}" for name in re.findall(r'(?:src|href)="([\w.-]+)"', page)}
    for source in SCRIPTS.values():
        referenced |= {f"{UI_PATH}/{name}" for name in re.findall(r"from '\./([\w.-]+\.js)'", source)}
    assert referenced and referenced <= set(ASSETS), referenced - set(ASSETS)


def test_no_inline_script_or_style_and_a_policy_that_allows_none() -> None:
    page = ASSETS[f"{UI_PATH}/"].body.decode()
    assert re.findall(r"<script\b[^>]*>", page) == ['<script type="module" src="app.js">']
    assert "<style" not in page and " style=" not in page and not re.search(r"\son\w+=", page)
    assert "unsafe-" not in CONTENT_SECURITY_POLICY and "default-src 'none'" in CONTENT_SECURITY_POLICY


@pytest.mark.parametrize("path", sorted(SCRIPTS))
def test_text_is_never_written_as_html(path: str) -> None:
    source = SCRIPTS[path]
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in source, f"{path} uses {sink}"


def test_only_the_shipped_files_are_answered_and_only_read() -> None:
    files = UiFiles(ASSETS)

    async def status(method: str, path: str) -> tuple[int, dict[str, str]]:
        sent: list[dict[str, object]] = []

        async def receive() -> dict[str, object]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": method, "path": path, "headers": [], "query_string": b""}
        await files(scope, receive, send)  # type: ignore[arg-type]
        start = sent[0]
        headers = {k.decode(): v.decode() for k, v in start["headers"]}  # type: ignore[attr-defined]
        return int(start["status"]), headers  # type: ignore[call-overload]

    async def run() -> None:
        ok, headers = await status("GET", "/ui/app.js")
        assert ok == 200 and headers["content-type"].startswith("text/javascript")
        assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert (await status("GET", "/ui/../pyproject.toml"))[0] == 404
        assert (await status("GET", "/ui/ui_routes.py"))[0] == 404
        assert (await status("DELETE", "/ui/app.js"))[0] == 405
        moved, headers = await status("GET", "/ui")
        assert (moved, headers["location"]) == (308, "ui/")  # relative: a proxy's prefix is kept
        _, headers = await status("GET", "/ui/signin.json")
        assert headers["content-type"] == "application/json"

    anyio.run(run)
