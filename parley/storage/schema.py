"""parley's schema: one numbered history of migrations for SQLite and PostgreSQL, and the runner
that brings a database of each to the newest version (docs/design.md#migrations).

The versions, as each database's schema_version table records them (one row per step applied):

    SQLite      1-17   legacy, SQLite's own history up to wave 2 (schema_sqlite_legacy.py)
    PostgreSQL  1-6    legacy, PostgreSQL's own history up to wave 2 (schema_postgres_legacy.py)
    both        18-    MIGRATIONS below: one number for both databases, one step each

Both legacy histories end at the same tables and columns (SQLite 17 = PostgreSQL 6, each in its
own types). Version 18 is that schema: it changes nothing, and records that the database follows
the shared history from there. A database runs the legacy steps it lacks, then the shared ones:
a new SQLite file records 1-17, 18, ...; a new PostgreSQL schema 1-6, 18, ... (7-17 are SQLite's
alone and never appear in PostgreSQL, which refuses them); a wave-2 file goes from 17 and a
wave-2 schema from 6 to 18 and on; the wave-1 file (10) runs 11-17 first. 18 is above both
legacy ranges, so a parley of wave 2 or before refuses a database this parley has migrated as
"newer than this parley knows", as this parley refuses one newer than LATEST.

Adding a migration: append a Migration to MIGRATIONS (its version is FIRST_SHARED + its index)
with its DDL once (`both`) or once per dialect (`sqlite`, `postgres`) where they differ: in
PostgreSQL identifiers and anything compared or ordered are text COLLATE "C" (SQLite's byte
order), text from outside and JSON values json, flags boolean, counts bigint, times double
precision; partial indexes are each database's own (its work scan). SQLite runs its DDL
statement by statement, split at each ";" (so none in a literal). Never edit, remove or reorder
a released migration, shared or legacy; tests/test_schema.py checks both databases reach the
same tables and columns.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from parley.errors import StorageError
from parley.storage.schema_postgres_legacy import POSTGRES_LEGACY
from parley.storage.schema_sqlite_legacy import SQLITE_LEGACY

if TYPE_CHECKING:
    from psycopg import AsyncConnection

Dialect = Literal["sqlite", "postgres"]


@dataclass(frozen=True)
class Migration:
    """One step of the shared history: its DDL for both databases, or for each ("" is none)."""

    note: str
    both: str | None = None
    sqlite: str | None = None
    postgres: str | None = None

    def __post_init__(self) -> None:
        own = (self.sqlite is not None, self.postgres is not None)
        if (self.both is not None) == any(own) or (self.both is None and not all(own)):
            raise ValueError(f"the migration {self.note!r} needs `both`, or `sqlite` and `postgres`")

    def ddl(self, dialect: Dialect) -> str:
        text = self.both if self.both is not None else getattr(self, dialect)
        assert isinstance(text, str)
        return text


# The first version of the shared history, above every legacy one.
FIRST_SHARED = 18

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "18: the schema both databases reached at wave 2 (SQLite's legacy 17, PostgreSQL's legacy "
        "6: the same tables and columns); nothing changes, the two share one history from here",
        both="",
    ),
    Migration(
        "19: fair use counted in the database, so a limit per minute holds across replicas: one "
        "row per session started or message sent by a principal (limits.sessions_per_minute, "
        "limits.messages_per_minute), written with the act, deleted once out of the window",
        sqlite=(
            "CREATE TABLE admissions (owner TEXT NOT NULL, counted TEXT NOT NULL, at REAL NOT NULL);"
            "CREATE INDEX admissions_owner ON admissions(owner, counted, at)"
        ),
        postgres=(
            'CREATE TABLE admissions (owner text COLLATE "C" NOT NULL, counted text COLLATE "C" NOT NULL, '
            "at double precision NOT NULL);"
            "CREATE INDEX admissions_owner ON admissions(owner, counted, at)"
        ),
    ),
    Migration(
        "20: plan mode: a session's plan status, revision, approved revision and whether it is in plan mode, and the "
        "mode of a turn and of the queued message that starts it (planning or executing a plan)",
        sqlite=(
            "ALTER TABLE sessions ADD COLUMN plan_status TEXT NOT NULL DEFAULT 'cleared';"
            "ALTER TABLE sessions ADD COLUMN plan_revision INTEGER NOT NULL DEFAULT 0;"
            "ALTER TABLE sessions ADD COLUMN plan_approved INTEGER NOT NULL DEFAULT 0;"
            "ALTER TABLE sessions ADD COLUMN planning INTEGER NOT NULL DEFAULT 0;"
            "ALTER TABLE turns ADD COLUMN mode TEXT;"
            "ALTER TABLE queued_messages ADD COLUMN mode TEXT;"
            "CREATE INDEX sessions_drafts ON sessions(owner, updated_at) WHERE plan_status = 'draft'"
        ),
        postgres=(
            "ALTER TABLE sessions ADD COLUMN plan_status TEXT NOT NULL DEFAULT 'cleared';"
            "ALTER TABLE sessions ADD COLUMN plan_revision INTEGER NOT NULL DEFAULT 0;"
            "ALTER TABLE sessions ADD COLUMN plan_approved INTEGER NOT NULL DEFAULT 0;"
            "ALTER TABLE sessions ADD COLUMN planning boolean NOT NULL DEFAULT false;"
            "ALTER TABLE turns ADD COLUMN mode TEXT;"
            "ALTER TABLE queued_messages ADD COLUMN mode TEXT;"
            "CREATE INDEX sessions_drafts ON sessions(owner, updated_at) WHERE plan_status = 'draft'"
        ),
    ),
    Migration(
        "21: forks: the session and turn a fork was made from (its lineage), and the agent version every "
        "turn of a session runs on when it is pinned (fork_session's agent_version)",
        sqlite=(
            "ALTER TABLE sessions ADD COLUMN parent_session_id TEXT;"
            "ALTER TABLE sessions ADD COLUMN parent_turn INTEGER;"
            "ALTER TABLE sessions ADD COLUMN agent_version_pin TEXT;"
            "CREATE INDEX sessions_forks ON sessions(parent_session_id, created_at) "
            "WHERE parent_session_id IS NOT NULL"
        ),
        postgres=(
            'ALTER TABLE sessions ADD COLUMN parent_session_id text COLLATE "C";'
            "ALTER TABLE sessions ADD COLUMN parent_turn bigint;"
            'ALTER TABLE sessions ADD COLUMN agent_version_pin text COLLATE "C";'
            "CREATE INDEX sessions_forks ON sessions(parent_session_id, created_at) "
            "WHERE parent_session_id IS NOT NULL"
        ),
    ),
    Migration(
        "22: replays: the session a replay session replays, whose recorded calls settle its own",
        sqlite="ALTER TABLE sessions ADD COLUMN replay_of TEXT",
        postgres='ALTER TABLE sessions ADD COLUMN replay_of text COLLATE "C"',
    ),
    Migration(
        "23: outbound webhooks: the outbox of deliveries, each written with the event it tells of, "
        "claimed by one process at a time, kept when delivered or dead",
        sqlite=(
            "CREATE TABLE webhook_deliveries (id TEXT PRIMARY KEY, subscription TEXT NOT NULL, "
            "event_type TEXT NOT NULL, session_id TEXT, payload TEXT NOT NULL, status TEXT NOT NULL, "
            "attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at REAL NOT NULL, lease_owner TEXT, "
            "lease_expires_at REAL, last_error TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL, "
            "delivered_at REAL);"
            "CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_at) "
            "WHERE status = 'pending';"
            "CREATE INDEX webhook_deliveries_listed ON webhook_deliveries(status, created_at)"
        ),
        postgres=(
            'CREATE TABLE webhook_deliveries (id text COLLATE "C" PRIMARY KEY, '
            'subscription text COLLATE "C" NOT NULL, event_type text COLLATE "C" NOT NULL, '
            'session_id text COLLATE "C", payload text NOT NULL, status text COLLATE "C" NOT NULL, '
            "attempts bigint NOT NULL DEFAULT 0, next_attempt_at double precision NOT NULL, "
            'lease_owner text COLLATE "C", lease_expires_at double precision, last_error text, '
            "created_at double precision NOT NULL, updated_at double precision NOT NULL, "
            "delivered_at double precision);"
            "CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_at) "
            "WHERE status = 'pending';"
            "CREATE INDEX webhook_deliveries_listed ON webhook_deliveries(status, created_at)"
        ),
    ),
    Migration(
        "24: schedules: the schedules made with the tools (a definition, an owner, paused or not), and one row "
        "per claimed tick of any schedule, written with the session it starts, so a tick starts at most one "
        "session across replicas and restarts",
        sqlite=(
            "CREATE TABLE schedules (name TEXT PRIMARY KEY, definition TEXT NOT NULL, owner TEXT NOT NULL, "
            "created_by TEXT NOT NULL, created_at REAL NOT NULL, paused INTEGER NOT NULL DEFAULT 0);"
            "CREATE TABLE schedule_ticks (schedule TEXT NOT NULL, tick_at REAL NOT NULL, status TEXT NOT NULL, "
            "session_id TEXT, claimed_at REAL NOT NULL, PRIMARY KEY (schedule, tick_at))"
        ),
        postgres=(
            'CREATE TABLE schedules (name text COLLATE "C" PRIMARY KEY, definition json NOT NULL, '
            'owner text COLLATE "C" NOT NULL, created_by text COLLATE "C" NOT NULL, '
            "created_at double precision NOT NULL, paused boolean NOT NULL DEFAULT false);"
            'CREATE TABLE schedule_ticks (schedule text COLLATE "C" NOT NULL, tick_at double precision NOT NULL, '
            'status text COLLATE "C" NOT NULL, session_id text COLLATE "C", '
            "claimed_at double precision NOT NULL, PRIMARY KEY (schedule, tick_at))"
        ),
    ),
    Migration(
        "25: sessions: whether a session's calls to downstream servers may carry its owner's own credentials "
        "(not when a schedule another principal made for the owner started it)",
        sqlite="ALTER TABLE sessions ADD COLUMN owner_credentials INTEGER NOT NULL DEFAULT 1",
        postgres="ALTER TABLE sessions ADD COLUMN owner_credentials boolean NOT NULL DEFAULT true",
    ),
    Migration(
        "26: credentials: each principal's tokens for a downstream server, by (principal, server, issuer), "
        "encrypted (ciphertexts and nonces, and the id of the key), with their scopes and expiry, and the "
        "claim of the one replica refreshing them",
        sqlite=(
            "CREATE TABLE credentials (principal TEXT NOT NULL, server TEXT NOT NULL, issuer TEXT NOT NULL, "
            "key_id TEXT NOT NULL, access_nonce BLOB NOT NULL, access_ciphertext BLOB NOT NULL, "
            "refresh_nonce BLOB, refresh_ciphertext BLOB, scopes TEXT NOT NULL, expires_at REAL, "
            "claimed_by TEXT, claimed_until REAL, created_at REAL NOT NULL, updated_at REAL NOT NULL, "
            "PRIMARY KEY (principal, server, issuer))"
        ),
        postgres=(
            'CREATE TABLE credentials (principal text COLLATE "C" NOT NULL, server text COLLATE "C" NOT NULL, '
            'issuer text COLLATE "C" NOT NULL, key_id text COLLATE "C" NOT NULL, access_nonce bytea NOT NULL, '
            "access_ciphertext bytea NOT NULL, refresh_nonce bytea, refresh_ciphertext bytea, "
            'scopes json NOT NULL, expires_at double precision, claimed_by text COLLATE "C", '
            "claimed_until double precision, created_at double precision NOT NULL, "
            "updated_at double precision NOT NULL, PRIMARY KEY (principal, server, issuer))"
        ),
    ),
    Migration(
        "27: oauth_flows: pending authorizations of a principal at a downstream server, each for one parked "
        "call's interrupt: the state and browser binding as digests, the PKCE verifier encrypted, the "
        "issuer, the expiry and when it was used (once)",
        sqlite=(
            "CREATE TABLE oauth_flows (id TEXT PRIMARY KEY, principal TEXT NOT NULL, server TEXT NOT NULL, "
            "session_id TEXT NOT NULL, interrupt_id TEXT NOT NULL, scopes TEXT NOT NULL, state_digest TEXT, "
            "binding_digest TEXT, issuer TEXT, key_id TEXT, verifier_nonce BLOB, verifier_ciphertext BLOB, "
            "created_at REAL NOT NULL, expires_at REAL NOT NULL, used_at REAL);"
            "CREATE UNIQUE INDEX oauth_flows_state ON oauth_flows (state_digest)"
        ),
        postgres=(
            'CREATE TABLE oauth_flows (id text COLLATE "C" PRIMARY KEY, principal text COLLATE "C" NOT NULL, '
            'server text COLLATE "C" NOT NULL, session_id text COLLATE "C" NOT NULL, '
            'interrupt_id text COLLATE "C" NOT NULL, scopes json NOT NULL, state_digest text COLLATE "C", '
            'binding_digest text COLLATE "C", issuer text COLLATE "C", key_id text COLLATE "C", '
            "verifier_nonce bytea, verifier_ciphertext bytea, created_at double precision NOT NULL, "
            "expires_at double precision NOT NULL, used_at double precision);"
            "CREATE UNIQUE INDEX oauth_flows_state ON oauth_flows (state_digest)"
        ),
    ),
    Migration(
        "28: oauth_clients: the client parley registered dynamically at an authorization server, by "
        "(server, issuer), so a restart or a replica uses the same one (public clients only: no secret)",
        sqlite=(
            "CREATE TABLE oauth_clients (server TEXT NOT NULL, issuer TEXT NOT NULL, client_id TEXT NOT NULL, "
            "registered_at REAL NOT NULL, PRIMARY KEY (server, issuer))"
        ),
        postgres=(
            'CREATE TABLE oauth_clients (server text COLLATE "C" NOT NULL, issuer text COLLATE "C" NOT NULL, '
            'client_id text COLLATE "C" NOT NULL, registered_at double precision NOT NULL, '
            "PRIMARY KEY (server, issuer))"
        ),
    ),
)

# The newest version this parley knows.
LATEST = FIRST_SHARED + len(MIGRATIONS) - 1

_LEGACY: dict[Dialect, tuple[str, ...]] = {"sqlite": SQLITE_LEGACY, "postgres": POSTGRES_LEGACY}
_NAMES: dict[Dialect, str] = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
assert all(len(legacy) < FIRST_SHARED for legacy in _LEGACY.values())

# A schema name parley puts in search_path as it is: lowercase, no quoting needed, not pg_*.
SCHEMA_NAME = re.compile(r"(?!pg_)[a-z_][a-z0-9_]{0,62}")

# The tables that hold parley's data, parents before children (the order a copy fills them in).
DATA_TABLES = (
    "sessions",
    "turns",
    "queued_messages",
    "messages",
    "tool_calls",
    "interrupts",
    "events",
    "steps",
    "summaries",
    "tasks",
    "audit",
    "agent_versions",
    "attachments",
    "attachment_refs",
    "admissions",
    "webhook_deliveries",
    "schedules",
    "schedule_ticks",
    "credentials",
    "oauth_flows",
    "oauth_clients",
)


def steps(dialect: Dialect, current: int = 0) -> list[tuple[int, str]]:
    """The (version, DDL) steps, in order, that bring a database of `dialect` at version `current`
    to LATEST: the legacy ones it lacks, then the shared ones."""
    legacy = _LEGACY[dialect]
    todo = [(version, legacy[version - 1]) for version in range(current + 1, len(legacy) + 1)]
    shared = range(max(current + 1, FIRST_SHARED), LATEST + 1)
    return todo + [(version, MIGRATIONS[version - FIRST_SHARED].ddl(dialect)) for version in shared]


def _refuse_unknown(dialect: Dialect, current: int, subject: str, elsewhere: str) -> None:
    """Raise StorageError if no parley this one knows wrote version `current` of `dialect`."""
    if current > LATEST:
        raise StorageError(
            f"{subject} has schema version {current}, newer than this parley knows ({LATEST}); "
            f"upgrade parley, or {elsewhere}"
        )
    legacy = len(_LEGACY[dialect])
    if legacy < current < FIRST_SHARED:
        raise StorageError(
            f"{subject} has schema version {current}, which no parley writes on {_NAMES[dialect]} "
            f"(its versions are 1-{legacy} and {FIRST_SHARED}-{LATEST}); {elsewhere}"
        )


def migrate_sqlite(db: sqlite3.Connection, path: Path) -> tuple[int, int]:
    """Bring the SQLite database `db` (the file at `path`, opened in autocommit mode) to LATEST, in
    one transaction that takes the write lock first (BEGIN IMMEDIATE): a process opening the same
    file at the same moment waits, then finds nothing left to do. Returns the versions (before,
    after); before is 0 for a new file.

    Raises:
        StorageError: the file's schema is newer than this parley knows, or at a version no
            parley writes on SQLite (nothing is changed).
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
        current = int(row[0]) if row is not None and row[0] is not None else 0
        _refuse_unknown("sqlite", current, str(path), "point --db at another file")
        for version, ddl in steps("sqlite", current):
            for statement in ddl.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        db.execute("COMMIT")
        return current, LATEST
    except BaseException:
        # SQLite may have rolled back by itself (a full disk); a second ROLLBACK would hide why.
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


