"""The storage ports: small protocols split by role, and `Store`, all of them at once (what a
backend implements and the composition root holds). The runtime names the narrowest port it
needs. Every port is safe to call from many tasks at once. The ports and what each holds:
docs/design.md#ports."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from parley.core.changes import Admit, Changes, Claimed, SessionSnapshot, SnapshotScope
from parley.core.forks import ForkedSession, ForkOutcome, ForkSource
from parley.core.ids import QueuedMessageId, SessionId, TurnId
from parley.core.records import (
    AgentVersionRecord,
    AttachmentBlob,
    AuditRecord,
    DatabaseCounts,
    DeleteOutcome,
    EventRecord,
    InterruptRecord,
    MessageRecord,
    PendingInterrupt,
    QueuedMessageRecord,
    SessionFilter,
    SessionPage,
    SessionRecord,
    SweepRule,
    TaskPage,
    TaskRecord,
    TaskStatus,
    ToolCallRecord,
    TurnRecord,
)
from parley.core.schedules import TickClaim
from parley.storage.integration_ports import CredentialStore, OAuthFlowStore, ScheduleStore, WebhookOutbox

T = TypeVar("T")


class StepStore(Protocol):
    """Decisions on a session, each in one transaction under the backend's lock."""

    async def decide(
        self,
        session_id: SessionId,
        scope: SnapshotScope,
        decide: Callable[[SessionSnapshot | None], tuple[T, Changes]],
        now: float,
        *,
        lease: str | None = None,
    ) -> T:
        """In one transaction: load the snapshot of `scope` (None if the session does not exist),
        call `decide` on it and write the `Changes` it returns; return what `decide` returned.
        `decide` must be a pure function (a backend may call it on its own thread). With `lease`,
        LeaseLost, and nothing decided or written, unless that holding of the lease is current."""
        ...

    async def decide_then_look(
        self,
        session_id: SessionId,
        scope: SnapshotScope,
        decide: Callable[[SessionSnapshot | None], tuple[T, Changes]],
        now: float,
        after: SnapshotScope,
        *,
        lease: str | None = None,
    ) -> tuple[T, SessionSnapshot | None]:
        """`decide`, and the snapshot of `after` as the same transaction sees it once the changes
        are written (None if the session does not exist): a decision whose maker looks next
        (the driver after starting a turn) saves that read's transaction."""
        ...

    async def snapshot(self, session_id: SessionId, scope: SnapshotScope) -> SessionSnapshot | None:
        """The snapshot of `scope` as one read sees it (no lock taken, nothing written)."""
        ...


class SessionStarts(Protocol):
    """Creating sessions, and finding what a retry with the same client_message_id started."""

    async def create_session(
        self,
        session: SessionRecord,
        first_message: QueuedMessageRecord | None,
        now: float,
        admit: Admit | None = None,
        audit: AuditRecord | None = None,
        more: Sequence[QueuedMessageRecord] = (),
        shared: Sequence[str] = (),
        tick: TickClaim | None = None,
    ) -> bool:
        """Store the session and its first queued message as given (see transitions.starting),
        and `more` queued behind it (a replay's messages), with references to the attachments
        (sha256) its messages `shared` with another session,
        with the events that record them and `audit`, the entry of the act, in one transaction.
        False (and nothing written) when the owner already used session.start_client_message_id.
        With `admit`, in the same transaction: the owner's usage is read under its lock and
        `admit.decide` either returns the admissions stored with the session or raises (and
        nothing is written). With `tick`, the schedule's tick is claimed first in the same
        transaction: False (and nothing written) when another start claimed it."""
        ...

    async def find_started(self, owner: str, client_message_id: str) -> SessionRecord | None:
        """The session that start_session created with this client_message_id."""
        ...

    async def find_sent(self, session_id: SessionId, client_message_id: str) -> QueuedMessageRecord | None:
        """The message sent to this session with this client_message_id, whatever became of it."""
        ...

    async def first_message(self, session_id: SessionId) -> QueuedMessageRecord | None: ...

    async def consumed_messages(self, session_id: SessionId) -> list[QueuedMessageRecord]:
        """The messages turns took, in the order they were sent (what a replay sends again)."""
        ...

    async def calls_of(self, session_id: SessionId) -> list[ToolCallRecord]:
        """Every tool call of the session, in the order they were asked for."""
        ...


