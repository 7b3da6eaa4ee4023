"""Replaying a session: a new session of the caller's, tagged `eval` and `replay`, that sends the
original's messages again, each to its own turn, on the agent as it is now (or a chosen agent).
Its calls that may change anything are settled from the original's record (core/replays.py), so a
replay never repeats a real-world write. It is an ordinary session: it survives crashes, shows
in /ui and is removed by retention."""

from __future__ import annotations

import logging
from dataclasses import replace

from parley.config import AgentConfig, effective_limits
from parley.core import transitions
from parley.core.changes import Admit
from parley.core.ids import SessionId, new_session_id
from parley.core.records import AuditRecord, QueuedMessageRecord, SessionRecord
from parley.errors import InvalidArgument, RateLimited, SessionLimitReached
from parley.runtime import audit
from parley.runtime.access import Principal, may_use
from parley.runtime.fair_use import FairUse
from parley.runtime.service.checks import Checks
from parley.runtime.service.parts import Parts
from parley.runtime.session_log import about

logger = logging.getLogger("parley.runtime.service")

# The tags of every replay session (evals and webhooks leave `eval` sessions out).
REPLAY_TAGS = ["eval", "replay"]


class ReplayCommands:
    def __init__(self, parts: Parts, fair_use: FairUse) -> None:
        self._parts = parts
        self._fair_use = fair_use

    async def replay(
        self,
        caller: Principal,
        session_id: str,
        agent: str | None = None,
        version: str | None = None,
        definition: AgentConfig | None = None,
        client_message_id: str | None = None,
    ) -> SessionRecord:
        """Start the replay of `session_id` (one the caller may read) on `agent` (default: the
        session's own agent) as configured now, or pinned to its stored `version`, or on
        `definition` (an agent file not deployed: stored as a version, and pinned); returns the
        replay session, whose turns then run one by one like any queued messages. With
        `client_message_id` (an eval's), a replay that id started before is returned instead."""
        p = self._parts
        original = await p.access.visible(caller, session_id, audit.REPLAY)
        if client_message_id is not None:
            Checks.client_message_id(client_message_id)
            existing = await p.store.find_started(caller.id, client_message_id)
            if existing is not None:
                return _same_replay(existing, original)
        name = definition.name if definition is not None else agent or original.agent
        pin = await self._pin(name, version, definition)
        definition = definition or p.agents.get(name)
        if definition is None:
            raise InvalidArgument("agent", f"no agent '{name}' is configured; list_agents shows the agents")
        if not may_use(caller, definition):
            raise InvalidArgument("agent", f"agent '{name}' is not available to {caller.id}")
        sent = await p.store.consumed_messages(original.id)
        if not sent:
            raise InvalidArgument("session_id", f"session {original.id} has no message to replay")
        limits = effective_limits(definition.limits, original.settings)
        if len(sent) > limits.max_turns:
            raise SessionLimitReached(
                original.id,
                f"it has {len(sent)} messages, more than the {limits.max_turns} turns agent '{name}' allows.",
            )
        now = p.clock()
        replay_id = new_session_id()
        queued = [_again(message, replay_id, now) for message in sent]
        record = SessionRecord.new(
            replay_id,
            agent=name,
            owner=caller.id,
            kind=original.kind,
            now=now,
            inputs=original.inputs,
            settings=original.settings,
            title=f"Replay of {original.title or original.id}"[:200],
            tags=REPLAY_TAGS,
            replay_of=original.id,
            start_client_message_id=client_message_id,
        )
        record = replace(record, parent_session_id=original.id, parent_turn=0, agent_version_pin=pin)
        shared = sorted({a["sha256"] for m in queued for a in m.attachments or [] if a.get("sha256")})
        entry = p.audit.entry(caller, audit.REPLAY, session_id=replay_id, target=original.id)
        created = await self._create(caller, original.id, record, queued, entry, shared)
        if not created:
            # A concurrent call with the same client_message_id started it first.
            existing = await p.store.find_started(caller.id, client_message_id or "")
            if existing is None:
                raise InvalidArgument("client_message_id", "was just used by another call; retry")
            return _same_replay(existing, original)
        logger.info("session %s replays %s on agent %s", replay_id, original.id, name, extra=about(record))
        p.signals.work_available(replay_id)
        stored = await p.store.get_session(replay_id)
        assert stored is not None
        return stored

    async def _create(
        self,
        caller: Principal,
        original: SessionId,
        record: SessionRecord,
        queued: list[QueuedMessageRecord],
        entry: AuditRecord,
        shared: list[str],
    ) -> bool:
        """Store the replay with its messages (False: its client_message_id was taken). A replay
        counts against the caller's fair use as a session it starts does."""
        p = self._parts
        claim = self._fair_use.claim(caller, new_session=True, message=True, now=record.created_at)
        admit = (
            None if claim is None else Admit(claim.scope, lambda usage: claim.admit(usage, starts_turn=True))
        )
        try:
            return await p.store.create_session(
                transitions.starting(record, queued[0]),
                queued[0],
                record.created_at,
                admit=admit,
                audit=entry,
                more=queued[1:],
                shared=shared,
            )
        except RateLimited as exc:
            await p.audit.refused(caller, audit.REPLAY, original, None, str(exc), reason="limit")
            raise

    async def _pin(self, name: str, version: str | None, definition: AgentConfig | None) -> str | None:
        """The version the replay's turns are pinned to (None: the live definition)."""
        agents = self._parts.agents
        if definition is not None:
            return (await agents.store_definition(definition, self._parts.clock())).version
        if version is None:
            return None
        return await agents.checked_version(name, version, "version")


def _same_replay(existing: SessionRecord, original: SessionRecord) -> SessionRecord:
    if existing.replay_of != original.id:
        raise InvalidArgument(
            "client_message_id",
            f"was already used to start session {existing.id}, which is not a replay of {original.id}",
        )
    return existing


def _again(message: QueuedMessageRecord, session_id: SessionId, now: float) -> QueuedMessageRecord:
    """A message of the original, sent again to the replay (its mode and settings kept)."""
    return QueuedMessageRecord.new(
        session_id,
        message.text,
        now=now,
        settings=message.settings,
        attachments=message.attachments,
        mode=message.mode,
    )
