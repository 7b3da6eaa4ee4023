"""The storage part of the composition root (app.py): the configured database opened with its
backend. Kept apart from app.py so the command line's database commands start without the server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from parley.config import ServerConfig
from parley.storage.ports import Store
from parley.storage.status import StorageStatus
from parley.storage.wakeups import ChangeFeed, NoChangeFeed


@dataclass(frozen=True, slots=True)
class OpenedStore:
    """An open store, how messages name its database, and its report for /healthz."""

    store: Store
    label: str
    status: Callable[[], Awaitable[StorageStatus]]
    # (before, after): the schema versions when it was opened (after is the newest known).
    migrated: tuple[int, int] | None = None
    # Other processes' changes, as far as the backend can tell them (PostgreSQL: LISTEN/NOTIFY;
    # SQLite: a FIFO per process in a folder beside the file).
    feed: ChangeFeed = field(default_factory=NoChangeFeed)


@asynccontextmanager
async def open_store(config: ServerConfig, origin: str = "") -> AsyncIterator[OpenedStore]:
    """Open (creating and migrating as needed) the database the configuration names; `origin`:
    the process whose changes it announces to other processes (none for the command line).

    Raises:
        StorageError: it cannot be opened, reached or migrated; the message names the database
            (never a password) and the fix.
    """
    if config.db_url is not None:
        from parley.storage.postgres import open_postgres_store

        storage = config.storage
        async with open_postgres_store(
            config.db_url,
            schema=storage.db_schema,
            pool_size=storage.pool_size,
            statement_timeout_s=storage.statement_timeout_s,
            connect_retry_s=storage.connect_retry_s,
            origin=origin,
            listen=storage.listen,
            listen_url=storage.listen_url,
            listen_ping_s=storage.listen_poll_interval_s,
            synchronous=storage.synchronous,
        ) as postgres:
            yield OpenedStore(postgres, config.db_label, postgres.status, postgres.migrated, postgres.feed)
        return
    from parley.storage.sqlite import open_sqlite_store

    assert config.db_path is not None
    async with open_sqlite_store(
        config.db_path, max_size_mb=config.storage.max_size_mb, synchronous=config.storage.synchronous
    ) as sqlite:

        async def status() -> StorageStatus:
            # How the latest write ended: "ok", "full", "read_only", "busy" or "error: ...".
            return StorageStatus(sqlite.health.status)

        yield OpenedStore(sqlite, config.db_label, status, sqlite.migrated, feed=sqlite.feed)
