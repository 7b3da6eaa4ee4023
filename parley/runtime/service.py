"""The operations callers perform on sessions, independent of MCP.

Every mutating operation commits first and then waits, bounded, for the turn that
consumes the caller's message. The wait is only the caller's: cancelling it (a client
timeout, a dropped connection) never touches the turn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import anyio

from parley.config import AgentConfig, RuntimeConfig
from parley.errors import (
    InvalidArgument,
    SessionClosed,
    SessionLimitReached,
    SessionNotFound,
    UnknownAgent,
)
from parley.ids import (
    QueuedMessageId,
    SessionId,
    TurnId,
    is_session_id,
    new_queued_message_id,
    new_session_id,
    new_turn_id,
)
from parley.runtime.signals import SessionSignals
from parley.storage.base import (
    MessageRecord,
    QueuedMessageRecord,
    SessionRecord,
    Store,
    ToolCallRecord,
    TurnRecord,
)

RESTING_TURN = frozenset({"answered", "completed", "failed", "cancelled"})
MAX_MESSAGES_PAGE = 200
DEFAULT_MESSAGES_PAGE = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnOutcome:
    session_id: SessionId
    turn_id: TurnId | None
    status: str
    answer: str | None = None
    error: str | None = None
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    queued_message_id: QueuedMessageId | None = None
    session_status: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSnapshot:
    session: SessionRecord
    messages: list[MessageRecord]
    total_messages: int
    queued: list[QueuedMessageRecord]
    last_turn: TurnRecord | None
    last_turn_calls: list[ToolCallRecord]


class SessionService:
    def __init__(
        self,
        *,
        store: Store,
        agents: Mapping[str, AgentConfig],
        signals: SessionSignals,
        runtime: RuntimeConfig,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._agents = agents
        self._signals = signals
        self._runtime = runtime
        self._clock = clock

    # ------------------------------------------------------------------ validation helpers

    def agents(self) -> list[AgentConfig]:
        return sorted(self._agents.values(), key=lambda a: a.name)

    def _agent(self, name: str) -> AgentConfig:
        agent = self._agents.get(name)
        if agent is None:
            raise UnknownAgent(name, list(self._agents))
        return agent

    def _check_message(self, message: str) -> str:
        if not message.strip():
            raise InvalidArgument("message", "must not be empty; write what you want the agent to do")
        limit = self._runtime.max_message_chars
        if len(message) > limit:
            raise InvalidArgument(
                "message", f"is {len(message)} characters long; the limit is {limit}. Shorten it or split it."
            )
        return message

    def _wait_s(self, wait_seconds: float | None) -> float:
        if wait_seconds is None:
            return min(self._runtime.default_wait_s, self._runtime.max_wait_s)
        if wait_seconds < 0:
            raise InvalidArgument("wait_seconds", "must be 0 or more")
        return min(wait_seconds, self._runtime.max_wait_s)

    async def _owned(self, owner: str, session_id: str) -> SessionRecord:
        if not is_session_id(session_id):
            raise SessionNotFound(session_id)
        session = await self._store.get_session(SessionId(session_id))
        if session is None or session.owner != owner:
            raise SessionNotFound(session_id)
        return session

    # ------------------------------------------------------------------ operations

    async def start_session(
        self, owner: str, agent_name: str, message: str | None, wait_seconds: float | None
    ) -> TurnOutcome:
        agent = self._agent(agent_name)
        if message is not None:
            self._check_message(message)
        wait_s = self._wait_s(wait_seconds)
        now = self._clock()
        session_id = new_session_id()
        record = SessionRecord(
            id=session_id,
            agent=agent.name,
            owner=owner,
            kind="chat",
            status="idle",
            phase=None,
            created_at=now,
            updated_at=now,
            turn_count=0,
            current_turn_id=None,
            last_turn_id=None,
            last_error=None,
            closed_reason=None,
            input_tokens=0,
            output_tokens=0,
            model_calls=0,
            todos=[],
            cancel_requested_turn=None,
            close_requested=False,
            lease_owner=None,
            lease_expires_at=None,
        )
        queued = None
        if message is not None:
            queued = QueuedMessageRecord(
                id=new_queued_message_id(),
                session_id=session_id,
                seq=0,
                text=message,
                status="queued",
                turn_id=None,
                created_at=now,
            )
        await self._store.create_session(record, queued, now)
        if queued is None:
            return TurnOutcome(session_id=session_id, turn_id=None, status="idle", session_status="idle")
        self._signals.work_available()
        return await self.wait_for_message(session_id, queued.id, wait_s)

    async def send_message(
        self, owner: str, session_id: str, message: str, wait_seconds: float | None
    ) -> TurnOutcome:
        session = await self._owned(owner, session_id)
        self._check_message(message)
        wait_s = self._wait_s(wait_seconds)
        agent = self._agents.get(session.agent)
        max_turns = agent.limits.max_turns if agent is not None else session.turn_count
        now = self._clock()
        queued = QueuedMessageRecord(
            id=new_queued_message_id(),
            session_id=session.id,
            seq=0,
            text=message,
            status="queued",
            turn_id=None,
            created_at=now,
        )
        outcome = await self._store.enqueue_message(session.id, owner, queued, max_turns, now)
        if outcome == "not_found":
            raise SessionNotFound(session_id)
        if outcome == "closed":
            latest = await self._store.get_session(session.id)
            reason = (latest.closed_reason if latest else None) or "closed by the caller"
            raise SessionClosed(session_id, reason)
        if outcome == "turn_limit":
            raise SessionLimitReached(
                session_id,
                f"it has used or queued all {max_turns} turns its agent allows, so it takes no more messages.",
            )
        self._signals.work_available()
        return await self.wait_for_message(session.id, queued.id, wait_s)

    async def get_session(
        self,
        owner: str,
        session_id: str,
        wait_seconds: float | None,
        messages_from: int | None,
        messages_limit: int | None,
    ) -> SessionSnapshot:
        session = await self._owned(owner, session_id)
        if messages_limit is not None and not 1 <= messages_limit <= MAX_MESSAGES_PAGE:
            raise InvalidArgument("messages_limit", f"must be between 1 and {MAX_MESSAGES_PAGE}")
        if messages_from is not None and messages_from < 1:
            raise InvalidArgument("messages_from", "must be 1 or more (message sequence numbers start at 1)")
        if wait_seconds:
            session = await self._wait_until_rest(session.id, self._wait_s(wait_seconds))
        total = await self._store.count_messages(session.id)
        limit = messages_limit or DEFAULT_MESSAGES_PAGE
        start = messages_from if messages_from is not None else max(1, total - limit + 1)
        messages = await self._store.list_messages(session.id, start, limit)
        last_turn = await self._store.get_turn(session.last_turn_id) if session.last_turn_id else None
        calls = await self._store.list_tool_calls(last_turn.id) if last_turn else []
        return SessionSnapshot(
            session=session,
            messages=messages,
            total_messages=total,
            queued=await self._store.list_queued(session.id),
            last_turn=last_turn,
            last_turn_calls=calls,
        )

    async def list_sessions(
        self, owner: str, status: str | None, agent: str | None, cursor: str | None, limit: int
    ) -> tuple[list[SessionRecord], str | None]:
        if cursor is not None:
            created, sep, last_id = cursor.partition("|")
            try:
                float(created)
            except ValueError:
                created = ""
            if not sep or not created or not is_session_id(last_id):
                raise InvalidArgument(
                    "cursor", "is not a cursor this server returned; omit it to start from the top"
                )
        page = await self._store.list_sessions(owner, status, agent, cursor, limit)
        return page.sessions, page.next_cursor

    async def cancel_turn(self, owner: str, session_id: str, wait_seconds: float | None) -> TurnOutcome:
        session = await self._owned(owner, session_id)
        wait_s = self._wait_s(wait_seconds)
        turn_id = await self._store.request_cancel(session.id, owner, self._clock(), new_turn_id())
        if turn_id is None:
            # Nothing runs: cancelling is idempotent, so report how the last turn ended.
            latest = await self._store.get_session(session.id) or session
            last = await self._store.get_turn(latest.last_turn_id) if latest.last_turn_id else None
            if last is not None:
                return await self.turn_outcome(last)
            return TurnOutcome(
                session_id=session.id, turn_id=None, status="idle", session_status=latest.status
            )
        self._signals.request_cancel(session.id)
        return await self.wait_for_turn(session.id, turn_id, wait_s)

    async def close_session(self, owner: str, session_id: str, wait_seconds: float | None) -> SessionRecord:
        session = await self._owned(owner, session_id)
        wait_s = self._wait_s(wait_seconds)
        if session.status != "closed":
            await self._store.request_close(session.id, owner, "closed by the caller", self._clock())
            self._signals.request_cancel(session.id)
            self._signals.work_available()
        deadline = anyio.current_time() + wait_s
        while True:
            latest = await self._store.get_session(session.id)
            if latest is None:
                raise SessionNotFound(session_id)
            remaining = deadline - anyio.current_time()
            if latest.status == "closed" or remaining <= 0:
                return latest
            await self._signals.wait_changed(session.id, min(remaining, self._runtime.poll_interval_s))

    # ------------------------------------------------------------------ waiting

    async def wait_for_message(
        self, session_id: SessionId, message_id: QueuedMessageId, wait_s: float
    ) -> TurnOutcome:
        """Wait for the turn that consumes this message to rest, at most `wait_s` seconds."""
        deadline = anyio.current_time() + wait_s
        while True:
            queued = await self._store.get_queued(message_id)
            if queued is not None and queued.status == "dropped":
                return TurnOutcome(
                    session_id=session_id,
                    turn_id=None,
                    status="cancelled",
                    error="The session was closed before this message was taken into a turn.",
                    queued_message_id=message_id,
                    session_status="closed",
                )
            if queued is not None and queued.turn_id is not None:
                remaining = max(0.0, deadline - anyio.current_time())
                return await self.wait_for_turn(session_id, queued.turn_id, remaining, message_id)
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                session = await self._store.get_session(session_id)
                return TurnOutcome(
                    session_id=session_id,
                    turn_id=None,
                    status="running",
                    queued_message_id=message_id,
                    session_status=session.status if session else None,
                )
            await self._signals.wait_changed(session_id, min(remaining, self._runtime.poll_interval_s))

    async def wait_for_turn(
        self, session_id: SessionId, turn_id: TurnId, wait_s: float, message_id: QueuedMessageId | None = None
    ) -> TurnOutcome:
        deadline = anyio.current_time() + wait_s
        while True:
            turn = await self._store.get_turn(turn_id)
            remaining = deadline - anyio.current_time()
            if turn is not None and (turn.status in RESTING_TURN or remaining <= 0):
                return await self.turn_outcome(turn, message_id)
            if turn is None and remaining <= 0:
                return TurnOutcome(session_id=session_id, turn_id=turn_id, status="running")
            await self._signals.wait_changed(
                session_id, min(max(remaining, 0.0), self._runtime.poll_interval_s)
            )

    async def _wait_until_rest(self, session_id: SessionId, wait_s: float) -> SessionRecord:
        deadline = anyio.current_time() + wait_s
        while True:
            session = await self._store.get_session(session_id)
            if session is None:
                raise SessionNotFound(session_id)
            remaining = deadline - anyio.current_time()
            if session.status != "running" or remaining <= 0:
                return session
            await self._signals.wait_changed(session_id, min(remaining, self._runtime.poll_interval_s))

    async def turn_outcome(self, turn: TurnRecord, message_id: QueuedMessageId | None = None) -> TurnOutcome:
        calls = await self._store.list_tool_calls(turn.id)
        session = await self._store.get_session(turn.session_id)
        return TurnOutcome(
            session_id=turn.session_id,
            turn_id=turn.id,
            status=turn.status,
            answer=turn.answer,
            error=turn.error,
            tool_calls=calls,
            input_tokens=turn.input_tokens,
            output_tokens=turn.output_tokens,
            model_calls=turn.model_calls,
            queued_message_id=message_id or turn.queued_message_id,
            session_status=session.status if session else None,
        )
