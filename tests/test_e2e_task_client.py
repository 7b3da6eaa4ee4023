"""tests/task_client.py against the task fixture server (tests/mcp_servers/task_echo_server.py) run
as a process of its own on stdio: one task of each generation from tests/test_task_client.py (which
runs all of them in this process, in memory and over HTTP) through `StdioServerParameters` and real
framing."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters

# Two tests of tests/test_task_client.py, a task of each generation, over stdio (this module's `target`):
from tests.test_task_client import (
    test_legacy_task_with_elicitation_on_tasks_result as test_legacy_task_with_elicitation_on_tasks_result,
)
from tests.test_task_client import (
    test_modern_task_with_input_requests_and_tasks_update as test_modern_task_with_input_requests_and_tasks_update,
)

pytestmark = pytest.mark.anyio

REPO = str(Path(__file__).resolve().parent.parent)

SERVER = StdioServerParameters(
    command=sys.executable, args=["-m", "tests.mcp_servers.task_echo_server"], cwd=REPO
)


@pytest.fixture(params=["stdio"])
async def target() -> AsyncIterator[Any]:
    """What `task_client` connects to: the server's stdio parameters (it starts the process)."""
    yield SERVER
