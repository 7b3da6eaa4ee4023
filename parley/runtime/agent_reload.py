"""Live reload of agents: a running server looks at its agent files (and the agent-related parts
of parley.yaml: agents_dir, model_aliases, default_model) every `runtime.agent_reload_s`, and
serves what changed once it is read and valid.

Looking is one stat per file (no new dependency, the same on every platform); reading happens on
a worker thread, and the new set replaces the old one whole (AgentCatalog.replace). A file that
does not validate keeps serving the version read before, and its problems are logged with their
codes; a removed file removes its agent (its sessions stay readable and take no new messages).
Turns that started keep their own version to the end (see agent_catalog.py). What else changed
in parley.yaml takes effect at the next start, and the log says so.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus

from parley.config import (
    DEMO_AGENT,
    E_DUPLICATE,
    AgentConfig,
    AgentContext,
    McpServerConfig,
    ModelSpec,
    ServerConfigFile,
    agent_folders,
    load_agent_files,
    read_server_file,
)
from parley.config.agent_files import AGENT_SUFFIXES
from parley.config.codes import E_KEPT, E_RESTART, ConfigNote
from parley.errors import ConfigError
from parley.runtime.agent_catalog import AgentCatalog

logger = logging.getLogger(__name__)

# parley.yaml's fields that a reload applies; a change of any other waits for the next start.
AGENT_FIELDS = frozenset({"agents_dir", "model_aliases", "default_model"})

# What a look at the files sees: per file, its size, time and inode (None: a folder is missing).
Fingerprint = tuple[tuple[str, int, int, int] | tuple[str, None], ...]


@dataclass(slots=True)
class ReloadReport:
    """What one reload changed, by agent name."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # an invalid edit: the earlier version serves on


@dataclass(frozen=True, slots=True)
class _Read:
    """What one reading of the files found (on a worker thread; nothing applied yet)."""

    file_cfg: ServerConfigFile | None
    folders: list[Path]
    agents: dict[str, AgentConfig]
    files: dict[Path, AgentConfig]
    report: ReloadReport