async def migrate_postgres(conn: AsyncConnection[Any], schema: str, label: str) -> tuple[int, int]:
    """Create `schema` if it is missing and bring it to LATEST; return the versions (before,
    after). One transaction under an advisory lock on the schema's name: a replica that starts at
    the same moment waits, then finds nothing left to do. `conn` is in autocommit mode.

    Raises:
        StorageError: the schema is newer than this parley knows, or at a version no parley
            writes on PostgreSQL (nothing is changed).
    """
    from psycopg import sql

    async with conn.transaction():
        # Taken before anything is looked at: even CREATE SCHEMA IF NOT EXISTS fails when two
        # sessions run it at once.
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('parley schema ' || %s, 0))", (schema,)
        )
        found = await conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        # Created only when missing: CREATE SCHEMA IF NOT EXISTS needs the CREATE privilege on the
        # database even when the schema exists, which a user of a shared database may not have.
        if await found.fetchone() is None:
            await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        await conn.execute("SELECT set_config('search_path', %s, true)", (schema,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_version")
        row = await cur.fetchone()
        current = int(row[0]) if row is not None else 0
        _refuse_unknown(
            "postgres",
            current,
            f"the PostgreSQL database {label}",
            "point storage.url or storage.schema at another database",
        )
        for version, ddl in steps("postgres", current):
            if ddl.strip():
                await conn.execute(ddl.encode())
            await conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
    return current, LATEST
