"""The configuration shared by the upgrade fixture's maker and its test: the same agents and
MCP server names, so the stored tool calls name servers the new release knows."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support import FAST_RUNTIME

REPO = Path(__file__).resolve().parents[2]
FIXTURE_DIR = Path(__file__).resolve().parent
DATABASE = FIXTURE_DIR / "wave1.db"
HANDLES = FIXTURE_DIR / "wave1.json"
# A task that outlives any test run: ten years.
TASK_TTL_MS = 10 * 365 * 86_400 * 1000


def write_world(directory: Path, *, poll_s: float) -> Path:
    """parley.yaml and agents in `directory`; `poll_s` paces the downstream task polls."""
    directory.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    servers: dict[str, Any] = {
        "fixture": {
            "command": python,
            "args": ["-m", "tests.mcp_servers.fixture_server"],
            "cwd": str(REPO),
            "env": {"FIXTURE_LOG": str(directory / "fixture.jsonl")},
        },
        "echo": {
            "command": python,
            "args": ["-m", "tests.mcp_servers.task_echo_server"],
            "cwd": str(REPO),
            "call_as_task": "when_offered",
            "task_poll_min_s": poll_s,
            "task_poll_max_s": poll_s,
            "task_poll_failures": 1,
            "tools": {"ask": {"approval": "never"}},
        },
    }
    config = {
        "storage": {"path": "parley.db"},
        "runtime": FAST_RUNTIME,
        "tasks": {"max_ttl_s": TASK_TTL_MS / 1000},
        "mcp_servers": servers,
    }
    path = directory / "parley.yaml"
    path.write_text(yaml.safe_dump(config))
    agents = directory / "configs" / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    for name, body in {
        "writer": {"mcp_servers": ["fixture"]},
        "asker": {"mcp_servers": ["echo"]},
    }.items():
        (agents / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, **body}))
    return path
