"""Forks written once for both databases: the original read and its fork written in one
transaction (the rule of what a fork copies is parley/core/forks.py's), and the forks of a
session listed for its lineage."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from parley.core.changes import Admit
from parley.core.forks import ForkedSession, ForkOutcome, ForkSource
from parley.core.ids import SessionId
from parley.core.records import AuditRecord, SessionRecord, SummaryRecord
from parley.storage.sql.base import SqlBase
from parley.storage.sql.program import Announce, Batch, Program, Result, Stmt
from parley.storage.sql.rows import FIELDS, SESSION_COLUMNS, TURN_COLUMNS, listing
from parley.storage.sql.steps import (
    INSERT_AUDIT,
    INSERT_BLOB_REF,
    INSERT_EVENT,
    INSERT_MESSAGE,
    audit_params,
    insert_sql,
)
from parley.storage.sql.usage import admission_writes, load_usage, usage_reads
from parley.storage.wakeups import Wake

# The original's turns up to the fork point, by their number.
_KEPT_TURNS = "SELECT id FROM turns WHERE session_id = ? AND seq <= ?"
# The last event of those turns: everything after it is the original's alone.
_CUT = f"coalesce((SELECT max(seq) FROM events WHERE session_id = ? AND turn_id IN ({_KEPT_TURNS})), 0)"
_INSERT_SESSION = insert_sql("sessions", (*FIELDS["sessions"], "message_seq", "event_seq", "queue_seq"))
_INSERT_TURN = insert_sql("turns", FIELDS["turns"])
_INSERT_SUMMARY = insert_sql("summaries", ("session_id", "upto_seq", "turn_id", "text", "created_at"))
# The forks of a session get_session lists, newest first.
_FORKS = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE parent_session_id = ?"

MakeFork = Callable[[ForkSource | None], tuple[ForkOutcome, ForkedSession | None]]


class SqlForks(SqlBase):
    async def fork_session(
        self,
        source_id: SessionId,
        at_turn: int,
        make: MakeFork,
        now: float,
        admit: Admit | None = None,
        audit: AuditRecord | None = None,
    ) -> tuple[ForkOutcome, ForkedSession | None]:
        return await self._execute(
            self._fork_program(source_id, at_turn, make, now, admit, audit), write=True
        )

    def _fork_program(
        self,
        source_id: SessionId,
        at_turn: int,
        make: MakeFork,
        now: float,
        admit: Admit | None,
        audit: AuditRecord | None,
    ) -> Program[tuple[ForkOutcome, ForkedSession | None]]:
        # One batch of reads: the original's rows up to the end of the turn, in this order, so a
        # turn read as ended has every message and event it will ever have in the reads after it.
        statements = self._source_reads(source_id, at_turn)
        if admit is not None:
            statements += usage_reads(self.dialect, admit.scope)
        results = yield Batch(statements, writes=False)
        source = self._source(results[:6])
        outcome, forked = make(source)
        if forked is None:
            return outcome, None
        counted = []
        if admit is not None:
            # Over a limit, decide raises: nothing is written.
            usage = load_usage(self.dialect, admit.scope, iter(results[6:]))
            counted = admission_writes(admit.decide(usage), now)
        writes = [*self._fork_writes(forked, now), *counted]
        if audit is not None:  # the act's audit entry, in the same transaction
            writes.append(Stmt(INSERT_AUDIT, audit_params(self.codec, audit)))
        announce = [Announce(Wake(forked.session.id))]
        yield Batch(writes, last=True, announce=announce)
        return outcome, forked

    def _source_reads(self, source_id: SessionId, at_turn: int) -> list[Stmt]:
        sid = source_id
        return [
            Stmt(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (sid,)),
            Stmt(f"SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ? ORDER BY seq", (sid,)),
            Stmt(
                f"SELECT {listing('messages')} FROM messages WHERE session_id = ? "
                f"AND turn_id IN ({_KEPT_TURNS}) ORDER BY seq",
                (sid, sid, at_turn),
            ),
            Stmt(
                f"SELECT {listing('events')} FROM events WHERE session_id = ? AND seq <= {_CUT} ORDER BY seq",
                (sid, sid, sid, at_turn),
            ),
            Stmt(
                "SELECT session_id, upto_seq, turn_id, text, created_at FROM summaries WHERE session_id = ? "
                "AND upto_seq <= coalesce((SELECT max(seq) FROM messages WHERE session_id = ? "
                f"AND turn_id IN ({_KEPT_TURNS})), 0) ORDER BY upto_seq",
                (sid, sid, sid, at_turn),
            ),
            Stmt("SELECT sha256 FROM attachment_refs WHERE session_id = ?", (sid,)),
        ]

    def _source(self, results: Sequence[Result]) -> ForkSource | None:
        codec = self.codec
        sessions, turns, messages, events, summaries, refs = results[:6]
        if not sessions.rows:
            return None
        return ForkSource(
            session=codec.session(sessions.rows[0]),
            turns=[codec.turn(r) for r in turns.rows],
            messages=[codec.record("messages", r) for r in messages.rows],
            events=[codec.record("events", r) for r in events.rows],
            summaries=[
                SummaryRecord(
                    session_id=SessionId(r[0]),
                    upto_seq=int(r[1]),
                    turn_id=r[2],
                    text=str(r[3]),
                    created_at=r[4],
                )
                for r in summaries.rows
            ],
            attachments=frozenset(str(r[0]) for r in refs.rows),
        )

    def _fork_writes(self, forked: ForkedSession, now: float) -> list[Stmt]:
        codec = self.codec
        fork_id = forked.session.id
        counters = (len(forked.messages), len(forked.events), 0)
        statements = [Stmt(_INSERT_SESSION, (*codec.record_params("sessions", forked.session), *counters))]
        many: list[tuple[str, list[Any]]] = [
            (_INSERT_TURN, [codec.record_params("turns", t) for t in forked.turns]),
            (INSERT_MESSAGE, [codec.record_params("messages", m) for m in forked.messages]),
            (INSERT_EVENT, [codec.record_params("events", e) for e in forked.events]),
            (
                _INSERT_SUMMARY,
                [
                    (fork_id, s.upto_seq, s.turn_id, codec.param("summaries", "text", s.text), s.created_at)
                    for s in forked.summaries
                ],
            ),
            (INSERT_BLOB_REF, [(fork_id, sha256, now) for sha256 in forked.attachments]),
        ]
        statements.extend(Stmt(sql, many=rows) for sql, rows in many if rows)
        return statements

    async def list_forks(self, session_id: SessionId, owner: str | None, limit: int) -> list[SessionRecord]:
        sql, params = _FORKS, [str(session_id)]
        if owner is not None:
            sql += " AND owner = ?"
            params.append(owner)
        rows = await self._rows(sql + " ORDER BY created_at DESC, id DESC LIMIT ?", (*params, limit))
        return [self.codec.session(r) for r in rows]