class Leases(Protocol):
    """Which process drives which session, and which sessions need a driver."""

    async def try_acquire_leases(
        self, session_ids: Sequence[SessionId], owner: str, now: float, ttl_s: float
    ) -> dict[SessionId, str]:
        """Take each session's lease for process `owner` if it is free, expired or `owner`'s own
        (not if another process holds it or it needs no driver), all in one statement: the new
        holdings' tokens (base.lease_token) by session; every write of a holding names its token.
        A scheduler taking over a crashed process's hundred sessions claims them at once."""
        ...

    async def claim_and_decide(
        self,
        session_id: SessionId,
        owner: str,
        now: float,
        ttl_s: float,
        scope: SnapshotScope,
        decide: Callable[[SessionSnapshot], tuple[T, Changes]],
        after: Callable[[SessionSnapshot], SnapshotScope],
    ) -> Claimed[T] | None:
        """try_acquire_leases for one session, and in the same transaction `decide` on its snapshot
        of `scope` as the claim left it (pure, as for StepStore.decide), its changes written: the
        new token, what `decide` returned and the snapshot of `after(snapshot)` read after the
        writes (the claim's own snapshot when `decide` changed nothing), so the driver's first
        step reads nothing more. None, with `decide` not called, when the lease was not taken."""
        ...

    async def renew_lease(self, session_id: SessionId, lease: str, now: float, ttl_s: float) -> SessionRecord:
        """Extend the lease and return the session as stored. Raises LeaseLost."""
        ...

    async def release_lease(self, session_id: SessionId, lease: str) -> None: ...

    async def count_leases(self, owner: str, now: float) -> int:
        """Sessions whose lease process `owner` holds now (for health reports)."""
        ...

    async def database_counts(self, now: float) -> DatabaseCounts:
        """Counts over the whole database (metrics): a few aggregate reads, no rows."""
        ...

    async def sessions_needing_work(self, now: float, limit: int) -> list[SessionId]:
        """Running sessions whose lease is free or expired."""
        ...


class SessionReads(Protocol):
    """Reading sessions, turns, tool calls, queued messages and interrupts."""

    async def get_session(self, session_id: SessionId) -> SessionRecord | None: ...

    async def list_sessions(
        self,
        owner: str | None,
        status: str | None,
        agent: str | None,
        cursor: str | None,
        limit: int,
        match: SessionFilter | None = None,
    ) -> SessionPage:
        """Sessions of `owner` (None: of every owner), newest first, a page at a time, narrowed by
        `match` (title text, tag, creation time)."""
        ...

    async def get_turn(self, turn_id: TurnId) -> TurnRecord | None: ...

    async def list_turns(self, session_id: SessionId) -> list[TurnRecord]: ...

    async def list_tool_calls(self, turn_id: TurnId) -> list[ToolCallRecord]: ...

    async def list_queued(self, session_id: SessionId) -> list[QueuedMessageRecord]: ...

    async def get_queued(self, message_id: QueuedMessageId) -> QueuedMessageRecord | None: ...

    async def get_queued_with_session(
        self, message_id: QueuedMessageId, session_id: SessionId
    ) -> tuple[QueuedMessageRecord | None, SessionRecord | None]:
        """The queued message and its session as one read saw them both (one transaction)."""
        ...

    async def list_interrupts(self, session_id: SessionId, pending_only: bool) -> list[InterruptRecord]: ...

    async def list_all_pending(self, limit: int) -> list[InterruptRecord]: ...


