"""In-memory backend of the Store port, for the fast test layer: the same contract as SQLite
(tests/test_storage_contract.py), nothing written to disk.

Every handle opened on one `MemoryDatabase` sees the same data, as every process sees the same
SQLite file; a handle is what a parley process holds. Writes are transactions that commit whole
(memory_tables.py); the queries, orderings, paging cursors and lease checks are SQLite's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from itertools import islice
from typing import Any, TypeVar

from parley.errors import LeaseLost
from parley.ids import QueuedMessageId, SessionId, TurnId
from parley.storage.base import (
    AgentVersionRecord,
    DatabaseCounts,
    EventRecord,
    InterruptRecord,
    MessageRecord,
    QueuedMessageRecord,
    SessionFilter,
    SessionPage,
    SessionRecord,
    StepRecord,
    ToolCallRecord,
    TurnRecord,
    lease_holder,
    lease_token,
)
from parley.storage.memory_access import MemoryAccess
from parley.storage.memory_manage import MemoryManage
from parley.storage.memory_steps import MemorySteps, calls_of
from parley.storage.memory_tables import Counters, MemoryDatabase, MemoryTables, Summary, row, rows

T = TypeVar("T")


def _take(items: Iterable[T], limit: int | None) -> list[T]:
    # SQLite's LIMIT: none, or a negative one, takes everything.
    return list(items) if limit is None or limit < 0 else list(islice(items, limit))


def _lease_is_free(session: SessionRecord, now: float) -> bool:
    expires = session.lease_expires_at
    return session.lease_owner is None or (expires is not None and expires < now)


def _needs_work(session: SessionRecord, now: float) -> bool:
    """The work scan's filter (SqliteStore.sessions_needing_work)."""
    if not _lease_is_free(session, now):
        return False
    due = session.wake_at is not None and session.wake_at <= now
    if session.status == "running":
        return session.wake_at is None or due
    # Waiting with a lapsed lease: a server asked a question during a call whose process
    # died (a parked session holds no lease); the new holder drops the question.
    return session.status == "waiting_for_input" and (due or session.lease_owner is not None)


def _matches(session: SessionRecord, match: SessionFilter) -> bool:
    """list_sessions' narrowing (SqliteStore.list_sessions): title text, tag, creation time."""
    if match.title is not None and (
        session.title is None or match.title.lower() not in session.title.lower()
    ):
        return False
    if match.tag is not None and match.tag not in session.tags:
        return False
    if match.created_from is not None and session.created_at < match.created_from:
        return False
    return match.created_before is None or session.created_at < match.created_before


