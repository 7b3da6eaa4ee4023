"""The rules of transitions.py applied to stored sessions: load the snapshot, decide, write the
changes, all in one transaction of the step port (parley/core/changes.py). Each method is one
event of parley/core/transitions.py; `lease` names the process that must still hold the session's lease.
See docs/design.md#the-step-port."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from parley.core import plans, transitions, turn_steps
from parley.core.changes import Changes, SessionSnapshot, SnapshotScope
from parley.core.ids import QueuedMessageId, SessionId, ToolCallId, TurnId
from parley.core.records import (
    AgentVersionRecord,
    AuditRecord,
    EnqueueOutcome,
    InterruptRecord,
    ModelStep,
    QueuedMessageRecord,
    Resolution,
    ResolveResult,
    SessionRecord,
    ToolCallStatus,
    TurnRecord,
)
from parley.core.transitions import TurnEnd
from parley.errors import StorageError
from parley.runtime.fair_use import Claim
from parley.storage.ports import StepStore

T = TypeVar("T")

# The turn row alone (a decision that reads neither its calls, its interrupts nor the queue).
_TURN_ONLY: dict[str, Any] = {"calls": False, "interrupts": False, "queue": False}

Decide = Callable[[SessionSnapshot], tuple[T, Changes]]


class SessionSteps:
    def __init__(self, store: StepStore) -> None:
        self._store = store

    async def _decide(
        self,
        session_id: SessionId,
        decide: Decide[T],
        missing: T,
        now: float,
        *,
        lease: str | None = None,
        **scope: Any,
    ) -> T:
        """Load, decide and write in one transaction; `missing` when the session does not exist.
        `scope` names what the snapshot holds (see SnapshotScope)."""
        value, _ = await self._decide_and_look(session_id, decide, missing, now, None, lease=lease, **scope)
        return value

    async def _decide_and_look(
        self,
        session_id: SessionId,
        decide: Decide[T],
        missing: T,
        now: float,
        look: SnapshotScope | None,
        *,
        lease: str | None = None,
        **scope: Any,
    ) -> tuple[T, SessionSnapshot | None]:
        """_decide, and with `look` the snapshot of that scope as the decision left it, read in the
        same transaction (the driver's next step then reads nothing more)."""

        def decide_or_missing(snapshot: SessionSnapshot | None) -> tuple[T, Changes]:
            return (missing, Changes()) if snapshot is None else decide(snapshot)

        loaded = SnapshotScope(**scope)
        if look is None:
            return await self._store.decide(session_id, loaded, decide_or_missing, now, lease=lease), None
        return await self._store.decide_then_look(
            session_id, loaded, decide_or_missing, now, look, lease=lease
        )

    async def _write(
        self,
        session_id: SessionId,
        lease: str,
        decide: Callable[[SessionSnapshot], Changes | None],
        now: float,
        look: SnapshotScope | None = None,
        **load: Any,
    ) -> SessionSnapshot | None:
        """A step of the lease holder's turn; a missing record is a bug, not a race. With `look`,
        the snapshot of that scope as the step left it."""

        def with_check(snapshot: SessionSnapshot) -> tuple[None, Changes]:
            changes = decide(snapshot)
            if changes is None:
                raise StorageError(f"session {session_id}: the record this step writes is not stored")
            return None, changes

        _, seen = await self._decide_and_look(session_id, with_check, None, now, look, lease=lease, **load)
        return seen

    async def look(self, session_id: SessionId, scope: SnapshotScope) -> SessionSnapshot | None:
        """A consistent view of the session as one transaction sees it; nothing is written."""
        return await self._store.snapshot(session_id, scope)

    # ------------------------------------------------------------------ a caller's requests

    async def enqueue_message(
        self,
        session_id: SessionId,
        owner: str,
        message: QueuedMessageRecord,
        max_turns: Callable[[SessionRecord], int],
        now: float,
        audit: AuditRecord | None = None,
        claim: Claim | None = None,
    ) -> tuple[EnqueueOutcome, SessionRecord | None]:
        """Queue `message` unless the session has used the turns `max_turns` gives it as stored;
        `audit`, the entry of the act, is committed with it when it is queued. With `claim`, the
        sender's fair use is read and counted in the same transaction: over a limit, RateLimited
        and nothing written. The outcome, and the session as the decision found it (None: gone)."""

        def queue(snapshot: SessionSnapshot) -> tuple[tuple[EnqueueOutcome, SessionRecord | None], Changes]:
            session = snapshot.session
            outcome, changes = transitions.queue_message(snapshot, owner, message, max_turns(session))
            if outcome == "queued" and claim is not None and snapshot.usage is not None:
                changes.admitted.extend(claim.admit(snapshot.usage, starts_turn=session.status == "idle"))
            if outcome == "queued" and audit is not None:
                changes.audit.append(audit)
            return (outcome, session), changes

        missing: tuple[EnqueueOutcome, SessionRecord | None] = ("not_found", None)
        return await self._decide(
            session_id,
            queue,
            missing,
            now,
            client_message_id=message.client_message_id,
            turn=False,
            usage=claim.scope if claim is not None else None,
        )

    async def approve_plan(
        self,
        session_id: SessionId,
        owner: str,
        revision: int,
        message: QueuedMessageRecord,
        max_turns: int,
        by: str,
        now: float,
        audit: AuditRecord | None = None,
        claim: Claim | None = None,
    ) -> plans.ApproveOutcome:
        """Approve `revision` and queue the executing turn's `message`, with `audit`, in one
        transaction: of two concurrent approvals exactly one is applied. With `claim`, the
        approver's fair use is counted as for a message (over a limit: RateLimited, nothing written)."""

        def approve(snapshot: SessionSnapshot) -> tuple[plans.ApproveOutcome, Changes]:
            outcome, changes = plans.approve_plan(snapshot, owner, revision, message, max_turns, by)
            if outcome == "approved" and claim is not None and snapshot.usage is not None:
                changes.admitted.extend(claim.admit(snapshot.usage, starts_turn=True))
            if outcome == "approved" and audit is not None:
                changes.audit.append(audit)
            return outcome, changes

        usage = claim.scope if claim is not None else None
        return await self._decide(session_id, approve, "not_found", now, turn=False, usage=usage)

    async def discard_plan(
        self, session_id: SessionId, owner: str, now: float, audit: AuditRecord | None = None
    ) -> plans.DiscardOutcome:
        def discard(snapshot: SessionSnapshot) -> tuple[plans.DiscardOutcome, Changes]:
            outcome, changes = plans.discard_plan(snapshot, owner)
            if outcome == "discarded" and audit is not None:
                changes.audit.append(audit)
            return outcome, changes

        return await self._decide(session_id, discard, "not_found", now, turn=False, calls=False)

    async def promote_to_steer(
        self, session_id: SessionId, owner: str, message_id: QueuedMessageId, now: float
    ) -> QueuedMessageRecord | None:
        return await self._decide(
            session_id,
            lambda s: transitions.promote_to_steer(s, owner),
            None,
            now,
            message_id=message_id,
            turn=False,
            queue=False,
        )

    async def delete_queued(
        self, session_id: SessionId, owner: str, message_id: QueuedMessageId, now: float
    ) -> QueuedMessageRecord | None:
        return await self._decide(
            session_id,
            lambda s: transitions.delete_queued(s, owner),
            None,
            now,
            message_id=message_id,
            turn=False,
        )

    async def request_cancel(
        self, session_id: SessionId, owner: str, now: float, queued_turn_id: TurnId
    ) -> TurnId | None:
        return await self._decide(
            session_id,
            lambda s: transitions.request_cancel(s, owner, queued_turn_id, now),
            None,
            now,
            turn=False,
        )

    async def request_close(self, session_id: SessionId, owner: str, reason: str, now: float) -> None:
        await self._decide(
            session_id, lambda s: (None, transitions.request_close(s, owner, reason)), None, now, turn=False
        )

    async def resolve_interrupt(
        self,
        session_id: SessionId,
        interrupt_id: str,
        resolution: Resolution,
        by: str,
        now: float,
        owner: str | None = None,
    ) -> ResolveResult:
        """Decide an interrupt; the first decision wins (see transitions.resolve_interrupt)."""
        return await self._decide(
            session_id,
            lambda s: transitions.resolve_interrupt(s, interrupt_id, resolution, by, now, owner),
            ResolveResult(outcome="not_found"),
            now,
            interrupt_id=interrupt_id,
            queue=False,
        )

    # ------------------------------------------------------------------ the lease holder's steps

    async def start_turn(
        self,
        session_id: SessionId,
        lease: str,
        turn_id: TurnId,
        now: float,
        agent_version: AgentVersionRecord | None = None,
        *,
        store_version: bool = False,
    ) -> TurnRecord | None:
        turn, _ = await self.start_turn_and_look(
            session_id, lease, turn_id, now, agent_version, store_version=store_version
        )
        return turn

    async def start_turn_and_look(
        self,
        session_id: SessionId,
        lease: str,
        turn_id: TurnId,
        now: float,
        agent_version: AgentVersionRecord | None = None,
        *,
        store_version: bool = False,
        look: SnapshotScope | None = None,
    ) -> tuple[TurnRecord | None, SessionSnapshot | None]:
        """start_turn, and with `look` the snapshot of that scope as the start left it, read in
        the same transaction: the driver's next step reads nothing more."""

        def start(snapshot: SessionSnapshot) -> tuple[TurnRecord | None, Changes]:
            return turn_steps.start_turn(snapshot, turn_id, now, agent_version, store_version=store_version)

        return await self._decide_and_look(session_id, start, None, now, look, lease=lease, turn=False)

    async def commit_model_step(
        self,
        session_id: SessionId,
        lease: str,
        step: ModelStep,
        now: float,
        look: SnapshotScope | None = None,
    ) -> SessionSnapshot | None:
        """The step alone (the turn goes on, or ends in a write of its own); with `look`, the
        session as the step left it (see _decide_and_look)."""
        return await self._write(
            session_id,
            lease,
            lambda s: turn_steps.model_step(s, step, lease, now),
            now,
            look,
            turn_id=step.turn_id,
            calls=False,
            interrupts=False,
            queue=False,
        )

    async def commit_answering_step(
        self, session_id: SessionId, lease: str, step: ModelStep, end: TurnEnd, now: float
    ) -> tuple[bool, str | None]:
        """The step, and the turn's end `end` with it when the step answers and nothing holds the
        turn back (turn_steps.answering_step): (ended, the status the session rests in, or None
        when it runs on with the lease kept)."""

        (ended, rested, _) = await self._answer(session_id, lease, step, end, now, None)
        return ended, rested

    async def commit_answering_step_and_look(
        self, session_id: SessionId, lease: str, step: ModelStep, end: TurnEnd, now: float
    ) -> tuple[bool, str | None, SessionSnapshot | None]:
        """commit_answering_step, and the session with the step's turn, its calls and its
        interrupts as the same transaction left them (for someone of this process who waits on
        that turn: Watch's `seen`)."""
        return await self._answer(
            session_id, lease, step, end, now, SnapshotScope(turn_id=step.turn_id, queue=False)
        )

    async def _answer(
        self,
        session_id: SessionId,
        lease: str,
        step: ModelStep,
        end: TurnEnd,
        now: float,
        look: SnapshotScope | None,
    ) -> tuple[bool, str | None, SessionSnapshot | None]:
        def decide(snapshot: SessionSnapshot) -> tuple[tuple[bool, str | None], Changes]:
            if snapshot.turn is None:
                raise StorageError(f"session {session_id}: the turn of this step is not stored")
            return turn_steps.answering_step(snapshot, step, lease, now, end)

        missing: tuple[bool, str | None] = (False, None)
        (ended, rested), seen = await self._decide_and_look(
            session_id, decide, missing, now, look, lease=lease, turn_id=step.turn_id
        )
        return ended, rested, seen

    async def append_nudge(
        self, session_id: SessionId, lease: str, turn_id: TurnId, text: str, now: float
    ) -> None:
        await self._write(
            session_id, lease, lambda s: turn_steps.nudge(s, text), now, turn_id=turn_id, **_TURN_ONLY
        )

    async def mark_tool_call_started(
        self, session_id: SessionId, lease: str, call_id: ToolCallId, now: float
    ) -> None:
        await self._write(
            session_id,
            lease,
            lambda s: turn_steps.tool_started(s, call_id),
            now,
            call_id=call_id,
            interrupts=False,
            queue=False,
        )

    async def commit_tool_result(
        self,
        session_id: SessionId,
        lease: str,
        call_id: ToolCallId,
        status: ToolCallStatus,
        result: dict[str, Any],
        now: float,
        todos: list[dict[str, Any]] | None = None,
    ) -> None:
        await self._write(
            session_id,
            lease,
            lambda s: turn_steps.tool_result(s, call_id, status, result, now, todos),
            now,
            call_id=call_id,
            queue=False,
        )

    async def raise_interrupt(
        self, session_id: SessionId, lease: str, interrupt: InterruptRecord, now: float
    ) -> None:
        await self._write(
            session_id,
            lease,
            lambda s: turn_steps.raise_interrupt(s, interrupt, now),
            now,
            turn=False,
            queue=False,
        )

    async def drop_questions_in_place(self, session_id: SessionId, lease: str, now: float) -> int:
        return await self._decide(
            session_id,
            lambda s: turn_steps.drop_questions_in_place(s, now),
            0,
            now,
            lease=lease,
            calls=False,
            queue=False,
        )

    async def ask_remote(
        self,
        session_id: SessionId,
        lease: str,
        call_id: ToolCallId,
        remote: dict[str, Any],
        questions: Sequence[InterruptRecord],
        now: float,
    ) -> None:
        await self._write(
            session_id,
            lease,
            lambda s: turn_steps.ask_remote(s, call_id, remote, questions, now),
            now,
            call_id=call_id,
            interrupts=False,
            queue=False,
        )

    async def wait_remote(
        self,
        session_id: SessionId,
        lease: str,
        call_id: ToolCallId,
        status: ToolCallStatus,
        remote: dict[str, Any],
        wake_at: float | None,
        now: float,
    ) -> None:
        await self._write(
            session_id,
            lease,
            lambda s: turn_steps.wait_remote(s, call_id, status, remote, wake_at),
            now,
            call_id=call_id,
            interrupts=False,
            queue=False,
        )

    async def set_timer(
        self, session_id: SessionId, lease: str, call_id: ToolCallId, wake_at: float, now: float
    ) -> None:
        await self._write(
            session_id, lease, lambda s: turn_steps.set_timer(call_id, wake_at), now, turn=False, queue=False
        )

    async def park_turn(
        self,
        session_id: SessionId,
        lease: str,
        turn_id: TurnId,
        now: float,
        look: SnapshotScope | None = None,
    ) -> tuple[bool, SessionSnapshot | None]:
        """Park the turn if nothing of it can run now: whether it was parked, and with `look`
        the session as the decision left it (see _decide_and_look)."""

        def decide(snapshot: SessionSnapshot) -> tuple[bool, Changes]:
            changes = transitions.park_turn(snapshot)
            return (changes is not None), (changes or Changes())

        return await self._decide_and_look(
            session_id, decide, False, now, look, turn_id=turn_id, lease=lease, queue=False
        )

    async def finish_turn(
        self, session_id: SessionId, lease: str, turn_id: TurnId, end: TurnEnd, now: float
    ) -> str | None:
        """End the turn. When that leaves the session at rest, the lease is let go in the same
        transaction and the status it rests in is returned (None: it runs on, the lease kept)."""

        def decide(snapshot: SessionSnapshot) -> tuple[str | None, Changes]:
            if snapshot.turn is None:
                return None, Changes()
            changes = transitions.finish_turn(snapshot, end, now)
            return transitions.let_go_if_resting(snapshot, changes), changes

        return await self._decide(session_id, decide, None, now, turn_id=turn_id, lease=lease)

    async def rest_session(self, session_id: SessionId, lease: str, now: float) -> bool:
        """A session without a turn closes, runs on with its queue, or rests; True if it rests."""
        return await self._decide(session_id, transitions.rest_session, True, now, lease=lease, turn=False)
