"""`storage:` in parley.yaml: the database (a SQLite file or a PostgreSQL URL) and how parley uses
it. What its fields say together, and how a URL's password is kept out of files, is database.py."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from parley.config.base import Strict


class StorageConfig(Strict):
    path: str | None = Field(None, description="SQLite file; relative paths resolve next to parley.yaml.")
    max_size_mb: float | None = Field(
        None,
        gt=0,
        description=(
            "Largest size the database file may grow to, in MiB; beyond it writes fail as 'full' (nothing "
            "is lost) until space is freed. Default: no limit but the disk. SQLite only."
        ),
    )
    synchronous: Literal["normal", "full"] = Field(
        "normal",
        description=(
            "How commits reach the disk, on SQLite and PostgreSQL. 'normal': a crash of parley loses "
            "nothing; a power loss (or, on PostgreSQL, a crash of the database server) may lose the last "
            "commits, but never the start of a call that must not run twice (those commits are always "
            "synced before the call is sent). On PostgreSQL that is synchronous_commit off for parley's "
            "connections, except those commits. 'full': every commit is synced (PostgreSQL: as the "
            "server's own synchronous_commit says)."
        ),
    )
    url: str | None = Field(
        None,
        description=(
            "PostgreSQL instead of SQLite: postgresql://user@host:5432/dbname. A password only from the "
            "environment: write ${PGPASSWORD} (any variable) in its place, or leave it out for libpq's "
            "PGPASSWORD / PGPASSFILE."
        ),
    )
    db_schema: str = Field(
        "public",
        alias="schema",
        description="PostgreSQL: the schema that holds parley's tables (created if missing).",
    )
    pool_size: int = Field(
        10, ge=1, le=1000, description="PostgreSQL: connections one process keeps open at most."
    )
    statement_timeout_s: float = Field(
        30.0,
        gt=0,
        le=86_400,
        description=(
            "PostgreSQL: seconds after which a statement (or a wait for a row lock) is stopped, failing as "
            "busy."
        ),
    )
    connect_retry_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        description=(
            "PostgreSQL: seconds parley keeps trying to reach the database at start, and that a call "
            "waits for a connection before it fails as unreachable."
        ),
    )
    listen: bool = Field(
        True,
        description=(
            "PostgreSQL: replicas wake each other with LISTEN/NOTIFY when they commit a change; false: "
            "they find each other's changes by polling alone (runtime.poll_interval_s)."
        ),
    )
    listen_url: str | None = Field(
        None,
        description=(
            "PostgreSQL: a direct connection for LISTEN when storage.url goes through a pooler in "
            "transaction mode (PgBouncer), which cannot keep a LISTEN. Default: storage.url. Its "
            "password, like storage.url's, only from the environment."
        ),
    )
    listen_poll_interval_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description=(
            "PostgreSQL, while LISTEN works: seconds between two looks of a waiting call or a driven "
            "session at the database by itself (a safety net), and how long the listening connection may "
            "be silent before it is checked. The work scan keeps runtime.poll_interval_s."
        ),
    )