class Transcripts(Protocol):
    """The transcript, its compaction summaries and the committed steps."""

    async def list_messages(
        self, session_id: SessionId, from_seq: int | None, limit: int | None
    ) -> list[MessageRecord]: ...

    async def count_messages(self, session_id: SessionId) -> int: ...

    async def save_summary(
        self, session_id: SessionId, lease: str, turn_id: TurnId, upto_seq: int, text: str, now: float
    ) -> None:
        """Store a compaction summary of the messages up to `upto_seq` (the transcript stays whole)."""
        ...

    async def latest_summary(self, session_id: SessionId) -> tuple[int, str] | None:
        """(upto_seq, text) of the newest summary."""
        ...


class EventLog(Protocol):
    """The append-only record of what happened, for progress and live views."""

    async def record_event(
        self, session_id: SessionId, turn_id: TurnId | None, kind: str, data: dict[str, Any], now: float
    ) -> None:
        """Append an event that changes no state (a warning, a tool's progress)."""
        ...

    async def latest_event_seq(self, session_id: SessionId) -> int: ...

    async def event_seqs(self, session_ids: Sequence[SessionId]) -> dict[SessionId, int]:
        """The latest event number of each session (a session that changed wrote an event)."""
        ...

    async def list_events(self, session_id: SessionId, after_seq: int, limit: int) -> list[EventRecord]: ...


class TaskStore(Protocol):
    """MCP tasks: stored handles on turns."""

    async def create_task(self, task: TaskRecord) -> None: ...

    async def get_task(self, task_id: str, now: float) -> TaskRecord | None:
        """The task, or None when there is none or it has expired."""
        ...

    async def update_task(
        self,
        task_id: str,
        *,
        status: TaskStatus,
        status_message: str | None,
        turn_id: TurnId | None,
        result: dict[str, Any] | None,
        now: float,
    ) -> TaskRecord | None:
        """Record a new state of an open task. An ended task is never changed: the first end
        wins, and the record as stored is returned."""
        ...

    async def list_tasks(self, owner: str, cursor: str | None, limit: int, now: float) -> TaskPage:
        """The owner's live tasks, oldest first, a page at a time."""
        ...

    async def purge_tasks(self, now: float) -> int:
        """Delete expired tasks; return how many."""
        ...


class OwnerQueries(Protocol):
    """What serving many principals asks of sessions across owners: fair-use counts, interrupts
    waiting for a principal, and removing a session."""

    async def list_pending_for(
        self, owner: str | None, agents: Sequence[str] | None, limit: int
    ) -> list[PendingInterrupt]:
        """Pending interrupts, oldest first, of sessions `owner` owns or of the `agents`; both
        None: of every session."""
        ...

    async def list_drafts_for(
        self, owner: str | None, agents: Sequence[str] | None, limit: int
    ) -> list[SessionRecord]:
        """Idle sessions whose plan is a draft waiting for review, oldest change first, of
        `owner` or of the `agents`, as list_pending_for."""
        ...

    async def delete_session(self, session_id: SessionId, now: float) -> DeleteOutcome:
        """Remove the session and everything of it (turns, calls, interrupts, queue, transcript,
        summaries, steps, events, its MCP tasks), unless it runs or a live lease holds it
        ('busy': nothing is removed). The audit keeps its entries."""
        ...


class SessionLabels(Protocol):
    """A session's title and tags: what people name and find it by. Written apart from the
    turn's steps (a running turn neither sees nor overwrites them)."""

    async def set_labels(self, session_id: SessionId, title: str | None, tags: Sequence[str]) -> bool:
        """Store the session's title (None: none) and tags as given; False when there is no such
        session."""
        ...

    async def propose_title(self, session_id: SessionId, title: str) -> bool:
        """Set the title only if the session has none yet; True when it was set."""
        ...


