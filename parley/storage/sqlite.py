"""SQLite backend of the Store port: one connection per process, WAL mode.

Several parley processes may open the same file (every desktop client window starts its
own server). WAL lets readers run beside the one writer, `BEGIN IMMEDIATE` takes the
write lock up front so a transaction never fails half way on a lock upgrade, and
`busy_timeout` makes a process wait for another's short transaction instead of failing.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from parley.errors import LeaseLost, StorageError
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
    lease_token,
)
from parley.storage.changes import NewEvent
from parley.storage.schema import migrate_sqlite
from parley.storage.sql_shared import SQLITE, read_database_counts, session_list_query, session_page
from parley.storage.sqlite_access import SqliteAccess
from parley.storage.sqlite_attachments import SqliteAttachments
from parley.storage.sqlite_file import prepare_database_file
from parley.storage.sqlite_manage import SqliteManage
from parley.storage.sqlite_plumbing import (
    BUSY_WAIT_S,
    Connection,
    Synchronous,
    dumps,
    unavailable,
)
from parley.storage.sqlite_rows import (
    CALL_COLUMNS as _CALL_COLUMNS,
)
from parley.storage.sqlite_rows import (
    INTERRUPT_COLUMNS as _INTERRUPT_COLUMNS,
)
from parley.storage.sqlite_rows import (
    QUEUED_COLUMNS as _QUEUED_COLUMNS,
)
from parley.storage.sqlite_rows import (
    SESSION_COLUMNS as _SESSION_COLUMNS,
)
from parley.storage.sqlite_rows import (
    TURN_COLUMNS as _TURN_COLUMNS,
)
from parley.storage.sqlite_rows import (
    call_row as _call,
)
from parley.storage.sqlite_rows import (
    interrupt_row as _interrupt,
)
from parley.storage.sqlite_rows import (
    queued_row as _queued,
)
from parley.storage.sqlite_rows import (
    session_row as _session,
)
from parley.storage.sqlite_rows import (
    turn_row as _turn,
)
from parley.storage.sqlite_steps import SqliteSteps, append_rows

_dumps = dumps


class SqliteStore(SqliteSteps, SqliteAccess, SqliteAttachments, SqliteManage):
    """The default Store. Open it with `open_sqlite_store`, which migrates the schema."""

    @staticmethod
    def _check_lease(db: Connection, session_id: SessionId, lease: str) -> None:
        found = db.execute("SELECT 1 FROM sessions WHERE id = ? AND lease_owner = ?", (session_id, lease))
        if found.fetchone() is None:
            raise LeaseLost(session_id)

    async def steer_pending(self, session_id: SessionId) -> bool:
        row = await self._fetchone(
            "SELECT 1 FROM queued_messages WHERE session_id = ? AND status = 'queued' AND steer = 1 LIMIT 1",
            (session_id,),
        )
        return row is not None

    # ------------------------------------------------------------------ sessions and queue

    async def create_session(
        self, session: SessionRecord, first_message: QueuedMessageRecord | None, now: float
    ) -> bool:
        status, phase = session.status, session.phase

        def create(db: Connection) -> bool:
            try:
                db.execute(
                    "INSERT INTO sessions (id, agent, owner, kind, status, phase, created_at, updated_at, inputs, "
                    "start_client_message_id, settings, title, tags) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        session.id,
                        session.agent,
                        session.owner,
                        session.kind,
                        status,
                        phase,
                        now,
                        now,
                        _dumps(session.inputs) if session.inputs is not None else None,
                        session.start_client_message_id,
                        _dumps(session.settings),
                        session.title,
                        _dumps(session.tags),
                    ),
                )
            except sqlite3.IntegrityError:
                return False  # the owner already started a session with this client_message_id
            events = [NewEvent(None, "session_created", {"agent": session.agent})]
            queued = []
            if first_message is not None:
                queued.append(first_message)
                events.append(NewEvent(None, "message_queued", {"queued_message_id": first_message.id}))
            append_rows(db, session.id, events=events, queued=queued, now=now)
            return True

        return await self._write(create)

    async def find_started(self, owner: str, client_message_id: str) -> SessionRecord | None:
        row = await self._fetchone(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE owner = ? AND start_client_message_id = ?",
            (owner, client_message_id),
        )
        return _session(row) if row is not None else None

    async def find_sent(self, session_id: SessionId, client_message_id: str) -> QueuedMessageRecord | None:
        row = await self._fetchone(
            f"SELECT {_QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? AND client_message_id = ?",
            (session_id, client_message_id),
        )
        return _queued(row) if row is not None else None

    async def first_message(self, session_id: SessionId) -> QueuedMessageRecord | None:
        row = await self._fetchone(
            f"SELECT {_QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? ORDER BY seq LIMIT 1",
            (session_id,),
        )
        return _queued(row) if row is not None else None

    async def latest_event_seq(self, session_id: SessionId) -> int:
        row = await self._fetchone("SELECT event_seq FROM sessions WHERE id = ?", (session_id,))
        return int(row[0]) if row is not None else 0

    async def event_seqs(self, session_ids: Sequence[SessionId]) -> dict[SessionId, int]:
        seqs: dict[SessionId, int] = {}
        ids = list(session_ids)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            rows = await self._fetchall(
                f"SELECT id, event_seq FROM sessions WHERE id IN ({','.join('?' * len(chunk))})", tuple(chunk)
            )
            seqs.update({SessionId(r[0]): int(r[1]) for r in rows})
        return seqs

    # ------------------------------------------------------------------ leases

    async def try_acquire_lease(
        self, session_id: SessionId, owner: str, now: float, ttl_s: float
    ) -> str | None:
        return (await self.try_acquire_leases([session_id], owner, now, ttl_s)).get(session_id)

    async def try_acquire_leases(
        self, session_ids: Sequence[SessionId], owner: str, now: float, ttl_s: float
    ) -> dict[SessionId, str]:
        prefix = lease_token(owner, 0)[:-1]  # "<owner>#": any earlier holding of this process

        def acquire(db: Connection) -> dict[SessionId, str]:
            taken: dict[SessionId, str] = {}
            for session_id in session_ids:
                row = db.execute(
                    "UPDATE sessions SET lease_epoch = lease_epoch + 1, lease_owner = ? || (lease_epoch + 1), "
                    "lease_expires_at = ? WHERE id = ? AND status IN ('running', 'waiting_for_input') "
                    "AND (lease_owner IS NULL OR lease_expires_at < ? OR substr(lease_owner, 1, ?) = ?) "
                    "RETURNING lease_owner",
                    (prefix, now + ttl_s, session_id, now, len(prefix), prefix),
                ).fetchone()
                if row is not None:
                    taken[session_id] = str(row[0])
            return taken

        return await self._write(acquire) if session_ids else {}

    async def renew_lease(self, session_id: SessionId, lease: str, now: float, ttl_s: float) -> SessionRecord:
        def renew(db: Connection) -> sqlite3.Row | None:
            row: sqlite3.Row | None = db.execute(
                f"UPDATE sessions SET lease_expires_at = ? WHERE id = ? AND lease_owner = ? "
                f"RETURNING {_SESSION_COLUMNS}",
                (now + ttl_s, session_id, lease),
            ).fetchone()
            return row

        row = await self._write(renew)
        if row is None:
            raise LeaseLost(session_id)
        return _session(row)

    async def release_lease(self, session_id: SessionId, lease: str) -> None:
        await self._write(
            lambda db: db.execute(
                "UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL WHERE id = ? AND lease_owner = ?",
                (session_id, lease),
            )
        )

    async def count_leases(self, owner: str, now: float) -> int:
        prefix = lease_token(owner, 0)[:-1]
        row = await self._fetchone(
            "SELECT COUNT(*) FROM sessions WHERE substr(lease_owner, 1, ?) = ? AND lease_expires_at >= ?",
            (len(prefix), prefix, now),
        )
        return int(row[0]) if row is not None else 0

    async def database_counts(self, now: float) -> DatabaseCounts:
        return await read_database_counts(self._fetchall, SQLITE, now)

    async def sessions_needing_work(self, now: float, limit: int) -> list[SessionId]:
        # Two partial indexes (migration 13), so sessions parked on a person are never read.
        rows = await self._fetchall(
            "SELECT id, updated_at FROM sessions INDEXED BY sessions_running WHERE status = 'running' "
            "AND (lease_owner IS NULL OR lease_expires_at < ?) AND (wake_at IS NULL OR wake_at <= ?) "
            "UNION ALL "
            # INDEXED BY: without statistics SQLite would pick the index on status alone.
            "SELECT id, updated_at FROM sessions INDEXED BY sessions_waiting_work "
            "WHERE status = 'waiting_for_input' AND (wake_at IS NOT NULL OR lease_owner IS NOT NULL) "
            "AND (lease_owner IS NULL OR lease_expires_at < ?) "
            # Due, or waiting with a lapsed lease: a server asked a question during a call whose
            # process died (a parked session holds no lease); the new holder drops the question.
            "AND (wake_at <= ? OR lease_owner IS NOT NULL) "
            "ORDER BY updated_at LIMIT ?",
            (now, now, now, now, limit),
        )
        return [row[0] for row in rows]

    # ------------------------------------------------------------------ turn steps

    async def record_event(
        self, session_id: SessionId, turn_id: TurnId | None, kind: str, data: dict[str, Any], now: float
    ) -> None:
        await self._write(
            lambda db: append_rows(db, session_id, events=[NewEvent(turn_id, kind, data)], now=now)
        )

    async def list_interrupts(self, session_id: SessionId, pending_only: bool) -> list[InterruptRecord]:
        sql = f"SELECT {_INTERRUPT_COLUMNS} FROM interrupts WHERE session_id = ?"
        if pending_only:
            sql += " AND status = 'pending'"
        rows = await self._fetchall(sql + " ORDER BY created_at, id", (session_id,))
        return [_interrupt(r) for r in rows]

    async def list_all_pending(self, limit: int) -> list[InterruptRecord]:
        rows = await self._fetchall(
            f"SELECT {_INTERRUPT_COLUMNS} FROM interrupts WHERE status = 'pending' ORDER BY created_at LIMIT ?",
            (limit,),
        )
        return [_interrupt(r) for r in rows]

    async def save_summary(
        self, session_id: SessionId, lease: str, turn_id: TurnId, upto_seq: int, text: str, now: float
    ) -> None:
        def save(db: Connection) -> None:
            self._check_lease(db, session_id, lease)
            db.execute(
                "INSERT OR REPLACE INTO summaries (session_id, upto_seq, turn_id, text, created_at) VALUES (?, ?, ?, ?, ?)",
                (session_id, upto_seq, turn_id, text, now),
            )
            event = NewEvent(turn_id, "compacted", {"upto_seq": upto_seq, "chars": len(text)})
            append_rows(db, session_id, events=[event], now=now)

        await self._write(save)

    async def latest_summary(self, session_id: SessionId) -> tuple[int, str] | None:
        row = await self._fetchone(
            "SELECT upto_seq, text FROM summaries WHERE session_id = ? ORDER BY upto_seq DESC LIMIT 1",
            (session_id,),
        )
        return (int(row[0]), str(row[1])) if row is not None else None

    # ------------------------------------------------------------------ reads

    async def get_session(self, session_id: SessionId) -> SessionRecord | None:
        row = await self._fetchone(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
        return _session(row) if row is not None else None

    async def list_sessions(
        self,
        owner: str | None,
        status: str | None,
        agent: str | None,
        cursor: str | None,
        limit: int,
        match: SessionFilter | None = None,
    ) -> SessionPage:
        sql, params = session_list_query(SQLITE, _SESSION_COLUMNS, owner, status, agent, cursor, limit, match)
        return session_page(await self._fetchall(sql, tuple(params)), limit, _session)

    async def get_turn(self, turn_id: TurnId) -> TurnRecord | None:
        row = await self._fetchone(f"SELECT {_TURN_COLUMNS} FROM turns WHERE id = ?", (turn_id,))
        return _turn(row) if row is not None else None

    async def get_agent_version(self, agent: str, version: str) -> AgentVersionRecord | None:
        row = await self._fetchone(
            "SELECT agent, version, definition, created_at FROM agent_versions WHERE agent = ? AND version = ?",
            (agent, version),
        )
        if row is None:
            return None
        return AgentVersionRecord(
            agent=row["agent"],
            version=row["version"],
            definition=json.loads(row["definition"]),
            created_at=row["created_at"],
        )

    async def list_turns(self, session_id: SessionId) -> list[TurnRecord]:
        rows = await self._fetchall(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE session_id = ? ORDER BY seq", (session_id,)
        )
        return [_turn(r) for r in rows]

    async def list_messages(
        self, session_id: SessionId, from_seq: int | None, limit: int | None
    ) -> list[MessageRecord]:
        sql = "SELECT session_id, seq, turn_id, role, content, created_at FROM messages WHERE session_id = ?"
        params: list[Any] = [session_id]
        if from_seq is not None:
            sql += " AND seq >= ?"
            params.append(from_seq)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        # A whole transcript may be large: read it off the event loop.
        whole = from_seq is None and limit is None
        rows = await self._fetchall(sql, tuple(params), inline=not whole)
        return [
            MessageRecord(
                session_id=r["session_id"],
                seq=r["seq"],
                turn_id=r["turn_id"],
                role=r["role"],
                content=json.loads(r["content"]),
                created_at=r["created_at"],
            )
            for r in rows
        ]

    async def count_messages(self, session_id: SessionId) -> int:
        row = await self._fetchone("SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,))
        return int(row[0]) if row is not None else 0

    async def list_tool_calls(self, turn_id: TurnId) -> list[ToolCallRecord]:
        rows = await self._fetchall(
            f"SELECT {_CALL_COLUMNS} FROM tool_calls WHERE turn_id = ? ORDER BY step_no, call_index",
            (turn_id,),
        )
        return [_call(r) for r in rows]

    async def list_queued(self, session_id: SessionId) -> list[QueuedMessageRecord]:
        rows = await self._fetchall(
            f"SELECT {_QUEUED_COLUMNS} FROM queued_messages WHERE session_id = ? AND status = 'queued' ORDER BY seq",
            (session_id,),
        )
        return [_queued(r) for r in rows]

    async def get_queued(self, message_id: QueuedMessageId) -> QueuedMessageRecord | None:
        row = await self._fetchone(
            f"SELECT {_QUEUED_COLUMNS} FROM queued_messages WHERE id = ?",
            (message_id,),
        )
        return _queued(row) if row is not None else None

    async def list_steps(self, session_id: SessionId) -> list[StepRecord]:
        rows = await self._fetchall(
            "SELECT session_id, turn_id, step_no, kind, process_id, input_tokens, output_tokens, created_at "
            "FROM steps WHERE session_id = ? ORDER BY created_at, step_no",
            (session_id,),
        )
        return [
            StepRecord(
                session_id=r[0],
                turn_id=r[1],
                step_no=r[2],
                kind=r[3],
                process_id=r[4],
                input_tokens=r[5],
                output_tokens=r[6],
                created_at=r[7],
            )
            for r in rows
        ]

    async def list_events(self, session_id: SessionId, after_seq: int, limit: int) -> list[EventRecord]:
        rows = await self._fetchall(
            "SELECT session_id, seq, turn_id, kind, data, created_at FROM events WHERE session_id = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (session_id, after_seq, limit),
        )
        return [
            EventRecord(
                session_id=r[0], seq=r[1], turn_id=r[2], kind=r[3], data=json.loads(r[4]), created_at=r[5]
            )
            for r in rows
        ]


# Switching a new file to WAL needs an exclusive lock that busy_timeout does not wait for;
# two processes opening a fresh database at once can collide there.
WAL_ATTEMPTS = 50
WAL_RETRY_S = 0.05


def _enable_wal(db: Connection) -> None:
    for attempt in range(WAL_ATTEMPTS):
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == WAL_ATTEMPTS - 1:
                raise
            time.sleep(WAL_RETRY_S)  # on the opening thread, before the store serves anyone


def _open_failed(path: Path, exc: sqlite3.Error) -> StorageError:
    failure = unavailable(path, exc)
    if failure is not None:
        return StorageError(f"cannot start: {failure.problem}, then start parley again")
    return StorageError(f"cannot open the database {path}: {exc}")


def _cap_size(db: Connection, max_size_mb: float) -> None:
    row = db.execute("PRAGMA page_size").fetchone()
    page_size = int(row[0]) if row is not None else 4096
    pages = max(1, int(max_size_mb * 1024 * 1024) // page_size)
    # SQLite keeps the cap per connection; a file already larger keeps its size and gains no pages.
    db.execute(f"PRAGMA max_page_count = {pages}")


def _open(path: Path, max_size_mb: float | None, synchronous: Synchronous) -> Connection:
    try:
        # The connection is used from worker threads, one at a time (SqliteBase's limiter).
        db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise _open_failed(path, exc) from exc
    try:
        db.row_factory = sqlite3.Row
        # Opening waits as long as a call would for another process's lock (a peer migrating).
        db.execute(f"PRAGMA busy_timeout = {int(BUSY_WAIT_S * 1000)}")
        _enable_wal(db)
        # FULL: every commit survives a power loss; NORMAL: a process crash loses nothing, a
        # power loss may lose the last commits, except those marked durable (see _make_durable).
        db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        db.execute("PRAGMA foreign_keys = ON")
        if max_size_mb is not None:
            _cap_size(db, max_size_mb)
        migrate_sqlite(db, path)
        db.execute("PRAGMA busy_timeout = 0")  # then SqliteBase pauses and tries again, see there
        if synchronous == "normal":
            db.execute("PRAGMA wal_autocheckpoint = 0")  # the store checkpoints off the event loop
    except sqlite3.Error as exc:
        db.close()
        raise _open_failed(path, exc) from exc
    except BaseException:
        db.close()
        raise
    return db


@asynccontextmanager
async def open_sqlite_store(
    path: Path, *, max_size_mb: float | None = None, synchronous: Synchronous = "full"
) -> AsyncIterator[SqliteStore]:
    """Open (creating and migrating as needed) the SQLite database at `path`.

    A new folder is created 0700 and a new file 0600 (see sqlite_file.py). With `max_size_mb`,
    writes that would grow the file beyond it fail as "full", and the data stays as it was.

    Raises:
        StorageError: the path cannot hold a database, or the file cannot be opened or migrated;
            the message names the file and the fix.
    """
    prepare_database_file(path)
    db = await anyio.to_thread.run_sync(_open, path, max_size_mb, synchronous)
    store = SqliteStore(db, path, synchronous)
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()
