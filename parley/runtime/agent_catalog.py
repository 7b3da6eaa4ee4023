"""The agents a process serves as they are configured now, and every earlier definition a turn
still runs on.

Each definition has a version: the hash of its content (its `version:` label included), so the
same file gives the same version in every process. The live set is replaced whole when agent
files change (agent_reload.py): a reader sees the old set or the new, never half of each. A turn
runs on the definition it started with, found by its version: the live one while it is unchanged
(a dictionary lookup per step), else one this process has held or read, else the one the database
stored as the turn started (in any process, after any restart).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from parley.config import AgentConfig
from parley.core.records import AgentVersionRecord
from parley.errors import InvalidArgument
from parley.storage.ports import AgentVersions

logger = logging.getLogger(__name__)

# Hex digits of the SHA-256 kept as the version: 64 bits, no collision among one agent's edits.
VERSION_DIGITS = 16


def definition_of(agent: AgentConfig) -> dict[str, Any]:
    """The definition as stored: every field, as JSON."""
    return agent.model_dump(mode="json")


def version_of(definition: dict[str, Any]) -> str:
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:VERSION_DIGITS]


@dataclass(frozen=True, slots=True)
class _Live:
    agent: AgentConfig
    version: str
    definition: dict[str, Any]

    @classmethod
    def of(cls, agent: AgentConfig) -> _Live:
        definition = definition_of(agent)
        return cls(agent, version_of(definition), definition)


class AgentCatalog(Mapping[str, AgentConfig]):
    """The live agents by name (what callers may start sessions with), with their versions, and
    the definitions of earlier versions that turns run on. One per process."""

    def __init__(self, agents: Mapping[str, AgentConfig], store: AgentVersions) -> None:
        self._store = store
        self._live: dict[str, _Live] = {}
        # Versions this process has served or read: a turn that started on one finds it here.
        self._held: dict[tuple[str, str], AgentConfig] = {}
        # Versions this process knows the database holds (it stored or read them).
        self._stored: set[tuple[str, str]] = set()
        self.replace(agents)

    def __getitem__(self, name: str) -> AgentConfig:
        return self._live[name].agent

    def __iter__(self) -> Iterator[str]:
        return iter(self._live)

    def __len__(self) -> int:
        return len(self._live)

    def version(self, name: str) -> str | None:
        """The version of the live definition of `name`."""
        live = self._live.get(name)
        return live.version if live is not None else None

    def replace(self, agents: Mapping[str, AgentConfig]) -> None:
        """Serve `agents` from now on. Turns that started on an earlier definition keep it."""
        live: dict[str, _Live] = {}
        for name, agent in agents.items():
            old = self._live.get(name)
            live[name] = old if old is not None and old.agent == agent else _Live.of(agent)
            self._held[(name, live[name].version)] = agent
        self._live = live  # one assignment: a reader sees the old set or the new

    def for_new_turn(self, name: str, now: float) -> tuple[AgentVersionRecord | None, bool]:
        """The definition a turn of `name` starting now runs on (None: the agent is not configured),
        and whether the turn must store it (the first turn on it in this process, unless the
        database is known to hold it)."""
        live = self._live.get(name)
        if live is None:
            return None, False
        record = AgentVersionRecord(
            agent=name, version=live.version, definition=live.definition, created_at=now
        )
        return record, (name, live.version) not in self._stored

    async def for_new_turn_of(
        self, name: str, now: float, pin: str | None
    ) -> tuple[AgentVersionRecord | None, bool]:
        """As for_new_turn, for a session whose turns are pinned to version `pin` (None: not
        pinned; the live definition). A pinned version that is live is the live one; else it is
        the one this process holds or the database stored. A pin no one has any more still names
        its version, so the turn fails as any turn whose version is gone, never running on
        another definition."""
        live = self._live.get(name)
        if pin is None or (live is not None and live.version == pin):
            return self.for_new_turn(name, now)
        agent = await self.for_turn(name, pin)
        if agent is None:
            return AgentVersionRecord(agent=name, version=pin, definition={}, created_at=now), False
        record = AgentVersionRecord(agent=name, version=pin, definition=definition_of(agent), created_at=now)
        return record, (name, pin) not in self._stored

    async def store_definition(self, agent: AgentConfig, now: float) -> AgentVersionRecord:
        """Store `agent`'s definition as a version before a turn ran on it (a replay's agent file,
        an eval's live definition), so a session pinned to it runs exactly it in any process."""
        stored = definition_of(agent)
        record = AgentVersionRecord(
            agent=agent.name, version=version_of(stored), definition=stored, created_at=now
        )
        await self._store.store_agent_version(record)
        self.mark_stored(record)
        return record

    async def checked_version(self, name: str, version: str, field: str) -> str:
        """`version` if sessions may be pinned to it (known_version), else InvalidArgument naming `field`."""
        if not await self.known_version(name, version):
            raise InvalidArgument(
                field,
                f"{version[:40]!r} is not a version of agent '{name}': give its live version "
                f"({self.version(name)}) or one a turn ran on (get_session lists each turn's agent_version)",
            )
        return version

    async def known_version(self, name: str, version: str) -> bool:
        """Whether `version` of agent `name` is live or stored: one a session may be pinned to."""
        if self.version(name) == version:
            return True
        # Stored, not merely held: every process must find the definition of a pinned version.
        return await self._store.get_agent_version(name, version) is not None

    def mark_stored(self, record: AgentVersionRecord) -> None:
        self._stored.add((record.agent, record.version))

    async def for_turn(self, name: str, version: str | None) -> AgentConfig | None:
        """The definition a turn runs on: its version's (None: a turn stored before versions were
        kept runs on the live one); None when neither this process nor the database has it."""
        live = self._live.get(name)
        if version is None or (live is not None and live.version == version):
            return live.agent if live is not None else None
        held = self._held.get((name, version))
        if held is not None:
            return held
        record = await self._store.get_agent_version(name, version)
        if record is None:
            return None
        try:
            agent = AgentConfig.model_validate(record.definition)
        except ValidationError as exc:
            logger.error("agent %s version %s is stored but cannot be read: %s", name, version, exc)
            return None
        self._held[(name, version)] = agent
        self._stored.add((name, version))
        return agent
