"""An eval case's scripted conversation as a session: a new session of the caller's, tagged
`eval`, with every scripted message queued at once (each runs as its own turn, as a replay's
do), pinned to one stored version of the agent. Its start carries a client_message_id chosen by
the eval (a digest of the dataset, the case and the version), so a rerun of the same eval after a
crash finds the session it started instead of starting another."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from parley.config import AgentConfig
from parley.core import transitions
from parley.core.changes import Admit
from parley.core.ids import new_session_id
from parley.core.records import QueuedMessageRecord, SessionRecord
from parley.errors import InvalidArgument, RateLimited
from parley.runtime import audit
from parley.runtime.access import Principal
from parley.runtime.fair_use import FairUse
from parley.runtime.service.checks import Checks, render_first_message
from parley.runtime.service.parts import Parts
from parley.runtime.session_log import about

logger = logging.getLogger("parley.runtime.service")

# The tags of an eval's scripted sessions (webhooks and schedules leave `eval` sessions out).
EVAL_TAGS = ["eval"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScriptedStart:
    """A scripted conversation to run: the agent, the version its turns are pinned to (None: the
    live definition, stored as a version and pinned), the messages, and a task's inputs."""

    agent: str
    version: str | None
    messages: list[str]
    client_message_id: str
    kind: str | None = None
    inputs: dict[str, Any] | None = None
    title: str | None = None


class EvalCommands:
    def __init__(self, parts: Parts, checks: Checks, fair_use: FairUse) -> None:
        self._parts = parts
        self._checks = checks
        self._fair_use = fair_use

    async def start_scripted(self, caller: Principal, start: ScriptedStart) -> SessionRecord:
        """The session of `start` (the one this client_message_id started before, if any)."""
        p, checks = self._parts, self._checks
        checks.client_message_id(start.client_message_id)
        existing = await p.store.find_started(caller.id, start.client_message_id)
        if existing is not None:
            return self._same(existing, start)
        pin, agent = await self.pin(caller, start.agent, start.version)
        kind = checks.kind(agent, start.kind)
        checks.inputs(agent, start.inputs)
        texts = [checks.message(text) for text in start.messages]
        if not texts:
            raise InvalidArgument("messages", "give at least one message to send")
        if len(texts) > agent.limits.max_turns:
            raise InvalidArgument(
                "messages",
                f"are {len(texts)}, more than the {agent.limits.max_turns} turns agent '{agent.name}' "
                "allows a session: split the conversation into several cases",
            )
        first = render_first_message(texts[0], start.inputs)
        assert first is not None
        checks.first_message(first, [])
        now = p.clock()
        session_id = new_session_id()
        queued = [QueuedMessageRecord.new(session_id, text, now=now) for text in [first, *texts[1:]]]
        queued[0] = replace(queued[0], client_message_id=start.client_message_id)
        record = SessionRecord.new(
            session_id,
            agent=agent.name,
            owner=caller.id,
            kind=kind,
            now=now,
            inputs=start.inputs,
            start_client_message_id=start.client_message_id,
            title=(start.title or f"Eval of {agent.name}")[:200],
            tags=EVAL_TAGS,
        )
        record = replace(record, agent_version_pin=pin)
        claim = self._fair_use.claim(caller, new_session=True, message=True, now=now)
        admit = (
            None if claim is None else Admit(claim.scope, lambda usage: claim.admit(usage, starts_turn=True))
        )
        entry = p.audit.entry(caller, audit.MESSAGE, session_id=session_id, target=queued[0].id)
        try:
            created = await p.store.create_session(
                transitions.starting(record, queued[0]),
                queued[0],
                now,
                admit=admit,
                audit=entry,
                more=queued[1:],
            )
        except RateLimited as exc:
            await p.audit.refused(caller, audit.MESSAGE, None, None, str(exc), reason="limit")
            raise
        if not created:
            # A concurrent run of the same eval started it first.
            existing = await p.store.find_started(caller.id, start.client_message_id)
            if existing is None:
                raise InvalidArgument("client_message_id", "was just used by another call; retry")
            return self._same(existing, start)
        logger.info("session %s runs an eval case on agent %s", session_id, agent.name, extra=about(record))
        p.signals.work_available(session_id)
        stored = await p.store.get_session(session_id)
        assert stored is not None
        return stored

    async def pin(self, caller: Principal, name: str, version: str | None) -> tuple[str, AgentConfig]:
        """The stored version of agent `name` (one `caller` may use) an eval's turns run on, and
        its definition: `version` (one that is live or stored), or the live definition, stored
        now so that any process runs exactly it."""
        p = self._parts
        live = self._checks.agent(caller, name)
        if version is None or version == p.agents.version(live.name):
            return (await p.agents.store_definition(live, p.clock())).version, live
        await p.agents.checked_version(live.name, version, "version")
        agent = await p.agents.for_turn(live.name, version)
        if agent is None:
            raise InvalidArgument(
                "version", f"the definition of version {version[:40]!r} is not in the database"
            )
        return version, agent

    @staticmethod
    def _same(existing: SessionRecord, start: ScriptedStart) -> SessionRecord:
        if existing.agent != start.agent or "eval" not in existing.tags:
            raise InvalidArgument(
                "client_message_id",
                f"was already used to start session {existing.id}, which is not this eval case's",
            )
        return existing