class MemoryStore(MemorySteps, MemoryAccess, MemoryManage):
    """A Store kept in memory. Open it with `open_memory_store`."""

    def _counters(self, tables: MemoryTables, session_id: SessionId) -> Counters:
        return tables.counters.get(session_id, Counters())

    # ------------------------------------------------------------------ sessions and queue

    async def steer_pending(self, session_id: SessionId) -> bool:
        return any(
            q.session_id == session_id and q.status == "queued" and q.steer
            for q in (await self._committed()).queued.values()
        )

    async def create_session(
        self, session: SessionRecord, first_message: QueuedMessageRecord | None, now: float
    ) -> bool:
        async with self._db.write() as tables:
            if session.id in tables.sessions or (
                session.start_client_message_id is not None
                and any(
                    (s.owner, s.start_client_message_id) == (session.owner, session.start_client_message_id)
                    for s in tables.sessions.values()
                )
            ):
                return False  # the owner already started a session with this client_message_id
            created = SessionRecord.new(
                session.id,
                agent=session.agent,
                owner=session.owner,
                kind=session.kind,
                now=now,
                inputs=session.inputs,
                start_client_message_id=session.start_client_message_id,
                settings=session.settings,
            )
            tables.sessions[session.id] = row(
                replace(
                    created,
                    status=session.status,
                    phase=session.phase,
                    title=session.title,
                    tags=session.tags,
                )
            )
            tables.append_event(session.id, None, "session_created", {"agent": session.agent}, now)
            if first_message is not None:
                message = first_message
                tables.insert_queued(message)
                tables.append_event(
                    message.session_id, None, "message_queued", {"queued_message_id": message.id}, now
                )
            return True

    async def find_started(self, owner: str, client_message_id: str) -> SessionRecord | None:
        sessions = (await self._committed()).sessions.values()
        return next(
            (row(s) for s in sessions if s.owner == owner and s.start_client_message_id == client_message_id),
            None,
        )

    async def find_sent(self, session_id: SessionId, client_message_id: str) -> QueuedMessageRecord | None:
        queued = (await self._committed()).queued.values()
        return next(
            (
                row(q)
                for q in queued
                if q.session_id == session_id and q.client_message_id == client_message_id
            ),
            None,
        )

    async def first_message(self, session_id: SessionId) -> QueuedMessageRecord | None:
        mine = [q for q in (await self._committed()).queued.values() if q.session_id == session_id]
        return row(min(mine, key=lambda q: q.seq)) if mine else None

    async def latest_event_seq(self, session_id: SessionId) -> int:
        tables = await self._committed()
        return self._counters(tables, session_id).event if session_id in tables.sessions else 0

    async def event_seqs(self, session_ids: Sequence[SessionId]) -> dict[SessionId, int]:
        tables = await self._committed()
        return {sid: self._counters(tables, sid).event for sid in session_ids if sid in tables.sessions}

    # ------------------------------------------------------------------ leases

    async def try_acquire_lease(
        self, session_id: SessionId, owner: str, now: float, ttl_s: float
    ) -> str | None:
        return (await self.try_acquire_leases([session_id], owner, now, ttl_s)).get(session_id)

    async def try_acquire_leases(
        self, session_ids: Sequence[SessionId], owner: str, now: float, ttl_s: float
    ) -> dict[SessionId, str]:
        taken: dict[SessionId, str] = {}
        async with self._db.write() as tables:
            for session_id in session_ids:
                session = tables.sessions.get(session_id)
                if (
                    session is None
                    or session.status not in ("running", "waiting_for_input")
                    or not (_lease_is_free(session, now) or lease_holder(session.lease_owner) == owner)
                ):
                    continue
                epoch = session.lease_epoch + 1
                taken[session_id] = lease_token(owner, epoch)
                tables.sessions[session_id] = replace(
                    session, lease_owner=taken[session_id], lease_epoch=epoch, lease_expires_at=now + ttl_s
                )
        return taken

    async def renew_lease(self, session_id: SessionId, lease: str, now: float, ttl_s: float) -> SessionRecord:
        async with self._db.write() as tables:
            session = tables.sessions.get(session_id)
            if session is None or session.lease_owner != lease:
                raise LeaseLost(session_id)
            renewed = replace(session, lease_expires_at=now + ttl_s)
            tables.sessions[session_id] = renewed
            return row(renewed)

    async def release_lease(self, session_id: SessionId, lease: str) -> None:
        async with self._db.write() as tables:
            session = tables.sessions.get(session_id)
            if session is not None and session.lease_owner == lease:
                tables.sessions[session_id] = replace(session, lease_owner=None, lease_expires_at=None)

    async def count_leases(self, owner: str, now: float) -> int:
        return sum(
            1
            for s in (await self._committed()).sessions.values()
            if lease_holder(s.lease_owner) == owner
            and s.lease_expires_at is not None
            and s.lease_expires_at >= now
        )

    async def database_counts(self, now: float) -> DatabaseCounts:
        tables = await self._committed()
        return DatabaseCounts(
            sessions=dict(Counter(s.status for s in tables.sessions.values())),
            queued_messages=sum(1 for q in tables.queued.values() if q.status == "queued"),
            leases=sum(
                1
                for s in tables.sessions.values()
                if s.lease_expires_at is not None and s.lease_expires_at >= now
            ),
            tasks=dict(Counter(t.status for t in tables.tasks.values())),
        )

    async def sessions_needing_work(self, now: float, limit: int) -> list[SessionId]:
        due = [s for s in (await self._committed()).sessions.values() if _needs_work(s, now)]
        return [s.id for s in _take(sorted(due, key=lambda s: s.updated_at), limit)]

    # ------------------------------------------------------------------ turn steps

    async def record_event(
        self, session_id: SessionId, turn_id: TurnId | None, kind: str, data: dict[str, Any], now: float
    ) -> None:
        async with self._db.write() as tables:
            tables.append_event(session_id, turn_id, kind, data, now)

    async def list_interrupts(self, session_id: SessionId, pending_only: bool) -> list[InterruptRecord]:
        found = [
            i
            for i in (await self._committed()).interrupts.values()
            if i.session_id == session_id and (i.status == "pending" or not pending_only)
        ]
        return rows(sorted(found, key=lambda i: (i.created_at, i.id)))

    async def list_all_pending(self, limit: int) -> list[InterruptRecord]:
        pending = [i for i in (await self._committed()).interrupts.values() if i.status == "pending"]
        return rows(_take(sorted(pending, key=lambda i: i.created_at), limit))

    async def save_summary(
        self, session_id: SessionId, lease: str, turn_id: TurnId, upto_seq: int, text: str, now: float
    ) -> None:
        async with self._db.write() as tables:
            session = tables.sessions.get(session_id)
            if session is None or session.lease_owner != lease:
                raise LeaseLost(session_id)
            tables.summaries[(session_id, upto_seq)] = Summary(turn_id=turn_id, text=text, created_at=now)
            tables.append_event(
                session_id, turn_id, "compacted", {"upto_seq": upto_seq, "chars": len(text)}, now
            )

    async def latest_summary(self, session_id: SessionId) -> tuple[int, str] | None:
        summaries = (await self._committed()).summaries
        upto = [seq for sid, seq in summaries if sid == session_id]
        return (max(upto), summaries[(session_id, max(upto))].text) if upto else None

    # ------------------------------------------------------------------ reads

    async def get_session(self, session_id: SessionId) -> SessionRecord | None:
        session = (await self._committed()).sessions.get(session_id)
        return row(session) if session is not None else None

    async def list_sessions(
        self,
        owner: str | None,
        status: str | None,
        agent: str | None,
        cursor: str | None,
        limit: int,
        match: SessionFilter | None = None,
    ) -> SessionPage:
        found = [
            s
            for s in (await self._committed()).sessions.values()
            if owner in (None, s.owner)
            and status in (None, s.status)
            and agent in (None, s.agent)
            and (match is None or _matches(s, match))
        ]
        if cursor is not None:
            created_at, _, last_id = cursor.partition("|")
            before = (float(created_at), last_id)
            found = [s for s in found if (s.created_at, s.id) < before]
        found.sort(key=lambda s: (s.created_at, s.id), reverse=True)
        taken = _take(found, limit + 1)
        sessions = rows(taken[:limit])
        next_cursor = None
        if len(taken) > limit:
            last = sessions[-1]
            next_cursor = f"{last.created_at!r}|{last.id}"
        return SessionPage(sessions=sessions, next_cursor=next_cursor)

    async def get_turn(self, turn_id: TurnId) -> TurnRecord | None:
        turn = (await self._committed()).turns.get(turn_id)
        return row(turn) if turn is not None else None

    async def get_agent_version(self, agent: str, version: str) -> AgentVersionRecord | None:
        found = (await self._committed()).agent_versions.get((agent, version))
        return row(found) if found is not None else None

    async def list_turns(self, session_id: SessionId) -> list[TurnRecord]:
        turns = [t for t in (await self._committed()).turns.values() if t.session_id == session_id]
        return rows(sorted(turns, key=lambda t: t.seq))

    async def list_messages(
        self, session_id: SessionId, from_seq: int | None, limit: int | None
    ) -> list[MessageRecord]:
        tables = await self._committed()
        # The transcript is append-only and numbered from 1, so the session's numbers are the keys.
        last = self._counters(tables, session_id).message
        keys = ((session_id, seq) for seq in range(max(from_seq or 1, 1), last + 1))
        return rows(_take((tables.messages[k] for k in keys if k in tables.messages), limit))

    async def count_messages(self, session_id: SessionId) -> int:
        tables = await self._committed()
        last = self._counters(tables, session_id).message
        return sum(1 for seq in range(1, last + 1) if (session_id, seq) in tables.messages)

    async def list_tool_calls(self, turn_id: TurnId) -> list[ToolCallRecord]:
        return rows(calls_of(await self._committed(), turn_id))

    async def list_queued(self, session_id: SessionId) -> list[QueuedMessageRecord]:
        queued = [
            q
            for q in (await self._committed()).queued.values()
            if q.session_id == session_id and q.status == "queued"
        ]
        return rows(sorted(queued, key=lambda q: q.seq))

    async def get_queued(self, message_id: QueuedMessageId) -> QueuedMessageRecord | None:
        message = (await self._committed()).queued.get(message_id)
        return row(message) if message is not None else None

    async def list_steps(self, session_id: SessionId) -> list[StepRecord]:
        steps = [s for s in (await self._committed()).steps.values() if s.session_id == session_id]
        return sorted(steps, key=lambda s: (s.created_at, s.step_no))

    async def list_events(self, session_id: SessionId, after_seq: int, limit: int) -> list[EventRecord]:
        tables = await self._committed()
        last = self._counters(tables, session_id).event
        keys = ((session_id, seq) for seq in range(max(after_seq + 1, 1), last + 1))
        return rows(_take((tables.events[k] for k in keys if k in tables.events), limit))


@asynccontextmanager
async def open_memory_store(database: MemoryDatabase | None = None) -> AsyncIterator[MemoryStore]:
    """A handle on `database`, or on a new empty one: what `open_sqlite_store` is for a file.
    Handles on the same database behave as processes sharing one file."""
    yield MemoryStore(database if database is not None else MemoryDatabase())
