"""The README is the front door: one screen, its tool table the tools the server publishes, and
its client snippets valid JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
PUBLISHED = json.loads((REPO / "tests" / "published_tools.json").read_text())


def test_the_readme_fits_in_two_hundred_lines() -> None:
    assert len(README.splitlines()) <= 200


def test_the_tool_table_names_every_published_tool_once_in_their_order() -> None:
    rows = re.findall(r"^\| `([a-z_]+)` \|", README, flags=re.MULTILINE)
    assert rows == [tool["name"] for tool in PUBLISHED]


def test_every_client_snippet_is_valid_json_naming_the_serve_command() -> None:
    blocks = re.findall(r"```json\n(.*?)```", README, flags=re.DOTALL)
    assert len(blocks) == 3
    for block in blocks:
        servers = json.loads(block)
        (entry,) = (servers.get("mcpServers") or servers["servers"]).values()
        assert entry["args"] == ["serve"]
        assert entry["command"].endswith("/.venv/bin/parley")
