"""The bind safety check of `parley serve --http` itself (the command line refuses a non-loopback
address without --insecure-bind, before anything starts). The rest of the HTTP behaviour runs
against parley in the test's process, served on a loopback socket: tests/test_http.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import TEST_DEADLINE_S, write_config


def test_binding_a_non_loopback_address_without_insecure_bind_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PARLEY_DB", None)
    command = [sys.executable, "-m", "parley", "serve", "--config", str(config), "--http"]
    result = subprocess.run(
        [*command, "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=TEST_DEADLINE_S,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    assert result.returncode != 0
    assert "--host" in result.stderr and "--insecure-bind" in result.stderr, result.stderr
    assert "listening on" not in result.stderr
    assert "serving MCP at" not in result.stderr
    assert not (tmp_path / "parley.db").exists(), "no server should have started"