class RetentionSweeps(Protocol):
    """What a retention policy removes, a small batch per call, each batch one short
    transaction (so a sweep never holds up a turn), safe with several processes sweeping at once
    (a row another process is deleting is skipped, not waited for)."""

    async def sweep_sessions(self, rule: SweepRule, now: float, limit: int) -> list[SessionRecord]:
        """Delete at most `limit` sessions `rule` selects, oldest change first, with every row of
        them (as delete_session does), and record each in the audit trail in the same transaction
        (principal and action base.RETENTION_*, detail: owner, agent, status); return them as
        they were."""
        ...

    async def purge_events(self, before: float, limit: int) -> int:
        """Delete at most `limit` events created before `before`, of sessions not running a turn
        (the transcript and the sessions' event numbers stay); return how many."""
        ...

    async def purge_deliveries(self, before: float, limit: int) -> int:
        """Delete at most `limit` webhook deliveries, delivered or dead, whose last attempt was
        before `before` (pending ones stay whatever their age); return how many."""
        ...


class AuditLog(Protocol):
    """The audit trail: append-only, kept for its own retention, independent of sessions."""

    async def record_audit(self, entry: AuditRecord) -> None:
        """Append `entry` (its id is given by the store)."""
        ...

    async def list_audit(
        self, session_id: str | None, principal: str | None, before_id: int | None, limit: int
    ) -> list[AuditRecord]:
        """Entries, newest first, of one session and/or one principal (None: any), with ids below
        `before_id` (None: from the newest)."""
        ...

    async def purge_audit(self, before: float) -> int:
        """Delete entries older than `before`; return how many."""
        ...


class AgentVersions(Protocol):
    """The agent definitions turns ran with (written with the turn that first runs on one, see
    Changes.new_agent_version), kept while any process may resume such a turn."""

    async def get_agent_version(self, agent: str, version: str) -> AgentVersionRecord | None: ...

    async def store_agent_version(self, record: AgentVersionRecord) -> None:
        """Store a definition sessions are pinned to before a turn ran on it (a replay's agent
        file); a version stored already is left as it is."""
        ...


class AttachmentStore(Protocol):
    """Attachment bytes, stored once by sha256 with the message that brought them (see
    QueuedMessageRecord.blobs), and which sessions refer to them."""

    async def attachment_data(self, hashes: Sequence[str]) -> dict[str, AttachmentBlob]:
        """The bytes of these hashes (those stored), for a model call."""
        ...

    async def session_attachment(self, session_id: SessionId, sha256: str) -> AttachmentBlob | None:
        """The bytes `sha256` names, if a message of the session carried them."""
        ...

    async def collect_attachments(self, stored_before: float) -> int:
        """Drop the references of sessions that no longer exist, then the bytes no session refers
        to and that were last stored before `stored_before` (a message being stored now may be
        about to refer to older bytes again); return how many blobs went. Run it after deleting
        sessions."""
        ...


class SessionForks(Protocol):
    """Forks: a new session made of an original up to the end of one of its turns."""

    async def fork_session(
        self,
        source_id: SessionId,
        at_turn: int,
        make: Callable[[ForkSource | None], tuple[ForkOutcome, ForkedSession | None]],
        now: float,
        admit: Admit | None = None,
        audit: AuditRecord | None = None,
    ) -> tuple[ForkOutcome, ForkedSession | None]:
        """In one transaction: read the original as far as `at_turn` (None: no such session), let
        `make` (parley/core/forks.py's rule) say what the fork is, and write it with its fair-use
        admissions (`admit` may refuse: then nothing is written) and `audit`. Returns `make`'s
        answer. The original is only read."""
        ...

    async def list_forks(self, session_id: SessionId, owner: str | None, limit: int) -> list[SessionRecord]:
        """The forks made of a session (of `owner` only, unless None), newest first, at most `limit`."""
        ...


class Store(
    OAuthFlowStore,
    CredentialStore,
    WebhookOutbox,
    StepStore,
    SessionForks,
    AttachmentStore,
    SessionStarts,
    Leases,
    SessionReads,
    Transcripts,
    EventLog,
    TaskStore,
    OwnerQueries,
    AuditLog,
    AgentVersions,
    SessionLabels,
    RetentionSweeps,
    ScheduleStore,
    Protocol,
):
    """Every port: durable state of every session."""
