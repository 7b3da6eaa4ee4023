"""Agent files: the folders agents_dir names, one file read (YAML, or Markdown with front matter as
Claude Code writes it: agent_markdown.py), its model alias resolved, its fields checked against
parley.yaml, and the agents the files define together."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from parley.config.agent import BUILTIN_TOOLS, DEMO_AGENT, AgentConfig
from parley.config.agent_markdown import markdown_agent_fields, not_an_agent, read_front_matter
from parley.config.codes import (
    E_DEFAULT_MODEL,
    E_DUPLICATE,
    E_FIELD,
    E_INPUT_SCHEMA,
    E_KIND,
    E_MISSING,
    E_PLAN,
    E_PROVIDER,
    E_RESULT_SCHEMA,
    E_SERVER,
    E_TOOL,
    ConfigNote,
)
from parley.config.env import expand_env
from parley.config.files import field_errors, read_text, read_yaml
from parley.config.mcp import McpServerConfig
from parley.config.models import KNOWN_PROVIDERS, ModelSpec, forced_choice_refusal
from parley.config.server import ServerConfigFile
from parley.errors import ConfigError

AGENT_SUFFIXES = (".yaml", ".yml", ".md")


def validate_agent(agent: AgentConfig, file: str) -> list[ConfigError]:
    problems = []
    if agent.model.provider not in KNOWN_PROVIDERS:
        problems.append(
            ConfigError(
                E_PROVIDER,
                file,
                "model.provider",
                f"unknown provider '{agent.model.provider}'; use one of: {', '.join(KNOWN_PROVIDERS)}",
            )
        )
    if agent.model.provider == "anthropic" and not agent.model.api_key_env:
        problems.append(
            ConfigError(
                E_FIELD, file, "model.api_key_env", "anthropic needs the name of the variable holding the key"
            )
        )
    if agent.model.base_url is not None and not agent.model.base_url.startswith(("http://", "https://")):
        problems.append(ConfigError(E_FIELD, file, "model.base_url", "must start with http:// or https://"))
    if agent.memory.mode not in (None, "compaction") and agent.compaction.enabled:
        problems.append(
            ConfigError(
                E_FIELD,
                file,
                "memory.mode",
                f"is {agent.memory.mode}, but compaction.enabled: true means the compaction mode; "
                "remove one of them",
            )
        )
    problems += _schema_problems(agent.result, file, "result", E_RESULT_SCHEMA)
    problems += _schema_problems(agent.input_schema, file, "input_schema", E_INPUT_SCHEMA)
    if agent.default_kind is not None and agent.default_kind not in agent.kinds:
        problems.append(
            ConfigError(
                E_KIND,
                file,
                "default_kind",
                f"'{agent.default_kind}' is not one of the agent's kinds ({', '.join(agent.kinds)}); "
                "add it to kinds or change default_kind",
            )
        )
    problems += _plan_problems(agent, file)
    for i, tool in enumerate(agent.tools):
        if tool not in BUILTIN_TOOLS:
            problems.append(
                ConfigError(
                    E_TOOL,
                    file,
                    f"tools.{i}",
                    f"unknown built-in tool '{tool}'; known: {', '.join(BUILTIN_TOOLS)}",
                )
            )
    return problems


def _plan_problems(agent: AgentConfig, file: str) -> list[ConfigError]:
    """Plan mode writes its plan with write_todos; a forced plan tool needs a model that takes one."""
    problems = []
    if agent.plan_mode and "write_todos" not in agent.tools:
        problems.append(
            ConfigError(
                E_PLAN,
                file,
                "plan_mode",
                "needs write_todos among tools: a planning turn writes its plan with it",
            )
        )
    refusal = forced_choice_refusal(agent.model)
    if agent.plan_mode and agent.plan_tool_choice == "required" and refusal is not None:
        model = f"{agent.model.provider}:{agent.model.name}"
        problems.append(
            ConfigError(
                E_PLAN,
                file,
                "plan_tool_choice",
                f"is required, but model {model} cannot be made to call a tool ({refusal}); "
                "use plan_tool_choice: auto or another model",
            )
        )
    return problems


def _schema_problems(schema: dict[str, Any] | None, file: str, field: str, code: str) -> list[ConfigError]:
    if schema is None:
        return []
    # Imported here: only an agent with a schema pays for jsonschema (about 50 ms of a start).
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(root)"
        return [ConfigError(code, file, field, f"is not a valid JSON Schema at {where}: {exc.message}")]
    if schema.get("type") != "object":
        return [
            ConfigError(
                code,
                file,
                field,
                'must describe an object: set "type: object" and list its fields under "properties"',
            )
        ]
    return []


def _server_ref_problems(
    agent: AgentConfig, file: str, servers: dict[str, McpServerConfig]
) -> list[ConfigError]:
    problems = []
    for i, ref in enumerate(agent.mcp_servers):
        if ref.server not in servers:
            known = ", ".join(sorted(servers)) or "none are configured"
            problems.append(
                ConfigError(
                    E_SERVER,
                    file,
                    f"mcp_servers.{i}.server",
                    f"no MCP server '{ref.server}' in parley.yaml (mcp_servers: {known}); add it there or fix the name",
                )
            )
    return problems


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentContext:
    """What reading an agent file needs from parley.yaml: its MCP servers (tools name them) and
    what a model alias means."""

    servers: dict[str, McpServerConfig]
    aliases: dict[str, ModelSpec]
    default_model: ModelSpec

    @classmethod
    def of(cls, file_cfg: ServerConfigFile) -> AgentContext:
        return cls(
            servers=file_cfg.mcp_servers,
            aliases=file_cfg.model_aliases,
            default_model=file_cfg.default_model or ModelSpec(),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentFileLoad:
    """One agent file as read: the agent (None when it could not be built), the problems that keep
    it from being served as it is, and notices of what is served differently than written."""

    path: Path
    agent: AgentConfig | None
    problems: list[ConfigError] = field(default_factory=list)
    notices: list[ConfigError] = field(default_factory=list)

    @property
    def is_valid(self) -> bool:
        return self.agent is not None and not self.problems


def load_agent_file(path: Path, context: AgentContext) -> AgentFileLoad:
    """Read one agent file: YAML, or Markdown with front matter (see agent_markdown.py)."""
    file = str(path)
    try:
        if path.suffix == ".md":
            found = read_front_matter(path, read_text(path))
            if found is None:
                return AgentFileLoad(path=path, agent=None, notices=[not_an_agent(path)])
            front, body = found
            expanded: dict[str, Any] = expand_env(front, file, "")
            data, notices = markdown_agent_fields(expanded, body, file, context.servers)
        else:
            data, notices = read_yaml(path), []
        notices += _resolve_model(data, file, context, markdown=path.suffix == ".md")
    except ConfigError as exc:
        return AgentFileLoad(path=path, agent=None, problems=[exc])
    try:
        agent = AgentConfig.model_validate(data)
    except ValidationError as exc:
        return AgentFileLoad(path=path, agent=None, problems=field_errors(file, exc), notices=notices)
    problems = validate_agent(agent, file) + _server_ref_problems(agent, file, context.servers)
    return AgentFileLoad(path=path, agent=agent, problems=problems, notices=notices)


def _resolve_model(
    data: dict[str, Any], file: str, context: AgentContext, *, markdown: bool
) -> list[ConfigError]:
    """Turn a model alias into its spec (model_aliases), or the server's default model for an agent
    that names none, `inherit`, or an alias parley.yaml does not map. A mapping stays as written."""
    value = data.get("model")
    if value is not None and not isinstance(value, str):
        return []
    default = context.default_model
    runs_on = f"the agent runs on the server's default model {default.provider}:{default.name}"
    alias = value.strip() if value is not None else None
    if alias is not None and alias in context.aliases:
        data["model"] = context.aliases[alias]
        return []
    data["model"] = default
    if alias is None:
        # Claude Code's default is `inherit`; a YAML agent without a model has always run on the default.
        return [ConfigNote(E_DEFAULT_MODEL, file, "model", f"is not given: {runs_on}")] if markdown else []
    if alias == "inherit":
        return [ConfigNote(E_DEFAULT_MODEL, file, "model", f"inherit: {runs_on}")]
    return [
        ConfigError(
            E_DEFAULT_MODEL,
            file,
            "model",
            f"'{alias}' is not in model_aliases of parley.yaml, so {runs_on}; map it there "
            f"(model_aliases: {{{alias}: {{provider: ..., name: ...}}}})",
        )
    ]


def agent_folders(file_cfg: ServerConfigFile, base_dir: Path) -> list[tuple[str, Path]]:
    """The agents_dir folders, each with the field that names it (agents_dir, agents_dir.1...)."""
    if isinstance(file_cfg.agents_dir, str):
        return [("agents_dir", base_dir / file_cfg.agents_dir)]
    return [(f"agents_dir.{i}", base_dir / folder) for i, folder in enumerate(file_cfg.agents_dir)]


def agent_paths(folder: Path) -> list[Path]:
    """The agent files of one folder, in name order (hidden files left out)."""
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if p.suffix in AGENT_SUFFIXES and not p.name.startswith(".") and p.is_file()
    )


def load_agent_files(
    file_cfg: ServerConfigFile, base_dir: Path, config_file: str, context: AgentContext | None = None
) -> tuple[list[AgentFileLoad], list[ConfigError]]:
    """Every agent file of the agents_dir folders, and the folders that do not exist (an error only
    when agents_dir is written out: the default folder may be absent). `context`: what the files
    are checked against, by default what `file_cfg` configures."""
    context = context or AgentContext.of(file_cfg)
    loads: list[AgentFileLoad] = []
    errors: list[ConfigError] = []
    for where, folder in agent_folders(file_cfg, base_dir):
        if folder.is_dir():
            loads += [load_agent_file(path, context) for path in agent_paths(folder)]
        elif "agents_dir" in file_cfg.model_fields_set:
            errors.append(ConfigError(E_MISSING, config_file, where, f"folder {folder} does not exist"))
    return loads, errors


def combine_agent_files(
    loads: list[AgentFileLoad],
) -> tuple[dict[str, AgentConfig], dict[str, Path], list[ConfigError]]:
    """The agents (the built-in demo unless a file defines its name), the file of each, and the
    problems, a name defined twice among them."""
    agents: dict[str, AgentConfig] = {DEMO_AGENT.name: DEMO_AGENT}
    files: dict[str, Path] = {}
    errors: list[ConfigError] = []
    for load in loads:
        errors.extend(load.problems)
        if load.agent is None:
            continue
        name = load.agent.name
        if name in files:
            errors.append(
                ConfigError(
                    E_DUPLICATE,
                    str(load.path),
                    "name",
                    f"agent '{name}' is already defined in {files[name]}; rename one of them",
                )
            )
            continue
        agents[name] = load.agent  # a file overrides the built-in agent of the same name
        files[name] = load.path
    return agents, files, errors
