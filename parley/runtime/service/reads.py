"""What a caller is shown: the agents it may use, a session's details, pages of sessions, the
interrupts waiting for it, a turn's outcome."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parley.config import AgentConfig, effective_memory
from parley.config.attachments import AttachmentsConfig
from parley.core.ids import QueuedMessageId
from parley.core.records import (
    AttachmentBlob,
    InterruptRecord,
    PendingInterrupt,
    QueuedMessageRecord,
    SessionRecord,
    TurnRecord,
)
from parley.errors import AttachmentNotFound, InvalidArgument
from parley.runtime import audit
from parley.runtime.access import Principal
from parley.runtime.mcp.connection import Caller
from parley.runtime.offer import Offer
from parley.runtime.service.checks import Checks, check_session_cursor, usable_agents
from parley.runtime.service.outcomes import SessionDetails, TurnOutcome, turn_outcome
from parley.runtime.service.parts import Parts
from parley.runtime.service.requests import MessagesPage, SessionQuery, Waiting
from parley.runtime.service.waits import Waits
from parley.runtime.session_access import Decider
from parley.runtime.toolbox import Toolbox, enabled_tools

# Decisions get_session shows (newest first; `parley audit` has them all).
DECISIONS_SHOWN = 50
MAX_MESSAGES_PAGE = 200
# Turns get_session lists (the latest), each with the agent version it ran on.
TURNS_SHOWN = 50
DEFAULT_MESSAGES_PAGE = 50
# Forks get_session lists (the newest).
FORKS_SHOWN = 20


class Reads:
    def __init__(
        self, parts: Parts, checks: Checks, waits: Waits, toolbox: Toolbox, model_names: Sequence[str]
    ) -> None:
        self._parts = parts
        self._checks = checks
        self._waits = waits
        self._toolbox = toolbox
        self._model_names = list(model_names)

    @property
    def model_names(self) -> list[str]:
        return list(self._model_names)

    def agents(self, caller: Principal) -> list[AgentConfig]:
        """The agents `caller` may use (an agent's `users:` may leave some out)."""
        return usable_agents(self._parts.agents, caller)

    async def describe_agents(self, caller: Principal) -> list[tuple[AgentConfig, Offer, str]]:
        """Each agent `caller` may use, with the tools a session of its default kind would be offered
        now, and the version of its definition."""
        described = []
        for agent in self.agents(caller):
            kind = "task" if "task" in agent.kinds else agent.resolved_default_kind
            offer = await self._toolbox.offer(agent, kind, Caller(principal=caller.id))
            described.append((agent, offer, self._parts.agents.version(agent.name) or ""))
        return described

    async def session_agent(self, session: SessionRecord) -> AgentConfig | None:
        """The definition a session's next turn runs on: the version it is pinned to, else its
        agent as configured now (None: neither is known any more)."""
        if session.agent_version_pin is not None:
            return await self._parts.agents.for_turn(session.agent, session.agent_version_pin)
        return self._parts.agents.get(session.agent)

    async def session_tools(self, session: SessionRecord, agent: AgentConfig | None = None) -> list[str]:
        """The tools a session's next model call is offered: its agent's, narrowed by its settings."""
        agent = agent or await self.session_agent(session)
        if agent is None:
            return []
        offer = await self._toolbox.offer(agent, session.kind, Caller(principal=session.owner))
        return [t.name for t in offer.narrowed(enabled_tools(session.settings)).tools]

    async def find_started(self, caller: Principal, client_message_id: str) -> SessionRecord | None:
        """The session `caller` started with this client_message_id, if any."""
        self._checks.client_message_id(client_message_id)
        return await self._parts.store.find_started(caller.id, client_message_id)

    async def get_session(
        self,
        caller: Principal,
        session_id: str,
        page: MessagesPage | None = None,
        waiting: Waiting | None = None,
    ) -> SessionDetails:
        """The session with a page of its messages (`page`), after waiting (bounded) until it rests
        when `waiting` asks for seconds."""
        page = page or MessagesPage()
        waiting = waiting or Waiting()
        store = self._parts.store
        session = await self._parts.access.visible(caller, session_id)
        if page.limit is not None and not 1 <= page.limit <= MAX_MESSAGES_PAGE:
            raise InvalidArgument("messages_limit", f"must be between 1 and {MAX_MESSAGES_PAGE}")
        if page.start is not None and page.start < 1:
            raise InvalidArgument("messages_from", "must be 1 or more (message sequence numbers start at 1)")
        if waiting.seconds:
            wait_s = self._checks.wait_s(waiting.seconds)
            session = await self._waits.wait_until_rest(session.id, wait_s, waiting.on_progress)
        total = await store.count_messages(session.id)
        limit = page.limit or DEFAULT_MESSAGES_PAGE
        start = page.start if page.start is not None else max(1, total - limit + 1)
        messages = await store.list_messages(session.id, start, limit)
        last_turn = await store.get_turn(session.last_turn_id) if session.last_turn_id else None
        trail = await store.list_audit(session.id, None, None, DECISIONS_SHOWN * 4)
        agent = await self.session_agent(session)
        return SessionDetails(
            session=session,
            messages=messages,
            total_messages=total,
            queued=await store.list_queued(session.id),
            last_turn=last_turn,
            pending=await store.list_interrupts(session.id, pending_only=True),
            decisions=[e for e in trail if e.action in audit.DECISIONS][:DECISIONS_SHOWN],
            tools=await self.session_tools(session, agent),
            memory=effective_memory(agent, session.settings) if agent is not None else None,
            turns=(await store.list_turns(session.id))[-TURNS_SHOWN:],
            forks=await store.list_forks(session.id, None if caller.is_admin else caller.id, FORKS_SHOWN),
        )

    def attachment_limits(self) -> AttachmentsConfig:
        return self._checks.attachment_limits

    def check_attachments(self, attachments: list[Any] | None) -> None:
        """Refuse attachments this server does not take, before a caller starts anything for them."""
        self._checks.attachments(attachments)

    async def sent_messages(self, caller: Principal, session_id: str) -> list[QueuedMessageRecord]:
        """The messages of the caller's session that a turn took, in order (a chat's history)."""
        session = await self._parts.access.visible(caller, session_id)
        return await self._parts.store.consumed_messages(session.id)

    async def attachment(self, caller: Principal, session_id: str, sha256: str) -> AttachmentBlob:
        """The bytes of an attachment a message of the caller's session carried."""
        session = await self._parts.access.visible(caller, session_id)
        blob = await self._parts.store.session_attachment(session.id, sha256.lower())
        if blob is None:
            raise AttachmentNotFound(session.id, sha256)
        return blob

    async def list_sessions(
        self, caller: Principal, query: SessionQuery
    ) -> tuple[list[SessionRecord], str | None]:
        """`caller`'s sessions; with parley:admin, every owner's (or `query.owner`'s); narrowed by
        `query.match` (session_labels.session_filter)."""
        check_session_cursor(query.cursor)
        owner = query.owner
        if not caller.is_admin:
            if owner not in (None, caller.id):
                raise InvalidArgument(
                    "owner",
                    "only callers with the parley:admin scope list other principals' sessions; leave it out",
                )
            owner = caller.id
        page = await self._parts.store.list_sessions(
            owner, query.status, query.agent, query.cursor, query.limit, query.match
        )
        return page.sessions, page.next_cursor

    async def pending(self, caller: Principal, session_id: str) -> list[InterruptRecord]:
        """The interrupts the session waits on, if `caller` may read it or decide them."""
        session = await self._parts.access.decidable(caller, session_id)
        return await self._parts.store.list_interrupts(session.id, pending_only=True)

    async def list_drafts(self, caller: Principal, limit: int) -> list[SessionRecord]:
        """The draft plans waiting for `caller`'s review (session_access.SessionAccess.list_drafts)."""
        return await self._parts.access.list_drafts(caller, limit)

    async def list_pending(self, caller: Principal, limit: int) -> list[PendingInterrupt]:
        """The interrupts waiting for `caller`'s decision (session_access.SessionAccess.list_pending)."""
        return await self._parts.access.list_pending(caller, limit)

    def decider(self, caller: Principal, session: SessionRecord | PendingInterrupt) -> Decider:
        """Whether `caller` may decide the interrupts of `session` (or a pending one's) by the tools
        or /v1, else who does."""
        return self._parts.access.decider(caller, session.agent, session.owner)

    async def turn_outcome(self, turn: TurnRecord, message_id: QueuedMessageId | None = None) -> TurnOutcome:
        return await turn_outcome(self._parts.steps, turn, message_id)
