"""PostgreSQL backend of the Store port: a psycopg connection pool per process, for several parley
replicas sharing one database (docs/design.md#postgresql).

The store itself is the shared one (parley/storage/sql/); this module runs its programs. Each
batch is one pipeline, one round trip: a decision's snapshot under `SELECT ... FOR UPDATE` on the
session row, then its writes with the COMMIT; a program of one batch is the pipeline's implicit
transaction (no BEGIN, no COMMIT); a read needs no transaction. Everything lives in one schema (`storage.schema`), so parley can share a
database with other applications.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from parley.errors import StorageError
from parley.redaction import mask_url
from parley.storage.postgres_copy import PostgresCopy
from parley.storage.postgres_feed import PostgresChangeFeed, channel_name
from parley.storage.postgres_plumbing import Conn, Pool, PostgresUnavailable, condition_of, detail_of
from parley.storage.postgres_wire import round_trip
from parley.storage.schema import SCHEMA_NAME, migrate_postgres
from parley.storage.sql.dialect import POSTGRES
from parley.storage.sql.program import Announce, Batch, Program, Result, Stmt, finish
from parley.storage.sql.rows import Codec
from parley.storage.sql.store import SqlStore
from parley.storage.status import StorageStatus, Synchronous
from parley.storage.wakeups import ChangeFeed, NoChangeFeed, wake_payload

logger = logging.getLogger(__name__)

T = TypeVar("T")

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


# DEFAULT: the server's own setting (postgresql.conf, the role's or the database's), whatever
# this connection set for its other commits.
_SYNCED_COMMIT = Stmt("SET LOCAL synchronous_commit TO DEFAULT")
_BEGIN = Stmt("BEGIN")
_COMMIT = Stmt("COMMIT")


class PostgresStore(SqlStore, PostgresCopy):
    """The Store on PostgreSQL. Open it with `open_postgres_store`, which migrates the schema."""

    dialect = POSTGRES
    codec = Codec(POSTGRES)
    # (before, after): the schema versions when this store was opened (`parley db migrate`).
    migrated: tuple[int, int] = (0, 0)
    # Other replicas' changes (LISTEN/NOTIFY), unless listening is turned off.
    feed: ChangeFeed = NoChangeFeed()
    # storage.synchronous: with "normal", a commit does not wait for the server's disk
    # (synchronous_commit off on every connection), except a durable one.
    synchronous: Synchronous = "full"

    async def _execute(self, program: Program[T], *, write: bool, inline: bool = True) -> T:
        """Each batch is one pipeline (one round trip); a program that writes runs in one
        transaction whose COMMIT goes with its last batch. A connection found broken before
        anything was written is replaced and the batch sent once more."""
        batch = next(program)
        if not write:
            return finish(program, (await self._first(batch, transaction=False))[1])
        conn, results = await self._first(batch, transaction=True)
        try:
            while not batch.last:
                try:
                    batch = program.send(results)
                except StopIteration as stop:
                    await self._sent(conn, Batch((), last=True))
                    value: T = stop.value
                    return value
                results = await self._sent(conn, batch)
            return finish(program, results)
        finally:
            await self._putconn(conn)

    async def _first(self, batch: Batch, *, transaction: bool) -> tuple[Conn, list[Result]]:
        """The first batch, on a pooled connection (handed back unless `transaction` goes on)."""
        for attempt in (1, 2):
            conn = await self._getconn()
            try:
                results = await self._send(conn, batch, writing=transaction, begin=transaction)
            except psycopg.Error as exc:
                await self._putconn(conn)
                if attempt == 1 and not batch.writes and condition_of(exc) == "unreachable":
                    continue  # nothing was written: the same batch on a fresh connection
                raise self._failed(
                    exc, writing=transaction and batch.writes, broken=conn.broken, session_id=batch.step_of
                ) from exc
            except BaseException:
                await self._putconn(conn)
                raise
            if not transaction:
                await self._putconn(conn)
            return conn, results
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _sent(self, conn: Conn, batch: Batch) -> list[Result]:
        """A later batch of a transaction."""
        try:
            return await self._send(conn, batch, writing=True)
        except psycopg.Error as exc:
            raise self._failed(exc, writing=True, broken=conn.broken, session_id=batch.step_of) from exc

    async def _send(self, conn: Conn, batch: Batch, *, writing: bool, begin: bool = False) -> list[Result]:
        statements = [*batch.statements, *self._announcements(batch.announce)]
        durable = batch.durable and self.synchronous == "normal"
        if durable:
            # This commit waits for the disk as the server is configured to (see `synchronous`).
            statements.insert(0, _SYNCED_COMMIT)
        if batch.last and writing:
            # A program of one batch needs no BEGIN and COMMIT: the statements of a pipeline up to
            # its Sync are one implicit transaction, committed at the Sync and rolled back whole
            # if one fails. A durable one keeps them: its SET LOCAL needs a transaction block.
            implicit = begin and not durable
            # A commit once sent is seen through: cancelled half way, its outcome would be unknown.
            with anyio.CancelScope(shield=True):
                results = await self._pipeline(
                    conn, statements, begin=begin and not implicit, commit=not implicit
                )
            self.health.record(None)
        else:
            results = await self._pipeline(conn, statements, begin=begin, commit=False)
        return results[int(durable) : int(durable) + len(batch.statements)]

    @staticmethod
    async def _pipeline(conn: Conn, statements: list[Stmt], *, begin: bool, commit: bool) -> list[Result]:
        # One round trip (postgres_wire.py). Cancelled while the server works (a decision waiting
        # for a row lock), it asks the server to stop and reads the pipeline to its end, so the
        # connection goes back to the pool idle (or is closed, if that fails within 5 s).
        sent = [*((_BEGIN,) if begin else ()), *statements, *((_COMMIT,) if commit else ())]
        results = await round_trip(conn, sent)
        return results[int(begin) : int(begin) + len(statements)]

    def _announcements(self, announce: Sequence[Announce]) -> list[Stmt]:
        """The NOTIFYs of a batch's wakes (postgres_feed.py), delivered by PostgreSQL at COMMIT."""
        if self._channel is None:
            return []
        statements = []
        for wake in announce:
            payload = wake_payload(wake.wake, self._origin)
            if wake.session_from is not None:
                prefix = payload[: len(payload) - len(wake.wake.session_id)]
                sql = f"SELECT pg_notify(?, ? || session_id) {wake.session_from}"
                statements.append(Stmt(sql, (self._channel, prefix, *wake.params)))
            elif wake.where is not None:
                statements.append(
                    Stmt(f"SELECT pg_notify(?, ?) WHERE {wake.where}", (self._channel, payload, *wake.params))
                )
            else:
                statements.append(Stmt("SELECT pg_notify(?, ?)", (self._channel, payload)))
        return statements

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


