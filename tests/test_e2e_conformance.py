"""The official MCP conformance suite's server scenarios against `parley serve --http`.

A tool nobody on this team wrote proves the protocol surface: every scenario of `--suite all` that
can apply to a product server must pass; the ones that need the suite's own fixtures are listed,
with the reason, in tests/conformance/expected_failures.yaml, the suite's own baseline format. The
run is the README's by-hand command, which must exit 0. The suite and Node.js 22 come from the npm
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

EXPECTED_FAILURES = Path(__file__).parent / "conformance" / "expected_failures.yaml"
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
    not_applicable = set(yaml.safe_load(EXPECTED_FAILURES.read_text())["server"])
    config = write_config(tmp_path)
    async with ServerProcess(config, http=True) as server:
        assert server.url is not None
        results = tmp_path / "results"
        command = [*conformance_cli, "server", "--url", server.url, "--suite", "all"]
        command += ["--expected-failures", str(EXPECTED_FAILURES), "--output-dir", str(results)]
        with anyio.fail_after(SUITE_TIMEOUT_S):
            done = await anyio.run_process(command, check=False, cwd=tmp_path)
    outcomes = _outcomes(results)
    output = f"{done.stdout.decode()[-4000:]}\n{done.stderr.decode()[-2000:]}"
    assert outcomes, f"the suite ran no scenario:\n{output}"
    passed = sorted(s for s, ok in outcomes.items() if ok and s not in not_applicable)
    skipped = sorted(s for s, ok in outcomes.items() if not ok and s in not_applicable)
    failed = sorted(s for s, ok in outcomes.items() if not ok and s not in not_applicable)
    now_passing = sorted(s for s, ok in outcomes.items() if ok and s in not_applicable)
    vanished = sorted(not_applicable - set(outcomes))
    with capsys.disabled():
        print(
            f"\nMCP conformance: {len(passed)} passed, {len(skipped)} not applicable, "
            f"{len(failed) + len(now_passing)} failed"
        )
    assert not failed, f"conformance scenarios failed: {failed}\n{output}"
    assert not now_passing, (
        f"listed as expected failures but now passing: {now_passing}; take them off {EXPECTED_FAILURES.name}"
    )
    assert not vanished, f"listed in {EXPECTED_FAILURES.name} but the suite has no such scenario: {vanished}"
    # The suite's own verdict on its baseline (warnings count as failures there): the by-hand command.
    assert done.returncode == 0, f"the suite exited {done.returncode}:\n{output}"
    assert "Traceback" not in server.log(), server.log()
