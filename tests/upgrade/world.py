"""The configuration shared by the upgrade fixtures' maker and their tests: the same agents and
MCP server names, so the stored tool calls name servers the new release knows.

The fixtures, one set per release whose databases later releases must upgrade:
- wave1.db (+ wave1.json, its handles): SQLite, schema 10, the first release;
- wave2.db and wave2_postgres.sql (+ wave2.json, wave2_postgres.json): SQLite schema 17 and
  PostgreSQL schema 6, the release before the two databases shared one migration history.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support import FAST_RUNTIME

REPO = Path(__file__).resolve().parents[2]
FIXTURE_DIR = Path(__file__).resolve().parent
# A task that outlives any test run: ten years.
TASK_TTL_MS = 10 * 365 * 86_400 * 1000


@dataclass(frozen=True)
class Fixture:
    """One committed database of a release: the file and the ids of what waits in it."""

    database: Path
    handles: Path


WAVE1 = Fixture(FIXTURE_DIR / "wave1.db", FIXTURE_DIR / "wave1.json")
WAVE2_SQLITE = Fixture(FIXTURE_DIR / "wave2.db", FIXTURE_DIR / "wave2.json")
# A plain SQL dump, schema-neutral (no schema names, owners or privileges): restore it into a
# schema of your own with search_path set to it.
WAVE2_POSTGRES = Fixture(FIXTURE_DIR / "wave2_postgres.sql", FIXTURE_DIR / "wave2_postgres.json")
# The wave-1 names, as its test knows them.
DATABASE = WAVE1.database
HANDLES = WAVE1.handles


def write_world(directory: Path, *, poll_s: float, storage: dict[str, Any] | None = None) -> Path:
    """parley.yaml and agents in `directory`; `poll_s` paces the downstream task polls; `storage`
    is the configuration's storage section (default: parley.db in `directory`)."""
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
        "storage": storage or {"path": "parley.db"},
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
