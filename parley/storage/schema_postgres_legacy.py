"""PostgreSQL's legacy migrations, 1-6: the schema history PostgreSQL had alone, frozen (the same
tables and columns as SQLite's legacy 1-17, parley/storage/schema_sqlite_legacy.py, in its own
types). Every release up to wave 2 applied them; this parley runs the ones a schema lacks, then
the shared migrations of parley/storage/schema.py, from 18 on.

Released: never edit, append to or reorder these (add a migration to schema.py instead).
"""

from __future__ import annotations

# Identifiers and anything compared or ordered (ids, owners, cursors) use the "C" collation, the
# byte order SQLite uses, whatever the database's default; text from outside is `json` (see
# postgres_rows.py); times are seconds since the epoch as double precision, like SQLite's REAL.
POSTGRES_LEGACY: tuple[str, ...] = (
    # 1: the schema of SQLite's migrations 1-11 in one step
    """
    CREATE TABLE sessions (
        id text COLLATE "C" PRIMARY KEY,
        agent text COLLATE "C" NOT NULL,
        owner text COLLATE "C" NOT NULL,
        kind text COLLATE "C" NOT NULL,
        status text COLLATE "C" NOT NULL,
        phase text COLLATE "C",
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        turn_count bigint NOT NULL DEFAULT 0,
        current_turn_id text COLLATE "C",
        last_turn_id text COLLATE "C",
        last_error json,
        closed_reason json,
        input_tokens bigint NOT NULL DEFAULT 0,
        output_tokens bigint NOT NULL DEFAULT 0,
        cached_tokens bigint NOT NULL DEFAULT 0,
        model_calls bigint NOT NULL DEFAULT 0,
        todos json NOT NULL DEFAULT '[]',
        cancel_requested_turn text COLLATE "C",
        close_requested boolean NOT NULL DEFAULT false,
        lease_owner text COLLATE "C",
        lease_expires_at double precision,
        lease_epoch bigint NOT NULL DEFAULT 0,
        message_seq bigint NOT NULL DEFAULT 0,
        event_seq bigint NOT NULL DEFAULT 0,
        queue_seq bigint NOT NULL DEFAULT 0,
        start_client_message_id text COLLATE "C",
        result json,
        inputs json,
        wake_at double precision,
        settings json NOT NULL DEFAULT '{}'
    );
    CREATE INDEX sessions_owner_created ON sessions (owner, created_at DESC, id DESC);
    CREATE UNIQUE INDEX sessions_start_client_id ON sessions (owner, start_client_message_id)
        WHERE start_client_message_id IS NOT NULL;
    -- The work scan (PostgresStore.sessions_needing_work) reads two small partial indexes, so a
    -- poll costs the sessions that are due, not the sessions that exist: a session waiting for a
    -- person without a timer is in neither, and one parked on a future timer is passed over by
    -- the range condition on its wake-up time.
    CREATE INDEX sessions_due ON sessions ((coalesce(wake_at, '-Infinity'::double precision)))
        WHERE status = 'running' OR (status = 'waiting_for_input' AND wake_at IS NOT NULL);
    CREATE INDEX sessions_waiting_leased ON sessions (lease_expires_at)
        WHERE status = 'waiting_for_input' AND lease_owner IS NOT NULL;
    -- Leases held now (count_leases, for /healthz): only sessions being driven have one.
    CREATE INDEX sessions_leased ON sessions (lease_owner) WHERE lease_owner IS NOT NULL;

    CREATE TABLE turns (
        id text COLLATE "C" PRIMARY KEY,
        session_id text COLLATE "C" NOT NULL REFERENCES sessions(id),
        seq bigint NOT NULL,
        status text COLLATE "C" NOT NULL,
        queued_message_id text COLLATE "C",
        started_at double precision NOT NULL,
        ended_at double precision,
        answer json,
        error json,
        model_calls bigint NOT NULL DEFAULT 0,
        input_tokens bigint NOT NULL DEFAULT 0,
        output_tokens bigint NOT NULL DEFAULT 0,
        cached_tokens bigint NOT NULL DEFAULT 0,
        result json,
        settings json NOT NULL DEFAULT '{}',
        UNIQUE (session_id, seq)
    );

    CREATE TABLE messages (
        session_id text COLLATE "C" NOT NULL REFERENCES sessions(id),
        seq bigint NOT NULL,
        turn_id text COLLATE "C",
        role text COLLATE "C" NOT NULL,
        content json NOT NULL,
        created_at double precision NOT NULL,
        PRIMARY KEY (session_id, seq)
    );

    CREATE TABLE tool_calls (
        id text COLLATE "C" PRIMARY KEY,
        session_id text COLLATE "C" NOT NULL REFERENCES sessions(id),
        turn_id text COLLATE "C" NOT NULL REFERENCES turns(id),
        step_no bigint NOT NULL,
        call_index bigint NOT NULL,
        name json NOT NULL,
        arguments json NOT NULL,
        status text COLLATE "C" NOT NULL,
        effect text COLLATE "C" NOT NULL,
        result json,
        attempts bigint NOT NULL DEFAULT 0,
        idempotency_key text COLLATE "C" NOT NULL,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        source text COLLATE "C" NOT NULL DEFAULT 'builtin',
        server text COLLATE "C",
        tool text COLLATE "C",
        requires_approval boolean NOT NULL DEFAULT false,
        wake_at double precision,
        decision text COLLATE "C",
        remote json,
        UNIQUE (turn_id, step_no, call_index)
    );

    CREATE TABLE interrupts (
        id text COLLATE "C" PRIMARY KEY,
        session_id text COLLATE "C" NOT NULL REFERENCES sessions(id),
        turn_id text COLLATE "C" NOT NULL REFERENCES turns(id),
        tool_call_id text COLLATE "C",
        kind text COLLATE "C" NOT NULL,
        status text COLLATE "C" NOT NULL,
        payload json NOT NULL,
        created_at double precision NOT NULL,
        deadline double precision,
        resolution json,
        resolved_by text COLLATE "C",
        resolved_at double precision
    );
    CREATE INDEX interrupts_pending ON interrupts (session_id, status);
    CREATE INDEX interrupts_turn ON interrupts (turn_id);
    CREATE INDEX interrupts_all_pending ON interrupts (created_at) WHERE status = 'pending';

    CREATE TABLE queued_messages (
        id text COLLATE "C" PRIMARY KEY,
        session_id text COLLATE "C" NOT NULL REFERENCES sessions(id),
        seq bigint NOT NULL,
        text json NOT NULL,
        status text COLLATE "C" NOT NULL,
        turn_id text COLLATE "C",
        created_at double precision NOT NULL,
        client_message_id text COLLATE "C",
        steer boolean NOT NULL DEFAULT false,
        settings json,
        UNIQUE (session_id, seq)
    );
    CREATE INDEX queued_pending ON queued_messages (session_id, status, seq);
    CREATE UNIQUE INDEX queued_client_id ON queued_messages (session_id, client_message_id)
        WHERE client_message_id IS NOT NULL;

    CREATE TABLE events (
        session_id text COLLATE "C" NOT NULL REFERENCES sessions(id),
        seq bigint NOT NULL,
        turn_id text COLLATE "C",
        kind text COLLATE "C" NOT NULL,
        data json NOT NULL,
        created_at double precision NOT NULL,
        PRIMARY KEY (session_id, seq)
    );

    -- One row per committed step. The primary key is the last line of defence against two
    -- processes committing the same model call.
    CREATE TABLE steps (
        session_id text COLLATE "C" NOT NULL REFERENCES sessions(id),
        turn_id text COLLATE "C" NOT NULL REFERENCES turns(id),
        step_no bigint NOT NULL,
        kind text COLLATE "C" NOT NULL,
        process_id text COLLATE "C" NOT NULL,
        input_tokens bigint NOT NULL DEFAULT 0,
        output_tokens bigint NOT NULL DEFAULT 0,
        cached_tokens bigint NOT NULL DEFAULT 0,
        created_at double precision NOT NULL,
        PRIMARY KEY (turn_id, kind, step_no)
    );
    CREATE INDEX steps_session ON steps (session_id);

    CREATE TABLE summaries (
        session_id text COLLATE "C" NOT NULL REFERENCES sessions(id),
        upto_seq bigint NOT NULL,
        turn_id text COLLATE "C",
        text json NOT NULL,
        created_at double precision NOT NULL,
        PRIMARY KEY (session_id, upto_seq)
    );

    CREATE TABLE tasks (
        id text COLLATE "C" PRIMARY KEY,
        owner text COLLATE "C" NOT NULL,
        generation text COLLATE "C" NOT NULL,
        tool text COLLATE "C" NOT NULL,
        session_id text COLLATE "C",
        queued_message_id text COLLATE "C",
        turn_id text COLLATE "C",
        status text COLLATE "C" NOT NULL,
        status_message json,
        result json,
        ttl_ms bigint,
        poll_interval_ms bigint NOT NULL,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        expires_at double precision
    );
    CREATE INDEX tasks_by_owner ON tasks (owner, created_at, id);
    CREATE INDEX tasks_by_expiry ON tasks (expires_at);
    """,
    # 2: the audit trail (SQLite's migration 12), and the indexes of the queries across owners
    """
    CREATE TABLE audit (
        id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        at double precision NOT NULL,
        principal text COLLATE "C" NOT NULL,
        client text COLLATE "C",
        action text COLLATE "C" NOT NULL,
        outcome text COLLATE "C" NOT NULL,
        session_id text COLLATE "C",
        target text COLLATE "C",
        detail json NOT NULL DEFAULT '{}'
    );
    CREATE INDEX audit_by_session ON audit (session_id, id);
    CREATE INDEX audit_by_principal ON audit (principal, id);
    CREATE INDEX audit_by_time ON audit (at);
    CREATE INDEX sessions_owner_status ON sessions (owner, status);
    """,
    # 3: agent versions (SQLite's migration 14): each turn names the definition it runs on,
    # stored by its content hash and shared by every session of the agent
    """
    ALTER TABLE turns ADD COLUMN agent_version text COLLATE "C";
    CREATE TABLE agent_versions (
        agent text COLLATE "C" NOT NULL,
        version text COLLATE "C" NOT NULL,
        definition json NOT NULL,
        created_at double precision NOT NULL,
        PRIMARY KEY (agent, version)
    );
    """,
    # 4: attachments (SQLite's migration 15): a queued message's references, the bytes stored
    # once by sha256, and which sessions refer to which bytes
    """
    ALTER TABLE queued_messages ADD COLUMN attachments json;
    CREATE TABLE attachments (
        sha256 text COLLATE "C" PRIMARY KEY,
        mime_type text NOT NULL,
        size bigint NOT NULL,
        data bytea NOT NULL,
        stored_at double precision NOT NULL
    );
    CREATE TABLE attachment_refs (
        session_id text COLLATE "C" NOT NULL,
        sha256 text COLLATE "C" NOT NULL,
        created_at double precision NOT NULL,
        PRIMARY KEY (session_id, sha256)
    );
    CREATE INDEX attachment_refs_by_blob ON attachment_refs(sha256);
    """,
    # 5: the W3C trace context a caller sent with a message (SQLite's migration 16)
    """
    ALTER TABLE queued_messages ADD COLUMN trace_context json;
    """,
    # 6: titles and tags (SQLite's migration 17; the title is text from outside, a JSON string,
    # the tags a JSON array), and the indexes retention sweeps and deletions use
    """
    ALTER TABLE sessions ADD COLUMN title json;
    ALTER TABLE sessions ADD COLUMN tags json NOT NULL DEFAULT '[]';
    CREATE INDEX sessions_by_change ON sessions (status, updated_at);
    CREATE INDEX events_by_time ON events (created_at);
    CREATE INDEX tool_calls_session ON tool_calls (session_id);
    CREATE INDEX tasks_by_session ON tasks (session_id);
    """,
)
