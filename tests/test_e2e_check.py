"""`parley check` validates a configuration before it is served: every problem is reported with its
stable code, the file and the field; `parley serve` refuses the same configuration the same way."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import TEST_DEADLINE_S, fixture_server, write_config


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str


def _env() -> dict[str, str]:
    env = {**os.environ}
    env.pop("PARLEY_CONFIG", None)
    env.pop("PARLEY_DB", None)
    return env


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "parley", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def _finish(process: subprocess.Popen[str]) -> Ran:
    try:
        stdout, stderr = process.communicate(timeout=TEST_DEADLINE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return Ran(process.returncode, stdout, stderr)


def _agent_file(config: Path, name: str) -> Path:
    return config.parent / "configs" / "agents" / f"{name}.yaml"


def _set_config_fields(config: Path, **fields: Any) -> None:
    data = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**data, **fields}))


def test_check_accepts_a_valid_configuration_with_an_agent_file(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        agents={
            "helper": {
                "description": "Helps.",
                "model": {"provider": "demo", "name": "demo"},
                "tools": ["write_todos"],
                "kinds": ["chat", "task"],
                "default_kind": "task",
                "input_schema": {"type": "object", "properties": {"topic": {"type": "string"}}},
                "result": {"type": "object", "properties": {"summary": {"type": "string"}}},
            }
        },
    )
    ran = _finish(_start("check", str(config)))
    assert ran.code == 0, ran
    assert "ok" in ran.stdout
    assert "helper" in ran.stdout and "demo" in ran.stdout


# Each case writes a configuration with exactly one problem and returns (file, field) it is reported at.
Case = Callable[[Path], tuple[Path, str]]


def _agent_not_yaml(directory: Path) -> tuple[Path, str]:
    config = write_config(directory, agents={"ok": {}})
    broken = _agent_file(config, "broken")
    broken.write_text("name: [unclosed\n  description: oops: : :\n")
    return broken, "(file)"


def _agent_unknown_field(directory: Path) -> tuple[Path, str]:
    config = write_config(directory, agents={"painter": {"colour": "blue"}})
    return _agent_file(config, "painter"), "colour"


def _runtime_wrong_type(directory: Path) -> tuple[Path, str]:
    config = write_config(directory, runtime={"poll_interval_s": "often"})
    return config, "runtime.poll_interval_s"


def _unknown_provider(directory: Path) -> tuple[Path, str]:
    config = write_config(directory, agents={"gpt": {"model": {"provider": "gpt-9", "name": "x"}}})
    return _agent_file(config, "gpt"), "model.provider"


def _unknown_tool(directory: Path) -> tuple[Path, str]:
    config = write_config(directory, agents={"wrecker": {"tools": ["write_todos", "rm_rf"]}})
    return _agent_file(config, "wrecker"), "tools.1"


def _duplicate_name(directory: Path) -> tuple[Path, str]:
    config = write_config(directory, agents={"a_twin": {"name": "twin"}, "b_twin": {"name": "twin"}})
    return _agent_file(config, "b_twin"), "name"


def _missing_agents_dir(directory: Path) -> tuple[Path, str]:
    config = write_config(directory)
    _set_config_fields(config, agents_dir="no/such/folder")
    return config, "agents_dir"


def _result_not_an_object(directory: Path) -> tuple[Path, str]:
    config = write_config(directory, agents={"worker": {"kinds": ["task"], "result": {"type": "string"}}})
    return _agent_file(config, "worker"), "result"


def _input_schema_invalid(directory: Path) -> tuple[Path, str]:
    config = write_config(directory, agents={"intake": {"input_schema": {"type": 12}}})
    return _agent_file(config, "intake"), "input_schema"


def _default_kind_not_a_kind(directory: Path) -> tuple[Path, str]:
    config = write_config(directory, agents={"chatty": {"kinds": ["chat"], "default_kind": "task"}})
    return _agent_file(config, "chatty"), "default_kind"


CASES: list[tuple[str, str, Case]] = [
    ("PARLEY-C001", "agent-file-not-yaml", _agent_not_yaml),
    ("PARLEY-C002", "unknown-agent-field", _agent_unknown_field),
    ("PARLEY-C002", "runtime-wrong-type", _runtime_wrong_type),
    ("PARLEY-C003", "unknown-provider", _unknown_provider),
    ("PARLEY-C004", "unknown-built-in-tool", _unknown_tool),
    ("PARLEY-C005", "duplicate-agent-name", _duplicate_name),
    ("PARLEY-C006", "missing-agents-dir", _missing_agents_dir),
    ("PARLEY-C007", "result-schema-not-an-object", _result_not_an_object),
    ("PARLEY-C008", "input-schema-not-json-schema", _input_schema_invalid),
    ("PARLEY-C009", "default-kind-not-among-kinds", _default_kind_not_a_kind),
]


CASE_IDS = [f"{code}-{what}" for code, what, _ in CASES]


@dataclass(frozen=True)
class Outcome:
    file: Path
    field: str
    check: Ran
    serve: Ran


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Write every case's configuration, then run `parley check PATH` and `parley serve --config PATH`
    on all of them at once (each must stop on its own), so the module stays fast."""
    started = {}
    for case_id, (_, _, case) in zip(CASE_IDS, CASES, strict=True):
        directory = tmp_path_factory.mktemp(case_id)
        file, field = case(directory)
        config = str(directory / "parley.yaml")
        started[case_id] = (file, field, _start("check", config), _start("serve", "--config", config))
    return {
        case_id: Outcome(file, field, _finish(check), _finish(serve))
        for case_id, (file, field, check, serve) in started.items()
    }