def _connection_params(url: str) -> dict[str, Any]:
    try:
        params: dict[str, Any] = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise StorageError(f"storage.url {mask_url(url)} is not a PostgreSQL URL: {detail_of(exc)}") from None
    params.setdefault("application_name", "parley")
    params.setdefault("connect_timeout", DEFAULT_CONNECT_TIMEOUT_S)
    return params


async def _migrate(
    params: dict[str, Any], schema: str, retry_s: float, label: str, secrets: Sequence[str | None]
) -> tuple[int, int]:
    """Create and migrate the schema on a first connection of its own: (version before, after)."""
    first = await _connect(params, retry_s, label, secrets)
    try:
        return await migrate_postgres(first, schema, label)
    except psycopg.Error as exc:
        raise StorageError(
            f"cannot migrate the PostgreSQL database {label}: {detail_of(exc, secrets)}"
        ) from exc
    finally:
        with anyio.CancelScope(shield=True):
            await first.close()


def _open_pool(
    params: dict[str, Any],
    schema: str,
    size: int,
    statement_timeout_s: float,
    retry_s: float,
    synchronous: Synchronous,
) -> Pool:
    """The store's pool (not opened yet): every connection set up once for the schema, the
    statement timeout and the commit mode."""
    timeout_ms = str(max(1, round(statement_timeout_s * 1000)))

    async def configure(conn: Conn) -> None:
        # Per connection, once: every statement of the store names its tables unqualified.
        await conn.execute(
            "SELECT set_config('search_path', %s, false), set_config('statement_timeout', %s, false)",
            (schema, timeout_ms),
        )
        if synchronous == "normal":
            await conn.execute("SELECT set_config('synchronous_commit', 'off', false)")

    return AsyncConnectionPool(
        kwargs={**params, "autocommit": True},
        min_size=1,
        max_size=size,
        # How long a call waits for a connection (the database gone, or every connection busy).
        timeout=max(retry_s, 1.0),
        # A lost connection is opened again with backoff (1 s, 2 s, 4 s, ...) for this long, then
        # the next call opens a new one: so the pool finds a database that comes back within
        # seconds, not after the backoff has grown to minutes.
        reconnect_timeout=max(retry_s, 1.0),
        configure=configure,
        name="parley",
        open=False,
    )


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
    synchronous: Synchronous = "full",
) -> AsyncIterator[PostgresStore]:
    """Connect to the PostgreSQL database at `url` (creating `schema` and migrating it as needed)
    and open a pool of at most `pool_size` connections whose statements run in `schema` and are
    stopped after `statement_timeout_s`.

    With `listen`, every change is announced to other replicas as process `origin` and
    `store.change_feed()` hears theirs, on a connection to `listen_url` (default `url`) that is
    pinged after `listen_ping_s` of silence (postgres_feed.py).

    With `synchronous` "normal", commits do not wait for the server to flush them
    (`synchronous_commit = off`): a crash of parley loses nothing, a crash of the database server
    may lose the last commits, except those marked durable (Changes.durable), which wait as the
    server's own setting says. "full" leaves every commit to the server's setting.

    Raises:
        StorageError: the URL is malformed, the database cannot be reached within
            `connect_retry_s`, or its schema is newer than this parley knows; the message names
            the database (never its password) and the fix.
    """
    if not SCHEMA_NAME.fullmatch(schema):
        raise StorageError(f"'{schema}' cannot be a schema for parley: use lowercase letters, digits and _")
    label = database_label(url, schema)
    params = _connection_params(url)
    secrets: tuple[str | None, ...] = (params.get("password"),)
    migrated = await _migrate(params, schema, connect_retry_s, label, secrets)
    pool = _open_pool(params, schema, pool_size, statement_timeout_s, connect_retry_s, synchronous)
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
        store.synchronous = synchronous
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
