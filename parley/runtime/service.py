"""The operations callers perform on sessions, independent of MCP.

Every mutating operation commits first and then waits, bounded, for the turn that
consumes the caller's message. The wait is only the caller's: cancelling it (a client
timeout, a dropped connection) never touches the turn.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import anyio
from jsonschema import Draft202012Validator

from parley.config import (
    MEMORY_MODES,
    OVERRIDABLE_LIMITS,
    AgentConfig,
    Memory,
    RuntimeConfig,
    effective_limits,
    effective_memory,
)
from parley.config.attachments import AttachmentsConfig
from parley.config.auth import LimitsConfig
from parley.core.states import ENDED_SESSION, TURN_ENDED, OutcomeStatus
from parley.errors import (
    AgentRemoved,
    AttachmentNotFound,
    InvalidArgument,
    RateLimited,
    RequestError,
    SessionBusy,
    SessionClosed,
    SessionLimitReached,
    SessionNotFound,
    UnknownAgent,
)
from parley.ids import (
    QueuedMessageId,
    SessionId,
    TurnId,
    is_queued_message_id,
    is_session_id,
    new_queued_message_id,
    new_session_id,
    new_turn_id,
)
from parley.runtime import audit, transitions
from parley.runtime.access import Principal, may_see, may_use
from parley.runtime.agent_catalog import AgentCatalog
from parley.runtime.attachments import check_attachments
from parley.runtime.audit import Audit
from parley.runtime.decisions import Decision, Decisions, checked_answer
from parley.runtime.fair_use import FairUse
from parley.runtime.model_titles import ModelTitles, wants_model_title
from parley.runtime.progress import ProgressFeed, ProgressFn
from parley.runtime.session_access import AskHuman, Decider, Person, SessionAccess
from parley.runtime.session_labels import check_tags, check_title, proposed_title
from parley.runtime.session_log import about
from parley.runtime.session_steps import SessionSteps
from parley.runtime.signals import SessionSignals
from parley.runtime.text import NO_VISIBLE_TEXT, has_visible_text
from parley.runtime.toolbox import Offer, Toolbox, enabled_tools
from parley.runtime.tracing import current_trace_context
from parley.storage.base import (
    AttachmentBlob,
    AuditRecord,
    DeleteOutcome,
    InterruptRecord,
    MessageRecord,
    PendingInterrupt,
    QueuedMessageRecord,
    Resolution,
    SessionFilter,
    SessionRecord,
    SessionStatus,
    ToolCallRecord,
    TurnRecord,
)
from parley.storage.changes import SessionSnapshot, SnapshotScope
from parley.storage.ports import Store

MAX_SETTINGS_CHARS = 4096
# What a caller may set for a session (start_session / send_message `settings`).
SETTINGS = ("model", "limits", "enabled_tools", "memory")
# Decisions get_session shows (newest first; `parley audit` has them all).
DECISIONS_SHOWN = 50
MAX_MESSAGES_PAGE = 200
# Turns get_session lists (the latest), each with the agent version it ran on.
TURNS_SHOWN = 50
DEFAULT_MESSAGES_PAGE = 50

logger = logging.getLogger(__name__)

T = TypeVar("T")


class _Again:
    """What a look of `_until` answers to look again at once (something changed it already knows of)."""


AGAIN = _Again()


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnOutcome:
    session_id: SessionId
    turn_id: TurnId | None
    status: OutcomeStatus
    answer: str | None = None
    error: str | None = None
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    model_calls: int = 0
    queued_message_id: QueuedMessageId | None = None
    session_status: SessionStatus | None = None
    result: Any = None
    pending: list[InterruptRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The version of the agent definition the turn runs on (None: stored before versions were kept).
    agent_version: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionDetails:
    session: SessionRecord
    messages: list[MessageRecord]
    total_messages: int
    queued: list[QueuedMessageRecord]
    last_turn: TurnRecord | None
    pending: list[InterruptRecord] = field(default_factory=list)
    # Who decided what (approvals, rejections, answers, declines; refused attempts too), newest first.
    decisions: list[AuditRecord] = field(default_factory=list)
    # The tools its next turn is offered (its agent's, narrowed by settings.enabled_tools).
    tools: list[str] = field(default_factory=list)
    # What of the transcript its next turn's model sees (None: its agent is no longer configured).
    memory: Memory | None = None
    # Its latest turns, oldest first: each names the agent version it ran on.
    turns: list[TurnRecord] = field(default_factory=list)


class SessionService:
    def __init__(
        self,
        *,
        store: Store,
        agents: AgentCatalog,
        signals: SessionSignals,
        runtime: RuntimeConfig,
        clock: Callable[[], float],
        toolbox: Toolbox,
        model_names: Sequence[str] = (),
        limits: LimitsConfig | None = None,
        attachments: AttachmentsConfig | None = None,
        titles: ModelTitles | None = None,
    ) -> None:
        self._attachments = attachments or AttachmentsConfig()
        self._toolbox = toolbox
        self._titles = titles
        self._model_names = list(model_names)
        self._decisions = Decisions(store, agents, clock)
        self._audit = Audit(store, clock)
        self._access = SessionAccess(store, agents, self._audit)
        self._fair_use = FairUse(limits or LimitsConfig(), store)
        self._store = store
        self._steps = SessionSteps(store)
        self._agents = agents
        self._signals = signals
        self._runtime = runtime
        self._clock = clock
        # Set when the only client left (stdin closed): every wait answers at once.
        self._waits_ended = False

    def end_waits(self) -> None:
        """The client is gone: every wait, running or still to come, answers now with what it has
        (a turn still running says so, with its session id) instead of waiting out its time."""
        self._waits_ended = True
        self._signals.everything_changed()

    # ------------------------------------------------------------------ validation helpers

    @property
    def poll_interval_s(self) -> float:
        """How often a wait looks at the database by itself (longer while the change feed is live)."""
        return self._signals.poll_interval_s

    @property
    def model_names(self) -> list[str]:
        return list(self._model_names)

    @property
    def audit(self) -> Audit:
        return self._audit

    def agents(self, caller: Principal) -> list[AgentConfig]:
        """The agents `caller` may use (an agent's `users:` may leave some out)."""
        return sorted((a for a in self._agents.values() if may_use(caller, a)), key=lambda a: a.name)

    async def describe_agents(self, caller: Principal) -> list[tuple[AgentConfig, Offer, str]]:
        """Each agent `caller` may use, with the tools a session of its default kind would be offered
        now, and the version of its definition."""
        described = []
        for agent in self.agents(caller):
            kind = "task" if "task" in agent.kinds else agent.resolved_default_kind
            offer = await self._toolbox.offer(agent, kind, None)
            described.append((agent, offer, self._agents.version(agent.name) or ""))
        return described

    def _agent(self, caller: Principal, name: str) -> AgentConfig:
        """The agent `caller` asks for; one it may not use is unknown to it."""
        agent = self._agents.get(name)
        if agent is None or not may_use(caller, agent):
            raise UnknownAgent(name, [a.name for a in self.agents(caller)])
        return agent

    def _check_message(self, message: str) -> str:
        if not has_visible_text(message):
            raise InvalidArgument("message", f"{NO_VISIBLE_TEXT}; write what you want the agent to do")
        limit = self._runtime.max_message_chars
        if len(message) > limit:
            raise InvalidArgument(
                "message", f"is {len(message)} characters long; the limit is {limit}. Shorten it or split it."
            )
        return message

    def _check_settings(
        self, settings: dict[str, Any] | None, agent: AgentConfig | None
    ) -> dict[str, Any] | None:
        """Settings a caller may change: which of the configured models to use (never a URL or a
        key), and lower limits for this session (the agent's limits are the ceilings)."""
        if settings is None:
            return None
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise InvalidArgument(
                "settings",
                f"unknown setting(s) {', '.join(unknown)}; the settings are: {', '.join(SETTINGS)}",
            )
        settings = dict(settings)
        if settings.get("limits") is not None:
            settings["limits"] = _checked_limits(settings["limits"], agent)
        if settings.get("memory") is not None:
            _check_memory(settings["memory"], agent)
        if len(json.dumps(settings)) > MAX_SETTINGS_CHARS:
            raise InvalidArgument("settings", f"must be at most {MAX_SETTINGS_CHARS} characters as JSON")
        model = settings.get("model")
        if model is not None and model not in self._model_names:
            names = ", ".join(self._model_names) or "none are configured (parley.yaml models:)"
            raise InvalidArgument(
                "settings.model", f"'{model}' is not a model of this server; choose one of: {names}"
            )
        return settings

    async def _check_enabled_tools(
        self, settings: dict[str, Any] | None, agent: AgentConfig | None, kind: str
    ) -> None:
        """settings.enabled_tools may name only tools the agent has (settings narrow, never widen);
        a tool of a server that cannot be listed now is taken on trust (it stays narrowed to the
        agent's tools when offered)."""
        enabled = (settings or {}).get("enabled_tools")
        if enabled is None or agent is None:
            return
        if not isinstance(enabled, list) or not all(isinstance(n, str) for n in enabled):
            raise InvalidArgument(
                "settings.enabled_tools",
                'must be a list of tool names from list_agents, e.g. ["ask_user"] (null: all of the agent\'s)',
            )
        offer = await self._toolbox.offer(agent, kind, None)
        unknown = [
            name
            for name in enabled
            if name not in offer.bindings and not any(name.startswith(f"{s}__") for s in offer.unavailable)
        ]
        if unknown:
            raise InvalidArgument(
                "settings.enabled_tools",
                f"{', '.join(unknown)}: not a tool of agent '{agent.name}', and settings can only narrow its "
                f"tools; choose among: {', '.join(offer.bindings) or 'none (it has no tools)'}",
            )

    async def session_tools(self, session: SessionRecord) -> list[str]:
        """The tools a session's next model call is offered: its agent's, narrowed by its settings."""
        agent = self._agents.get(session.agent)
        if agent is None:
            return []
        offer = await self._toolbox.offer(agent, session.kind, None)
        return [t.name for t in offer.narrowed(enabled_tools(session.settings)).tools]

    def _wait_s(self, wait_seconds: float | None) -> float:
        if wait_seconds is None:
            return min(self._runtime.default_wait_s, self._runtime.max_wait_s)
        if wait_seconds < 0:
            raise InvalidArgument("wait_seconds", "must be 0 or more")
        return min(wait_seconds, self._runtime.max_wait_s)

    async def may_answer_as_person(self, caller: Principal, session_id: str) -> bool:
        """Whether what the person behind `caller`'s client answers decides this session's interrupts."""
        return await self._access.may_answer_as_person(caller, session_id)

    async def person_for(
        self, caller: Principal, session_id: str, ask_human: AskHuman | None
    ) -> Person | None:
        return await self._access.person_for(caller, session_id, ask_human)

    async def list_pending(self, caller: Principal, limit: int) -> list[PendingInterrupt]:
        return await self._access.list_pending(caller, limit)

    def decider(self, caller: Principal, session: SessionRecord | PendingInterrupt) -> Decider:
        """Whether `caller` may decide the interrupts of `session` (or a pending one's) by the tools
        or /v1, else who does."""
        return self._access.decider(caller, session.agent, session.owner)

    async def visible_session(self, caller: Principal, session_id: str) -> SessionRecord:
        """The session, if `caller` may read it; anything else is SessionNotFound (as unknown)."""
        return await self._access.visible(caller, session_id)

    async def decidable_session(self, caller: Principal, session_id: str) -> SessionRecord:
        """The session, if `caller` may read it or decide its interrupts (an approver of its agent)."""
        return await self._access.decidable(caller, session_id)

    async def find_started(self, caller: Principal, client_message_id: str) -> SessionRecord | None:
        """The session `caller` started with this client_message_id, if any."""
        self._check_client_message_id(client_message_id)
        return await self._store.find_started(caller.id, client_message_id)

    # ------------------------------------------------------------------ operations

    @staticmethod
    def _check_client_message_id(value: str | None) -> str | None:
        if value is not None and not _CLIENT_MESSAGE_ID.fullmatch(value):
            raise InvalidArgument(
                "client_message_id",
                "must be 1 to 128 characters of letters, digits and . _ : - (for example a UUID)",
            )
        return value

    def _check_inputs(self, agent: AgentConfig, inputs: dict[str, Any] | None) -> None:
        if agent.input_schema is None:
            if inputs is not None:
                raise InvalidArgument("inputs", f"agent '{agent.name}' takes no inputs; leave inputs out")
            return
        errors = sorted(
            Draft202012Validator(agent.input_schema).iter_errors(inputs or {}), key=lambda e: list(e.path)
        )
        if errors:
            problems = "; ".join(
                f"{'/'.join(str(p) for p in e.path) or '(inputs)'}: {e.message}" for e in errors[:10]
            )
            raise InvalidArgument("inputs", f"do not match agent '{agent.name}''s input schema: {problems}")

    async def start_session(
        self,
        caller: Principal,
        agent_name: str,
        message: str | None,
        wait_seconds: float | None,
        *,
        kind: str | None = None,
        inputs: dict[str, Any] | None = None,
        client_message_id: str | None = None,
        on_progress: ProgressFn | None = None,
        ask_human: AskHuman | None = None,
        settings: dict[str, Any] | None = None,
        attachments: list[Any] | None = None,
    ) -> TurnOutcome:
        agent = self._agent(caller, agent_name)
        settings = self._check_settings(settings, agent)
        if message is not None:
            self._check_message(message)
        refs, blobs = check_attachments(attachments, self._attachments)
        wait_s = self._wait_s(wait_seconds)
        self._check_client_message_id(client_message_id)
        session_kind = kind or agent.resolved_default_kind
        if session_kind not in agent.kinds:
            raise InvalidArgument(
                "kind", f"agent '{agent.name}' runs {' or '.join(agent.kinds)} sessions, not '{session_kind}'"
            )
        self._check_inputs(agent, inputs)
        await self._check_enabled_tools(settings, agent, session_kind)
        text = render_first_message(message, inputs)
        if text is not None and len(text) > self._runtime.max_message_chars:
            raise InvalidArgument(
                "inputs", "with the message they exceed the message size limit; shorten them"
            )
        if refs and text is None:
            raise InvalidArgument("attachments", "go with a message: add one that says what they are for")

        if client_message_id is not None:
            existing = await self._store.find_started(caller.id, client_message_id)
            if existing is not None:
                return await self._retry_of_start(existing, agent.name, text, refs, wait_s, on_progress)
        try:
            await self._fair_use.admit(caller, new_session=True, message=text is not None, starts_turn=True)
        except RateLimited as exc:
            action = audit.MESSAGE if text else audit.START
            await self._audit.refused(caller, action, None, None, str(exc), reason="limit")
            raise
        now = self._clock()
        session_id = new_session_id()
        record = SessionRecord.new(
            session_id,
            agent=agent.name,
            owner=caller.id,
            kind=session_kind,
            now=now,
            inputs=inputs,
            start_client_message_id=client_message_id,
            settings=settings,
            title=None if self._model_titled(agent, message) else proposed_title(message),
        )
        queued = None
        if text is not None:
            queued = QueuedMessageRecord(
                id=new_queued_message_id(),
                session_id=session_id,
                seq=0,
                text=text,
                status="queued",
                turn_id=None,
                created_at=now,
                client_message_id=client_message_id,
                attachments=refs or None,
                blobs=blobs,
                trace_context=current_trace_context(),
            )
        if not await self._store.create_session(transitions.starting(record, queued), queued, now):
            # A concurrent retry with the same client_message_id won the race.
            existing = await self._store.find_started(caller.id, client_message_id or "")
            if existing is None:
                raise InvalidArgument("client_message_id", "was just used by another call; retry")
            return await self._retry_of_start(existing, agent.name, text, refs, wait_s, on_progress)
        logger.info(
            "session %s started with agent %s (%s)", session_id, agent.name, session_kind, extra=about(record)
        )
        await self._audit.record(
            caller,
            audit.MESSAGE if queued else audit.START,
            session_id=session_id,
            target=queued.id if queued else None,
        )
        if queued is None:
            return TurnOutcome(session_id=session_id, turn_id=None, status="idle", session_status="idle")
        if record.title is None:
            await self._title(session_id, agent, message)
        self._signals.work_available(session_id)
        return await self.wait_for_message(
            session_id, queued.id, wait_s, on_progress, self._access.person(caller, record, ask_human)
        )

    async def _retry_of_start(
        self,
        existing: SessionRecord,
        agent: str,
        text: str | None,
        refs: list[dict[str, Any]],
        wait_s: float,
        on_progress: ProgressFn | None,
    ) -> TurnOutcome:
        first = await self._store.first_message(existing.id)
        sent = (first.text, first.attachments or []) if first else (None, [])
        if existing.agent != agent or sent != (text, refs):
            raise InvalidArgument(
                "client_message_id",
                f"was already used to start session {existing.id} with a different agent or message; "
                "use a new client_message_id for a new session",
            )
        if first is None:
            return TurnOutcome(
                session_id=existing.id, turn_id=None, status="idle", session_status=existing.status
            )
        return await self.wait_for_message(existing.id, first.id, wait_s, on_progress)

    async def send_message(
        self,
        caller: Principal,
        session_id: str,
        message: str | None,
        wait_seconds: float | None,
        *,
        client_message_id: str | None = None,
        on_progress: ProgressFn | None = None,
        ask_human: AskHuman | None = None,
        steer: bool = False,
        queued_message_id: str | None = None,
        settings: dict[str, Any] | None = None,
        attachments: list[Any] | None = None,
    ) -> TurnOutcome:
        act = audit.STEER if steer else audit.MESSAGE
        session = await self._access.visible(caller, session_id, act, [queued_message_id or ""])
        agent = self._agents.get(session.agent)
        if agent is None and session.status not in ENDED_SESSION:
            raise AgentRemoved(session.id, session.agent)
        if agent is not None and not may_use(caller, agent):
            # The agent's users: changed since the session started; its history stays readable.
            raise InvalidArgument(
                "session_id", f"agent '{agent.name}' is no longer available to {caller.id}; nothing was sent"
            )
        settings = self._check_settings(settings, agent)
        await self._check_enabled_tools(settings, agent, session.kind)
        person = self._access.person(caller, session, ask_human)
        refs, blobs = check_attachments(attachments, self._attachments)
        if queued_message_id is not None:
            if refs:
                raise InvalidArgument(
                    "attachments", "leave them out when promoting a queued message; it keeps its own"
                )
            return await self._promote(
                caller, session, queued_message_id, steer, message, wait_seconds, on_progress, person
            )
        if message is None:
            raise InvalidArgument(
                "message", "is required (unless you promote a queued message with queued_message_id)"
            )
        self._check_message(message)
        wait_s = self._wait_s(wait_seconds)
        self._check_client_message_id(client_message_id)
        if client_message_id is not None:
            sent = await self._store.find_sent(session.id, client_message_id)
            if sent is not None:
                return await self._retry_of_send(sent, message, refs, wait_s, on_progress)
        # A message to a busy session queues behind (or steers) its turn: no turn more runs at once.
        try:
            await self._fair_use.admit(
                caller, new_session=False, message=True, starts_turn=session.status == "idle"
            )
        except RateLimited as exc:
            await self._audit.refused(caller, act, session.id, None, str(exc), reason="limit")
            raise
        limits = effective_limits(agent.limits, {**session.settings, **(settings or {})}) if agent else None
        max_turns = limits.max_turns if limits is not None else session.turn_count
        now = self._clock()
        queued = QueuedMessageRecord(
            id=new_queued_message_id(),
            session_id=session.id,
            seq=0,
            text=message,
            status="queued",
            turn_id=None,
            created_at=now,
            client_message_id=client_message_id,
            steer=steer,
            settings=settings,
            attachments=refs or None,
            blobs=blobs,
            trace_context=current_trace_context(),
        )
        entry = self._audit.entry(
            caller, audit.STEER if steer else audit.MESSAGE, session_id=session.id, target=queued.id
        )
        outcome = await self._steps.enqueue_message(session.id, session.owner, queued, max_turns, now, entry)
        if outcome == "duplicate":
            sent = await self._store.find_sent(session.id, client_message_id or "")
            if sent is None:
                raise InvalidArgument("client_message_id", "was just used by another call; retry")
            return await self._retry_of_send(sent, message, refs, wait_s, on_progress)
        if outcome != "queued":
            refusal = await self._refusal(session, outcome, max_turns)
            await self._audit.refused(caller, act, session.id, None, str(refusal), reason=outcome)
            raise refusal
        if session.title is None:
            await self._title(session.id, agent, message)
        self._signals.work_available(session.id)
        return await self.wait_for_message(session.id, queued.id, wait_s, on_progress, person)

    async def _refusal(self, session: SessionRecord, outcome: str, max_turns: int) -> RequestError:
        """Why a message was not queued (the queueing transaction's `outcome`)."""
        if outcome == "closed":
            latest = await self._store.get_session(session.id) or session
            return SessionClosed(session.id, _ended_reason(latest))
        if outcome == "turn_limit":
            return SessionLimitReached(
                session.id,
                f"it has used or queued all {max_turns} turns its agent allows, so it takes no more messages.",
            )
        return SessionNotFound(session.id)

    async def _promote(
        self,
        caller: Principal,
        session: SessionRecord,
        queued_message_id: str,
        steer: bool,
        message: str | None,
        wait_seconds: float | None,
        on_progress: ProgressFn | None,
        person: Person | None,
    ) -> TurnOutcome:
        if not steer:
            raise InvalidArgument(
                "queued_message_id", "goes with steer=true: it promotes a queued message to a steer"
            )
        if message is not None:
            raise InvalidArgument(
                "message", "leave it out when promoting a queued message; its text is already stored"
            )
        wait_s = self._wait_s(wait_seconds)
        if not is_queued_message_id(queued_message_id):
            raise InvalidArgument(
                "queued_message_id", "is not a queued message id (qm_ followed by 32 hex digits)"
            )
        record = await self._steps.promote_to_steer(
            session.id, session.owner, QueuedMessageId(queued_message_id), self._clock()
        )
        if record is None:
            raise InvalidArgument(
                "queued_message_id", f"no message {queued_message_id} in session {session.id}"
            )
        if record.status == "dropped":
            raise InvalidArgument("queued_message_id", f"{queued_message_id} was deleted; send it again")
        await self._audit.record(caller, audit.STEER, session_id=session.id, target=record.id)
        self._signals.request_cancel(session.id)
        self._signals.work_available(session.id)
        return await self.wait_for_message(session.id, record.id, wait_s, on_progress, person)

    async def delete_queued_message(self, caller: Principal, session_id: str, queued_message_id: str) -> str:
        session = await self._access.visible(caller, session_id, audit.DELETE_QUEUED, [queued_message_id])
        if not is_queued_message_id(queued_message_id):
            raise InvalidArgument(
                "queued_message_id", "is not a queued message id (qm_ followed by 32 hex digits)"
            )
        record = await self._steps.delete_queued(
            session.id, session.owner, QueuedMessageId(queued_message_id), self._clock()
        )
        if record is None:
            raise InvalidArgument(
                "queued_message_id", f"no message {queued_message_id} in session {session.id}"
            )
        if record.status == "consumed":
            raise InvalidArgument(
                "queued_message_id",
                f"{queued_message_id} was already taken into turn {record.turn_id}; cancel_turn stops it",
            )
        self._signals.notify(session.id)
        if record.status == "dropped":
            return "already deleted"
        await self._audit.record(caller, audit.DELETE_QUEUED, session_id=session.id, target=record.id)
        return "deleted"

    async def _retry_of_send(
        self,
        sent: QueuedMessageRecord,
        message: str,
        refs: list[dict[str, Any]],
        wait_s: float,
        on_progress: ProgressFn | None,
    ) -> TurnOutcome:
        if (sent.text, sent.attachments or []) != (message, refs):
            raise InvalidArgument(
                "client_message_id",
                "was already used for a different message in this session; use a new client_message_id",
            )
        return await self.wait_for_message(sent.session_id, sent.id, wait_s, on_progress)

    async def get_session(
        self,
        caller: Principal,
        session_id: str,
        wait_seconds: float | None,
        messages_from: int | None,
        messages_limit: int | None,
        on_progress: ProgressFn | None = None,
    ) -> SessionDetails:
        session = await self._access.visible(caller, session_id)
        if messages_limit is not None and not 1 <= messages_limit <= MAX_MESSAGES_PAGE:
            raise InvalidArgument("messages_limit", f"must be between 1 and {MAX_MESSAGES_PAGE}")
        if messages_from is not None and messages_from < 1:
            raise InvalidArgument("messages_from", "must be 1 or more (message sequence numbers start at 1)")
        if wait_seconds:
            session = await self._wait_until_rest(session.id, self._wait_s(wait_seconds), on_progress)
        total = await self._store.count_messages(session.id)
        limit = messages_limit or DEFAULT_MESSAGES_PAGE
        start = messages_from if messages_from is not None else max(1, total - limit + 1)
        messages = await self._store.list_messages(session.id, start, limit)
        last_turn = await self._store.get_turn(session.last_turn_id) if session.last_turn_id else None
        trail = await self._store.list_audit(session.id, None, None, DECISIONS_SHOWN * 4)
        agent = self._agents.get(session.agent)
        return SessionDetails(
            session=session,
            messages=messages,
            total_messages=total,
            queued=await self._store.list_queued(session.id),
            last_turn=last_turn,
            pending=await self._store.list_interrupts(session.id, pending_only=True),
            decisions=[e for e in trail if e.action in audit.DECISIONS][:DECISIONS_SHOWN],
            tools=await self.session_tools(session),
            memory=effective_memory(agent, session.settings) if agent is not None else None,
            turns=(await self._store.list_turns(session.id))[-TURNS_SHOWN:],
        )

    async def attachment(self, caller: Principal, session_id: str, sha256: str) -> AttachmentBlob:
        """The bytes of an attachment a message of the caller's session carried."""
        session = await self._access.visible(caller, session_id)
        blob = await self._store.session_attachment(session.id, sha256.lower())
        if blob is None:
            raise AttachmentNotFound(session.id, sha256)
        return blob

    async def list_sessions(
        self,
        caller: Principal,
        status: str | None,
        agent: str | None,
        cursor: str | None,
        limit: int,
        owner: str | None = None,
        match: SessionFilter | None = None,
    ) -> tuple[list[SessionRecord], str | None]:
        """`caller`'s sessions; with parley:admin, every owner's (or `owner`'s); narrowed by `match`
        (session_labels.session_filter)."""
        if cursor is not None:
            created, sep, last_id = cursor.partition("|")
            if not sep or cursor_time(created) is None or not is_session_id(last_id):
                raise InvalidArgument(
                    "cursor", "is not a cursor this server returned; omit it to start from the top"
                )
        if not caller.is_admin:
            if owner not in (None, caller.id):
                raise InvalidArgument(
                    "owner",
                    "only callers with the parley:admin scope list other principals' sessions; leave it out",
                )
            owner = caller.id
        page = await self._store.list_sessions(owner, status, agent, cursor, limit, match)
        return page.sessions, page.next_cursor

    def _model_titled(self, agent: AgentConfig | None, message: str | None) -> bool:
        return self._titles is not None and message is not None and wants_model_title(agent)

    async def _title(self, session_id: SessionId, agent: AgentConfig | None, message: str | None) -> None:
        """Title an untitled session from its first message: by the model for agents that opt in
        (in the background), else by the message's first words."""
        titles = self._titles
        if (
            titles is not None
            and agent is not None
            and message is not None
            and wants_model_title(agent)
            and titles.request(session_id, agent, message)
        ):
            return
        title = proposed_title(message)
        if title is not None:
            await self._store.propose_title(session_id, title)

    async def update_session(
        self, caller: Principal, session_id: str, title: str | None, tags: Sequence[str] | None
    ) -> SessionRecord:
        """Set the session's title ("" clears it) and/or replace its tags (None: unchanged)."""
        session = await self._access.visible(caller, session_id, audit.UPDATE)
        if title is None and tags is None:
            raise InvalidArgument("title", "give a title, tags, or both; nothing was changed")
        new_title = check_title(title) if title is not None else session.title
        new_tags = check_tags(tags) if tags is not None else session.tags
        if not await self._store.set_labels(session.id, new_title, new_tags):
            raise SessionNotFound(session_id)
        # Live views (the /v1 streams) show the new labels as they show everything else.
        await self._store.record_event(
            session.id, None, "session_updated", {"title": new_title, "tags": new_tags}, self._clock()
        )
        self._signals.notify(session.id)
        await self._audit.record(caller, audit.UPDATE, session_id=session.id)
        return replace(session, title=new_title, tags=new_tags)

    async def approve(
        self,
        caller: Principal,
        session_id: str,
        decisions: Sequence[Decision],
        wait_seconds: float | None,
        *,
        on_progress: ProgressFn | None = None,
        ask_human: AskHuman | None = None,
    ) -> TurnOutcome:
        targets = [d.interrupt_id for d in decisions]
        session = await self._access.decidable(caller, session_id, audit.APPROVE, targets)
        wait_s = self._wait_s(wait_seconds)
        await self._access.check_decider(caller, session, "tool", audit.APPROVE, targets)
        try:
            turn_id, notes = await self._decisions.approve(session, decisions, "caller", session.owner)
        except RequestError as exc:
            for d in decisions:
                await self._audit.refused(
                    caller,
                    audit.APPROVE if d.approved else audit.REJECT,
                    session.id,
                    d.interrupt_id,
                    str(exc),
                )
            raise
        for d in decisions:
            action = audit.APPROVE if d.approved else audit.REJECT
            await self._audit.record(caller, action, session_id=session.id, target=d.interrupt_id, via="tool")
        self._signals.work_available(session.id)
        return await self._after_decision(caller, session, turn_id, notes, wait_s, on_progress, ask_human)

    async def answer_question(
        self,
        caller: Principal,
        session_id: str,
        interrupt_id: str,
        answer: str | None,
        decline: bool,
        wait_seconds: float | None,
        *,
        on_progress: ProgressFn | None = None,
        ask_human: AskHuman | None = None,
    ) -> TurnOutcome:
        action = audit.DECLINE if decline else audit.ANSWER
        session = await self._access.decidable(caller, session_id, action, [interrupt_id])
        wait_s = self._wait_s(wait_seconds)
        await self._access.check_decider(caller, session, "tool", action, [interrupt_id])
        try:
            turn_id, notes = await self._decisions.answer(
                session, interrupt_id, answer, decline, "caller", session.owner
            )
        except RequestError as exc:
            await self._audit.refused(caller, action, session.id, interrupt_id, str(exc))
            raise
        await self._audit.record(caller, action, session_id=session.id, target=interrupt_id, via="tool")
        self._signals.work_available(session.id)
        return await self._after_decision(caller, session, turn_id, notes, wait_s, on_progress, ask_human)

    async def _after_decision(
        self,
        caller: Principal,
        session: SessionRecord,
        turn_id: TurnId,
        notes: list[str],
        wait_s: float,
        on_progress: ProgressFn | None,
        ask_human: AskHuman | None,
    ) -> TurnOutcome:
        """What a decider learns: the owner (and parley:admin) the resumed turn's outcome; an
        approver who may not read the session only whether the turn still waits, and for what."""
        if may_see(caller, session.owner):
            person = self._access.person(caller, session, ask_human)
            outcome = await self.wait_for_turn(session.id, turn_id, wait_s, on_progress, person)
            return replace(outcome, notes=notes + outcome.notes)
        snapshot = await self._steps.look(session.id, _turn_view(turn_id))
        waiting = snapshot is not None and _waits_for_input(snapshot.session, turn_id)
        pending = [i for i in snapshot.interrupts if i.status == "pending"] if snapshot and waiting else []
        return TurnOutcome(
            session_id=session.id,
            turn_id=turn_id,
            status="waiting_for_input" if pending else "running",
            pending=pending,
            notes=[
                *notes,
                f"Recorded: you decided as an approver of agent '{session.agent}'. The session belongs to "
                f"{session.owner}, who sees how the turn goes on.",
            ],
        )

    async def resume_with_answers(
        self,
        caller: Principal,
        session_id: str,
        turn_id: str,
        answers: Sequence[tuple[InterruptRecord, Resolution]],
        wait_seconds: float | None,
        on_progress: ProgressFn | None = None,
    ) -> TurnOutcome:
        """The retry of a call that returned an input-required result: apply the person's answers
        (the message was queued by the first call and is not queued again), then keep waiting."""
        session = await self._access.visible(caller, session_id)
        wait_s = self._wait_s(wait_seconds)
        await self.apply_answers(caller, session.id, answers, via="mrtr")
        return await self.wait_for_turn(session.id, TurnId(turn_id), wait_s, on_progress)

    async def apply_answers(
        self,
        caller: Principal,
        session_id: str,
        answers: Sequence[tuple[InterruptRecord, Resolution]],
        via: str = "task_input",
    ) -> None:
        """Resolve interrupts with what a person answered through `caller`'s client (a form, an
        input-required round, a task's input). An answer outside the choices leaves its
        interrupt pending, to be asked again; an interrupt resolved meanwhile stays as it is."""
        if not answers:
            return
        action = audit.ANSWER if answers[0][0].kind == "question" else audit.APPROVE
        session = await self._access.decidable(caller, session_id, action, [i.id for i, _ in answers])
        await self._access.check_decider(caller, session, "person", action, [i.id for i, _ in answers])
        for interrupt, resolution in answers:
            await self._resolve_by_person(caller, session.id, interrupt, resolution, via)

    async def _resolve_by_person(
        self,
        caller: Principal,
        session_id: SessionId,
        interrupt: InterruptRecord,
        resolution: Resolution,
        via: str,
    ) -> None:
        if resolution.answer is not None:
            # The form's choices are a hint to the client, not a guarantee.
            checked = checked_answer(interrupt, resolution.answer)
            if checked is None:
                return
            resolution = replace(resolution, answer=checked)
        result = await self._steps.resolve_interrupt(
            session_id, interrupt.id, resolution, "elicitation", self._clock()
        )
        if result.outcome == "resolved":
            await self._audit.record(
                caller,
                _decision_action(interrupt, resolution),
                session_id=session_id,
                target=interrupt.id,
                via=via,
            )
        self._signals.work_available(session_id)

    async def put_to_person(self, person: Person, interrupt: InterruptRecord, deadline: float) -> None:
        """Ask the person behind a caller's client about one interrupt (withdrawn if it is resolved
        some other way first, or at `deadline` on anyio's clock) and apply what they answer."""
        resolution = await self._ask(person.ask, interrupt, deadline)
        if resolution is not None:
            await self._resolve_by_person(
                person.caller, interrupt.session_id, interrupt, resolution, "elicitation"
            )

    async def pending(self, caller: Principal, session_id: str) -> list[InterruptRecord]:
        session = await self._access.decidable(caller, session_id)
        return await self._store.list_interrupts(session.id, pending_only=True)

    async def cancel_turn(
        self,
        caller: Principal,
        session_id: str,
        wait_seconds: float | None,
        on_progress: ProgressFn | None = None,
        turn_id: str | None = None,
    ) -> TurnOutcome:
        session = await self._access.visible(caller, session_id, audit.CANCEL, [turn_id or ""])
        wait_s = self._wait_s(wait_seconds)
        if turn_id is not None and turn_id != session.current_turn_id:
            # A stale cancel (the turn it meant has ended) must not stop a newer turn.
            old = await self._store.get_turn(TurnId(turn_id))
            if old is None or old.session_id != session.id:
                raise InvalidArgument("turn_id", f"no turn {turn_id} in session {session.id}")
            outcome = await self.turn_outcome(old)
            return replace(
                outcome, notes=[f"Turn {turn_id} is not running ({old.status}); nothing was cancelled."]
            )
        turn_id = await self._steps.request_cancel(session.id, session.owner, self._clock(), new_turn_id())
        if turn_id is None:
            # Nothing runs: cancelling is idempotent, so report how the last turn ended.
            latest = await self._store.get_session(session.id) or session
            last = await self._store.get_turn(latest.last_turn_id) if latest.last_turn_id else None
            if last is not None:
                outcome = await self.turn_outcome(last)
                return replace(outcome, notes=["Nothing was running; this is how the last turn ended."])
            return TurnOutcome(
                session_id=session.id, turn_id=None, status="idle", session_status=latest.status
            )
        await self._audit.record(caller, audit.CANCEL, session_id=session.id, target=turn_id)
        self._signals.request_cancel(session.id)
        return await self.wait_for_turn(session.id, turn_id, wait_s, on_progress)

    async def close_session(
        self, caller: Principal, session_id: str, wait_seconds: float | None
    ) -> SessionRecord:
        session = await self._access.visible(caller, session_id, audit.CLOSE)
        wait_s = self._wait_s(wait_seconds)
        if session.status != "closed":
            await self._steps.request_close(session.id, session.owner, "closed by the caller", self._clock())
            await self._audit.record(caller, audit.CLOSE, session_id=session.id)
            self._signals.request_cancel(session.id)
            self._signals.work_available(session.id)

        async def closed(last: bool) -> SessionRecord | None:
            latest = await self._store.get_session(session.id)
            if latest is None:
                raise SessionNotFound(session_id)
            return latest if latest.status == "closed" or last else None

        return await self._until(session.id, wait_s, closed)

    async def delete_session(
        self, caller: Principal, session_id: str, wait_seconds: float | None = None
    ) -> Literal["deleted", "already deleted"]:
        """Remove the session and everything of it; the audit keeps the fact. A session that runs
        a turn is closed first (the turn cancelled, queued messages dropped, so no other turn
        starts) and deleted as soon as it rests, within `wait_seconds`."""
        try:
            session = await self._access.visible(caller, session_id)
        except SessionNotFound:
            # A retry of a delete that went through: idempotent, for its deleter only.
            earlier = (
                await self._store.list_audit(session_id, caller.id, None, 20)
                if is_session_id(session_id)
                else []
            )
            if any(e.action == audit.DELETE and e.outcome == "ok" for e in earlier):
                return "already deleted"
            await self._access.refuse_unseen(caller, session_id, audit.DELETE)
            raise
        outcome = await self._store.delete_session(session.id, self._clock())
        if outcome == "busy":
            outcome = await self._close_then_delete(caller, session, self._wait_s(wait_seconds))
        if outcome == "busy":
            raise SessionBusy(session.id)
        if outcome == "not_found":
            raise SessionNotFound(session_id)
        await self._audit.record(
            caller, audit.DELETE, session_id=session.id, owner=session.owner, agent=session.agent
        )
        logger.info("session %s deleted by %s", session.id, caller.id)
        return "deleted"

    async def _close_then_delete(
        self, caller: Principal, session: SessionRecord, wait_s: float
    ) -> DeleteOutcome:
        await self._steps.request_close(session.id, session.owner, "closed to be deleted", self._clock())
        await self._audit.record(caller, audit.CLOSE, session_id=session.id, reason="delete_session")
        self._signals.request_cancel(session.id)
        self._signals.work_available(session.id)

        async def deleted(last: bool) -> DeleteOutcome | None:
            outcome = await self._store.delete_session(session.id, self._clock())
            return outcome if outcome != "busy" or last else None

        return await self._until(session.id, wait_s, deleted)

    # ------------------------------------------------------------------ waiting

    async def wait_for_message(
        self,
        session_id: SessionId,
        message_id: QueuedMessageId,
        wait_s: float,
        on_progress: ProgressFn | None = None,
        person: Person | None = None,
    ) -> TurnOutcome:
        """Wait for the turn that consumes this message to rest, at most `wait_s` seconds."""
        deadline = anyio.current_time() + wait_s
        progress = await self._progress(session_id, on_progress)

        async def taken(last: bool) -> TurnOutcome | None:
            queued = await self._store.get_queued(message_id)
            if queued is not None and queued.status == "dropped":
                latest = await self._store.get_session(session_id)
                return TurnOutcome(
                    session_id=session_id,
                    turn_id=None,
                    status="cancelled",
                    error="The session ended before this message was taken into a turn.",
                    queued_message_id=message_id,
                    session_status=latest.status if latest else None,
                )
            if queued is not None and queued.turn_id is not None:
                remaining = max(0.0, deadline - anyio.current_time())
                return await self._wait_turn(
                    session_id, queued.turn_id, remaining, message_id, progress, person
                )
            if not last:
                return None
            session = await self._store.get_session(session_id)
            return TurnOutcome(
                session_id=session_id,
                turn_id=None,
                status="running",
                queued_message_id=message_id,
                session_status=session.status if session else None,
            )

        return await self._until(session_id, wait_s, taken, progress)

    async def wait_for_turn(
        self,
        session_id: SessionId,
        turn_id: TurnId,
        wait_s: float,
        on_progress: ProgressFn | None = None,
        person: Person | None = None,
    ) -> TurnOutcome:
        progress = await self._progress(session_id, on_progress)
        return await self._wait_turn(session_id, turn_id, wait_s, None, progress, person)

    async def _wait_turn(
        self,
        session_id: SessionId,
        turn_id: TurnId,
        wait_s: float,
        message_id: QueuedMessageId | None,
        progress: ProgressFeed,
        person: Person | None = None,
    ) -> TurnOutcome:
        deadline = anyio.current_time() + wait_s
        asked: set[str] = set()

        async def rested(last: bool) -> TurnOutcome | _Again | None:
            if not last:
                # Most wake-ups come from a step of the turn still running: the session row says
                # so (a turn that rests leaves it in the same write), so that is all read then.
                session = await self._store.get_session(session_id)
                if session is not None and session.current_turn_id == turn_id and session.status == "running":
                    return None
            # One read: the session with this turn, its calls and its interrupts.
            snapshot = await self._steps.look(session_id, _turn_view(turn_id))
            turn = snapshot.turn if snapshot is not None else None
            if snapshot is None or turn is None:
                return TurnOutcome(session_id=session_id, turn_id=turn_id, status="running") if last else None
            if turn.status in TURN_ENDED or last:
                await progress.poll()  # what happened last (the end of a streamed text) still goes out
                return _outcome(snapshot, turn, message_id)
            if not _waits_for_input(snapshot.session, turn_id):
                return None
            new = [i for i in snapshot.interrupts if i.status == "pending" and i.id not in asked]
            if person is None or not new:
                return _outcome(snapshot, turn, message_id)
            # Put each new interrupt to the person through the client; an answer resolves it
            # exactly as approve/answer_question would, and the wait goes on at once.
            for interrupt in new:
                asked.add(interrupt.id)
                await self.put_to_person(person, interrupt, deadline)
            return AGAIN

        return await self._until(session_id, wait_s, rested, progress)

    async def _ask(
        self, ask_human: AskHuman, interrupt: InterruptRecord, deadline: float
    ) -> Resolution | None:
        """Put one interrupt to the person until they answer, the caller's wait ends, or the
        interrupt is resolved some other way (then the prompt is withdrawn)."""
        result: list[Resolution | None] = [None]
        with anyio.move_on_after(max(deadline - anyio.current_time(), 0.0)):
            async with anyio.create_task_group() as tg:

                async def ask() -> None:
                    result[0] = await ask_human(interrupt)
                    tg.cancel_scope.cancel()

                async def withdraw_when_resolved() -> None:
                    with self._signals.watching(interrupt.session_id) as changes:
                        while True:
                            await changes.wait(self._signals.poll_interval_s)
                            pending = await self._store.list_interrupts(
                                interrupt.session_id, pending_only=True
                            )
                            if all(p.id != interrupt.id for p in pending):
                                tg.cancel_scope.cancel()
                                return

                tg.start_soon(ask)
                tg.start_soon(withdraw_when_resolved)
        return result[0]

    async def _wait_until_rest(
        self, session_id: SessionId, wait_s: float, on_progress: ProgressFn | None = None
    ) -> SessionRecord:
        progress = await self._progress(session_id, on_progress)

        async def at_rest(last: bool) -> SessionRecord | None:
            session = await self._store.get_session(session_id)
            if session is None:
                raise SessionNotFound(session_id)
            return session if session.status != "running" or last else None

        return await self._until(session_id, wait_s, at_rest, progress)

    async def _until(
        self,
        session_id: SessionId,
        wait_s: float,
        look: Callable[[bool], Awaitable[T | _Again | None]],
        progress: ProgressFeed | None = None,
    ) -> T:
        """The one bounded wait: look at the session until `look` has an answer, waking on each
        change of the session (or every poll interval, for changes made by other processes).
        `look(last)` is told when the wait is over and must answer then; AGAIN looks at once."""
        deadline = anyio.current_time() + wait_s
        # Watched from before the first look: a change committed while a look reads wakes the next wait.
        with self._signals.watching(session_id) as changes:
            while True:
                remaining = deadline - anyio.current_time()
                found = await look(remaining <= 0 or self._waits_ended)
                if found is AGAIN:
                    continue
                if found is not None:
                    return found  # type: ignore[return-value]
                await changes.wait(min(max(remaining, 0.0), self._signals.poll_interval_s))
                if progress is not None:
                    await progress.poll()

    async def _progress(self, session_id: SessionId, on_progress: ProgressFn | None) -> ProgressFeed:
        feed = ProgressFeed(self._store, session_id, on_progress, self._runtime.progress_interval_s)
        await feed.start()
        return feed

    async def turn_outcome(self, turn: TurnRecord, message_id: QueuedMessageId | None = None) -> TurnOutcome:
        snapshot = await self._steps.look(turn.session_id, _turn_view(turn.id))
        if snapshot is None or snapshot.turn is None:
            return TurnOutcome(session_id=turn.session_id, turn_id=turn.id, status=turn.status)
        return _outcome(snapshot, snapshot.turn, message_id)


# The time in a page's cursor as the stores write it (a float's repr): ASCII digits, a point, an
# exponent. float() alone would also take "inf", "nan", "1_0" and spaces around.
_CURSOR_TIME = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?")


def cursor_time(text: str) -> float | None:
    """The creation time a list cursor names, or None when it is not one this server writes."""
    if not _CURSOR_TIME.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


# The settings limits that count something (turns, calls, tokens): whole numbers only. A float
# beyond 2**53 is no longer exact, so it is no whole number either.
_COUNTED_LIMITS = frozenset({"max_model_calls_per_turn", "max_turns", "max_session_tokens"})
_EXACT_FLOAT = 2.0**53


def _checked_limits(limits: Any, agent: AgentConfig | None) -> dict[str, int | float]:
    """settings.limits with each value checked: a known limit, a positive finite number (a whole
    one for what counts), never above the agent's own; a whole number written 3.0 becomes 3."""
    if not isinstance(limits, dict):
        raise InvalidArgument("settings.limits", 'must be an object such as {"max_turns": 10}')
    checked: dict[str, int | float] = {}
    for name, value in limits.items():
        field_name = f"settings.limits.{name}"
        if name not in OVERRIDABLE_LIMITS:
            raise InvalidArgument(
                field_name, f"is not a limit you can set; these are: {', '.join(OVERRIDABLE_LIMITS)}"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
            raise InvalidArgument(field_name, "must be a positive number")
        if name in _COUNTED_LIMITS and isinstance(value, float):
            if not value.is_integer() or value > _EXACT_FLOAT:
                raise InvalidArgument(field_name, f"must be a whole number such as 10, got {value:g}")
            value = int(value)
        ceiling = getattr(agent.limits, name) if agent is not None else None
        if ceiling is not None and value > ceiling:
            raise InvalidArgument(field_name, f"may be at most {ceiling:g}, the agent's own limit")
        checked[name] = value
    return checked


def _check_memory(memory: Any, agent: AgentConfig | None) -> None:
    """settings.memory: a mode that remembers no more than the agent's (none < window < compaction
    < full), and a window no larger than the agent's own window."""
    field_name = "settings.memory"
    if not isinstance(memory, dict) or set(memory) - {"mode", "messages"}:
        raise InvalidArgument(field_name, 'must be an object such as {"mode": "window", "messages": 10}')
    own = agent.resolved_memory if agent is not None else None
    mode = memory.get("mode", own.mode if own else None)
    if mode not in MEMORY_MODES:
        raise InvalidArgument(f"{field_name}.mode", f"must be one of: {', '.join(MEMORY_MODES)}")
    if own is not None and MEMORY_MODES.index(mode) > MEMORY_MODES.index(own.mode):
        raise InvalidArgument(
            f"{field_name}.mode",
            f"'{mode}' would remember more than agent '{agent.name if agent else ''}' does ({own.mode}); "
            f"choose among: {', '.join(MEMORY_MODES[: MEMORY_MODES.index(own.mode) + 1])}",
        )
    messages = memory.get("messages")
    if messages is None:
        return
    if mode != "window":
        raise InvalidArgument(f"{field_name}.messages", 'goes with "mode": "window"')
    if isinstance(messages, bool) or not isinstance(messages, int) or messages < 1:
        raise InvalidArgument(f"{field_name}.messages", "must be a whole number of messages, 1 or more")
    if own is not None and own.mode == "window" and messages > own.messages:
        raise InvalidArgument(
            f"{field_name}.messages", f"may be at most {own.messages}, the agent's own window"
        )


def _turn_view(turn_id: TurnId) -> SnapshotScope:
    """The session with one turn, its calls and its interrupts (not the queue)."""
    return SnapshotScope(turn_id=turn_id, queue=False)


def _outcome(snapshot: SessionSnapshot, turn: TurnRecord, message_id: QueuedMessageId | None) -> TurnOutcome:
    session = snapshot.session
    status: OutcomeStatus = turn.status
    pending: list[InterruptRecord] = []
    if turn.status == "running" and _waits_for_input(session, turn.id):
        status = "waiting_for_input"
        pending = [i for i in snapshot.interrupts if i.status == "pending"]
    return TurnOutcome(
        session_id=turn.session_id,
        turn_id=turn.id,
        status=status,
        pending=pending,
        answer=turn.answer,
        error=turn.error,
        tool_calls=list(snapshot.calls),
        input_tokens=turn.input_tokens,
        output_tokens=turn.output_tokens,
        cached_tokens=turn.cached_tokens,
        model_calls=turn.model_calls,
        queued_message_id=message_id or turn.queued_message_id,
        session_status=session.status,
        result=turn.result,
        agent_version=turn.agent_version,
    )


def _decision_action(interrupt: InterruptRecord, resolution: Resolution) -> str:
    if interrupt.kind == "approval":
        return audit.APPROVE if resolution.approved else audit.REJECT
    return audit.DECLINE if resolution.declined else audit.ANSWER


def _waits_for_input(session: SessionRecord, turn_id: TurnId) -> bool:
    return session.status == "waiting_for_input" and session.current_turn_id == turn_id


_CLIENT_MESSAGE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def render_first_message(message: str | None, inputs: dict[str, Any] | None) -> str | None:
    """Validated inputs become part of the session's first message."""
    if inputs is None:
        return message
    block = "Inputs:\n" + json.dumps(inputs, indent=2, ensure_ascii=False)
    return block if message is None else f"{block}\n\n{message}"


def _ended_reason(session: SessionRecord) -> str:
    if session.status == "completed":
        return "its task completed with a result"
    if session.status == "failed":
        return f"its task failed: {session.last_error or 'no reason recorded'}"
    return session.closed_reason or "closed by the caller"