@pytest.mark.parametrize(
    ("code", "case_id"), [(c[0], i) for c, i in zip(CASES, CASE_IDS, strict=True)], ids=CASE_IDS
)
def test_check_names_the_code_file_and_field_of_a_configuration_problem_and_exits_1(
    outcomes: dict[str, Outcome], code: str, case_id: str
) -> None:
    outcome = outcomes[case_id]
    check = outcome.check
    assert check.code == 1, check
    # One problem, one report (a YAML parser's message may continue on further lines).
    lines = [line for line in check.stdout.splitlines() if line.startswith("PARLEY-")]
    assert len(lines) == 1, check
    prefix = f"{code} {outcome.file}: {outcome.field}: "
    assert lines[0].startswith(prefix) and len(lines[0]) > len(prefix), check
    assert "1 problem(s) found" in check.stderr, check
    assert "ok:" not in check.stdout


@pytest.mark.parametrize(
    ("code", "case_id"), [(c[0], i) for c, i in zip(CASES, CASE_IDS, strict=True)], ids=CASE_IDS
)
def test_serve_refuses_the_same_problem_with_exit_2_and_the_same_code_on_stderr(
    outcomes: dict[str, Outcome], code: str, case_id: str
) -> None:
    outcome = outcomes[case_id]
    serve = outcome.serve
    assert serve.code == 2, serve
    assert f"parley: configuration error: {code} {outcome.file}: {outcome.field}: " in serve.stderr, serve
    assert serve.stdout == ""
    assert "started as" not in serve.stderr, "no server should have started"


STRAY_LINE = "Starting default (STDIO) server..."


def _noisy_server_config(directory: Path) -> tuple[Path, Path]:
    """A configuration whose stdio MCP server writes a stray line to stderr as it starts, and the
    file the server writes its process id to when it does start."""
    started = directory / "started.pids"
    fixture = fixture_server(directory / "fixture.jsonl")
    fixture["env"]["FIXTURE_STARTED"] = str(started)
    noisy = {
        **fixture,
        "command": "sh",
        "args": ["-c", f'echo "{STRAY_LINE}" >&2; exec "$@"', "sh", fixture["command"], *fixture["args"]],
    }
    return write_config(directory, mcp_servers={"fixture": noisy}), started


def test_check_says_which_servers_it_contacts_and_keeps_their_stderr_out_of_its_output(
    tmp_path: Path,
) -> None:
    online_config, online_started = _noisy_server_config(tmp_path / "online")
    offline_config, offline_started = _noisy_server_config(tmp_path / "offline")
    online = _start("check", str(online_config))
    offline = _start("check", "--offline", str(offline_config))
    checked, skipped = _finish(online), _finish(offline)

    assert checked.code == 0, checked
    assert online_started.exists(), "the server was started to list its tools"
    assert STRAY_LINE not in checked.stdout + checked.stderr, checked
    contacting = [line for line in checked.stderr.splitlines() if "contacting" in line]
    assert len(contacting) == 1 and "fixture" in contacting[0], checked

    assert skipped.code == 0, skipped
    assert not offline_started.exists(), "--offline must not start any server"
    assert STRAY_LINE not in skipped.stdout + skipped.stderr, skipped
    assert "not contacted" in skipped.stderr and "fixture" in skipped.stderr, skipped
