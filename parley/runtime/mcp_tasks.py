"""MCP tasks: a durable handle on the turn one call started or resumed.

Nothing runs per task. The turn runs in the scheduler like any other; a task's state is
derived from its turn whenever somebody looks (working while it runs, input_required while
it waits for a person, completed when it rests) and stored when it changes. Once a task has
ended, its stored result is final. So a task outlives the connection that made it and the
process that served it, and ten thousand open tasks cost ten thousand rows.
See docs/design.md#tasks-as-handles-on-turns.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio
from anyio.abc import TaskStatus as StartedStatus

from parley.config import TasksConfig
from parley.core.ids import SessionId, TurnId, is_task_id, new_task_id
from parley.core.records import InterruptRecord, Resolution, TaskRecord, TaskStatus
from parley.errors import InvalidArgument, RequestError
from parley.runtime import audit
from parley.runtime.access import Principal, may_see
from parley.runtime.background import log_pass_failure
from parley.runtime.service import SessionService, TurnOutcome, Waiting, cursor_time
from parley.runtime.session_access import AskHuman
from parley.runtime.signals import SessionSignals, Watch
from parley.storage.ports import Store

logger = logging.getLogger(__name__)

# A watcher's longest sleep without news (changes wake it earlier; this only bounds how late it
# notices that its task expired).
WATCH_IDLE_S = 300.0

# Renders a turn outcome as the tool result a task ends with (the server layer knows the wire).
RenderOutcome = Callable[[TurnOutcome], dict[str, Any]]


class TaskNotFound(RequestError):
    def __init__(self, task_id: str) -> None:
        super().__init__(
            f"No task {task_id}: it never existed, belongs to someone else, or expired and was deleted."
        )


class TaskEnded(RequestError):
    def __init__(self, task: TaskRecord) -> None:
        super().__init__(f"Task {task.id} has already ended ({task.status}); there is nothing to cancel.")
        self.task = task


@dataclass(frozen=True, slots=True)
class TaskState:
    """A task as it is now, with the interrupts it waits on (empty unless input_required)."""

    task: TaskRecord
    pending: list[InterruptRecord]


class McpTaskService:
    def __init__(
        self,
        *,
        store: Store,
        service: SessionService,
        signals: SessionSignals,
        clock: Callable[[], float],
        settings: TasksConfig,
        render: RenderOutcome,
    ) -> None:
        self._store = store
        self._service = service
        self._signals = signals
        self._clock = clock
        self._settings = settings
        self._render = render
        # Sessions whose tasks are watched for status notifications, with how many watchers each.
        self._watched: dict[SessionId, int] = {}

    @property
    def settings(self) -> TasksConfig:
        return self._settings

    def ttl_ms(self, requested_ms: int | None) -> int:
        """The TTL a task gets: what the client asked for, at most the configured maximum."""
        ceiling = int(self._settings.max_ttl_s * 1000)
        if requested_ms is None:
            return min(int(self._settings.default_ttl_s * 1000), ceiling)
        if requested_ms < 0:
            raise InvalidArgument("task.ttl", "must be 0 or more milliseconds")
        return min(requested_ms, ceiling)

    def _new(self, owner: Principal, generation: str, tool: str, ttl_ms: int) -> TaskRecord:
        now = self._clock()
        return TaskRecord(
            id=new_task_id(),
            owner=owner.id,
            generation=generation,
            tool=tool,
            session_id=None,
            queued_message_id=None,
            turn_id=None,
            status="working",
            status_message=None,
            result=None,
            ttl_ms=ttl_ms,
            poll_interval_ms=int(self._settings.poll_interval_s * 1000),
            created_at=now,
            updated_at=now,
            expires_at=now + ttl_ms / 1000,
        )

    async def create(
        self, owner: Principal, generation: str, tool: str, outcome: TurnOutcome, ttl_ms: int
    ) -> TaskState:
        """A task following the turn `outcome` names (what the call returned without waiting:
        the queued message or the turn). It is stored before this returns, so the client can
        poll it at once."""
        record = replace(
            self._new(owner, generation, tool, ttl_ms),
            session_id=outcome.session_id,
            queued_message_id=outcome.queued_message_id,
            turn_id=outcome.turn_id,
        )
        await self._store.create_task(record)
        await self._service.audit.record(
            owner,
            audit.TASK,
            session_id=record.session_id,
            target=record.id,
            tool=tool,
            generation=generation,
        )
        # What the call saw may be stale already; the state comes from the turn itself.
        return await self._refresh(record)

    async def create_ended(
        self,
        owner: Principal,
        generation: str,
        tool: str,
        status: TaskStatus,
        result: dict[str, Any],
        ttl_ms: int,
    ) -> TaskRecord:
        """A task that ended as it was made (the call was refused); `result` says why."""
        record = replace(
            self._new(owner, generation, tool, ttl_ms),
            status=status,
            result=result,
            status_message=_first_text(result),
        )
        await self._store.create_task(record)
        return record

    async def get(self, caller: Principal, task_id: str) -> TaskState:
        record = await self._stored(caller, task_id)
        return await self._refresh(record)

    async def _stored(self, caller: Principal, task_id: str) -> TaskRecord:
        """The task, if `caller` made it (or has parley:admin); anything else is not found."""
        if not is_task_id(task_id):
            raise TaskNotFound(task_id)
        record = await self._store.get_task(task_id, self._clock())
        if record is None or not may_see(caller, record.owner):
            raise TaskNotFound(task_id)
        return record

    async def list_page(self, caller: Principal, cursor: str | None) -> tuple[list[TaskRecord], str | None]:
        if cursor is not None:
            created, sep, last_id = cursor.partition("|")
            if not sep or cursor_time(created) is None or not is_task_id(last_id):
                raise InvalidArgument("cursor", "is not a cursor this server returned; omit it to start over")
        page = await self._store.list_tasks(caller.id, cursor, self._settings.list_page_size, self._clock())
        tasks = [(await self._refresh(t)).task for t in page.tasks]
        return tasks, page.next_cursor

    async def cancel(self, caller: Principal, task_id: str) -> TaskRecord:
        """Cancel the task and the turn it follows (a message not yet in a turn is dropped)."""
        try:
            state = await self.get(caller, task_id)
        except TaskNotFound:
            await self._service.audit.refused(
                caller, audit.TASK_CANCEL, None, task_id[:100], "not found", reason="not_found"
            )
            raise
        if state.task.is_terminal:
            raise TaskEnded(state.task)
        record = await self._store.update_task(
            task_id,
            status="cancelled",
            status_message="Cancelled by the client; its turn is cancelled too.",
            turn_id=None,
            result=None,
            now=self._clock(),
        )
        if record is None or record.status != "cancelled":
            # It ended some other way first.
            return record or state.task
        await self._service.audit.record(
            caller, audit.TASK_CANCEL, session_id=record.session_id, target=record.id
        )
        await self._stop_work(caller, record)
        return record

    async def _stop_work(self, caller: Principal, task: TaskRecord) -> None:
        if task.session_id is None:
            return
        turn_id = task.turn_id
        try:
            if turn_id is None and task.queued_message_id is not None:
                try:
                    await self._service.messages.delete_queued_message(
                        caller, task.session_id, task.queued_message_id
                    )
                    return
                except InvalidArgument:
                    # Taken into a turn in the meantime: cancel that turn.
                    queued = await self._store.get_queued(task.queued_message_id)
                    turn_id = queued.turn_id if queued is not None else None
            if turn_id is not None:
                await self._service.lifecycle.cancel_turn(
                    caller, task.session_id, Waiting(seconds=0), turn_id=turn_id
                )
        except RequestError as exc:
            logger.info("task %s: its turn could not be cancelled: %s", task.id, exc)

    async def answer(
        self,
        caller: Principal,
        task_id: str,
        answers: Callable[[list[InterruptRecord]], list[tuple[InterruptRecord, Resolution]]],
    ) -> None:
        """Apply a person's answers to what the task waits on; `answers` matches them to the
        pending interrupts (unknown or already answered ones are ignored)."""
        state = await self.get(caller, task_id)
        if state.task.session_id is None or not state.pending:
            return
        await self._service.persons.apply_answers(
            caller, state.task.session_id, answers(state.pending), via="task_input"
        )

    async def until_ended(
        self, caller: Principal, task_id: str, ask_human: AskHuman | None, asked: set[str] | None = None
    ) -> TaskRecord:
        """Wait until the task ends. While it waits for input and the client can be asked (and the
        agent takes that person's decisions), put each interrupt to the person once (the tools can
        answer it too; the first answer wins)."""
        asked = set() if asked is None else asked
        state = await self.get(caller, task_id)
        if state.task.is_terminal or state.task.session_id is None:
            return state.task
        # Watched from before the next look: a change committed while a look reads is not missed.
        with self._signals.watching(state.task.session_id) as changes:
            while True:
                task = state.task
                if task.is_terminal:
                    return task
                fresh = [i for i in state.pending if i.id not in asked]
                person = (
                    await self._service.access.person_for(caller, task.session_id, ask_human)
                    if fresh and task.session_id
                    else None
                )
                if person is not None:
                    for interrupt in fresh:
                        asked.add(interrupt.id)
                        await self._service.persons.put_to_person(
                            person, interrupt, _deadline_of(task, self._clock())
                        )
                else:
                    await changes.wait(self._service.waits.poll_interval_s)
                state = await self.get(caller, task_id)

    async def follow(
        self, owner: Principal, task_id: str, on_change: Callable[[TaskRecord], Awaitable[None]]
    ) -> None:
        """Call `on_change` with each new state of the task until it ends or expires. Changes made
        in this process are seen at once, those of other processes as the storage's change feed
        delivers them (PostgreSQL), else within `status_poll_s`."""
        last = (await self.get(owner, task_id)).task
        session_id = last.session_id
        if session_id is None:
            return
        self._watched[session_id] = self._watched.get(session_id, 0) + 1
        try:
            with self._signals.watching(session_id) as changes:
                await self._follow(owner, task_id, session_id, last, changes, on_change)
        finally:
            left = self._watched.get(session_id, 1) - 1
            if left:
                self._watched[session_id] = left
            else:
                self._watched.pop(session_id, None)

    async def _follow(
        self,
        owner: Principal,
        task_id: str,
        session_id: SessionId,
        last: TaskRecord,
        changes: Watch,
        on_change: Callable[[TaskRecord], Awaitable[None]],
    ) -> None:
        seen = await self._store.latest_event_seq(session_id)
        while not last.is_terminal:
            # Woken by this process's changes at once, by other processes' through the storage's
            # change feed (PostgreSQL) or else run_watch.
            await changes.wait(WATCH_IDLE_S)
            if last.expires_at is not None and self._clock() >= last.expires_at:
                return
            # Every change of a session writes an event: one cheap read says whether to look again.
            seq = await self._store.latest_event_seq(session_id)
            if seq == seen:
                continue
            seen = seq
            try:
                task = (await self.get(owner, task_id)).task
            except TaskNotFound:
                return
            if (task.status, task.status_message) != (last.status, last.status_message):
                await on_change(task)
            last = task

    async def run_watch(self, *, task_status: StartedStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Every `status_poll_s`, one read of the event numbers of every watched session: a
        session another process changed wakes its watchers (one query, however many tasks)."""
        task_status.started()
        seen: dict[SessionId, int] = {}
        while True:
            await anyio.sleep(self._settings.status_poll_s)
            watched = list(self._watched)
            if not watched or self._signals.live:
                # Nothing to watch, or the change feed wakes the watchers itself.
                seen.clear()
                continue
            try:
                current = await self._store.event_seqs(watched)
            except Exception:
                log_pass_failure(logger, "looking for changes of watched tasks")
                continue
            for session_id, seq in current.items():
                if seen.get(session_id, seq) != seq:
                    self._signals.notify(session_id)
            seen = current

    async def run_purge(self, *, task_status: StartedStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Delete expired tasks now and every `purge_interval_s`."""
        task_status.started()
        while True:
            try:
                purged = await self._store.purge_tasks(self._clock())
                if purged:
                    logger.info("deleted %d expired task(s)", purged)
            except Exception:
                log_pass_failure(logger, "purging expired tasks")
            await anyio.sleep(self._settings.purge_interval_s)

    # ------------------------------------------------------------------ deriving the state

    async def _refresh(self, record: TaskRecord) -> TaskState:
        if record.is_terminal:
            return TaskState(record, [])
        return await self._apply_state(record, await self._outcome(record))

    async def _outcome(self, record: TaskRecord) -> TurnOutcome | None:
        turn_id: TurnId | None = record.turn_id
        if turn_id is None and record.queued_message_id is not None and record.session_id is not None:
            queued = await self._store.get_queued(record.queued_message_id)
            if queued is not None and queued.status == "dropped":
                return TurnOutcome(
                    session_id=record.session_id,
                    turn_id=None,
                    status="cancelled",
                    error="The message was dropped before a turn took it (deleted, or the session ended).",
                    queued_message_id=record.queued_message_id,
                )
            turn_id = queued.turn_id if queued is not None else None
        if turn_id is None:
            return None
        turn = await self._store.get_turn(turn_id)
        return (
            await self._service.reads.turn_outcome(turn, record.queued_message_id)
            if turn is not None
            else None
        )

    async def _apply_state(self, record: TaskRecord, outcome: TurnOutcome | None) -> TaskState:
        status: TaskStatus
        result = None
        pending: list[InterruptRecord] = []
        if outcome is None or outcome.status == "running":
            status = "working"
            message = (
                f"Turn {outcome.turn_id} is running."
                if outcome is not None and outcome.turn_id
                else "The message waits for the turn that runs now to end."
            )
        elif outcome.status == "waiting_for_input":
            status, pending = "input_required", outcome.pending
            message = _waiting_message(outcome)
        elif outcome.status == "idle":
            status, result = "completed", self._render(outcome)
            message = "The session was created; it is idle."
        else:
            status, result = "completed", self._render(outcome)
            message = f"Turn {outcome.turn_id} ended: {outcome.status}."
        turn_id = outcome.turn_id if outcome is not None else None
        if (status, message, turn_id or record.turn_id) == (
            record.status,
            record.status_message,
            record.turn_id,
        ):
            return TaskState(record, pending)
        updated = await self._store.update_task(
            record.id,
            status=status,
            status_message=message,
            turn_id=turn_id,
            result=result,
            now=self._clock(),
        )
        if updated is None:
            raise TaskNotFound(record.id)
        return TaskState(updated, pending if updated.status == "input_required" else [])


def _first_text(result: dict[str, Any]) -> str | None:
    for item in result.get("content") or []:
        if isinstance(item, dict) and item.get("type") == "text":
            return str(item.get("text"))[:500]
    return None


def _deadline_of(task: TaskRecord, now: float) -> float:
    """The end of a task's life on anyio's clock (an elicitation is not kept open past it)."""
    left = (task.expires_at - now) if task.expires_at is not None else 86_400.0
    return anyio.current_time() + max(left, 0.0)


def _waiting_message(outcome: TurnOutcome) -> str:
    parts = []
    for interrupt in outcome.pending:
        if interrupt.kind == "approval":
            parts.append(f"approval of {interrupt.payload.get('tool')} ({interrupt.id})")
        else:
            parts.append(f"an answer to {str(interrupt.payload.get('question'))[:200]!r} ({interrupt.id})")
    return (
        f"Turn {outcome.turn_id} waits for " + " and ".join(parts) + ". Answer through this task, or call "
        f"approve / answer_question with session_id {outcome.session_id} and the id."
    )