class AgentReloader:
    """Watches one parley.yaml and its agent folders for a running server."""

    def __init__(
        self,
        config_path: Path,
        catalog: AgentCatalog,
        agent_files: Mapping[str, Path],
        servers: Mapping[str, McpServerConfig],
        interval_s: float,
        on_reload: Callable[[Mapping[str, AgentConfig]], None] | None = None,
    ) -> None:
        self._config_path = config_path
        self._base_dir = config_path.resolve().parent
        self._catalog = catalog
        # MCP servers are started with the process: agents are checked against those that run.
        self._servers = dict(servers)
        self._interval_s = interval_s
        self._on_reload = on_reload
        # The agent each file serves now (a file whose edit is invalid keeps its earlier one).
        self._files: dict[Path, AgentConfig] = {path: catalog[name] for name, path in agent_files.items()}
        start, _ = read_server_file(config_path)
        self._started_with = _beyond_agents(start)
        self._restart_noted = self._started_with
        self._folders = [f for _, f in agent_folders(start, self._base_dir)] if start else []
        self._seen = self._look()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await anyio.sleep(self._interval_s)
            seen = self._look()
            if seen != self._seen:
                self._seen = seen
                await self.reload()

    async def reload(self) -> ReloadReport:
        """Read the files again (on a worker thread) and serve what is valid."""
        read = await anyio.to_thread.run_sync(self._read)
        if read.file_cfg is None:
            return read.report
        self._folders = read.folders
        self._files = read.files
        self._catalog.replace(read.agents)
        report = read.report
        if report.added or report.changed or report.removed:
            logger.info("agents reloaded: %s", self._describe(report))
            if self._on_reload is not None:
                self._on_reload(read.agents)
        return report

    def _describe(self, report: ReloadReport) -> str:
        parts = []
        for what, names in (
            ("added", report.added),
            ("changed", report.changed),
            ("removed", report.removed),
        ):
            labels = [f"{n} (version {self._catalog.version(n)})" if n in self._catalog else n for n in names]
            if labels:
                parts.append(f"{what} {', '.join(labels)}")
        return "; ".join(parts)

    def _look(self) -> Fingerprint:
        """One stat per file: cheap enough to repeat every fraction of a second."""
        seen: list[tuple[str, int, int, int] | tuple[str, None]] = [_stat(self._config_path)]
        for folder in self._folders:
            try:
                with os.scandir(folder) as entries:
                    found = sorted(
                        (e.path, e.stat())
                        for e in entries
                        if not e.name.startswith(".") and os.path.splitext(e.name)[1] in AGENT_SUFFIXES
                    )
            except OSError:  # the folder is missing (or a file went away while looking: next time)
                seen.append((str(folder), None))
                continue
            seen += [(path, st.st_mtime_ns, st.st_size, st.st_ino) for path, st in found]
        return tuple(seen)

    def _read(self) -> _Read:
        report = ReloadReport()
        file_cfg, problems = read_server_file(self._config_path)
        if file_cfg is None:
            for problem in problems:
                logger.warning("%s; the agents stay as they were until it is fixed", problem)
            return _Read(None, self._folders, {}, self._files, report)
        self._note_restart(file_cfg)
        context = AgentContext(
            servers=self._servers,
            aliases=file_cfg.model_aliases,
            default_model=file_cfg.default_model or ModelSpec(),
        )
        loads, missing = load_agent_files(file_cfg, self._base_dir, str(self._config_path), context)
        for problem in missing:
            logger.warning("%s; the agents of that folder are no longer served", problem)
        files: dict[Path, AgentConfig] = {}
        for load in loads:
            before = self._files.get(load.path)
            if load.is_valid and load.agent is not None:
                files[load.path] = load.agent
                if load.agent != before:
                    _log_notices(load.notices)
                continue
            for problem in load.problems:
                logger.warning("%s", problem)
            if before is not None:
                files[load.path] = before
                report.kept.append(before.name)
                logger.warning(
                    "%s",
                    ConfigError(
                        E_KEPT,
                        str(load.path),
                        "(file)",
                        f"does not validate (above); agent '{before.name}' keeps serving the version read "
                        f"before ({self._catalog.version(before.name)}) until the file is fixed",
                    ),
                )
        agents: dict[str, AgentConfig] = {DEMO_AGENT.name: DEMO_AGENT}
        served: dict[Path, AgentConfig] = {}
        owner: dict[str, Path] = {}
        for path, agent in files.items():
            if agent.name in owner:
                logger.warning(
                    "%s",
                    ConfigError(
                        E_DUPLICATE,
                        str(path),
                        "name",
                        f"agent '{agent.name}' is already defined in {owner[agent.name]}; this file is not "
                        "served until one of them is renamed",
                    ),
                )
                continue
            owner[agent.name] = path
            agents[agent.name] = agent
            served[path] = agent
        for name, agent in agents.items():
            if name not in self._catalog:
                report.added.append(name)
            elif self._catalog[name] != agent:
                report.changed.append(name)
        report.removed = [name for name in self._catalog if name not in agents]
        for name in report.removed:
            logger.info(
                "agent %s is no longer configured: its sessions stay readable and take no new messages", name
            )
        folders = [f for _, f in agent_folders(file_cfg, self._base_dir)]
        return _Read(file_cfg, folders, agents, served, report)

    def _note_restart(self, file_cfg: ServerConfigFile) -> None:
        now = _beyond_agents(file_cfg)
        if now == self._restart_noted:
            return
        changed = sorted(k for k in {*now, *self._started_with} if now.get(k) != self._started_with.get(k))
        self._restart_noted = now
        if changed:
            logger.warning(
                "%s",
                ConfigError(
                    E_RESTART,
                    str(self._config_path),
                    ", ".join(changed),
                    "changed; a running server reloads only agents_dir, model_aliases and default_model: "
                    "this applies at the next start",
                ),
            )


def _beyond_agents(file_cfg: ServerConfigFile | None) -> dict[str, Any]:
    """parley.yaml's sections other than the agent parts, to tell what a reload cannot apply."""
    if file_cfg is None:
        return {}
    return file_cfg.model_dump(exclude=set(AGENT_FIELDS))


def _stat(path: Path) -> tuple[str, int, int, int] | tuple[str, None]:
    try:
        st = path.stat()
    except OSError:
        return (str(path), None)
    return (str(path), st.st_mtime_ns, st.st_size, st.st_ino)


def _log_notices(notices: list[ConfigError]) -> None:
    for notice in notices:
        logger.log(logging.INFO if isinstance(notice, ConfigNote) else logging.WARNING, "%s", notice)
