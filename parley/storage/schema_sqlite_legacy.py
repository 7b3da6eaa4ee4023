"""SQLite's legacy migrations, 1-17: the schema history SQLite had alone, frozen. Every release up
to wave 2 applied them (a file of those releases is at one of these versions); this parley runs the
ones a file lacks, then the shared migrations of parley/storage/schema.py, from 18 on.

Released: never edit, append to or reorder these (add a migration to schema.py instead). Each
entry is run statement by statement, split at each ";".
"""

from __future__ import annotations

SQLITE_LEGACY: tuple[str, ...] = (
    # 1: sessions, turns, transcript, tool calls, interrupts, queue, events, steps
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        owner TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        phase TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        turn_count INTEGER NOT NULL DEFAULT 0,
        current_turn_id TEXT,
        last_turn_id TEXT,
        last_error TEXT,
        closed_reason TEXT,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        model_calls INTEGER NOT NULL DEFAULT 0,
        todos TEXT NOT NULL DEFAULT '[]',
        cancel_requested_turn TEXT,
        close_requested INTEGER NOT NULL DEFAULT 0,
        lease_owner TEXT,
        lease_expires_at REAL,
        message_seq INTEGER NOT NULL DEFAULT 0,
        event_seq INTEGER NOT NULL DEFAULT 0,
        queue_seq INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX sessions_owner_created ON sessions(owner, created_at DESC, id DESC);
    CREATE INDEX sessions_status ON sessions(status);

    CREATE TABLE turns (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        seq INTEGER NOT NULL,
        status TEXT NOT NULL,
        queued_message_id TEXT,
        started_at REAL NOT NULL,
        ended_at REAL,
        answer TEXT,
        error TEXT,
        model_calls INTEGER NOT NULL DEFAULT 0,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        UNIQUE (session_id, seq)
    );

    CREATE TABLE messages (
        session_id TEXT NOT NULL REFERENCES sessions(id),
        seq INTEGER NOT NULL,
        turn_id TEXT,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (session_id, seq)
    );

    CREATE TABLE tool_calls (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        turn_id TEXT NOT NULL REFERENCES turns(id),
        step_no INTEGER NOT NULL,
        call_index INTEGER NOT NULL,
        name TEXT NOT NULL,
        arguments TEXT NOT NULL,
        status TEXT NOT NULL,
        effect TEXT NOT NULL,
        result TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        idempotency_key TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        UNIQUE (turn_id, step_no, call_index)
    );

    CREATE TABLE interrupts (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        turn_id TEXT NOT NULL REFERENCES turns(id),
        tool_call_id TEXT,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at REAL NOT NULL,
        resolved_at REAL
    );

    CREATE TABLE queued_messages (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        seq INTEGER NOT NULL,
        text TEXT NOT NULL,
        status TEXT NOT NULL,
        turn_id TEXT,
        created_at REAL NOT NULL,
        UNIQUE (session_id, seq)
    );
    CREATE INDEX queued_pending ON queued_messages(session_id, status, seq);

    CREATE TABLE events (
        session_id TEXT NOT NULL REFERENCES sessions(id),
        seq INTEGER NOT NULL,
        turn_id TEXT,
        kind TEXT NOT NULL,
        data TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (session_id, seq)
    );

    -- One row per committed step. The unique key is the last line of defence against
    -- two processes committing the same model call.
    CREATE TABLE steps (
        session_id TEXT NOT NULL REFERENCES sessions(id),
        turn_id TEXT NOT NULL REFERENCES turns(id),
        step_no INTEGER NOT NULL,
        kind TEXT NOT NULL,
        process_id TEXT NOT NULL,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        PRIMARY KEY (turn_id, kind, step_no)
    );
    CREATE INDEX steps_session ON steps(session_id);
    """,
    # 2: idempotent sends (client_message_id), task results, session inputs
    """
    ALTER TABLE queued_messages ADD COLUMN client_message_id TEXT;
    CREATE UNIQUE INDEX queued_client_id ON queued_messages(session_id, client_message_id)
        WHERE client_message_id IS NOT NULL;
    ALTER TABLE sessions ADD COLUMN start_client_message_id TEXT;
    CREATE UNIQUE INDEX sessions_start_client_id ON sessions(owner, start_client_message_id)
        WHERE start_client_message_id IS NOT NULL;
    ALTER TABLE sessions ADD COLUMN result TEXT;
    ALTER TABLE sessions ADD COLUMN inputs TEXT;
    ALTER TABLE turns ADD COLUMN result TEXT;
    """,
    # 3: MCP tool calls remember their source, server and the server's own tool name
    """
    ALTER TABLE tool_calls ADD COLUMN source TEXT NOT NULL DEFAULT 'builtin';
    ALTER TABLE tool_calls ADD COLUMN server TEXT;
    ALTER TABLE tool_calls ADD COLUMN tool TEXT;
    ALTER TABLE tool_calls ADD COLUMN requires_approval INTEGER NOT NULL DEFAULT 0;
    """,
    # 4: approvals, questions and durable waits
    """
    ALTER TABLE interrupts ADD COLUMN deadline REAL;
    ALTER TABLE interrupts ADD COLUMN resolution TEXT;
    ALTER TABLE interrupts ADD COLUMN resolved_by TEXT;
    CREATE INDEX interrupts_pending ON interrupts(session_id, status);
    ALTER TABLE tool_calls ADD COLUMN wake_at REAL;
    ALTER TABLE tool_calls ADD COLUMN decision TEXT;
    ALTER TABLE sessions ADD COLUMN wake_at REAL;
    """,
    # 5: steering
    """
    ALTER TABLE queued_messages ADD COLUMN steer INTEGER NOT NULL DEFAULT 0;
    """,
    # 6: session settings (they apply from the turn of the message that carries them)
    """
    ALTER TABLE queued_messages ADD COLUMN settings TEXT;
    ALTER TABLE turns ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE sessions ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
    """,
    # 7: compaction summaries (the transcript itself is never shortened)
    """
    CREATE TABLE summaries (
        session_id TEXT NOT NULL REFERENCES sessions(id),
        upto_seq INTEGER NOT NULL,
        turn_id TEXT,
        text TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (session_id, upto_seq)
    );
    """,
    # 8: cached prompt tokens, per call and summed
    """
    ALTER TABLE steps ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE turns ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
    """,
    # 9: MCP tasks: a client's durable handle on the turn one of its calls started or resumed
    """
    CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        generation TEXT NOT NULL,
        tool TEXT NOT NULL,
        session_id TEXT,
        queued_message_id TEXT,
        turn_id TEXT,
        status TEXT NOT NULL,
        status_message TEXT,
        result TEXT,
        ttl_ms INTEGER,
        poll_interval_ms INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        expires_at REAL
    );
    CREATE INDEX tasks_by_owner ON tasks(owner, created_at, id);
    CREATE INDEX tasks_by_expiry ON tasks(expires_at);
    """,
    # 10: a tool call's state at its MCP server: a downstream task it polls, input it was asked for
    """
    ALTER TABLE tool_calls ADD COLUMN remote TEXT;
    """,
    # 11: the lease's epoch: each acquisition of a session's lease counts one up, and the lease
    # token (lease_owner) names the process and the epoch, so a write of an earlier holding of the
    # same process is refused as well as another process's (a fencing token)
    """
    ALTER TABLE sessions ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0;
    """,
    # 12: the audit trail (who sent, decided, cancelled, deleted what; it outlives the sessions),
    # and the indexes of the queries across owners: running turns per owner, pending interrupts
    """
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        principal TEXT NOT NULL,
        client TEXT,
        action TEXT NOT NULL,
        outcome TEXT NOT NULL,
        session_id TEXT,
        target TEXT,
        detail TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX audit_by_session ON audit(session_id, id);
    CREATE INDEX audit_by_principal ON audit(principal, id);
    CREATE INDEX audit_by_time ON audit(at);
    CREATE INDEX sessions_owner_status ON sessions(owner, status);
    CREATE INDEX interrupts_all_pending ON interrupts(created_at) WHERE status = 'pending';
    """,
    # 13: the work scan reads only sessions that may need a driver: a parked session (waiting
    # for a person, no timer, no lease) is not even visited, however many there are
    """
    CREATE INDEX sessions_waiting_work ON sessions(updated_at)
        WHERE status = 'waiting_for_input' AND (wake_at IS NOT NULL OR lease_owner IS NOT NULL);
    CREATE INDEX sessions_running ON sessions(updated_at) WHERE status = 'running';
    """,
    # 14: agent versions: each turn names the definition it runs on, stored by its content hash
    # (shared by every session of the agent, so it outlives them)
    """
    ALTER TABLE turns ADD COLUMN agent_version TEXT;
    CREATE TABLE agent_versions (
        agent TEXT NOT NULL,
        version TEXT NOT NULL,
        definition TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (agent, version)
    );
    """,
    # 15: attachments: a queued message's references (JSON), the bytes stored once by sha256, and
    # which sessions refer to which bytes (a blob no session refers to any more is garbage: see
    # collect_attachments; deleting a session deletes its attachment_refs rows)
    """
    ALTER TABLE queued_messages ADD COLUMN attachments TEXT;
    CREATE TABLE attachments (
        sha256 TEXT PRIMARY KEY,
        mime_type TEXT NOT NULL,
        size INTEGER NOT NULL,
        data BLOB NOT NULL,
        stored_at REAL NOT NULL
    );
    CREATE TABLE attachment_refs (
        session_id TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (session_id, sha256)
    );
    CREATE INDEX attachment_refs_by_blob ON attachment_refs(sha256);
    """,
    # 16: the W3C trace context (traceparent, tracestate, baggage) a caller sent with a message,
    # so the turn it starts joins the caller's trace, in whichever process runs it
    """
    ALTER TABLE queued_messages ADD COLUMN trace_context TEXT;
    """,
    # 17: titles and tags (what people name and find sessions by), and the indexes retention
    # sweeps and deletions use: sessions by status and last change, events by age, a session's
    # tool calls and tasks
    """
    ALTER TABLE sessions ADD COLUMN title TEXT;
    ALTER TABLE sessions ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';
    CREATE INDEX sessions_by_change ON sessions(status, updated_at);
    CREATE INDEX events_by_time ON events(created_at);
    CREATE INDEX tool_calls_session ON tool_calls(session_id);
    CREATE INDEX tasks_by_session ON tasks(session_id);
    """,
)
