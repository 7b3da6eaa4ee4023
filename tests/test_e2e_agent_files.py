"""`parley check` (the command line, its own process) on a Claude Code subagent file: it says what
parley serves differently from Claude Code. The agent files run in tests/test_agent_files.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_providers import serving_fake_providers
from tests.support import TEST_DEADLINE_S
from tests.test_agent_files import write_agent_files

pytestmark = pytest.mark.anyio


def check(config: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PARLEY_CONFIG", "PARLEY_DB")}
    return subprocess.run(
        [sys.executable, "-m", "parley", "check", "--offline", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=TEST_DEADLINE_S,
        check=False,
    )


async def test_parley_check_lists_the_subagents_unservable_tools_with_their_code(tmp_path: Path) -> None:
    async with serving_fake_providers() as fake:
        config = write_agent_files(tmp_path, fake)
    ran = check(config)
    assert ran.returncode == 0, ran
    reviewer = config.parent / ".claude" / "agents" / "code-reviewer.md"
    for i, tool in enumerate(["Read", "Grep", "Glob", "Bash"]):
        assert (
            f"warning: PARLEY-C014 {reviewer}: tools.{i}: '{tool}' is one of Claude Code's own tools"
            in ran.stdout
        )
    assert (
        f"note: PARLEY-C016 {reviewer}: model: inherit: the agent runs on the server's default model demo:demo"
        in (ran.stdout)
    )
    assert "code-reviewer" in ran.stdout.splitlines()[-1] and ran.stdout.splitlines()[-1].startswith("ok:")
