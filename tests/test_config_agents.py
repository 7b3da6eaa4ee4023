"""Agent files in Claude Code's subagent format (Markdown with YAML front matter) beside YAML ones:
how their fields map onto parley's, and what `parley check` is told about what parley serves
differently (skipped tools, the default model, ignored fields)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.config import ModelSpec, collect_config_errors, load_config
from parley.config.codes import ConfigNote
from parley.errors import ConfigError

# The fields of the documented example of a Claude Code subagent, written for these tests.
REVIEWER = """---
name: code-reviewer
description: Reviews changed code for mistakes. Use it after editing.
tools: Read, Grep, Glob, Bash
model: inherit
---
You review code. Point out bugs first, then style.

Keep it short.
"""


def project(
    tmp_path: Path, config: dict[str, Any] | None = None, files: dict[str, str] | None = None
) -> Path:
    """parley.yaml plus files (by their path under the project); returns the config path."""
    path = tmp_path / "parley.yaml"
    path.write_text(yaml.safe_dump({"storage": {"path": "p.db"}, **(config or {})}), encoding="utf-8")
    for name, text in (files or {}).items():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return path


def codes(notices: tuple[ConfigError, ...] | list[ConfigError]) -> list[tuple[str, str]]:
    return [(n.code, n.field) for n in notices]


def front(**fields: Any) -> str:
    body = fields.pop("body", "Do the work.")
    return f"---\n{yaml.safe_dump(fields)}---\n{body}\n"


def test_a_claude_code_subagent_loads_with_its_unservable_tools_and_model_reported(tmp_path: Path) -> None:
    config = load_config(
        project(tmp_path, {"agents_dir": ".claude/agents"}, {".claude/agents/r.md": REVIEWER}), None
    )
    agent = config.agents["code-reviewer"]
    assert agent.description == "Reviews changed code for mistakes. Use it after editing."
    assert agent.instructions == "You review code. Point out bugs first, then style.\n\nKeep it short."
    assert agent.tools == [] and agent.mcp_servers == []
    assert agent.model == ModelSpec()  # inherit: the server's default, the demo model when none is set
    assert codes(config.agent_notices) == [
        ("PARLEY-C014", "tools.0"),
        ("PARLEY-C014", "tools.1"),
        ("PARLEY-C014", "tools.2"),
        ("PARLEY-C014", "tools.3"),
        ("PARLEY-C016", "model"),
    ]
    assert "'Bash' is one of Claude Code's own tools" in str(config.agent_notices[3])
    assert isinstance(config.agent_notices[4], ConfigNote)
    assert "demo:demo" in str(config.agent_notices[4])
    assert config.agent_files == {"code-reviewer": tmp_path / ".claude" / "agents" / "r.md"}


def test_tools_map_built_ins_by_name_and_mcp_tools_in_either_spelling(tmp_path: Path) -> None:
    servers = {"time": {"command": "x"}, "my_srv": {"command": "y"}, "files": {"command": "z"}}
    tools = "ask_user, time__now, mcp__my_srv__read_it, mcp__files, WebFetch, write_todos, durable_wait"
    text = front(name="a", tools=tools, disallowedTools=["durable_wait"])
    config = load_config(md(tmp_path, {"mcp_servers": servers}, a=text), None)
    agent = config.agents["a"]
    assert agent.tools == ["ask_user", "write_todos"]
    assert [(r.server, r.include) for r in agent.mcp_servers] == [
        ("time", ["now"]),
        ("my_srv", ["read_it"]),
        ("files", None),  # Claude Code's mcp__server: every tool of it
    ]
    assert codes(config.agent_notices) == [("PARLEY-C014", "tools.4"), ("PARLEY-C016", "model")]


def md(tmp_path: Path, config: dict[str, Any] | None = None, **agents: str) -> Path:
    return project(tmp_path, config, {f"configs/agents/{name}.md": text for name, text in agents.items()})


def test_tools_as_a_yaml_list_and_an_explicit_mcp_servers_entry_governing_its_server(tmp_path: Path) -> None:
    servers = {"time": {"command": "x"}}
    text = front(
        name="b",
        tools=["ask_user", "time__now"],
        mcp_servers=[{"server": "time", "exclude": ["later"]}],
        model="inherit",
    )
    config = load_config(md(tmp_path, {"mcp_servers": servers}, b=text), None)
    agent = config.agents["b"]
    assert agent.tools == ["ask_user"]
    assert [(r.server, r.include, r.exclude) for r in agent.mcp_servers] == [("time", None, ["later"])]


def test_a_file_without_tools_gets_none_and_a_warning(tmp_path: Path) -> None:
    config = load_config(md(tmp_path, c=front(name="c", model="inherit")), None)
    assert config.agents["c"].tools == []
    assert codes(config.agent_notices) == [("PARLEY-C015", "tools"), ("PARLEY-C016", "model")]
    assert not isinstance(config.agent_notices[0], ConfigNote)


def test_model_aliases_resolve_and_an_unmapped_alias_runs_on_the_default_model(tmp_path: Path) -> None:
    sonnet = {"provider": "anthropic", "name": "claude-sonnet-4-5", "api_key_env": "K"}
    local = {"provider": "openai", "name": "llama", "base_url": "http://127.0.0.1:1/v1"}
    config = load_config(
        md(
            tmp_path,
            # `models:` names are what callers may switch to; they are not aliases.
            {"model_aliases": {"sonnet": sonnet}, "default_model": local, "models": {"opus": sonnet}},
            s=front(name="s", tools="", model="sonnet"),
            o=front(name="o", tools="", model="opus"),
        ),
        None,
    )
    assert config.agents["s"].model == ModelSpec(**sonnet)
    assert config.agents["o"].model == ModelSpec(**local)
    [notice] = config.agent_notices
    assert (notice.code, notice.field, isinstance(notice, ConfigNote)) == ("PARLEY-C016", "model", False)
    assert "'opus' is not in model_aliases" in notice.problem and "openai:llama" in notice.problem


def test_default_model_is_also_the_model_of_a_yaml_agent_that_names_none(tmp_path: Path) -> None:
    local = {"provider": "openai", "name": "llama", "base_url": "http://127.0.0.1:1/v1"}
    files = {
        "configs/agents/y.yaml": yaml.safe_dump({"name": "y"}),
        "configs/agents/z.yml": yaml.safe_dump({"name": "z", "model": "fast"}),
    }
    config = load_config(
        project(tmp_path, {"default_model": local, "model_aliases": {"fast": local}}, files), None
    )
    assert config.agents["y"].model == ModelSpec(**local) == config.agents["z"].model
    assert config.agents["demo"].model == ModelSpec()  # the built-in demo agent keeps its model
    assert config.agent_notices == ()


def test_parley_fields_in_front_matter_and_claude_code_fields_parley_ignores(tmp_path: Path) -> None:
    text = front(
        name="t",
        tools="write_todos",
        model="inherit",
        version="2.1",
        kinds=["task"],
        result={"type": "object", "properties": {"summary": {"type": "string"}}},
        limits={"max_turns": 5},
        maxTurns=3,
        approver="human",
        color="blue",
        permissionMode="acceptEdits",
        memory="project",
    )
    config = load_config(md(tmp_path, t=text), None)
    agent = config.agents["t"]
    assert (agent.version, agent.kinds, agent.approver) == ("2.1", ["task"], "human")
    assert (agent.limits.max_turns, agent.limits.max_model_calls_per_turn) == (5, 3)
    assert sorted(codes(config.agent_notices)) == [
        ("PARLEY-C016", "model"),
        ("PARLEY-C017", "color"),
        ("PARLEY-C017", "memory"),
        ("PARLEY-C017", "permissionMode"),
    ]


def test_agents_dir_may_list_folders_and_a_name_defined_twice_is_c005(tmp_path: Path) -> None:
    path = project(
        tmp_path,
        {"agents_dir": ["configs/agents", ".claude/agents"]},
        {
            "configs/agents/one.yaml": yaml.safe_dump({"name": "one"}),
            ".claude/agents/two.md": front(name="two", tools=""),
            ".claude/agents/README.md": "# Our agents\n",
        },
    )
    config = load_config(path, None)
    assert set(config.agents) == {"demo", "one", "two"}
    assert ("PARLEY-C018", "(file)") in codes(config.agent_notices)
    (tmp_path / ".claude/agents/again.md").write_text(front(name="one", tools=""))
    [error] = collect_config_errors(path)
    assert (error.code, error.file, error.field) == (
        "PARLEY-C005",
        str(tmp_path / ".claude/agents/again.md"),
        "name",
    )


@pytest.mark.parametrize(
    ("text", "code", "field"),
    [
        ("---\nname: [unclosed\n---\nbody\n", "PARLEY-C001", "(front matter)"),
        ("---\n- a list\n---\nbody\n", "PARLEY-C001", "(front matter)"),
        (front(name="bad name!", tools=""), "PARLEY-C002", "name"),
        (front(name="x", tools=12), "PARLEY-C002", "tools"),
        (front(name="x", tools="", mcp_servers=["nowhere"]), "PARLEY-C012", "mcp_servers.0.server"),
    ],
    ids=["bad-yaml", "not-a-mapping", "bad-name", "tools-not-a-list", "unknown-server"],
)
def test_what_breaks_a_markdown_agent_file_is_an_error_with_its_code(
    tmp_path: Path, text: str, code: str, field: str
) -> None:
    [error] = collect_config_errors(md(tmp_path, broken=text))  # one problem, reported once
    assert (error.code, error.file, error.field) == (code, str(tmp_path / "configs/agents/broken.md"), field)


def test_a_missing_folder_of_an_agents_dir_list_is_c006_with_its_index(tmp_path: Path) -> None:
    path = project(tmp_path, {"agents_dir": ["configs/agents", "nowhere"]}, {"configs/agents/x.md": REVIEWER})
    [error] = collect_config_errors(path)
    assert (error.code, error.field) == ("PARLEY-C006", "agents_dir.1")
