"""PostgreSQL backend of the Store port: a psycopg connection pool per process, for several parley
replicas sharing one database (DESIGN §4.7, §5).

The same contract as SQLite (tests/test_storage_contract.py): a decision is written in the
transaction that read its snapshot, with the session row locked (`SELECT ... FOR UPDATE`, see
postgres_steps.py); a lease is claimed with `FOR UPDATE SKIP LOCKED`, so a replica never waits
on a session another one is writing; each statement that needs no snapshot is one statement,
committed by itself. Everything lives in one schema (`storage.schema`), so parley can share a
database with other applications.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from parley.errors import LeaseLost, StorageError
from parley.ids import QueuedMessageId, SessionId, TurnId
from parley.redaction import mask_url
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
from parley.storage.postgres_access import PostgresAccess
from parley.storage.postgres_attachments import PostgresAttachments
from parley.storage.postgres_copy import PostgresCopy
from parley.storage.postgres_feed import PostgresChangeFeed, channel_name
from parley.storage.postgres_manage import PostgresManage
from parley.storage.postgres_plumbing import Conn, Pool, PostgresUnavailable, detail_of
from parley.storage.postgres_rows import (
    CALL_FIELDS,
    EVENT_FIELDS,
    INTERRUPT_FIELDS,
    MESSAGE_FIELDS,
    QUEUED_FIELDS,
    SESSION_FIELDS,
    STEP_FIELDS,
    TURN_FIELDS,
    call_row,
    event_row,
    interrupt_row,
    json_value,
    listing,
    message_row,
    queued_row,
    session_row,
    step_row,
    turn_row,
)
from parley.storage.postgres_steps import PostgresSteps, queued_values
from parley.storage.postgres_tasks import page_limit
from parley.storage.schema import SCHEMA_NAME, migrate_postgres
from parley.storage.sql_shared import POSTGRES, read_database_counts, session_list_query, session_page
from parley.storage.status import StorageStatus
from parley.storage.wakeups import ChangeFeed, NoChangeFeed, Wake

logger = logging.getLogger(__name__)

_SESSION = listing(SESSION_FIELDS)
_TURN = listing(TURN_FIELDS)
_QUEUED = listing(QUEUED_FIELDS)
_CALL = listing(CALL_FIELDS)
_INTERRUPT = listing(INTERRUPT_FIELDS)

# How long /healthz waits for the database to answer before it reports it unreachable (probes
# such as Kubernetes' give up after a second or a few).
HEALTH_PROBE_S = 2.0
# libpq's own connect timeout when the URL names none: without one, a host that drops packets
# holds a connection attempt for the operating system's TCP timeout (minutes).
DEFAULT_CONNECT_TIMEOUT_S = 5
# Connection failures that waiting does not cure: fail at once instead of retrying.
_FOR_GOOD = (
    "does not exist",
    "authentication failed",
    "pg_hba.conf",
    "no password supplied",
    "permission denied",
)

# The work scan. A UNION of two index range scans (see the sessions_due and
# sessions_waiting_leased indexes in postgres_schema.py) that together select exactly what
# SqliteStore.sessions_needing_work selects: running sessions that are due, waiting ones whose
# timer is due, and waiting ones left with a lapsed lease - each with its lease free or expired.
# With 100,000 parked sessions (waiting for a person, or for a timer hours away) and none due,
# EXPLAIN ANALYZE shows (tests/test_storage_postgres.py checks the plan's shape):
#   Limit -> Sort (Sort Key: sessions.updated_at) -> HashAggregate -> Append
#     -> Index Scan using sessions_due on sessions (actual rows=0)
#          Index Cond: (COALESCE(wake_at, '-Infinity'::double precision) <= '1000001'::double precision)
#          Filter: ((lease_owner IS NULL) OR (lease_expires_at < '1000001'::double precision))
#     -> Index Scan using sessions_waiting_leased on sessions sessions_1 (actual rows=0)
#          Index Cond: (lease_expires_at < '1000001'::double precision)
#   Execution Time: 0.126 ms
# No sequential scan: a poll reads the sessions that are due, not the ones that are parked.
WORK_SCAN = (
    "SELECT id FROM ("
    " SELECT id, updated_at FROM sessions"
    " WHERE (status = 'running' OR (status = 'waiting_for_input' AND wake_at IS NOT NULL))"
    " AND coalesce(wake_at, '-Infinity'::double precision) <= %(now)s"
    " AND (lease_owner IS NULL OR lease_expires_at < %(now)s)"
    " UNION"
    # Waiting with a lapsed lease: a server asked a question during a call whose process died
    # (a parked session holds no lease); the new holder drops the question.
    " SELECT id, updated_at FROM sessions"
    " WHERE status = 'waiting_for_input' AND lease_owner IS NOT NULL AND lease_expires_at < %(now)s"
    ") due ORDER BY updated_at LIMIT %(limit)s"
)


class PostgresStore(PostgresSteps, PostgresCopy, PostgresAccess, PostgresAttachments, PostgresManage):
    """The Store on PostgreSQL. Open it with `open_postgres_store`, which migrates the schema."""

    # (before, after): the schema versions when this store was opened (`parley db migrate`).
    migrated: tuple[int, int] = (0, 0)
    # Other replicas' changes (LISTEN/NOTIFY), unless listening is turned off.
    feed: ChangeFeed = NoChangeFeed()

    async def steer_pending(self, session_id: SessionId) -> bool:
        row = await self._fetchone(
            "SELECT 1 FROM queued_messages WHERE session_id = %s AND status = 'queued' AND steer LIMIT 1",
            (session_id,),
        )
        return row is not None

    # ------------------------------------------------------------------ sessions and queue

    async def create_session(
        self, session: SessionRecord, first_message: QueuedMessageRecord | None, now: float
    ) -> bool:
        # One statement: the session and its first events and message are inserted only when the
        # session is (a second start with the owner's client_message_id inserts nothing).
        params: dict[str, Any] = {
            "id": session.id,
            "agent": session.agent,
            "owner": session.owner,
            "kind": session.kind,
            "status": session.status,
            "phase": session.phase,
            "now": now,
            "inputs": json_value(session.inputs),
            "start": session.start_client_message_id,
            "settings": json_value(session.settings),
            "title": json_value(session.title),
            "tags": json_value(session.tags),
            "created": json_value({"agent": session.agent}),
            "events": 1,
            "queue": 0,
        }
        parts = [
            "WITH s AS (INSERT INTO sessions (id, agent, owner, kind, status, phase, created_at, updated_at, "
            "inputs, start_client_message_id, settings, title, tags, event_seq, queue_seq) VALUES (%(id)s, "
            "%(agent)s, %(owner)s, %(kind)s, %(status)s, %(phase)s, %(now)s, %(now)s, %(inputs)s, %(start)s, "
            "%(settings)s, %(title)s, %(tags)s, %(events)s, %(queue)s) ON CONFLICT DO NOTHING RETURNING id)",
            ", created AS (INSERT INTO events (session_id, seq, turn_id, kind, data, created_at) "
            "SELECT id, 1, NULL, 'session_created', %(created)s::json, %(now)s FROM s)",
        ]
        if first_message is not None:
            message = first_message
            values = queued_values(message, session.id, 1)
            params |= {f"q{i}": value for i, value in enumerate(values)}
            params |= {"events": 2, "queue": 1, "queued": json_value({"queued_message_id": message.id})}
            casts = {
                "text": "::json",
                "settings": "::json",
                "attachments": "::json",
                "trace_context": "::json",
                "steer": "::boolean",
                "created_at": "::float8",
            }
            selected = ", ".join(f"%(q{i})s{casts.get(name, '')}" for i, name in enumerate(QUEUED_FIELDS))
            parts += [
                f", q AS (INSERT INTO queued_messages ({_QUEUED}) SELECT {selected} FROM s)",
                ", queued AS (INSERT INTO events (session_id, seq, turn_id, kind, data, created_at) "
                "SELECT id, 2, NULL, 'message_queued', %(queued)s::json, %(now)s FROM s)",
            ]
            # Its attachments' bytes (distinct hashes: one statement cannot insert a key twice),
            # stored only when the session is.
            for i, blob in enumerate(message.blobs):
                params |= {
                    f"b{i}": blob.sha256,
                    f"bm{i}": blob.mime_type,
                    f"bs{i}": blob.size,
                    f"bd{i}": blob.data,
                }
                parts += [
                    f", b{i} AS (INSERT INTO attachments (sha256, mime_type, size, data, stored_at) "
                    f"SELECT %(b{i})s, %(bm{i})s, %(bs{i})s, %(bd{i})s, %(now)s FROM s "
                    "ON CONFLICT (sha256) DO UPDATE SET stored_at = excluded.stored_at)",
                    f", r{i} AS (INSERT INTO attachment_refs (session_id, sha256, created_at) "
                    f"SELECT id, %(b{i})s, %(now)s FROM s ON CONFLICT DO NOTHING)",
                ]
        # A session started with a message needs a driver: other replicas hear of it (only when
        # it was created: the expression runs for the rows of `s`).
        notify, notify_params = self._notify_sql(Wake(session.id, work=first_message is not None))
        params |= notify_params
        parts.append(f" SELECT id, {notify} FROM s")
        return bool(await self._write("".join(parts), params))

    async def find_started(self, owner: str, client_message_id: str) -> SessionRecord | None:
        row = await self._fetchone(
            f"SELECT {_SESSION} FROM sessions WHERE owner = %s AND start_client_message_id = %s",
            (owner, client_message_id),
        )
        return session_row(row) if row is not None else None

    async def find_sent(self, session_id: SessionId, client_message_id: str) -> QueuedMessageRecord | None:
        row = await self._fetchone(
            f"SELECT {_QUEUED} FROM queued_messages WHERE session_id = %s AND client_message_id = %s",
            (session_id, client_message_id),
        )
        return queued_row(row) if row is not None else None

    async def first_message(self, session_id: SessionId) -> QueuedMessageRecord | None:
        row = await self._fetchone(
            f"SELECT {_QUEUED} FROM queued_messages WHERE session_id = %s ORDER BY seq LIMIT 1", (session_id,)
        )
        return queued_row(row) if row is not None else None

    async def latest_event_seq(self, session_id: SessionId) -> int:
        row = await self._fetchone("SELECT event_seq FROM sessions WHERE id = %s", (session_id,))
        return int(row[0]) if row is not None else 0

    async def event_seqs(self, session_ids: Sequence[SessionId]) -> dict[SessionId, int]:
        rows = await self._fetchall(
            "SELECT id, event_seq FROM sessions WHERE id = ANY(%s)", (list(session_ids),)
        )
        return {SessionId(r[0]): int(r[1]) for r in rows}

    # ------------------------------------------------------------------ leases

    async def try_acquire_lease(
        self, session_id: SessionId, owner: str, now: float, ttl_s: float
    ) -> str | None:
        prefix = lease_token(owner, 0)[:-1]  # "<owner>#": any earlier holding of this process
        # SKIP LOCKED: a session whose row another transaction holds (a decision being written,
        # another replica claiming it) is not waited for; the next scan looks again.
        rows = await self._write(
            "UPDATE sessions SET lease_epoch = lease_epoch + 1, "
            "lease_owner = %(prefix)s::text || (lease_epoch + 1), lease_expires_at = %(expires)s "
            "WHERE id = (SELECT id FROM sessions WHERE id = %(sid)s "
            "AND status IN ('running', 'waiting_for_input') "
            "AND (lease_owner IS NULL OR lease_expires_at < %(now)s OR starts_with(lease_owner, %(prefix)s)) "
            "FOR UPDATE SKIP LOCKED) RETURNING lease_owner",
            {"prefix": prefix, "expires": now + ttl_s, "sid": session_id, "now": now},
        )
        return str(rows[0][0]) if rows else None

    async def try_acquire_leases(
        self, session_ids: Sequence[SessionId], owner: str, now: float, ttl_s: float
    ) -> dict[SessionId, str]:
        if not session_ids:
            return {}
        prefix = lease_token(owner, 0)[:-1]
        # As try_acquire_lease, for every session at once: rows another transaction holds are
        # skipped, not waited for.
        rows = await self._write(
            "UPDATE sessions SET lease_epoch = lease_epoch + 1, "
            "lease_owner = %(prefix)s::text || (lease_epoch + 1), lease_expires_at = %(expires)s "
            "WHERE id IN (SELECT id FROM sessions WHERE id = ANY(%(sids)s) "
            "AND status IN ('running', 'waiting_for_input') "
            "AND (lease_owner IS NULL OR lease_expires_at < %(now)s OR starts_with(lease_owner, %(prefix)s)) "
            "FOR UPDATE SKIP LOCKED) RETURNING id, lease_owner",
            {"prefix": prefix, "expires": now + ttl_s, "sids": list(session_ids), "now": now},
        )
        return {SessionId(row[0]): str(row[1]) for row in rows}

    async def renew_lease(self, session_id: SessionId, lease: str, now: float, ttl_s: float) -> SessionRecord:
        rows = await self._write(
            f"UPDATE sessions SET lease_expires_at = %s WHERE id = %s AND lease_owner = %s RETURNING {_SESSION}",
            (now + ttl_s, session_id, lease),
        )
        if not rows:
            raise LeaseLost(session_id)
        return session_row(rows[0])

    async def release_lease(self, session_id: SessionId, lease: str) -> None:
        # A session let go with work left (this process stops, or a message came as it let go)
        # wakes the other replicas; a parked one waits for its timer or a person.
        notify, params = self._notify_sql(Wake(session_id, work=True))
        await self._write(
            "WITH released AS (UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL "
            "WHERE id = %(sid)s AND lease_owner = %(lease)s RETURNING status, wake_at) "
            f"SELECT {notify} FROM released WHERE status = 'running' AND wake_at IS NULL",
            {"sid": session_id, "lease": lease, **params},
        )

    async def count_leases(self, owner: str, now: float) -> int:
        prefix = lease_token(owner, 0)[:-1]
        # Tokens starting with "<owner>#" are exactly those in ["<owner>#", "<owner>$") in the "C"
        # collation: a range the sessions_leased index answers.
        row = await self._fetchone(
            "SELECT count(*) FROM sessions WHERE lease_owner >= %s AND lease_owner < %s "
            "AND lease_expires_at >= %s",
            (prefix, prefix[:-1] + "$", now),
        )
        return int(row[0]) if row is not None else 0

    async def database_counts(self, now: float) -> DatabaseCounts:
        return await read_database_counts(self._fetchall, POSTGRES, now)

    async def sessions_needing_work(self, now: float, limit: int) -> list[SessionId]:
        rows = await self._fetchall(WORK_SCAN, {"now": now, "limit": page_limit(limit)})
        return [SessionId(row[0]) for row in rows]

    # ------------------------------------------------------------------ events and summaries

    async def record_event(
        self, session_id: SessionId, turn_id: TurnId | None, kind: str, data: dict[str, Any], now: float
    ) -> None:
        # Waiting callers on other replicas hear of it (a tool's progress, a warning).
        notify, params = self._notify_sql(Wake(session_id))
        rows = await self._write(
            "WITH s AS (UPDATE sessions SET event_seq = event_seq + 1 WHERE id = %(sid)s "
            "RETURNING id, event_seq) "
            "INSERT INTO events (session_id, seq, turn_id, kind, data, created_at) "
            "SELECT id, event_seq, %(turn)s::text, %(kind)s, %(data)s::json, %(now)s::float8 FROM s "
            f"RETURNING seq, {notify}",
            {
                "sid": session_id,
                "turn": turn_id,
                "kind": kind,
                "data": json_value(data),
                "now": now,
                **params,
            },
        )
        if not rows:
            raise StorageError(f"session {session_id} vanished from the database")

    async def list_interrupts(self, session_id: SessionId, pending_only: bool) -> list[InterruptRecord]:
        query = f"SELECT {_INTERRUPT} FROM interrupts WHERE session_id = %s"
        if pending_only:
            query += " AND status = 'pending'"
        rows = await self._fetchall(query + " ORDER BY created_at, id", (session_id,))
        return [interrupt_row(r) for r in rows]

    async def list_all_pending(self, limit: int) -> list[InterruptRecord]:
        rows = await self._fetchall(
            f"SELECT {_INTERRUPT} FROM interrupts WHERE status = 'pending' ORDER BY created_at LIMIT %s",
            (page_limit(limit),),
        )
        return [interrupt_row(r) for r in rows]

    async def save_summary(
        self, session_id: SessionId, lease: str, turn_id: TurnId, upto_seq: int, text: str, now: float
    ) -> None:
        # One statement: the lease check is the UPDATE's condition (it locks the row, so no other
        # holding comes between), and the summary and its event go in only when it matched.
        notify, notify_params = self._notify_sql(Wake(session_id))
        rows = await self._write(
            "WITH s AS (UPDATE sessions SET event_seq = event_seq + 1 WHERE id = %(sid)s AND lease_owner = %(lease)s "
            "RETURNING id, event_seq), "
            "summary AS (INSERT INTO summaries (session_id, upto_seq, turn_id, text, created_at) "
            "SELECT id, %(upto)s, %(turn)s::text, %(text)s::json, %(now)s FROM s "
            "ON CONFLICT (session_id, upto_seq) DO UPDATE SET turn_id = excluded.turn_id, text = excluded.text, "
            "created_at = excluded.created_at) "
            "INSERT INTO events (session_id, seq, turn_id, kind, data, created_at) "
            "SELECT id, event_seq, %(turn)s::text, 'compacted', %(data)s::json, %(now)s FROM s "
            f"RETURNING seq, {notify}",
            {
                **notify_params,
                "sid": session_id,
                "lease": lease,
                "upto": upto_seq,
                "turn": turn_id,
                "text": json_value(text),
                "now": now,
                "data": json_value({"upto_seq": upto_seq, "chars": len(text)}),
            },
        )
        if not rows:
            raise LeaseLost(session_id)

    async def latest_summary(self, session_id: SessionId) -> tuple[int, str] | None:
        row = await self._fetchone(
            "SELECT upto_seq, text FROM summaries WHERE session_id = %s ORDER BY upto_seq DESC LIMIT 1",
            (session_id,),
        )
        return (int(row[0]), str(row[1])) if row is not None else None

    # ------------------------------------------------------------------ reads

    async def get_session(self, session_id: SessionId) -> SessionRecord | None:
        row = await self._fetchone(f"SELECT {_SESSION} FROM sessions WHERE id = %s", (session_id,))
        return session_row(row) if row is not None else None

    async def list_sessions(
        self,
        owner: str | None,
        status: str | None,
        agent: str | None,
        cursor: str | None,
        limit: int,
        match: SessionFilter | None = None,
    ) -> SessionPage:
        sql, params = session_list_query(POSTGRES, _SESSION, owner, status, agent, cursor, limit, match)
        return session_page(await self._fetchall(sql, tuple(params)), limit, session_row)

    async def get_turn(self, turn_id: TurnId) -> TurnRecord | None:
        row = await self._fetchone(f"SELECT {_TURN} FROM turns WHERE id = %s", (turn_id,))
        return turn_row(row) if row is not None else None

    async def get_agent_version(self, agent: str, version: str) -> AgentVersionRecord | None:
        row = await self._fetchone(
            "SELECT agent, version, definition, created_at FROM agent_versions WHERE agent = %s AND version = %s",
            (agent, version),
        )
        if row is None:
            return None
        return AgentVersionRecord(agent=row[0], version=row[1], definition=row[2], created_at=row[3])

    async def list_turns(self, session_id: SessionId) -> list[TurnRecord]:
        rows = await self._fetchall(
            f"SELECT {_TURN} FROM turns WHERE session_id = %s ORDER BY seq", (session_id,)
        )
        return [turn_row(r) for r in rows]

    async def list_messages(
        self, session_id: SessionId, from_seq: int | None, limit: int | None
    ) -> list[MessageRecord]:
        query = f"SELECT {listing(MESSAGE_FIELDS)} FROM messages WHERE session_id = %s"
        params: list[Any] = [session_id]
        if from_seq is not None:
            query += " AND seq >= %s"
            params.append(from_seq)
        rows = await self._fetchall(query + " ORDER BY seq LIMIT %s", (*params, page_limit(limit)))
        return [message_row(r) for r in rows]

    async def count_messages(self, session_id: SessionId) -> int:
        row = await self._fetchone("SELECT count(*) FROM messages WHERE session_id = %s", (session_id,))
        return int(row[0]) if row is not None else 0

    async def list_tool_calls(self, turn_id: TurnId) -> list[ToolCallRecord]:
        rows = await self._fetchall(
            f"SELECT {_CALL} FROM tool_calls WHERE turn_id = %s ORDER BY step_no, call_index", (turn_id,)
        )
        return [call_row(r) for r in rows]

    async def list_queued(self, session_id: SessionId) -> list[QueuedMessageRecord]:
        rows = await self._fetchall(
            f"SELECT {_QUEUED} FROM queued_messages WHERE session_id = %s AND status = 'queued' ORDER BY seq",
            (session_id,),
        )
        return [queued_row(r) for r in rows]

    async def get_queued(self, message_id: QueuedMessageId) -> QueuedMessageRecord | None:
        row = await self._fetchone(f"SELECT {_QUEUED} FROM queued_messages WHERE id = %s", (message_id,))
        return queued_row(row) if row is not None else None

    async def list_steps(self, session_id: SessionId) -> list[StepRecord]:
        rows = await self._fetchall(
            f"SELECT {listing(STEP_FIELDS)} FROM steps WHERE session_id = %s ORDER BY created_at, step_no",
            (session_id,),
        )
        return [step_row(r) for r in rows]

    async def list_events(self, session_id: SessionId, after_seq: int, limit: int) -> list[EventRecord]:
        rows = await self._fetchall(
            f"SELECT {listing(EVENT_FIELDS)} FROM events WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s",
            (session_id, after_seq, page_limit(limit)),
        )
        return [event_row(r) for r in rows]

    # ------------------------------------------------------------------ health

    async def status(self) -> StorageStatus:
        """For /healthz: whether the database answers now, its schema version and the pool. The
        condition is the latest write's, like SQLite's, or "unreachable" while nothing answers."""
        version: int | None = None
        try:
            probe_s = min(HEALTH_PROBE_S, self._pool.timeout)
            with anyio.fail_after(probe_s):
                async with self._connection(probe_s) as conn:
                    cur = await conn.execute("SELECT max(version) FROM schema_version")
                    row = await cur.fetchone()
                    version = int(row[0]) if row is not None and row[0] is not None else None
            reachable, problem = True, None
        except PostgresUnavailable as exc:
            # Every connection busy is not "unreachable": the database answers, parley queues.
            reachable, problem = exc.condition == "busy", exc.condition
        except (psycopg.Error, TimeoutError) as exc:
            reachable, problem = False, "unreachable"
            logger.debug("health probe of %s failed: %s", self.label, detail_of(exc, self._secrets))
        if reachable and self.health.status == "unreachable":
            self.health.record(None)  # it answers again; the next write will tell if it takes writes
        condition = self.health.status if reachable else "unreachable"
        if problem == "busy" and condition == "ok":
            condition = "busy"
        details = {
            "backend": "postgresql",
            "schema": self.schema,
            "reachable": reachable,
            "schema_version": version,
            "pool": self.pool_stats(),
        }
        return StorageStatus(condition=condition, reachable=reachable, details=details)


async def _connect(params: dict[str, Any], retry_s: float, label: str, secrets: Sequence[str | None]) -> Conn:
    """A first connection, tried again for up to `retry_s` (a database that starts beside parley)."""
    deadline = anyio.current_time() + retry_s
    pause = 0.1
    while True:
        try:
            return await AsyncConnection.connect(**params, autocommit=True)
        except psycopg.OperationalError as exc:
            detail = detail_of(exc, secrets)
            for_good = any(word in detail for word in _FOR_GOOD)
            if for_good or anyio.current_time() + pause > deadline:
                tried = "" if for_good else f" (tried for {retry_s:g}s, storage.connect_retry_s)"
                raise StorageError(
                    f"cannot connect to the PostgreSQL database {label}: {detail}; check that it runs and "
                    f"that storage.url names the right host, database and user{tried}"
                ) from None
        await anyio.sleep(pause)
        pause = min(pause * 2, 2.0)


def database_label(url: str, schema: str) -> str:
    """How messages and logs name the database: its URL without a password, and the schema."""
    return f"{mask_url(url)} (schema {schema})"


@asynccontextmanager
async def open_postgres_store(
    url: str,
    *,
    schema: str = "public",
    pool_size: int = 10,
    statement_timeout_s: float = 30.0,
    connect_retry_s: float = 10.0,
    origin: str = "",
    listen: bool = True,
    listen_url: str | None = None,
    listen_ping_s: float = 5.0,
) -> AsyncIterator[PostgresStore]:
    """Connect to the PostgreSQL database at `url` (creating `schema` and migrating it as needed)
    and open a pool of at most `pool_size` connections whose statements run in `schema` and are
    stopped after `statement_timeout_s`.

    With `listen`, every change is announced to other replicas as process `origin` and
    `store.change_feed()` hears theirs, on a connection to `listen_url` (default `url`) that is
    pinged after `listen_ping_s` of silence (postgres_feed.py).

    Raises:
        StorageError: the URL is malformed, the database cannot be reached within
            `connect_retry_s`, or its schema is newer than this parley knows; the message names
            the database (never its password) and the fix.
    """
    if not SCHEMA_NAME.fullmatch(schema):
        raise StorageError(f"'{schema}' cannot be a schema for parley: use lowercase letters, digits and _")
    label = database_label(url, schema)
    try:
        params: dict[str, Any] = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise StorageError(f"storage.url {mask_url(url)} is not a PostgreSQL URL: {detail_of(exc)}") from None
    secrets: tuple[str | None, ...] = (params.get("password"),)
    params.setdefault("application_name", "parley")
    params.setdefault("connect_timeout", DEFAULT_CONNECT_TIMEOUT_S)
    first = await _connect(params, connect_retry_s, label, secrets)
    try:
        migrated = await migrate_postgres(first, schema, label)
    except psycopg.Error as exc:
        raise StorageError(
            f"cannot migrate the PostgreSQL database {label}: {detail_of(exc, secrets)}"
        ) from exc
    finally:
        with anyio.CancelScope(shield=True):
            await first.close()
    timeout_ms = str(max(1, round(statement_timeout_s * 1000)))

    async def configure(conn: Conn) -> None:
        # Per connection, once: every statement of the store names its tables unqualified.
        await conn.execute(
            "SELECT set_config('search_path', %s, false), set_config('statement_timeout', %s, false)",
            (schema, timeout_ms),
        )

    pool: Pool = AsyncConnectionPool(
        kwargs={**params, "autocommit": True},
        min_size=1,
        max_size=pool_size,
        # How long a call waits for a connection (the database gone, or every connection busy).
        timeout=max(connect_retry_s, 1.0),
        # A lost connection is opened again with backoff (1 s, 2 s, 4 s, ...) for this long, then
        # the next call opens a new one: so the pool finds a database that comes back within
        # seconds, not after the backoff has grown to minutes.
        reconnect_timeout=max(connect_retry_s, 1.0),
        configure=configure,
        name="parley",
        open=False,
    )
    try:
        await pool.open(wait=True, timeout=max(connect_retry_s, 1.0))
    except psycopg.Error as exc:
        with anyio.CancelScope(shield=True):
            await pool.close()
        raise StorageError(
            f"cannot open connections to the PostgreSQL database {label}: {detail_of(exc, secrets)}"
        ) from exc
    listen_params: dict[str, Any] | None = None
    if listen:
        try:
            listen_params = {**params, **conninfo_to_dict(listen_url)} if listen_url else dict(params)
        except psycopg.Error as exc:
            raise StorageError(
                f"storage.listen_url {mask_url(listen_url or '')} is not a PostgreSQL URL: {detail_of(exc)}"
            ) from None
        secrets = (*secrets, listen_params.get("password"))
    try:
        store = PostgresStore(
            pool,
            label=label,
            schema=schema,
            secrets=secrets,
            channel=channel_name(schema) if listen else None,
            origin=origin,
        )
        store.migrated = migrated
        if listen_params is not None:
            store.feed = PostgresChangeFeed(
                listen_params,
                channel=channel_name(schema),
                origin=origin,
                label=database_label(listen_url or url, schema),
                ping_s=listen_ping_s,
                secrets=secrets,
            )
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await pool.close()
