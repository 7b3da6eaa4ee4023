"""`parley eval` killed mid-eval (SIGKILL, in the middle of a case) and run again: it resumes on
the sessions it started and finishes with the same pass/fail per case as an eval never
interrupted. On SQLite and PostgreSQL: the eval's sessions are ordinary ones in either."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import FAST_RUNTIME, REPO, TEST_DEADLINE_S, Database

EXAMPLES = REPO / "examples" / "evals"
# The demo dataset's second case has the model call write_todos: the process dies once the tool
# ran and before its result is committed (one case done, the second halfway through its turn).
FAULT = "tool_ran:write_todos"
EVERY_CASE_PASSES = {"greets": True, "plans": True, "remembers": True, "reports": True}


def _eval_command(entry: list[str], dataset: Path, config: Path, database: Database) -> list[str]:
    argv = [sys.executable, *entry, "eval", str(dataset), "--config", str(config), "--agent", "helper"]
    argv += ["--concurrency", "1", "--json"]
    return argv + (["--db", database.db_arg] if database.db_arg else [])


@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
def test_an_eval_killed_mid_case_resumes_with_the_same_verdicts(tmp_path: Path, database: Database) -> None:
    folder = tmp_path / "evals"
    shutil.copytree(EXAMPLES, folder)
    config = folder / "parley.yaml"
    settings = yaml.safe_load(config.read_text())
    settings["storage"] = database.storage() if database.url else {"path": str(database.path)}
    # Short leases: the rerun takes over the killed process's session once its lease runs out.
    settings["runtime"] = FAST_RUNTIME
    config.write_text(yaml.safe_dump(settings))
    dataset = folder / "demo.yaml"

    doomed = subprocess.run(
        _eval_command(["-m", "parley.testing.serve", "--fault", FAULT], dataset, config, database),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TEST_DEADLINE_S,
    )
    assert doomed.returncode == -9, f"the eval should have died at {FAULT}:\n{doomed.stderr}"
    assert doomed.stdout == "", "no report from an eval that died"
    started = database.rows("SELECT id, status FROM sessions ORDER BY created_at")
    assert [status for _, status in started] == ["idle", "running"], "the second case's turn was cut short"

    resumed = subprocess.run(
        _eval_command(["-m", "parley"], dataset, config, database),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=TEST_DEADLINE_S,
    )
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert {case["name"]: case["passed"] for case in report["cases"]} == EVERY_CASE_PASSES
    sessions = [case["candidate"]["session_id"] for case in report["cases"]]
    assert sessions[:2] == [row[0] for row in started], "the sessions already started were reused"
    plans = report["cases"][1]["candidate"]
    assert plans["tool_calls"] == ["write_todos"], "the turn cut short was finished, not started again"
    assert len(database.rows("SELECT id FROM sessions")) == 4
