"""Server and agent configuration: pydantic models, loading parley.yaml and the agent files, the
built-in demo agent.

The package's modules, from the leaves up:

- codes.py: the stable PARLEY-C0xx codes of configuration problems, and `ConfigNote`;
- base.py: `Strict`, the base of every model (unknown fields refused, values frozen);
- the models of parley.yaml's blocks: models.py (`model:`, `models:`), mcp.py (`mcp_servers:`),
  agent.py (an agent's definition, the demo agent), storage.py (`storage:`), runtime.py
  (`runtime:`, `tasks:`), http.py (`http:`), auth.py (`auth:`, `limits:`, `audit:`, an agent's
  `users:` and `approvers:`), attachments.py, retention.py, ui.py (`ui:`, the page's sign-in),
  credentials.py (`credentials:`, its keys read); server.py: parley.yaml as a whole
  (`ServerConfigFile`) and the loaded configuration (`ServerConfig`);
- env.py: ${NAME} expansion and the environment variables; files.py: reading a file as YAML;
  database.py: PostgreSQL URLs, --db and PARLEY_DB, what `storage:` says together;
- agent_markdown.py: Claude Code's Markdown agent files mapped onto an agent's fields;
  agent_files.py: the agent folders, one agent file read and checked;
- loading.py: `load_config`, `collect_config_errors` and `credential_keys`, the whole of it.

The package is the only part of parley that reads environment variables (PARLEY_CONFIG,
PARLEY_DB, the data-directory variables, and those a configuration names as ${NAME});
everything else receives a loaded `ServerConfig`. The names below are importable from
`parley.config` itself.
"""

from __future__ import annotations

from parley.config.agent import (
    BUILTIN_TOOLS,
    DEMO_AGENT,
    MEMORY_MODES,
    OVERRIDABLE_LIMITS,
    AgentConfig,
    AgentLimits,
    AgentServerRef,
    CompactionConfig,
    Memory,
    MemoryConfig,
    MemoryMode,
    SessionKind,
    effective_limits,
    effective_memory,
)
from parley.config.agent_files import (
    AGENT_SUFFIXES,
    AgentContext,
    AgentFileLoad,
    agent_folders,
    agent_paths,
    combine_agent_files,
    load_agent_file,
    load_agent_files,
    validate_agent,
)
from parley.config.attachments import AttachmentsConfig
from parley.config.auth import AuditConfig, AuthConfig, LimitsConfig, Members, TokenEntry
from parley.config.codes import (
    E_BIND,
    E_DEFAULT_MODEL,
    E_DUPLICATE,
    E_ENV,
    E_FIELD,
    E_IGNORED_FIELD,
    E_INPUT_SCHEMA,
    E_KEPT,
    E_KIND,
    E_MISSING,
    E_NO_TOOLS,
    E_NOT_AGENT,
    E_PLAN,
    E_PROVIDER,
    E_RESTART,
    E_RESULT_SCHEMA,
    E_SERVER,
    E_SERVER_TOOL,
    E_TOOL,
    E_UNSERVABLE_TOOL,
    E_YAML,
    ConfigNote,
)
from parley.config.database import (
    POSTGRES_SCHEMES,
    clear_text_password,
    db_override_from_env,
    expand_database_url,
    is_database_url,
)
from parley.config.env import config_path_from_env, default_data_dir, secret_from_env
from parley.config.http import HttpConfig
from parley.config.loading import collect_config_errors, load_config, read_server_file
from parley.config.mcp import ApprovalPolicy, Effect, McpServerConfig, ToolPolicy
from parley.config.models import KNOWN_PROVIDERS, ModelSpec
from parley.config.retention import RetentionConfig
from parley.config.runtime import MIN_RELOAD_S, RuntimeConfig, TasksConfig
from parley.config.server import ServerConfig, ServerConfigFile
from parley.config.storage import StorageConfig
from parley.config.ui import UiConfig
from parley.config.webhooks import TRIGGER_SCOPE, TriggerConfig, WebhookSubscription

__all__ = [
    "AGENT_SUFFIXES",
    "BUILTIN_TOOLS",
    "DEMO_AGENT",
    "E_BIND",
    "E_DEFAULT_MODEL",
    "E_DUPLICATE",
    "E_ENV",
    "E_FIELD",
    "E_IGNORED_FIELD",
    "E_INPUT_SCHEMA",
    "E_KEPT",
    "E_KIND",
    "E_MISSING",
    "E_NOT_AGENT",
    "E_NO_TOOLS",
    "E_PLAN",
    "E_PROVIDER",
    "E_RESTART",
    "E_RESULT_SCHEMA",
    "E_SERVER",
    "E_SERVER_TOOL",
    "E_TOOL",
    "E_UNSERVABLE_TOOL",
    "E_YAML",
    "KNOWN_PROVIDERS",
    "MEMORY_MODES",
    "MIN_RELOAD_S",
    "OVERRIDABLE_LIMITS",
    "POSTGRES_SCHEMES",
    "TRIGGER_SCOPE",
    "AgentConfig",
    "AgentContext",
    "AgentFileLoad",
    "AgentLimits",
    "AgentServerRef",
    "ApprovalPolicy",
    "AttachmentsConfig",
    "AuditConfig",
    "AuthConfig",
    "CompactionConfig",
    "ConfigNote",
    "Effect",
    "HttpConfig",
    "LimitsConfig",
    "McpServerConfig",
    "Members",
    "Memory",
    "MemoryConfig",
    "MemoryMode",
    "ModelSpec",
    "RetentionConfig",
    "RuntimeConfig",
    "ServerConfig",
    "ServerConfigFile",
    "SessionKind",
    "StorageConfig",
    "TasksConfig",
    "TokenEntry",
    "ToolPolicy",
    "TriggerConfig",
    "UiConfig",
    "WebhookSubscription",
    "agent_folders",
    "agent_paths",
    "clear_text_password",
    "collect_config_errors",
    "combine_agent_files",
    "config_path_from_env",
    "db_override_from_env",
    "default_data_dir",
    "effective_limits",
    "effective_memory",
    "expand_database_url",
    "is_database_url",
    "load_agent_file",
    "load_agent_files",
    "load_config",
    "read_server_file",
    "secret_from_env",
    "validate_agent",
]
