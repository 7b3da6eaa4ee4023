"""Agent files written for Claude Code: Markdown with YAML front matter (the subagent convention:
`name`, `description`, `tools`, `model`; the body is the instructions), mapped onto parley's agent
fields. parley-only fields (limits, kinds, result, approvers, mcp_servers...) may sit in the same
front matter.

What parley cannot honour is reported as a notice (a `ConfigError` with a stable code that
`parley check` prints as a warning), never as a reason to refuse the file: the agent runs without
the tool, on the default model, ignoring the field. Only what breaks the file (no front matter, bad
YAML) is an error.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from parley.config.agent import BUILTIN_TOOLS
from parley.config.codes import E_IGNORED_FIELD, E_NO_TOOLS, E_NOT_AGENT, E_UNSERVABLE_TOOL, E_YAML
from parley.errors import ConfigError

# Claude Code's own tools: named in the notice, so a reader knows why they are skipped.
CLAUDE_CODE_TOOLS = frozenset(
    {
        "Agent",
        "Bash",
        "BashOutput",
        "Edit",
        "ExitPlanMode",
        "Glob",
        "Grep",
        "KillShell",
        "LS",
        "MultiEdit",
        "NotebookEdit",
        "NotebookRead",
        "Read",
        "SlashCommand",
        "Skill",
        "Task",
        "TodoWrite",
        "WebFetch",
        "WebSearch",
        "Write",
    }
)
# Claude Code front-matter fields with no meaning in parley (a permission mode, hooks, a colour...).
CLAUDE_CODE_ONLY_FIELDS = frozenset(
    {"color", "skills", "hooks", "background", "effort", "isolation", "initialPrompt"}
)
# Claude Code fields parley maps itself (the rest of the front matter goes to AgentConfig as is).
_MAPPED = frozenset({"tools", "disallowedTools", "maxTurns", "mcpServers", "permissionMode"})
_FRONT_MATTER = re.compile(
    r"\A\ufeff?---[ \t]*\r?\n(?P<yaml>.*?)(?:\r?\n)?^---[ \t]*$(?P<body>.*)\Z", re.S | re.M
)
_MCP_PREFIX = "mcp__"


def read_front_matter(path: Path, text: str) -> tuple[dict[str, Any], str] | None:
    """The front matter (a mapping) and the body of a Markdown agent file; None when the file has
    no front matter (a README beside the agents is no agent).

    Raises:
        ConfigError: the front matter is not a YAML mapping.
    """
    found = _FRONT_MATTER.match(text)
    if found is None:
        return None
    try:
        front = yaml.safe_load(found.group("yaml"))
    except yaml.YAMLError as exc:
        raise ConfigError(E_YAML, str(path), "(front matter)", f"is not valid YAML: {exc}") from exc
    if front is None:
        front = {}
    if not isinstance(front, dict):
        raise ConfigError(E_YAML, str(path), "(front matter)", "must be a mapping of fields (key: value)")
    return front, found.group("body").strip()


def not_an_agent(path: Path) -> ConfigError:
    return ConfigError(
        E_NOT_AGENT,
        str(path),
        "(file)",
        "has no YAML front matter between two '---' lines at its top, so it is not an agent; skipped",
    )


def markdown_agent_fields(
    front: dict[str, Any], body: str, file: str, servers: Collection[str]
) -> tuple[dict[str, Any], list[ConfigError]]:
    """The AgentConfig fields of a Markdown agent (front matter already ${NAME}-expanded), and the
    notices about what parley does not serve as written. The model stays as written (an alias,
    `inherit`, a mapping, or absent); agent_files.py resolves it."""
    notices: list[ConfigError] = []
    data = _plain_fields(front, body, file, notices)
    refs = _tool_fields(front, file, servers, data, notices)
    _add_named_servers(front, file, servers, refs, notices)
    explicit = {_ref_server(r) for r in data.get("mcp_servers") or []}
    mapped_refs: list[Any] = [
        server if include is None else {"server": server, "include": list(dict.fromkeys(include))}
        for server, include in refs.items()
        if server not in explicit  # an explicit mcp_servers entry governs its server
    ]
    if mapped_refs:
        data["mcp_servers"] = [*(data.get("mcp_servers") or []), *mapped_refs]
    max_turns = front.get("maxTurns")
    if max_turns is not None:
        limits = data.get("limits") if isinstance(data.get("limits"), dict) else {}
        # Claude Code's agentic turns are model calls within one parley turn.
        data["limits"] = {"max_model_calls_per_turn": max_turns, **(limits or {})}
    _permission_mode(front, file, data, notices)
    return data, notices


def _permission_mode(
    front: dict[str, Any], file: str, data: dict[str, Any], notices: list[ConfigError]
) -> None:
    """Claude Code's `permissionMode: plan` is parley's plan mode, which plans with write_todos
    (added when the file does not list it). parley has no other permission modes."""
    mode = front.get("permissionMode")
    if mode is None:
        return
    if mode != "plan":
        notices.append(
            ConfigError(
                E_IGNORED_FIELD,
                file,
                "permissionMode",
                f"'{mode}' is a Claude Code permission mode parley does not use; ignored (parley's "
                "tool policies decide what needs approval; permissionMode: plan is plan mode)",
            )
        )
        return
    data.setdefault("plan_mode", True)
    tools = data.get("tools")
    if isinstance(tools, list) and "write_todos" not in tools:
        data["tools"] = [*tools, "write_todos"]


def _plain_fields(front: dict[str, Any], body: str, file: str, notices: list[ConfigError]) -> dict[str, Any]:
    """The front matter's fields that go to AgentConfig as they are (Claude Code's own settings
    left out, with a notice), and the body as the instructions."""
    data: dict[str, Any] = {}
    for key, value in front.items():
        if key in _MAPPED:
            continue
        if key in CLAUDE_CODE_ONLY_FIELDS:
            notices.append(
                ConfigError(
                    E_IGNORED_FIELD, file, str(key), "is a Claude Code setting parley does not use; ignored"
                )
            )
        elif key == "memory" and isinstance(value, str):
            notices.append(
                ConfigError(
                    E_IGNORED_FIELD,
                    file,
                    "memory",
                    f"'{value}' is Claude Code's persistent memory folder, which parley does not keep; ignored "
                    "(parley's memory is a mapping such as {mode: window, messages: 20})",
                )
            )
        else:
            data[str(key)] = value
    if "instructions" in data:
        notices.append(
            ConfigError(
                E_IGNORED_FIELD,
                file,
                "instructions",
                "a Markdown agent's instructions are its body (after the front matter); remove this field",
            )
        )
        del data["instructions"]
    data["instructions"] = body
    return data


def _tool_fields(
    front: dict[str, Any],
    file: str,
    servers: Collection[str],
    data: dict[str, Any],
    notices: list[ConfigError],
) -> dict[str, list[str] | None]:
    """Claude Code's `tools` (less `disallowedTools`) as parley's: the built-ins go to data["tools"];
    returned, the MCP servers they name with their tools (None: every tool of the server)."""
    refs: dict[str, list[str] | None] = {}
    if "tools" not in front:
        notices.append(
            ConfigError(
                E_NO_TOOLS,
                file,
                "tools",
                "is not given: Claude Code would give this agent all of its tools, parley gives it none; "
                "list the ones it may use (built-ins such as ask_user, MCP tools as server__tool)",
            )
        )
    elif (listed := _names(front["tools"], file, "tools", [])) is None:
        data["tools"] = front["tools"]  # neither a string nor a list: the field check names it
    else:
        denied = set(_names(front.get("disallowedTools"), file, "disallowedTools", notices) or ())
        builtins: list[str] = []
        for i, name in enumerate(listed):
            if name in denied:
                continue
            mapped = _map_tool(name, servers)
            if mapped is None:
                notices.append(ConfigError(E_UNSERVABLE_TOOL, file, f"tools.{i}", _unservable(name)))
            elif mapped[0] == "builtin":
                builtins.append(name)
            else:
                _, server, tool = mapped
                current = refs.get(server, [])
                # None: every tool of the server (named alone, or as Claude Code's mcp__server).
                refs[server] = None if tool is None or current is None else [*current, tool]
        data["tools"] = list(dict.fromkeys(builtins))
    return refs


def _add_named_servers(
    front: dict[str, Any],
    file: str,
    servers: Collection[str],
    refs: dict[str, list[str] | None],
    notices: list[ConfigError],
) -> None:
    """Claude Code's `mcpServers`: each one parley.yaml configures gives every tool of it (unless
    `tools` already chose some); any other is a notice."""
    for server in _names(front.get("mcpServers"), file, "mcpServers", notices, allow_mappings=True) or ():
        if server in servers:
            refs.setdefault(server, None)
        else:
            notices.append(
                ConfigError(
                    E_UNSERVABLE_TOOL,
                    file,
                    "mcpServers",
                    f"'{server}' is not an MCP server of parley.yaml; define it under mcp_servers there",
                )
            )


def _ref_server(ref: Any) -> Any:
    return ref.get("server") if isinstance(ref, dict) else ref


def _names(
    value: Any, file: str, field: str, notices: list[ConfigError], allow_mappings: bool = False
) -> list[str] | None:
    """A list of names as Claude Code writes it: a comma-separated string or a YAML list; None
    (with a notice) when it is neither."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else None
    if items is None:
        notices.append(
            ConfigError(
                E_IGNORED_FIELD,
                file,
                field,
                "must be a comma-separated list or a YAML list of names; ignored",
            )
        )
        return None
    names = []
    for item in items:
        if isinstance(item, str) and item.strip():
            names.append(item.strip())
        elif allow_mappings and isinstance(item, dict):
            notices.append(
                ConfigError(
                    E_UNSERVABLE_TOOL,
                    file,
                    field,
                    "an MCP server defined inside an agent file is not served; define it under mcp_servers "
                    "in parley.yaml and name it here",
                )
            )
    return names


