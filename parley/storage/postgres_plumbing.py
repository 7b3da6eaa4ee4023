"""The connection plumbing of the PostgreSQL store: a psycopg pool, and the failures that are the
database's condition (unreachable, full, read-only, busy) turned into StorageUnavailable. How a
program's batches go out (one pipeline each) is PostgresStore._execute's.

Every connection is handed back to the pool shielded from cancellation, rolled back first when
a transaction was left open, so a cancelled call neither keeps a row lock nor loses a connection.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from parley.errors import LeaseLost, StorageCondition, StorageError, StorageUnavailable
from parley.redaction import redact
from parley.storage.status import StorageHealth

logger = logging.getLogger(__name__)

Row = tuple[Any, ...]
Conn = AsyncConnection[Row]
Pool = AsyncConnectionPool[Conn]
Params = Sequence[Any] | Mapping[str, Any]
Statement = tuple[str, Params]

# The SQLSTATEs that describe the database's condition rather than our SQL. Any other error (a
# constraint, a type) is a bug and is left as it is.
_CONDITIONS: dict[str, StorageCondition] = {
    "53100": "full",  # disk_full
    "53300": "busy",  # too_many_connections
    "25006": "read_only",  # read_only_sql_transaction: a standby, default_transaction_read_only
    "42501": "read_only",  # insufficient_privilege: this user may not write
    "57014": "busy",  # query_canceled: statement_timeout
    "55P03": "busy",  # lock_not_available
    "40P01": "busy",  # deadlock_detected
    "40001": "busy",  # serialization_failure
    "57P01": "unreachable",  # admin_shutdown
    "57P02": "unreachable",  # crash_shutdown
    "57P03": "unreachable",  # cannot_connect_now: starting up or shutting down
}

_PROBLEMS: dict[StorageCondition, str] = {
    "full": "is full: free space on the database server's disk",
    "read_only": (
        "refuses writes (a read-only standby, default_transaction_read_only, or a user without the "
        "rights): point storage.url at the primary, or grant the user its rights"
    ),
    "busy": (
        "is busy (a lock held too long, a statement past storage.statement_timeout_s, or too many "
        "connections): retry shortly"
    ),
    "unreachable": "cannot be reached ({detail}): check that PostgreSQL runs and accepts connections",
    "error": "failed ({detail}): check the database server's log",
}


class PostgresUnavailable(StorageUnavailable):
    """A PostgreSQL database that cannot serve a call for its condition, not the call's.

    `outcome_known` is False when the connection broke while a write was on its way: it may have
    been committed, and the message says so instead of "nothing was changed"."""

    def __init__(
        self, label: str, condition: StorageCondition, detail: str, *, outcome_known: bool = True
    ) -> None:
        super().__init__(label, condition, detail)
        self.outcome_known = outcome_known
        problem = _PROBLEMS[condition].format(detail=detail)
        self.problem = f"the database {label} {problem}"
        outcome = (
            "nothing was changed"
            if outcome_known
            else "the connection broke while the change was on its way, so it may or may not be stored"
        )
        self.args = (f"The database {label} {problem}, then call again; {outcome}.",)


def condition_of(exc: BaseException) -> StorageCondition | None:
    """The database condition behind a psycopg error, or None when it is not one (a bug)."""
    if isinstance(exc, PoolTimeout):
        return "unreachable"
    if not isinstance(exc, psycopg.Error):
        return None
    state = exc.sqlstate
    if state is None:
        # Raised by the client without a word from the server: a connection that failed or broke.
        return "unreachable" if isinstance(exc, psycopg.OperationalError) else None
    if state.startswith("08"):  # connection_exception
        return "unreachable"
    return _CONDITIONS.get(state)


def detail_of(exc: BaseException, secrets: Sequence[str | None] = ()) -> str:
    """The first line of a driver error, without a password it may repeat."""
    text = str(exc).strip().splitlines()
    return redact(text[0] if text else type(exc).__name__, secrets)


class PostgresBase:
    """The pool and its transactions; the store's parts build on it."""

    def __init__(
        self,
        pool: Pool,
        *,
        label: str,
        schema: str,
        secrets: Sequence[str | None] = (),
        channel: str | None = None,
        origin: str = "",
    ) -> None:
        self._pool = pool
        # The database as messages name it: its URL without a password, and the schema.
        self.label = label
        self.schema = schema
        self._secrets = tuple(secrets)
        # Where committed changes are announced to other replicas (postgres_feed.py; None: not
        # at all), and who announces them (this process; "" for the command line).
        self._channel = channel
        self._origin = origin
        self.health = StorageHealth()
        # Connections handed out and not yet back (the pool's own size also counts connections
        # still being opened, which says nothing about how busy parley is).
        self._in_use = 0

    # ------------------------------------------------------------------ connections

    async def _getconn(self, wait_s: float | None = None) -> Conn:
        try:
            conn = await self._pool.getconn(wait_s)
        except PoolTimeout as exc:
            raise self._unavailable(exc) from exc
        self._in_use += 1
        return conn

    async def _putconn(self, conn: Conn) -> None:
        """Back to the pool, rolled back if a transaction was left open (a failed or cancelled call).
        A connection in the middle of a statement, or broken, is closed and replaced by the pool."""
        with anyio.CancelScope(shield=True):
            self._in_use -= 1
            # pgconn's status, not conn.info's: it answers for a closed connection too.
            status = conn.pgconn.transaction_status
            if status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                try:
                    await conn.execute("ROLLBACK")
                except psycopg.Error as exc:
                    logger.debug("rollback before returning a connection failed: %s", detail_of(exc))
            await self._pool.putconn(conn)

    @asynccontextmanager
    async def _connection(self, wait_s: float | None = None) -> AsyncIterator[Conn]:
        """A pooled connection; `wait_s`: how long to wait for one (default: the pool's timeout)."""
        conn = await self._getconn(wait_s)
        try:
            yield conn
        finally:
            await self._putconn(conn)

    # ------------------------------------------------------------------ failures

    def _unavailable(self, exc: BaseException, *, outcome_known: bool = True) -> PostgresUnavailable:
        condition = condition_of(exc) or "error"
        if isinstance(exc, PoolTimeout) and self._saturated():
            condition = "busy"  # every connection is in use: the database answers, parley waits
        failure = PostgresUnavailable(
            self.label, condition, detail_of(exc, self._secrets), outcome_known=outcome_known
        )
        if self.health.status == "ok":
            logger.error("the database %s: %s (%s)", self.label, failure.condition, failure.detail)
        self.health.record(failure)
        return failure

    def _failed(
        self, exc: psycopg.Error, *, writing: bool, broken: bool = False, session_id: str | None = None
    ) -> Exception:
        """The error to raise for a failed statement: a lost lease, the database's condition, or a
        bug (left as it is)."""
        if (
            session_id is not None
            and isinstance(exc, psycopg.errors.UniqueViolation)
            and exc.diag.constraint_name == "steps_pkey"
        ):
            return LeaseLost(session_id)  # another holding already committed this very step
        if isinstance(exc, psycopg.IntegrityError):
            return StorageError(f"{self.label}: {detail_of(exc, self._secrets)}")
        if condition_of(exc) is None:
            return exc
        # A broken connection during a write leaves its outcome unknown; a server's refusal does not.
        lost = writing and (broken or exc.sqlstate is None or exc.sqlstate.startswith("08"))
        return self._unavailable(exc, outcome_known=not lost)

    def _saturated(self) -> bool:
        return self._in_use >= self._pool.max_size

    def pool_stats(self) -> dict[str, int]:
        """The pool's connections: open (or being opened), in use, the most it may open, and
        callers waiting for one."""
        stats = self._pool.get_stats()
        return {
            "size": stats.get("pool_size", 0),
            "in_use": self._in_use,
            "max": self._pool.max_size,
            "waiting": stats.get("requests_waiting", 0),
        }
