"""`parley check`: compare the tool names the configuration mentions with what servers list."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import anyio

from parley import __version__
from parley.config import E_SERVER_TOOL, McpServerConfig, ServerConfig
from parley.errors import ConfigError
from parley.redaction import shown_host
from parley.runtime.mcp.connection import Caller
from parley.runtime.mcp.failures import ToolSourceUnavailable
from parley.runtime.mcp.sources import McpToolSources


def contacted(servers: Mapping[str, McpServerConfig]) -> str:
    """What checking the tool names starts or contacts, for one line: each server with the program
    it starts (not its arguments, which may carry secrets) or the host it is reached at."""
    parts = []
    for name in sorted(servers):
        cfg = servers[name]
        if cfg.command is not None:
            parts.append(f"{name} (starts {Path(cfg.command).name})")
        else:
            parts.append(f"{name} ({shown_host(cfg.url or '')})")
    return ", ".join(parts)


async def check_server_tools(config: ServerConfig) -> tuple[list[ConfigError], list[str]]:
    """Problems (tools named in the configuration that their server does not list) and warnings
    (servers that could not be listed, so their names went unchecked)."""
    errors: list[ConfigError] = []
    warnings: list[str] = []
    if not config.mcp_servers:
        return errors, warnings
    # What the servers write to stderr is theirs, not the check's: out of sight unless debugging.
    sources = McpToolSources(config.mcp_servers, __version__, stderr_level=logging.DEBUG)
    listed: dict[str, set[str]] = {}
    async with anyio.create_task_group() as tg:
        await tg.start(sources.run)
        for name in sorted(config.mcp_servers):
            if config.mcp_servers[name].auth is not None:
                # Listed only with a person's own token, which the check does not have.
                warnings.append(
                    f"MCP server '{name}' takes each person's own OAuth token (auth user_oauth): its tools are "
                    "not listed here, so the tool names configured for it were not checked"
                )
                continue
            # A server with each principal's own headers is listed as each of them (a principal
            # whose credential it refuses is named in a warning).
            principals: list[str | None] = [*sorted(config.mcp_servers[name].headers_by_principal)] or [None]
            for principal in principals:
                as_whom = f" (as principal '{principal}')" if principal is not None else ""
                try:
                    tools = await sources.list_tools(name, Caller(principal=principal))
                except ToolSourceUnavailable as exc:
                    warnings.append(f"{exc}{as_whom}; the tool names configured for it were not checked")
                    continue
                listed.setdefault(name, set()).update(t.name for t in tools)
        tg.cancel_scope.cancel()

    where = str(config.config_path) if config.config_path else "parley.yaml"
    for server, cfg in config.mcp_servers.items():
        for tool in cfg.tools:
            if server in listed and tool not in listed[server]:
                errors.append(
                    _unknown(where, f"mcp_servers.{server}.tools.{tool}", server, tool, listed[server])
                )
    for agent_name, agent in config.agents.items():
        file = str(config.agent_files.get(agent_name, f"(agent {agent_name})"))
        for i, ref in enumerate(agent.mcp_servers):
            known = listed.get(ref.server)
            if known is None:
                continue
            named = [("include", t) for t in ref.include or []] + [("exclude", t) for t in ref.exclude]
            named += [("tools", t) for t in ref.tools]
            for field, tool in named:
                if tool not in known:
                    errors.append(_unknown(file, f"mcp_servers.{i}.{field}", ref.server, tool, known))
    return errors, warnings


def _unknown(file: str, field: str, server: str, tool: str, known: set[str]) -> ConfigError:
    names = ", ".join(sorted(known)) or "none"
    return ConfigError(
        E_SERVER_TOOL, file, field, f"server '{server}' lists no tool '{tool}'; it lists: {names}"
    )