def _map_tool(name: str, servers: Collection[str]) -> tuple[str, str, str | None] | None:
    """("builtin", name, None), ("mcp", server, tool or None for all of its tools), or None."""
    if name in BUILTIN_TOOLS:
        return ("builtin", name, None)
    candidates = [name[len(_MCP_PREFIX) :], name] if name.startswith(_MCP_PREFIX) else [name]
    for candidate in candidates:
        if candidate in servers:
            return ("mcp", candidate, None)  # Claude Code's mcp__server: every tool of the server
        # The longest configured server name that prefixes it wins (names may contain '_').
        for server in sorted(servers, key=len, reverse=True):
            prefix = f"{server}__"
            if candidate.startswith(prefix) and len(candidate) > len(prefix):
                return ("mcp", server, candidate[len(prefix) :])
    return None


def _unservable(name: str) -> str:
    if name.split("(", 1)[0] in CLAUDE_CODE_TOOLS:
        return f"'{name}' is one of Claude Code's own tools, which parley does not have; skipped"
    if name.startswith(_MCP_PREFIX) or "__" in name:
        return (
            f"'{name}' names no MCP server of parley.yaml (mcp_servers); skipped — add the server there "
            "to serve its tools"
        )
    return (
        f"'{name}' is neither a parley built-in ({', '.join(BUILTIN_TOOLS)}) nor an MCP tool "
        "(server__tool or mcp__server__tool); skipped"
    )
