"""The official MCP conformance suite's server scenarios against `parley serve --http`.

A tool nobody on this team wrote proves the protocol surface: every scenario that can apply to a
product server must pass; the ones that need the suite's own fixtures are listed, with the
reason, in tests/conformance/not_applicable.yaml. The suite and Node.js 22 come from the npm
registry into the cache outside the checkout (tests/npm_servers.py).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import anyio
import pytest
import yaml

from tests.npm_servers import conformance_cli, node22
from tests.support import ServerProcess, write_config

pytestmark = pytest.mark.anyio

# Fixtures, imported for pytest to find.
__all__ = ["conformance_cli", "node22"]

NOT_APPLICABLE = Path(__file__).parent / "conformance" / "not_applicable.yaml"
SUITE_TIMEOUT_S = float(os.environ.get("PARLEY_CONFORMANCE_TIMEOUT", "300"))


def _outcomes(results: Path) -> dict[str, bool]:
    """scenario -> passed, from the suite's per-scenario checks.json files."""
    outcomes: dict[str, bool] = {}
    for checks_file in sorted(results.glob("server-*/checks.json")):
        # Directories are named server-<scenario>-<timestamp>.
        scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", checks_file.parent.name.removeprefix("server-"))
        checks = json.loads(checks_file.read_text())
        outcomes[scenario] = bool(checks) and all(c.get("status") != "FAILURE" for c in checks)
    return outcomes


async def test_conformance_server_scenarios(
    conformance_cli: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    not_applicable: dict[str, str] = yaml.safe_load(NOT_APPLICABLE.read_text())
    config = write_config(tmp_path)
    async with ServerProcess(config, http=True) as server:
        assert server.url is not None
        results = tmp_path / "results"
        command = [*conformance_cli, "server", "--url", server.url, "--output-dir", str(results)]
        with anyio.fail_after(SUITE_TIMEOUT_S):
            done = await anyio.run_process(command, check=False, cwd=tmp_path)
    outcomes = _outcomes(results)
    assert outcomes, f"the suite ran no scenario:\n{done.stdout.decode()}\n{done.stderr.decode()}"
    passed = sorted(s for s, ok in outcomes.items() if ok and s not in not_applicable)
    skipped = sorted(s for s, ok in outcomes.items() if not ok and s in not_applicable)
    failed = sorted(s for s, ok in outcomes.items() if not ok and s not in not_applicable)
    now_passing = sorted(s for s, ok in outcomes.items() if ok and s in not_applicable)
    vanished = sorted(set(not_applicable) - set(outcomes))
    with capsys.disabled():
        print(
            f"\nMCP conformance: {len(passed)} passed, {len(skipped)} not applicable, "
            f"{len(failed) + len(now_passing)} failed"
        )
    assert not failed, f"conformance scenarios failed: {failed}\n{done.stdout.decode()[-4000:]}"
    assert not now_passing, (
        f"listed as not applicable but now passing: {now_passing}; take them off {NOT_APPLICABLE.name}"
    )
    assert not vanished, f"listed in {NOT_APPLICABLE.name} but the suite has no such scenario: {vanished}"
    assert "Traceback" not in server.log(), server.log()
