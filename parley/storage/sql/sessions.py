"""Sessions written once for both databases: decisions and looks, starting a session, the
transcript's lookups, events and summaries. Leases and the work scan are in leases.py
(docs/design.md#leases-and-the-work-scan), the plain reads in reads.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from parley.core.changes import Admit, Changes, Claimed, SessionSnapshot, SnapshotScope
from parley.core.ids import SessionId, TurnId
from parley.core.records import (
    AuditRecord,
    DatabaseCounts,
    EventRecord,
    QueuedMessageRecord,
    SessionRecord,
    ToolCallRecord,
)
from parley.core.schedules import TickClaim
from parley.core.webhooks import OutboxRoute
from parley.errors import LeaseLost, StorageError
from parley.storage.sql.base import SqlBase
from parley.storage.sql.conditions import QUEUED
from parley.storage.sql.leases import claim_statement, claimed_and_decided
from parley.storage.sql.program import Announce, Batch, Program, Stmt, reads
from parley.storage.sql.rows import (
    CALL_COLUMNS,
    FIELDS,
    QUEUED_COLUMNS,
    SESSION_COLUMNS,
    listing,
)
from parley.storage.sql.schedules import tick_claim
from parley.storage.sql.steps import (
    Outbox,
    audit_params,
    decide_program,
    queued_params,
    snapshot_program,
)
from parley.storage.sql.usage import admission_writes, load_usage, usage_reads
from parley.storage.sql.webhooks import outbox_statements
from parley.storage.wakeups import Wake

T = TypeVar("T")

_SESSION_EXISTS = "EXISTS (SELECT 1 FROM sessions WHERE id = ?)"
# A new session's first rows, written only while it has no numbers yet (see create_session).
_FRESH = "EXISTS (SELECT 1 FROM sessions WHERE id = ? AND event_seq = 0)"
_INSERT_EVENT_IF_FRESH = f"INSERT INTO events ({listing('events')}) SELECT ?, ?, NULL, ?, ?, ? WHERE {_FRESH}"
_INSERT_BLOB_IF_FRESH = (
    f"INSERT INTO attachments (sha256, mime_type, size, data, stored_at) SELECT ?, ?, ?, ?, ? "
    f"WHERE {_FRESH} ON CONFLICT (sha256) DO UPDATE SET stored_at = excluded.stored_at"
)
_INSERT_BLOB_REF_IF_FRESH = (
    f"INSERT INTO attachment_refs (session_id, sha256, created_at) SELECT ?, ?, ? "
    f"WHERE {_FRESH} ON CONFLICT DO NOTHING"
)


def _plain_start(statements: list[Stmt], announce: list[Announce]) -> Program[bool]:
    results = yield Batch(statements, last=True, announce=announce)
    return results[0].count > 0


def _claimed_first(claim: Stmt, start: Program[bool]) -> Program[bool]:
    """`start` after the schedule's tick is claimed in the same transaction: nothing more is
    written when another start holds the tick (PostgreSQL: the claim waits for that one's commit)."""
    (claimed,) = yield Batch([claim])
    if claimed.count == 0:
        return False
    return (yield from start)


class SqlSessions(SqlBase):
    # The subscriptions whose deliveries decisions write (sql/webhooks.py; none by default).
    webhook_routes: tuple[OutboxRoute, ...] = ()

    # ------------------------------------------------------------------ the step port

    async def decide(
        self,
        session_id: SessionId,
        scope: SnapshotScope,
        decide: Callable[[SessionSnapshot | None], tuple[T, Changes]],
        now: float,
        *,
        lease: str | None = None,
    ) -> T:
        value, _ = await self._decision(session_id, scope, decide, now, lease, None)
        return value

    async def decide_then_look(
        self,
        session_id: SessionId,
        scope: SnapshotScope,
        decide: Callable[[SessionSnapshot | None], tuple[T, Changes]],
        now: float,
        after: SnapshotScope,
        *,
        lease: str | None = None,
    ) -> tuple[T, SessionSnapshot | None]:
        return await self._decision(session_id, scope, decide, now, lease, after)

    async def _decision(
        self,
        session_id: SessionId,
        scope: SnapshotScope,
        decide: Callable[[SessionSnapshot | None], tuple[T, Changes]],
        now: float,
        lease: str | None,
        after: SnapshotScope | None,
    ) -> tuple[T, SessionSnapshot | None]:
        program = decide_program(self.codec, session_id, scope, decide, now, lease, self._outbox(now), after)
        return await self._execute(program, write=True)

    async def claim_and_decide(
        self,
        session_id: SessionId,
        owner: str,
        now: float,
        ttl_s: float,
        scope: SnapshotScope,
        decide: Callable[[SessionSnapshot], tuple[T, Changes]],
        after: Callable[[SessionSnapshot], SnapshotScope],
    ) -> Claimed[T] | None:
        claim = claim_statement(self.dialect, [session_id], owner, now, ttl_s)
        program = claimed_and_decided(
            self.codec, claim, session_id, scope, decide, now, self._outbox(now), after
        )
        return await self._execute(program, write=True)

    def _outbox(self, now: float) -> Outbox | None:
        """The webhook deliveries of a decision's events, if any subscription wants them."""
        routes = self.webhook_routes
        if not routes:
            return None

        def outbox(snapshot: SessionSnapshot, changes: Changes) -> list[Stmt]:
            return outbox_statements(routes, snapshot, changes, now)

        return outbox

    async def snapshot(self, session_id: SessionId, scope: SnapshotScope) -> SessionSnapshot | None:
        return await self._execute(snapshot_program(self.codec, session_id, scope), write=False)

    # ------------------------------------------------------------------ starting sessions

    async def create_session(
        self,
        session: SessionRecord,
        first_message: QueuedMessageRecord | None,
        now: float,
        admit: Admit | None = None,
        audit: AuditRecord | None = None,
        more: Sequence[QueuedMessageRecord] = (),
        shared: Sequence[str] = (),
        tick: TickClaim | None = None,
    ) -> bool:
        # One batch. The session is inserted unless its id or the owner's client_message_id is
        # taken, with its numbers at 0; its first events, message and bytes go in only while its
        # numbers are 0 (so only when this statement inserted it), and then the numbers are set.
        codec = self.codec
        param = codec.param
        sid = session.id
        queued = [first_message, *more] if first_message is not None else []
        statements = [
            Stmt(
                "INSERT INTO sessions (id, agent, owner, kind, status, phase, created_at, updated_at, inputs, "
                "start_client_message_id, settings, title, tags, replay_of, planning, parent_session_id, "
                "parent_turn, agent_version_pin, owner_credentials, event_seq, queue_seq) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0) ON CONFLICT DO NOTHING",
                (
                    sid,
                    session.agent,
                    session.owner,
                    session.kind,
                    session.status,
                    session.phase,
                    now,
                    now,
                    param("sessions", "inputs", session.inputs),
                    session.start_client_message_id,
                    param("sessions", "settings", session.settings),
                    param("sessions", "title", session.title),
                    param("sessions", "tags", session.tags),
                    session.replay_of,
                    param("sessions", "planning", session.planning),
                    session.parent_session_id,
                    session.parent_turn,
                    session.agent_version_pin,
                    param("sessions", "owner_credentials", session.owner_credentials),
                ),
            )
        ]
        events = [(sid, 1, "session_created", codec.dialect.json({"agent": session.agent}), now, sid)]
        statements += self._queued_if_fresh(sid, queued, events, now)
        if shared:
            # Attachments the session's messages share with another session's: the bytes are stored.
            statements.append(Stmt(_INSERT_BLOB_REF_IF_FRESH, many=[(sid, sha, now, sid) for sha in shared]))
        statements.insert(1, Stmt(_INSERT_EVENT_IF_FRESH, many=events))
        if audit is not None:  # the act's audit entry, in the same transaction
            statements.append(self._audit_if_fresh(audit, sid))
        statements.append(
            Stmt(
                "UPDATE sessions SET event_seq = ?, queue_seq = ? WHERE id = ? AND event_seq = 0",
                (len(events), len(queued), sid),
            )
        )
        # A session started with a message needs a driver: other processes hear of it.
        wake = Wake(sid, work=first_message is not None)
        announce = [Announce(wake, where=_SESSION_EXISTS, params=(sid,))]
        start = (
            self._admitted_start(statements, admit, announce, sid, now)
            if admit is not None
            else _plain_start(statements, announce)
        )
        if tick is not None:
            start = _claimed_first(tick_claim(tick, sid, now), start)
        return await self._execute(start, write=True)

    def _queued_if_fresh(
        self, sid: SessionId, queued: Sequence[QueuedMessageRecord], events: list[tuple[Any, ...]], now: float
    ) -> list[Stmt]:
        """A new session's queued messages and their bytes (and their events, added to `events`),
        written only with the session they belong to."""
        codec = self.codec
        statements = []
        for n, message in enumerate(queued, start=1):
            queued_event = codec.dialect.json({"queued_message_id": message.id})
            events.append((sid, n + 1, "message_queued", queued_event, now, sid))
            statements.append(
                Stmt(
                    f"INSERT INTO queued_messages ({QUEUED_COLUMNS}) SELECT {codec.typed_placeholders('queued_messages')} "
                    f"WHERE {_FRESH}",
                    (*queued_params(codec, message, sid, n), sid),
                )
            )
            blobs = message.blobs
            if blobs:
                many = [(b.sha256, b.mime_type, b.size, b.data, now, sid) for b in blobs]
                statements.append(Stmt(_INSERT_BLOB_IF_FRESH, many=many))
                statements.append(
                    Stmt(_INSERT_BLOB_REF_IF_FRESH, many=[(sid, b.sha256, now, sid) for b in blobs])
                )
        return statements

    def _admitted_start(
        self, statements: list[Stmt], admit: Admit, announce: list[Announce], sid: SessionId, now: float
    ) -> Program[bool]:
        """create_session's batch after the owner's fair use is read under its lock and admits
        it (or refuses, and nothing is written); the admissions go in only with the session."""
        results = yield Batch(usage_reads(self.dialect, admit.scope), writes=False)
        admitted = admit.decide(load_usage(self.dialect, admit.scope, iter(results)))
        counted = admission_writes(admitted, now, only_if=_FRESH, params=(sid,))
        results = yield Batch([*statements[:-1], *counted, statements[-1]], last=True, announce=announce)
        return results[0].count > 0

    def _audit_if_fresh(self, entry: AuditRecord, sid: SessionId) -> Stmt:
        """The audit entry of a session's start, written only with the session it starts."""
        columns = FIELDS["audit"][1:]  # the id is the database's
        values = self.codec.typed_placeholders("audit").split(", ")[1:]
        return Stmt(
            f"INSERT INTO audit ({', '.join(columns)}) SELECT {', '.join(values)} WHERE {_FRESH}",
            (*audit_params(self.codec, entry), sid),
        )

    async def find_started(self, owner: str, client_message_id: str) -> SessionRecord | None:
        row = await self._row(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE owner = ? AND start_client_message_id = ?",
            (owner, client_message_id),
        )
        return self.codec.session(row) if row is not None else None

    async def find_sent(self, session_id: SessionId, client_message_id: str) -> QueuedMessageRecord | None:
        row = await self._row(
            f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? AND client_message_id = ?",
            (session_id, client_message_id),
        )
        return self.codec.queued(row) if row is not None else None

    async def consumed_messages(self, session_id: SessionId) -> list[QueuedMessageRecord]:
        rows = await self._rows(
            f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? AND status = 'consumed' "
            "ORDER BY seq",
            (session_id,),
        )
        return [self.codec.queued(r) for r in rows]

    async def calls_of(self, session_id: SessionId) -> list[ToolCallRecord]:
        rows = await self._rows(
            f"SELECT {CALL_COLUMNS} FROM tool_calls WHERE session_id = ? ORDER BY created_at, step_no, call_index",
            (session_id,),
        )
        return [self.codec.call(r) for r in rows]

    async def first_message(self, session_id: SessionId) -> QueuedMessageRecord | None:
        row = await self._row(
            f"SELECT {QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? ORDER BY seq LIMIT 1",
            (session_id,),
        )
        return self.codec.queued(row) if row is not None else None

    async def database_counts(self, now: float) -> DatabaseCounts:
        sessions, tasks, queued, leases = await self._execute(
            reads(
                Stmt("SELECT status, count(*) FROM sessions GROUP BY status"),
                Stmt("SELECT status, count(*) FROM tasks GROUP BY status"),
                Stmt(f"SELECT count(*) FROM queued_messages WHERE {QUEUED}"),
                Stmt("SELECT count(*) FROM sessions WHERE lease_expires_at >= ?", (now,)),
            ),
            write=False,
        )
        return DatabaseCounts(
            sessions={str(r[0]): int(r[1]) for r in sessions.rows},
            queued_messages=int(queued.rows[0][0]),
            leases=int(leases.rows[0][0]),
            tasks={str(r[0]): int(r[1]) for r in tasks.rows},
        )

    # ------------------------------------------------------------------ events and summaries

    async def record_event(
        self, session_id: SessionId, turn_id: TurnId | None, kind: str, data: dict[str, Any], now: float
    ) -> None:
        # The number is taken under the row lock the UPDATE holds; the INSERT reads it back.
        bumped, _ = await self._change(
            Stmt("UPDATE sessions SET event_seq = event_seq + 1 WHERE id = ?", (session_id,)),
            Stmt(
                f"INSERT INTO events ({listing('events')}) SELECT id, event_seq, ?, ?, ?, ? FROM sessions WHERE id = ?",
                (turn_id, kind, self.dialect.json(data), now, session_id),
            ),
            # Waiting callers in other processes hear of it (a tool's progress, a warning).
            announce=[Announce(Wake(session_id))],
        )
        if bumped.count == 0:
            raise StorageError(f"session {session_id} vanished from the database")

    async def latest_event_seq(self, session_id: SessionId) -> int:
        return await self._count("SELECT event_seq FROM sessions WHERE id = ?", (session_id,))

    async def event_seqs(self, session_ids: Sequence[SessionId]) -> dict[SessionId, int]:
        seqs: dict[SessionId, int] = {}
        ids = list(session_ids)
        for start in range(0, len(ids), 500):
            among, params = self.dialect.in_list("id", ids[start : start + 500])
            rows = await self._rows(f"SELECT id, event_seq FROM sessions WHERE {among}", params)
            seqs.update({SessionId(r[0]): int(r[1]) for r in rows})
        return seqs

    async def list_events(self, session_id: SessionId, after_seq: int, limit: int) -> list[EventRecord]:
        rows = await self._rows(
            f"SELECT {listing('events')} FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (session_id, after_seq, self.dialect.limit(limit)),
        )
        return [self.codec.record("events", r) for r in rows]

    async def save_summary(
        self, session_id: SessionId, lease: str, turn_id: TurnId, upto_seq: int, text: str, now: float
    ) -> None:
        # Every statement is conditional on the lease: when it is lost, nothing is written.
        held = "FROM sessions WHERE id = ? AND lease_owner = ?"
        bumped, _, _ = await self._change(
            Stmt(
                "UPDATE sessions SET event_seq = event_seq + 1 WHERE id = ? AND lease_owner = ?",
                (session_id, lease),
            ),
            Stmt(
                f"INSERT INTO summaries (session_id, upto_seq, turn_id, text, created_at) SELECT id, ?, ?, ?, ? {held} "
                "ON CONFLICT (session_id, upto_seq) DO UPDATE SET turn_id = excluded.turn_id, text = excluded.text, "
                "created_at = excluded.created_at",
                (upto_seq, turn_id, self.dialect.outside_text(text), now, session_id, lease),
            ),
            Stmt(
                f"INSERT INTO events ({listing('events')}) SELECT id, event_seq, ?, 'compacted', ?, ? {held}",
                (
                    turn_id,
                    self.dialect.json({"upto_seq": upto_seq, "chars": len(text)}),
                    now,
                    session_id,
                    lease,
                ),
            ),
            announce=[Announce(Wake(session_id))],
        )
        if bumped.count == 0:
            raise LeaseLost(session_id)

    async def latest_summary(self, session_id: SessionId) -> tuple[int, str] | None:
        row = await self._row(
            "SELECT upto_seq, text FROM summaries WHERE session_id = ? ORDER BY upto_seq DESC LIMIT 1",
            (session_id,),
        )
        return (int(row[0]), str(row[1])) if row is not None else None


__all__ = ["FIELDS", "SqlSessions"]
