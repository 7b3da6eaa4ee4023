"""Configuration loading: built-in defaults, agent files, and errors with stable codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.config import (
    DEMO_AGENT,
    RuntimeConfig,
    collect_config_errors,
    load_config,
)
from parley.errors import ConfigError, ConfigErrors


def write_yaml(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def project(tmp_path: Path, config: dict[str, Any] | None = None, **agent_files: Any) -> Path:
    """parley.yaml plus configs/agents/<stem>.yaml files; returns the config path."""
    config_path = write_yaml(tmp_path / "parley.yaml", config or {})
    for stem, body in agent_files.items():
        target = tmp_path / "configs" / "agents" / f"{stem}.yaml"
        if isinstance(body, str):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body, encoding="utf-8")
        else:
            write_yaml(target, body)
    return config_path


def only_error(config_path: Path) -> ConfigError:
    errors = collect_config_errors(config_path)
    assert len(errors) == 1, [str(e) for e in errors]
    with pytest.raises(ConfigErrors) as raised:
        load_config(config_path, None)
    assert [str(e) for e in raised.value.errors] == [str(errors[0])]
    return errors[0]


def assert_names(error: ConfigError, code: str, file: Path, field: str) -> None:
    assert (error.code, error.file, error.field) == (code, str(file), field)
    message = str(error)
    assert message.startswith(f"{code} ")
    assert str(file) in message
    assert f": {field}: " in message


# ---------------------------------------------------------------------------- defaults


def test_without_a_config_file_the_demo_agent_runs_on_a_database_in_the_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    config = load_config(None, None)
    assert config.agents == {"demo": DEMO_AGENT}
    assert DEMO_AGENT.model.provider == "demo" and "write_todos" in DEMO_AGENT.tools
    assert config.db_path == tmp_path / "data" / "parley" / "parley.db"
    assert config.runtime == RuntimeConfig()
    assert config.config_path is None and config.agent_files == {}
    assert collect_config_errors(None) == []


def test_a_db_override_wins_over_the_storage_path(tmp_path: Path) -> None:
    config_path = project(tmp_path, {"storage": {"path": "in-file.db"}})
    assert load_config(config_path, tmp_path / "override.db").db_path == tmp_path / "override.db"
    assert load_config(None, tmp_path / "override.db").db_path == tmp_path / "override.db"


def test_relative_paths_resolve_next_to_the_config_file_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project(tmp_path / "proj", {"storage": {"path": "data/p.db"}, "agents_dir": "my-agents"})
    write_yaml(tmp_path / "proj" / "my-agents" / "helper.yaml", {"name": "helper"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(Path("../proj/parley.yaml"), None)
    assert config.db_path is not None
    assert config.db_path.resolve() == (tmp_path / "proj" / "data" / "p.db").resolve()
    assert set(config.agents) == {"demo", "helper"}


def test_runtime_settings_are_read_from_the_config_file(tmp_path: Path) -> None:
    config = load_config(project(tmp_path, {"runtime": {"poll_interval_s": 0.1, "lease_ttl_s": 2}}), None)
    assert (config.runtime.poll_interval_s, config.runtime.lease_ttl_s) == (0.1, 2.0)
    assert config.runtime.max_wait_s == RuntimeConfig().max_wait_s


def test_a_config_without_an_agents_folder_keeps_the_built_in_demo(tmp_path: Path) -> None:
    config = load_config(project(tmp_path, {}), None)
    assert config.agents == {"demo": DEMO_AGENT}


# ---------------------------------------------------------------------------- agent files


def test_an_agent_file_overrides_the_built_in_demo_agent(tmp_path: Path) -> None:
    config_path = project(
        tmp_path,
        mine={
            "name": "demo",
            "instructions": "Be brief.",
            "tools": [],
            "limits": {"max_model_calls_per_turn": 3},
        },
    )
    config = load_config(config_path, None)
    demo = config.agents["demo"]
    assert demo != DEMO_AGENT
    assert (demo.instructions, demo.tools, demo.limits.max_model_calls_per_turn) == ("Be brief.", [], 3)
    assert config.agent_files == {"demo": tmp_path / "configs" / "agents" / "mine.yaml"}


def test_agent_files_add_agents_beside_the_demo_and_yml_files_count(tmp_path: Path) -> None:
    config_path = project(tmp_path, helper={"name": "helper", "description": "Helps."})
    write_yaml(tmp_path / "configs" / "agents" / "other.yml", {"name": "other"})
    (tmp_path / "configs" / "agents" / "notes.txt").write_text("name: ignored\n")
    config = load_config(config_path, None)
    assert set(config.agents) == {"demo", "helper", "other"}
    assert config.agents["helper"].description == "Helps."
    assert config.agents["demo"] == DEMO_AGENT


# ---------------------------------------------------------------------------- errors


def test_invalid_yaml_in_an_agent_file_is_c001_naming_the_file(tmp_path: Path) -> None:
    config_path = project(tmp_path, broken="name: [unclosed\n")
    error = only_error(config_path)
    assert_names(error, "PARLEY-C001", tmp_path / "configs" / "agents" / "broken.yaml", "(file)")
    assert "not valid YAML" in str(error)


def test_invalid_yaml_in_the_config_file_is_c001(tmp_path: Path) -> None:
    config_path = tmp_path / "parley.yaml"
    config_path.write_text("storage: {path: [\n")
    assert_names(only_error(config_path), "PARLEY-C001", config_path, "(file)")


def test_a_yaml_file_that_is_not_a_mapping_is_c001(tmp_path: Path) -> None:
    config_path = project(tmp_path, listy="- name: a\n- name: b\n")
    error = only_error(config_path)
    assert_names(error, "PARLEY-C001", tmp_path / "configs" / "agents" / "listy.yaml", "(top level)")
    assert "mapping" in error.problem


def test_an_unknown_agent_field_is_c002_naming_the_field(tmp_path: Path) -> None:
    config_path = project(tmp_path, helper={"name": "helper", "colour": "blue"})
    error = only_error(config_path)
    assert_names(error, "PARLEY-C002", tmp_path / "configs" / "agents" / "helper.yaml", "colour")
    assert "unknown field" in error.problem


def test_an_invalid_nested_agent_value_is_c002_naming_the_dotted_field(tmp_path: Path) -> None:
    config_path = project(tmp_path, helper={"name": "helper", "limits": {"max_model_calls_per_turn": 0}})
    error = only_error(config_path)
    assert_names(
        error,
        "PARLEY-C002",
        tmp_path / "configs" / "agents" / "helper.yaml",
        "limits.max_model_calls_per_turn",
    )
    assert "greater than or equal to 1" in error.problem


def test_an_agent_file_without_a_name_is_c002(tmp_path: Path) -> None:
    config_path = project(tmp_path, empty="")
    assert_names(
        only_error(config_path), "PARLEY-C002", tmp_path / "configs" / "agents" / "empty.yaml", "name"
    )


def test_an_unknown_field_in_the_config_file_is_c002(tmp_path: Path) -> None:
    config_path = project(tmp_path, {"runtime": {"poll_interval": 1}})
    error = only_error(config_path)
    assert_names(error, "PARLEY-C002", config_path, "runtime.poll_interval")
    assert "unknown field" in error.problem


def test_an_unknown_model_provider_is_c003(tmp_path: Path) -> None:
    config_path = project(tmp_path, helper={"name": "helper", "model": {"provider": "acme-ai"}})
    error = only_error(config_path)
    assert_names(error, "PARLEY-C003", tmp_path / "configs" / "agents" / "helper.yaml", "model.provider")
    assert "acme-ai" in error.problem and "demo" in error.problem


def test_an_unknown_built_in_tool_is_c004_naming_its_position(tmp_path: Path) -> None:
    config_path = project(tmp_path, helper={"name": "helper", "tools": ["write_todos", "web_search"]})
    error = only_error(config_path)
    assert_names(error, "PARLEY-C004", tmp_path / "configs" / "agents" / "helper.yaml", "tools.1")
    assert "web_search" in error.problem and "write_todos" in error.problem


def test_two_files_defining_the_same_agent_is_c005_naming_both_files(tmp_path: Path) -> None:
    config_path = project(tmp_path, a={"name": "twin"}, b={"name": "twin"})
    error = only_error(config_path)
    first, second = tmp_path / "configs" / "agents" / "a.yaml", tmp_path / "configs" / "agents" / "b.yaml"
    assert_names(error, "PARLEY-C005", second, "name")
    assert str(first) in error.problem


def test_a_missing_agents_dir_is_c006(tmp_path: Path) -> None:
    config_path = project(tmp_path, {"agents_dir": "nowhere"})
    error = only_error(config_path)
    assert_names(error, "PARLEY-C006", config_path, "agents_dir")
    assert "nowhere" in error.problem


def test_a_missing_config_file_is_c006(tmp_path: Path) -> None:
    config_path = tmp_path / "absent.yaml"
    assert_names(only_error(config_path), "PARLEY-C006", config_path, "(file)")


def test_collect_config_errors_and_load_config_report_every_problem(tmp_path: Path) -> None:
    config_path = project(
        tmp_path,
        a={"name": "a", "model": {"provider": "acme-ai"}, "tools": ["nope"]},
        b={"name": "b", "colour": "red"},
    )
    errors = collect_config_errors(config_path)
    assert [(e.code, Path(e.file).name, e.field) for e in errors] == [
        ("PARLEY-C003", "a.yaml", "model.provider"),
        ("PARLEY-C004", "a.yaml", "tools.0"),
        ("PARLEY-C002", "b.yaml", "colour"),
    ]
    with pytest.raises(ConfigErrors) as raised:
        load_config(config_path, None)
    assert [str(e) for e in raised.value.errors] == [str(e) for e in errors]
    assert str(raised.value).splitlines() == [str(e) for e in errors]


def test_env_references_are_expanded_and_a_missing_variable_names_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_TEST_AGENT_TEXT", "be brief")
    config = project(tmp_path, env={"name": "env", "instructions": "${PARLEY_TEST_AGENT_TEXT}, costs $$5"})
    loaded = load_config(config, None)
    assert loaded.agents["env"].instructions == "be brief, costs $5"

    monkeypatch.delenv("PARLEY_TEST_AGENT_TEXT")
    errors = collect_config_errors(config)
    assert [(e.code, e.field) for e in errors] == [("PARLEY-C011", "instructions")]
    assert "PARLEY_TEST_AGENT_TEXT" in str(errors[0]) and "env.yaml" in str(errors[0])


def test_storage_synchronous_applies_to_postgresql_too_and_max_size_to_sqlite_only(tmp_path: Path) -> None:
    url = "postgresql://parley@db.internal:5432/parley"
    durable = project(tmp_path / "a", {"storage": {"url": url, "synchronous": "full"}})
    assert collect_config_errors(durable) == []
    capped = project(tmp_path / "b", {"storage": {"url": url, "max_size_mb": 100}})
    error = only_error(capped)
    assert (error.field, error.problem) == (
        "storage.max_size_mb",
        "applies to SQLite only; remove it (storage.url is set)",
    )
