"""The MCP Inspector's CLI mode (a client nobody on this team wrote) against parley, over stdio and
over streamable HTTP: it lists the tools and starts a session answered by the demo agent.

These are the commands the README shows users; the Inspector and Node.js 22 come from the npm
registry into the cache outside the checkout (tests/npm_servers.py).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from parley.config.auth import token_digest
from tests.npm_servers import inspector_cli, node22
from tests.support import TEST_DEADLINE_S, ServerProcess, db_rows, write_config

pytestmark = pytest.mark.anyio

# Fixtures, imported for pytest to find.
__all__ = ["inspector_cli", "node22"]

PARLEY_TOOLS = {"list_agents", "start_session", "send_message", "get_session", "approve", "answer_question"}


async def _inspect(inspector_cli: list[str], home: Path, arguments: list[str]) -> dict[str, Any]:
    """Run the Inspector's CLI once; return the JSON it printed."""
    # Its catalog and secret store go to a private home, not the user's.
    env = {**os.environ, "HOME": str(home), "MCP_CATALOG_PATH": str(home / "mcp.json")}
    with anyio.fail_after(TEST_DEADLINE_S * 2):
        done = await anyio.run_process([*inspector_cli, *arguments], check=False, env=env, cwd=home)
    output = f"{done.stdout.decode()}\n{done.stderr.decode()}"
    assert done.returncode == 0, f"the Inspector exited {done.returncode}:\n{output}"
    return dict(json.loads(done.stdout))


def _check(listed: dict[str, Any], started: dict[str, Any]) -> None:
    names = {tool["name"] for tool in listed["tools"]}
    assert names >= PARLEY_TOOLS, names
    for tool in listed["tools"]:
        # Models read these on every request: no runs of spaces from docstring indentation.
        assert "  " not in tool["description"], tool["description"]
    assert started["isError"] is False, started
    outcome = started["structuredContent"]
    assert outcome["status"] == "answered", outcome
    assert "hello inspector" in outcome["answer"], outcome
    assert outcome["session_id"].startswith("ses_")
    assert outcome["session_id"] in started["content"][0]["text"]


START = ["--method", "tools/call", "--tool-name", "start_session", "--tool-arg", "agent=demo"]
START += ["message=hello inspector"]


async def test_inspector_over_stdio(inspector_cli: list[str], tmp_path: Path) -> None:
    config = write_config(tmp_path)
    # After `--`, the rest is parley's command line (its --config is not the Inspector's).
    target = ["--", sys.executable, "-m", "parley", "serve", "--config", str(config)]
    listed = await _inspect(inspector_cli, tmp_path, ["--method", "tools/list", *target])
    started = await _inspect(inspector_cli, tmp_path, [*START, *target])
    _check(listed, started)


async def test_inspector_over_http(inspector_cli: list[str], tmp_path: Path) -> None:
    config = write_config(tmp_path)
    async with ServerProcess(config, http=True) as server:
        assert server.url is not None
        # --strict: the Inspector's schema portability check, findings in the JSON envelope.
        strict = ["--method", "tools/list", "--strict", "--format", "json"]
        envelope = await _inspect(inspector_cli, tmp_path, [server.url, *strict])
        started = await _inspect(inspector_cli, tmp_path, [server.url, *START])
    assert envelope.get("schemaFindings") is None, json.dumps(envelope.get("schemaFindings"), indent=1)
    _check(envelope["result"], started)
    assert "Traceback" not in server.log(), server.log()


async def test_inspector_over_http_with_a_static_token(inspector_cli: list[str], tmp_path: Path) -> None:
    """The README's command for a server with `auth: tokens`: the token in a --header."""
    token = "parley_" + secrets.token_urlsafe(32)
    config = write_config(
        tmp_path,
        auth={"mode": "tokens", "tokens": [{"name": "inspector", "sha256": token_digest(token)}]},
    )
    async with ServerProcess(config, http=True) as server:
        assert server.url is not None
        header = ["--header", f"Authorization: Bearer {token}"]
        listed = await _inspect(inspector_cli, tmp_path, [server.url, *header, "--method", "tools/list"])
        started = await _inspect(inspector_cli, tmp_path, [server.url, *header, *START])
        env = {**os.environ, "HOME": str(tmp_path), "MCP_CATALOG_PATH": str(tmp_path / "mcp.json")}
        with anyio.fail_after(TEST_DEADLINE_S * 2):
            refused = await anyio.run_process(
                [*inspector_cli, server.url, "--method", "tools/list"], check=False, env=env, cwd=tmp_path
            )
    _check(listed, started)
    assert refused.returncode != 0, "without the token the Inspector gets nothing"
    owners = db_rows(tmp_path / "parley.db", "SELECT DISTINCT owner FROM sessions")
    assert owners == [("inspector",)]
    assert token not in server.log()
