"""The contract every `Store` backend keeps, run against each backend on a real database.

Add a backend by adding a `_Backend` subclass to `BACKENDS`; every test then runs on it.
Time is passed explicitly (`now`), so lease expiry is tested without sleeping. PostgreSQL runs
on the server PARLEY_TEST_POSTGRES names (see tests/postgres_support.py), in a schema of this
module's own, emptied before each test.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from parley.core.changes import CURRENT_TURN, Changes, NewEvent, NewMessage, SessionSnapshot, SnapshotScope
from parley.core.ids import (
    QueuedMessageId,
    SessionId,
    TurnId,
    new_interrupt_id,
    new_session_id,
    new_tool_call_id,
    new_turn_id,
)
from parley.core.records import (
    AgentVersionRecord,
    InterruptRecord,
    ModelStep,
    NewToolCall,
    QueuedMessageRecord,
    Resolution,
    SessionRecord,
    TaskRecord,
    TurnRecord,
    TurnStatus,
    lease_token,
)
from parley.core.transitions import TurnEnd, starting
from parley.core.turn_steps import start_turn
from parley.errors import LeaseLost, StorageError
from parley.runtime.session_steps import SessionSteps
from parley.storage.ports import Store
from parley.storage.postgres import open_postgres_store
from parley.storage.schema import LATEST, steps
from parley.storage.sqlite import open_sqlite_store
from tests.postgres_support import PgSchema
from tests.store_support import enqueue, list_steps, steer_pending, try_acquire_lease
from tests.support import TEST_DEADLINE_S

pytestmark = pytest.mark.anyio

T0 = 1_000_000.0
TTL = 30.0
PROC_A = "proc_a"
PROC_B = "proc_b"
# The token of the first holding of a session\'s lease by each (what every write names).
LEASE_A = lease_token(PROC_A, 1)
LEASE_B = lease_token(PROC_B, 1)


# ---------------------------------------------------------------------------- backends


class _Backend:
    """One database, opened as many times as a test needs (each open is like another process)."""

    # The schema versions a new database records (schema.steps), and how messages name it.
    versions: tuple[int, ...] = ()
    label = ""

    def open(self) -> AbstractAsyncContextManager[Store]:
        raise NotImplementedError

    def schema_versions(self) -> list[int]:
        raise NotImplementedError

    def set_schema_version(self, version: int) -> None:
        raise NotImplementedError


class _SqliteBackend(_Backend):
    versions = tuple(version for version, _ in steps("sqlite"))

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self.path = tmp_path / "x.db"
        self.label = str(self.path)

    def open(self) -> AbstractAsyncContextManager[Store]:
        return open_sqlite_store(self.path)

    def schema_versions(self) -> list[int]:
        with sqlite3.connect(self.path, timeout=TEST_DEADLINE_S) as conn:
            return [row[0] for row in conn.execute("SELECT version FROM schema_version ORDER BY version")]

    def set_schema_version(self, version: int) -> None:
        with sqlite3.connect(self.path, timeout=TEST_DEADLINE_S) as conn:
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))


class _PostgresBackend(_Backend):
    versions = tuple(version for version, _ in steps("postgres"))

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        # One schema for the module (made once, by the first open), emptied for each test.
        self.schema: PgSchema = request.getfixturevalue("pg_schema")
        self.schema.reset()
        self.label = self.schema.label

    def open(self) -> AbstractAsyncContextManager[Store]:
        return open_postgres_store(self.schema.url, schema=self.schema.schema, pool_size=4)

    def schema_versions(self) -> list[int]:
        return [row[0] for row in self.schema.rows("SELECT version FROM schema_version ORDER BY version")]

    def set_schema_version(self, version: int) -> None:
        self.schema.rows("INSERT INTO schema_version (version) VALUES (%s)", (version,))


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], _Backend]] = {
    "sqlite": _SqliteBackend,
    "postgres": _PostgresBackend,
}
_BACKEND_KEY = pytest.StashKey[_Backend]()


@pytest.fixture(params=list(BACKENDS))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    backend = BACKENDS[request.param](request, tmp_path)
    request.node.stash[_BACKEND_KEY] = backend
    async with backend.open() as opened:
        yield opened


@pytest.fixture
def backend(request: pytest.FixtureRequest, store: Store) -> _Backend:
    """The database behind `store`, to open it again or inspect it."""
    backend: _Backend = request.node.stash[_BACKEND_KEY]
    return backend


@pytest.fixture
async def other_store(backend: _Backend) -> AsyncIterator[Store]:
    """A second, independent connection to the same database: another parley process."""
    async with backend.open() as opened:
        yield opened


# ---------------------------------------------------------------------------- builders


async def _finish(
    store: Store,
    sid: SessionId,
    lease: str,
    turn_id: TurnId,
    status: TurnStatus,
    answer: str | None,
    error: str | None,
    now: float,
    **end: Any,
) -> None:
    """End a turn the way the driver does: the rule in core/transitions.py, written by the store."""
    await SessionSteps(store).finish_turn(
        sid, lease, turn_id, TurnEnd(status=status, answer=answer, error=error, **end), now
    )


def session_record(
    *, owner: str = "alice", agent: str = "demo", sid: SessionId | None = None
) -> SessionRecord:
    return SessionRecord.new(sid or new_session_id(), agent=agent, owner=owner, kind="chat", now=T0)


def queued(session_id: SessionId, text: str, now: float = T0) -> QueuedMessageRecord:
    return QueuedMessageRecord.new(session_id, text, now=now)


async def new_session(
    store: Store,
    first: str | None = None,
    *,
    owner: str = "alice",
    agent: str = "demo",
    now: float = T0,
) -> SessionId:
    record = session_record(owner=owner, agent=agent)
    message = queued(record.id, first, now) if first is not None else None
    await store.create_session(starting(record, message), message, now)
    return record.id


async def running_turn(
    store: Store, first: str = "hello", *, owner: str = PROC_A
) -> tuple[SessionId, TurnRecord]:
    """A session whose first turn has started under the first holding of its lease by `owner`."""
    sid = await new_session(store, first)
    lease = await try_acquire_lease(store, sid, owner, T0, TTL)
    assert lease == lease_token(owner, 1)
    turn = await SessionSteps(store).start_turn(sid, lease, new_turn_id(), T0 + 1)
    assert turn is not None
    return sid, turn


def model_step(turn_id: TurnId, step_no: int, *calls: str, text: str = "thinking") -> ModelStep:
    new_calls = [
        NewToolCall(id=new_tool_call_id(), call_index=i, name=name, arguments={"i": i}, effect="read")
        for i, name in enumerate(calls)
    ]
    assistant: dict[str, Any] = {"text": text}
    if new_calls:
        assistant["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in new_calls]
    return ModelStep(
        turn_id=turn_id,
        step_no=step_no,
        assistant=assistant,
        tool_calls=new_calls,
        input_tokens=10,
        output_tokens=5,
    )


async def snapshot(store: Store, sid: SessionId, turn_id: TurnId | None = None) -> dict[str, Any]:
    """Everything a write could change, to compare before and after a refused write."""
    session = await store.get_session(sid)
    return {
        "session": session,
        "messages": await store.list_messages(sid, None, None),
        "steps": await list_steps(store, sid),
        "events": await store.list_events(sid, 0, 10_000),
        "queued": await store.list_queued(sid),
        "turns": await store.list_turns(sid),
        "calls": await store.list_tool_calls(turn_id) if turn_id is not None else [],
    }


async def status_of(store: Store, sid: SessionId) -> tuple[str, str | None]:
    session = await store.get_session(sid)
    assert session is not None
    return session.status, session.phase


# ---------------------------------------------------------------------------- schema


async def test_opening_the_same_database_again_migrates_nothing_and_keeps_the_data(
    store: Store, backend: _Backend
) -> None:
    sid = await new_session(store, "kept")
    assert backend.schema_versions() == list(backend.versions)
    async with backend.open() as again:
        assert await again.get_session(sid) is not None
        assert [q.text for q in await again.list_queued(sid)] == ["kept"]
    async with backend.open():
        pass
    assert backend.schema_versions() == list(backend.versions)


async def test_a_database_from_a_newer_parley_is_refused_naming_both_schema_versions(
    store: Store, backend: _Backend
) -> None:
    newer = LATEST + 41
    backend.set_schema_version(newer)
    with pytest.raises(StorageError) as refused:
        async with backend.open():
            pytest.fail("a database with a newer schema was opened")
    message = str(refused.value)
    assert "\n" not in message, message
    numbers = re.findall(r"\d+", message.replace(backend.label, "<db>"))
    assert str(newer) in numbers, message
    assert str(LATEST) in numbers, message
    assert backend.schema_versions()[-1] == newer  # the refused open changed nothing


# ---------------------------------------------------------------------------- sessions and queue


async def test_a_session_created_without_a_message_is_idle_with_nothing_queued(store: Store) -> None:
    sid = await new_session(store, owner="alice", agent="helper")
    session = await store.get_session(sid)
    assert session is not None
    assert (session.status, session.phase) == ("idle", None)
    assert (session.owner, session.agent, session.kind) == ("alice", "helper", "chat")
    assert session.created_at == T0
    assert session.current_turn_id is None
    assert session.turn_count == 0
    assert session.lease_owner is None
    assert await store.list_queued(sid) == []
    assert await store.count_messages(sid) == 0


async def test_a_session_created_with_a_first_message_is_running_with_the_message_queued(
    store: Store,
) -> None:
    record = session_record()
    first = queued(record.id, "hi there")
    await store.create_session(starting(record, first), first, T0)
    assert await status_of(store, record.id) == ("running", "queued")
    pending = await store.list_queued(record.id)
    assert [(q.id, q.text, q.status, q.turn_id) for q in pending] == [(first.id, "hi there", "queued", None)]
    stored = await store.get_queued(first.id)
    assert stored is not None and stored.session_id == record.id
    # Queued is not yet part of the transcript: the user message is appended when its turn starts.
    assert await store.count_messages(record.id) == 0
    kinds = [e.kind for e in await store.list_events(record.id, 0, 100)]
    assert kinds == ["session_created", "message_queued"]


async def test_enqueue_on_an_idle_session_queues_the_message_and_makes_the_session_running(
    store: Store,
) -> None:
    sid = await new_session(store)
    message = queued(sid, "wake up")
    assert await enqueue(SessionSteps(store), sid, "alice", message, 10, T0 + 1) == "queued"
    assert await status_of(store, sid) == ("running", "queued")
    assert [q.id for q in await store.list_queued(sid)] == [message.id]


async def test_enqueue_for_another_owner_or_an_unknown_session_is_not_found_and_queues_nothing(
    store: Store,
) -> None:
    sid = await new_session(store, owner="alice")
    assert await enqueue(SessionSteps(store), sid, "mallory", queued(sid, "x"), 10, T0) == "not_found"
    unknown = new_session_id()
    assert await enqueue(SessionSteps(store), unknown, "alice", queued(unknown, "x"), 10, T0) == "not_found"
    assert await store.list_queued(sid) == []
    assert await status_of(store, sid) == ("idle", None)


async def test_enqueue_on_a_closed_session_is_refused_as_closed(store: Store) -> None:
    sid = await new_session(store)
    await SessionSteps(store).request_close(sid, "alice", "done with it", T0 + 1)
    assert await enqueue(SessionSteps(store), sid, "alice", queued(sid, "too late"), 10, T0 + 2) == "closed"
    assert await store.list_queued(sid) == []
    assert await status_of(store, sid) == ("closed", None)


async def test_enqueue_is_refused_once_turns_taken_plus_messages_queued_reach_the_limit(store: Store) -> None:
    sid = await new_session(store, "one")
    assert await enqueue(SessionSteps(store), sid, "alice", queued(sid, "two"), 2, T0) == "queued"
    assert await enqueue(SessionSteps(store), sid, "alice", queued(sid, "three"), 2, T0) == "turn_limit"
    assert await try_acquire_lease(store, sid, PROC_A, T0, TTL)
    assert await SessionSteps(store).start_turn(sid, LEASE_A, new_turn_id(), T0) is not None
    # One turn taken and one message queued still fill both allowed turns.
    assert await enqueue(SessionSteps(store), sid, "alice", queued(sid, "four"), 2, T0) == "turn_limit"
    assert [q.text for q in await store.list_queued(sid)] == ["two"]


async def test_request_cancel_marks_the_running_turn_and_returns_its_id(store: Store) -> None:
    sid, turn = await running_turn(store)
    assert await SessionSteps(store).request_cancel(sid, "mallory", T0, new_turn_id()) is None
    assert await SessionSteps(store).request_cancel(sid, "alice", T0 + 2, new_turn_id()) == turn.id
    session = await store.get_session(sid)
    assert session is not None and session.cancel_requested_turn == turn.id
    idle = await new_session(store)
    assert await SessionSteps(store).request_cancel(idle, "alice", T0, new_turn_id()) is None
    assert await store.list_turns(idle) == []


async def test_request_cancel_before_a_queued_message_starts_records_it_as_a_cancelled_turn(
    store: Store,
) -> None:
    sid = await new_session(store, "never mind")
    turn_id = new_turn_id()
    assert await SessionSteps(store).request_cancel(sid, "alice", T0 + 1, turn_id) == turn_id
    [turn] = await store.list_turns(sid)
    assert (turn.id, turn.seq, turn.status) == (turn_id, 1, "cancelled")
    assert [(m.role, m.content) for m in await store.list_messages(sid, None, None)] == [
        ("user", {"text": "never mind"})
    ]
    assert await store.list_queued(sid) == []
    assert await status_of(store, sid) == ("idle", None)


async def test_a_second_start_with_an_owners_client_message_id_is_refused_and_writes_nothing(
    store: Store,
) -> None:
    first = replace(session_record(owner="alice"), start_client_message_id="start-1")
    message = queued(first.id, "hello")
    assert await store.create_session(starting(first, message), message, T0)
    again = replace(session_record(owner="alice"), start_client_message_id="start-1")
    assert not await store.create_session(again, queued(again.id, "hello"), T0 + 1)
    assert await store.get_session(again.id) is None
    assert await store.list_events(again.id, 0, 10) == []
    found = await store.find_started("alice", "start-1")
    assert found is not None and found.id == first.id
    assert await store.find_started("alice", "start-2") is None
    # Client message ids are the owner's own: someone else may use the same one.
    bobs = replace(session_record(owner="bob"), start_client_message_id="start-1")
    assert await store.create_session(bobs, None, T0 + 2)
    assert await store.find_started("bob", "start-1") is not None
    # The same session id twice is refused as well.
    assert not await store.create_session(session_record(sid=first.id), None, T0 + 3)
    session = await store.get_session(first.id)
    assert session is not None and session.created_at == T0


async def test_a_message_sent_with_a_client_message_id_is_found_by_it_and_not_queued_twice(
    store: Store,
) -> None:
    sid = await new_session(store, "first")
    message = replace(queued(sid, "once"), client_message_id="send-1")
    assert await enqueue(SessionSteps(store), sid, "alice", message, 10, T0 + 1) == "queued"
    again = replace(queued(sid, "once"), client_message_id="send-1")
    assert await enqueue(SessionSteps(store), sid, "alice", again, 10, T0 + 2) == "duplicate"
    found = await store.find_sent(sid, "send-1")
    assert found is not None and (found.id, found.text, found.status) == (message.id, "once", "queued")
    assert await store.find_sent(sid, "send-2") is None
    assert await store.find_sent(await new_session(store), "send-1") is None
    first = await store.first_message(sid)
    assert first is not None and first.text == "first"
    assert [q.text for q in await store.list_queued(sid)] == ["first", "once"]


async def test_messages_events_and_the_queue_are_numbered_per_session_from_one_without_gaps(
    store: Store,
) -> None:
    a = await new_session(store, "a1")
    b = await new_session(store)
    for text in ("a2", "a3"):
        assert await enqueue(SessionSteps(store), a, "alice", queued(a, text), 10, T0) == "queued"
    assert await enqueue(SessionSteps(store), b, "alice", queued(b, "b1"), 10, T0) == "queued"
    assert [q.seq for q in await store.list_queued(a)] == [1, 2, 3]
    assert [q.seq for q in await store.list_queued(b)] == [1]
    await store.record_event(a, None, "progress", {"n": 1}, T0 + 1)

    events = await store.list_events(a, 0, 100)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].kind == "progress" and events[-1].data == {"n": 1}
    assert [e.seq for e in await store.list_events(a, 2, 2)] == [3, 4]
    assert await store.latest_event_seq(a) == len(events)
    b_events = await store.list_events(b, 0, 100)
    unknown = new_session_id()
    assert await store.latest_event_seq(unknown) == 0
    assert await store.event_seqs([a, b, unknown]) == {a: len(events), b: len(b_events)}

    assert await try_acquire_lease(store, a, PROC_A, T0, TTL)
    for step_no in (1, 2):
        turn = await SessionSteps(store).start_turn(a, LEASE_A, new_turn_id(), T0 + step_no)
        assert turn is not None
        await SessionSteps(store).commit_model_step(a, LEASE_A, model_step(turn.id, 1), T0 + step_no)
        await _finish(store, a, LEASE_A, turn.id, "answered", "ok", None, T0 + step_no)
    messages = await store.list_messages(a, None, None)
    assert [(m.seq, m.role) for m in messages] == [
        (1, "user"),
        (2, "assistant"),
        (3, "user"),
        (4, "assistant"),
    ]
    assert [m.seq for m in await store.list_messages(a, 2, 2)] == [2, 3]
    assert await store.count_messages(a) == 4
    assert await store.list_messages(b, None, None) == []


async def test_an_event_for_a_session_that_does_not_exist_is_refused(store: Store) -> None:
    with pytest.raises(StorageError):
        await store.record_event(new_session_id(), None, "progress", {}, T0)


async def test_a_record_read_from_the_store_is_the_callers_own_copy(store: Store) -> None:
    sid, turn = await running_turn(store)
    todos = [{"content": "plan", "status": "pending"}]
    step = model_step(turn.id, 1, "write_todos")
    await SessionSteps(store).commit_model_step(sid, LEASE_A, step, T0 + 2)
    call_id = step.tool_calls[0].id
    await SessionSteps(store).commit_tool_result(
        sid, LEASE_A, call_id, "succeeded", {"text": "saved"}, T0 + 3, todos=todos
    )
    todos[0]["status"] = "changed by the caller after the write"
    session = await store.get_session(sid)
    assert session is not None and session.todos == [{"content": "plan", "status": "pending"}]
    session.todos.append({"content": "changed by a reader"})
    [call] = await store.list_tool_calls(turn.id)
    assert call.result is not None
    call.result["text"] = "changed by a reader"
    call.arguments.clear()
    [message] = [m for m in await store.list_messages(sid, None, None) if m.role == "assistant"]
    message.content.clear()

    again = await store.get_session(sid)
    assert again is not None and again.todos == [{"content": "plan", "status": "pending"}]
    [call] = await store.list_tool_calls(turn.id)
    assert (call.result, call.arguments) == ({"text": "saved"}, {"i": 0})
    [message] = [m for m in await store.list_messages(sid, None, None) if m.role == "assistant"]
    assert message.content == step.assistant


async def test_a_queued_message_is_read_with_its_session_as_one_read_saw_them(store: Store) -> None:
    sid = await new_session(store, "one")
    first_id = (await store.list_queued(sid))[0].id
    assert await try_acquire_lease(store, sid, PROC_A, T0, TTL)
    waiting, session = await store.get_queued_with_session(first_id, sid)
    assert waiting is not None and (waiting.status, waiting.turn_id) == ("queued", None)
    assert session is not None and (session.status, session.current_turn_id) == ("running", None)
    turn = await SessionSteps(store).start_turn(sid, LEASE_A, new_turn_id(), T0 + 1)
    assert turn is not None
    taken, session = await store.get_queued_with_session(first_id, sid)
    assert taken is not None and (taken.status, taken.turn_id) == ("consumed", turn.id)
    assert session is not None and (session.status, session.current_turn_id) == ("running", turn.id)
    unknown = await store.get_queued_with_session(QueuedMessageId("qm_unknown"), SessionId("ses_unknown"))
    assert unknown == (None, None)


# ---------------------------------------------------------------------------- turns


async def test_start_turn_takes_queued_messages_oldest_first_and_appends_the_user_message(
    store: Store,
) -> None:
    sid = await new_session(store, "one")
    for text in ("two", "three"):
        assert await enqueue(SessionSteps(store), sid, "alice", queued(sid, text), 10, T0) == "queued"
    first_id = (await store.list_queued(sid))[0].id
    assert await try_acquire_lease(store, sid, PROC_A, T0, TTL)

    turn_id = new_turn_id()
    turn = await SessionSteps(store).start_turn(sid, LEASE_A, turn_id, T0 + 1)
    assert turn is not None
    assert (turn.id, turn.seq, turn.status, turn.queued_message_id) == (turn_id, 1, "running", first_id)
    assert turn.started_at == T0 + 1 and turn.ended_at is None and turn.model_calls == 0
    messages = await store.list_messages(sid, None, None)
    assert [(m.seq, m.role, m.content, m.turn_id) for m in messages] == [
        (1, "user", {"text": "one"}, turn_id)
    ]
    consumed = await store.get_queued(first_id)
    assert consumed is not None and (consumed.status, consumed.turn_id) == ("consumed", turn_id)
    assert [q.text for q in await store.list_queued(sid)] == ["two", "three"]
    session = await store.get_session(sid)
    assert session is not None
    assert (
        session.status,
        session.phase,
        session.current_turn_id,
        session.last_turn_id,
        session.turn_count,
    ) == (
        "running",
        "model",
        turn_id,
        turn_id,
        1,
    )

    await _finish(store, sid, LEASE_A, turn_id, "answered", "ok", None, T0 + 2)
    second = await SessionSteps(store).start_turn(sid, LEASE_A, new_turn_id(), T0 + 3)
    assert second is not None and second.seq == 2
    assert [m.content["text"] for m in await store.list_messages(sid, None, None)] == ["one", "two"]
    assert [t.id for t in await store.list_turns(sid)] == [turn_id, second.id]


async def test_a_turn_that_ends_at_rest_lets_go_of_the_lease_in_the_same_write(store: Store) -> None:
    sid, turn = await running_turn(store)
    await _finish(store, sid, LEASE_A, turn.id, "answered", "ok", None, T0 + 2)
    session = await store.get_session(sid)
    assert session is not None
    assert (session.status, session.lease_owner, session.lease_expires_at) == ("idle", None, None)
    # Nothing more is written under the lease let go.
    with pytest.raises(LeaseLost):
        await SessionSteps(store).start_turn(sid, LEASE_A, new_turn_id(), T0 + 3)
    assert len(await store.list_turns(sid)) == 1


async def test_a_turn_that_ends_with_a_message_queued_keeps_the_lease_for_the_next(store: Store) -> None:
    sid, turn = await running_turn(store)
    steps = SessionSteps(store)
    assert await enqueue(steps, sid, "alice", queued(sid, "next"), 10, T0 + 2) == "queued"
    await _finish(store, sid, LEASE_A, turn.id, "answered", "ok", None, T0 + 3)
    session = await store.get_session(sid)
    assert session is not None and (session.status, session.lease_owner) == ("running", LEASE_A)
    following = await steps.start_turn(sid, LEASE_A, new_turn_id(), T0 + 4)
    assert following is not None and len(await store.list_turns(sid)) == 2


async def test_a_model_step_that_answers_ends_its_turn_and_lets_go_of_the_lease_in_one_write(
    store: Store,
) -> None:
    sid, turn = await running_turn(store)
    steps = SessionSteps(store)
    end = TurnEnd(status="answered", answer="the answer")
    step = model_step(turn.id, 1, text="the answer")
    with pytest.raises(LeaseLost):
        await steps.commit_answering_step(sid, lease_token(PROC_B, 1), step, end, T0 + 2)
    assert await steps.commit_answering_step(sid, LEASE_A, step, end, T0 + 2) == (True, "idle")
    session = await store.get_session(sid)
    assert session is not None
    assert (session.status, session.current_turn_id, session.lease_owner) == ("idle", None, None)
    [ended] = await store.list_turns(sid)
    assert (ended.status, ended.answer, ended.model_calls) == ("answered", "the answer", 1)
    assert [m.role for m in await store.list_messages(sid, None, None)] == ["user", "assistant"]
    kinds = [e.kind for e in await store.list_events(sid, 0, 100)]
    assert kinds[-2:] == ["model_step", "turn_ended"]
    with pytest.raises(LeaseLost):  # nothing more under the lease let go
        await steps.commit_model_step(sid, LEASE_A, model_step(turn.id, 2), T0 + 3)


async def test_a_model_step_asking_for_tools_leaves_its_turn_running(store: Store) -> None:
    sid, turn = await running_turn(store)
    end = TurnEnd(status="answered", answer="thinking")
    step = model_step(turn.id, 1, "read")
    assert await SessionSteps(store).commit_answering_step(sid, LEASE_A, step, end, T0 + 2) == (False, None)
    session = await store.get_session(sid)
    assert session is not None and (session.status, session.lease_owner) == ("running", LEASE_A)
    assert [c.status for c in await store.list_tool_calls(turn.id)] == ["pending"]


# ---------------------------------------------------------------------------- agent versions


def agent_version(version: str, instructions: str) -> AgentVersionRecord:
    # Text from people (a NUL, accents) in the definition, as in any other JSON value.
    definition = {
        "name": "demo",
        "instructions": instructions,
        "tools": ["ask_user"],
        "limits": {"max_turns": 3},
    }
    return AgentVersionRecord(agent="demo", version=version, definition=definition, created_at=T0)


async def test_a_turn_names_its_agent_version_and_the_definition_is_stored_with_it(
    store: Store, other_store: Store
) -> None:
    sid = await new_session(store, "one")
    await enqueue(SessionSteps(store), sid, "alice", queued(sid, "two"), 10, T0)
    assert await try_acquire_lease(store, sid, PROC_A, T0, TTL)
    first = agent_version("a1b2c3d4e5f60718", "Review.\u0000 Prüfe.")
    turn = await SessionSteps(store).start_turn(
        sid, LEASE_A, new_turn_id(), T0 + 1, first, store_version=True
    )
    assert turn is not None and turn.agent_version == first.version
    assert await other_store.get_agent_version("demo", first.version) == first
    assert [t.agent_version for t in await other_store.list_turns(sid)] == [first.version]
    await _finish(store, sid, LEASE_A, turn.id, "answered", "ok", None, T0 + 2)
    # The same hash again (another process, or a turn whose process knew it was stored): the first stays.
    again = replace(first, definition={"name": "changed"}, created_at=T0 + 5)
    second = await SessionSteps(store).start_turn(
        sid, LEASE_A, new_turn_id(), T0 + 3, again, store_version=True
    )
    assert second is not None and (await store.get_turn(second.id)) == second
    assert await other_store.get_agent_version("demo", first.version) == first
    assert await other_store.get_agent_version("demo", "ffffffffffffffff") is None
    assert await other_store.get_agent_version("other", first.version) is None


async def test_agent_versions_outlive_the_sessions_that_ran_on_them(store: Store) -> None:
    sid = await new_session(store, "one")
    assert await try_acquire_lease(store, sid, PROC_A, T0, TTL)
    version = agent_version("0123456789abcdef", "Plan.")
    turn = await SessionSteps(store).start_turn(
        sid, LEASE_A, new_turn_id(), T0 + 1, version, store_version=True
    )
    assert turn is not None
    await _finish(store, sid, LEASE_A, turn.id, "answered", "ok", None, T0 + 2)
    await store.release_lease(sid, LEASE_A)
    assert await store.delete_session(sid, T0 + 3) == "deleted"
    assert await store.get_agent_version("demo", version.version) == version


async def test_a_turn_started_without_a_version_names_none(store: Store) -> None:
    _, turn = await running_turn(store)
    assert turn.agent_version is None
    stored = await store.get_turn(turn.id)
    assert stored is not None and stored.agent_version is None


async def test_a_committed_model_step_stores_the_assistant_message_its_pending_calls_and_usage(
    store: Store,
) -> None:
    sid, turn = await running_turn(store)
    step = model_step(turn.id, 1, "alpha", "beta")
    await SessionSteps(store).commit_model_step(sid, LEASE_A, step, T0 + 2)

    messages = await store.list_messages(sid, None, None)
    assert [(m.role, m.content) for m in messages[1:]] == [("assistant", step.assistant)]
    calls = await store.list_tool_calls(turn.id)
    assert [(c.id, c.name, c.call_index, c.step_no, c.status, c.attempts) for c in calls] == [
        (step.tool_calls[0].id, "alpha", 0, 1, "pending", 0),
        (step.tool_calls[1].id, "beta", 1, 1, "pending", 0),
    ]
    assert [c.idempotency_key for c in calls] == [f"{sid}/{turn.id}/{c.id}" for c in calls]
    stored_turn = await store.get_turn(turn.id)
    assert stored_turn is not None
    assert (stored_turn.model_calls, stored_turn.input_tokens, stored_turn.output_tokens) == (1, 10, 5)
    session = await store.get_session(sid)
    assert session is not None
    assert (session.model_calls, session.input_tokens, session.output_tokens, session.phase) == (
        1,
        10,
        5,
        "tools",
    )
    steps = await list_steps(store, sid)
    assert [(s.turn_id, s.step_no, s.kind, s.process_id) for s in steps] == [(turn.id, 1, "model", PROC_A)]


async def test_a_tool_result_updates_the_call_appends_a_tool_message_and_saves_todos(store: Store) -> None:
    sid, turn = await running_turn(store)
    step = model_step(turn.id, 1, "write_todos")
    await SessionSteps(store).commit_model_step(sid, LEASE_A, step, T0 + 2)
    call_id = step.tool_calls[0].id
    await SessionSteps(store).mark_tool_call_started(sid, LEASE_A, call_id, T0 + 3)
    assert [(c.status, c.attempts) for c in await store.list_tool_calls(turn.id)] == [("running", 1)]
    todos = [{"content": "plan", "status": "pending"}]
    await SessionSteps(store).commit_tool_result(
        sid, LEASE_A, call_id, "succeeded", {"text": "saved", "is_error": False}, T0 + 4, todos=todos
    )
    [call] = await store.list_tool_calls(turn.id)
    assert (call.status, call.result) == ("succeeded", {"text": "saved", "is_error": False})
    last = (await store.list_messages(sid, None, None))[-1]
    assert last.role == "tool" and last.turn_id == turn.id
    assert last.content["tool_call_id"] == call_id and last.content["text"] == "saved"
    session = await store.get_session(sid)
    assert session is not None and session.todos == todos


async def test_the_same_model_step_cannot_be_committed_twice(store: Store) -> None:
    sid, turn = await running_turn(store)
    await SessionSteps(store).commit_model_step(
        sid, LEASE_A, model_step(turn.id, 1, "alpha", text="first"), T0 + 2
    )
    before = await snapshot(store, sid, turn.id)
    # A second process that made the same model call must not commit it again.
    with pytest.raises(LeaseLost):
        await SessionSteps(store).commit_model_step(
            sid, LEASE_A, model_step(turn.id, 1, "beta", text="second"), T0 + 3
        )
    assert await snapshot(store, sid, turn.id) == before
    await SessionSteps(store).commit_model_step(sid, LEASE_A, model_step(turn.id, 2, text="next"), T0 + 4)
    assert [s.step_no for s in await list_steps(store, sid)] == [1, 2]


async def test_finish_turn_cancels_unfinished_calls_and_sets_the_session_idle(store: Store) -> None:
    sid, turn = await running_turn(store)
    step = model_step(turn.id, 1, "done", "started", "waiting")
    await SessionSteps(store).commit_model_step(sid, LEASE_A, step, T0 + 2)
    done, started, waiting = (c.id for c in step.tool_calls)
    await SessionSteps(store).mark_tool_call_started(sid, LEASE_A, done, T0 + 3)
    await SessionSteps(store).commit_tool_result(sid, LEASE_A, done, "succeeded", {"text": "ok"}, T0 + 3)
    await SessionSteps(store).mark_tool_call_started(sid, LEASE_A, started, T0 + 3)

    await _finish(store, sid, LEASE_A, turn.id, "cancelled", None, None, T0 + 4)

    statuses = {c.id: c.status for c in await store.list_tool_calls(turn.id)}
    assert statuses == {done: "succeeded", started: "cancelled", waiting: "cancelled"}
    ended = await store.get_turn(turn.id)
    assert ended is not None and (ended.status, ended.ended_at) == ("cancelled", T0 + 4)
    session = await store.get_session(sid)
    assert session is not None
    assert (session.status, session.phase, session.current_turn_id, session.last_turn_id) == (
        "idle",
        None,
        None,
        turn.id,
    )


async def test_finish_turn_records_the_answer_and_the_error(store: Store) -> None:
    sid, turn = await running_turn(store)
    await _finish(store, sid, LEASE_A, turn.id, "failed", "partial", "it broke", T0 + 2)
    ended = await store.get_turn(turn.id)
    assert ended is not None and (ended.status, ended.answer, ended.error) == (
        "failed",
        "partial",
        "it broke",
    )
    session = await store.get_session(sid)
    assert session is not None and session.last_error == "it broke"


async def test_finish_turn_keeps_the_session_running_when_messages_are_queued(store: Store) -> None:
    sid, turn = await running_turn(store)
    assert await enqueue(SessionSteps(store), sid, "alice", queued(sid, "next"), 10, T0 + 2) == "queued"
    await _finish(store, sid, LEASE_A, turn.id, "answered", "ok", None, T0 + 3)
    assert await status_of(store, sid) == ("running", "queued")
    session = await store.get_session(sid)
    assert session is not None and session.current_turn_id is None
    assert [q.text for q in await store.list_queued(sid)] == ["next"]


async def test_finish_turn_closes_the_session_when_a_close_was_requested_during_the_turn(
    store: Store,
) -> None:
    sid, turn = await running_turn(store)
    assert await enqueue(SessionSteps(store), sid, "alice", queued(sid, "next"), 10, T0 + 2) == "queued"
    await SessionSteps(store).request_close(sid, "alice", "user is done", T0 + 3)
    session = await store.get_session(sid)
    assert session is not None
    assert (session.status, session.close_requested, session.cancel_requested_turn) == (
        "running",
        True,
        turn.id,
    )
    assert await store.list_queued(sid) == []

    await _finish(store, sid, LEASE_A, turn.id, "cancelled", None, None, T0 + 4)
    session = await store.get_session(sid)
    assert session is not None
    assert (session.status, session.phase, session.closed_reason, session.current_turn_id) == (
        "closed",
        None,
        "user is done",
        None,
    )


async def test_finish_turn_with_a_close_reason_closes_the_session_and_drops_queued_messages(
    store: Store,
) -> None:
    sid, turn = await running_turn(store)
    message = queued(sid, "never runs")
    assert await enqueue(SessionSteps(store), sid, "alice", message, 10, T0 + 2) == "queued"
    await _finish(store, sid, LEASE_A, turn.id, "answered", "ok", None, T0 + 3, close_reason="turn limit")
    session = await store.get_session(sid)
    assert session is not None and (session.status, session.closed_reason) == ("closed", "turn limit")
    assert await store.list_queued(sid) == []
    dropped = await store.get_queued(message.id)
    assert dropped is not None and dropped.status == "dropped"
    assert await enqueue(SessionSteps(store), sid, "alice", queued(sid, "more"), 10, T0 + 4) == "closed"


async def test_request_close_on_an_idle_session_closes_it_at_once(store: Store) -> None:
    sid = await new_session(store)
    await SessionSteps(store).request_close(sid, "mallory", "not yours", T0 + 1)
    assert await status_of(store, sid) == ("idle", None)
    await SessionSteps(store).request_close(sid, "alice", "finished", T0 + 2)
    session = await store.get_session(sid)
    assert session is not None and (session.status, session.closed_reason) == ("closed", "finished")
    assert "session_closed" in [e.kind for e in await store.list_events(sid, 0, 100)]
    await SessionSteps(store).request_close(sid, "alice", "again", T0 + 3)
    session = await store.get_session(sid)
    assert session is not None and session.closed_reason == "finished"


async def test_request_close_before_the_first_turn_drops_queued_messages_and_no_turn_starts(
    store: Store,
) -> None:
    sid = await new_session(store, "first")
    message = (await store.list_queued(sid))[0]
    await SessionSteps(store).request_close(sid, "alice", "changed my mind", T0 + 1)
    assert await store.list_queued(sid) == []
    dropped = await store.get_queued(message.id)
    assert dropped is not None and dropped.status == "dropped"
    assert await enqueue(SessionSteps(store), sid, "alice", queued(sid, "more"), 10, T0 + 2) == "closed"
    # Whoever drives the session next finds nothing to run and lets it close.
    assert await try_acquire_lease(store, sid, PROC_A, T0 + 2, TTL)
    assert await SessionSteps(store).start_turn(sid, LEASE_A, new_turn_id(), T0 + 2) is None
    assert await SessionSteps(store).rest_session(sid, LEASE_A, T0 + 3)
    session = await store.get_session(sid)
    assert session is not None and (session.status, session.closed_reason) == ("closed", "changed my mind")
    assert await store.list_turns(sid) == []


async def test_rest_session_sets_a_session_without_work_idle_and_refuses_while_work_remains(
    store: Store,
) -> None:
    sid = await new_session(store, "one")
    assert await try_acquire_lease(store, sid, PROC_A, T0, TTL)
    assert not await SessionSteps(store).rest_session(sid, LEASE_A, T0 + 1)  # a message is queued
    turn = await SessionSteps(store).start_turn(sid, LEASE_A, new_turn_id(), T0 + 1)
    assert turn is not None
    assert not await SessionSteps(store).rest_session(sid, LEASE_A, T0 + 2)  # a turn runs
    await _finish(store, sid, LEASE_A, turn.id, "answered", "ok", None, T0 + 3)
    # The turn's end rested the session itself (and let go of the lease: nothing left to rest).
    assert await status_of(store, sid) == ("idle", None)


async def test_rest_session_never_reopens_a_session_that_was_closed_meanwhile(store: Store) -> None:
    sid = await new_session(store, "hello")
    assert await try_acquire_lease(store, sid, PROC_A, T0, TTL)
    # The driver saw a queued message; before it starts the turn the caller cancels that message
    # (the session rests) and then closes the session, which closes it at once.
    assert await SessionSteps(store).request_cancel(sid, "alice", T0 + 1, new_turn_id()) is not None
    await SessionSteps(store).request_close(sid, "alice", "all done", T0 + 2)
    assert await status_of(store, sid) == ("closed", None)
    # The driver carries on: nothing to start, so it lets the session rest.
    assert await SessionSteps(store).start_turn(sid, LEASE_A, new_turn_id(), T0 + 3) is None
    assert await SessionSteps(store).rest_session(sid, LEASE_A, T0 + 4)
    session = await store.get_session(sid)
    assert session is not None and (session.status, session.closed_reason) == ("closed", "all done")


# ---------------------------------------------------------------------------- leases


async def test_a_lease_held_by_one_process_blocks_another_until_it_expires(
    store: Store, other_store: Store
) -> None:
    sid = await new_session(store, "work")
    first = await try_acquire_lease(store, sid, PROC_A, T0, TTL)
    assert first == lease_token(PROC_A, 1)
    assert not await try_acquire_lease(other_store, sid, PROC_B, T0 + 1, TTL)
    assert not await try_acquire_lease(other_store, sid, PROC_B, T0 + TTL - 0.001, TTL)
    # The holder may take its own lease again, which extends it under a new token: a write of
    # the earlier holding (a stale task of the same process) is refused from now on.
    second = await try_acquire_lease(store, sid, PROC_A, T0 + 10, TTL)
    assert second == lease_token(PROC_A, 2)
    with pytest.raises(LeaseLost):
        await store.renew_lease(sid, first, T0 + 11, TTL)
    with pytest.raises(LeaseLost):
        await SessionSteps(store).start_turn(sid, first, new_turn_id(), T0 + 11)
    assert not await try_acquire_lease(other_store, sid, PROC_B, T0 + TTL + 1, TTL)
    third = await try_acquire_lease(other_store, sid, PROC_B, T0 + 10 + TTL + 1, TTL)
    assert third == lease_token(PROC_B, 3), "the epoch counts the holdings of the session, by anyone"
    session = await store.get_session(sid)
    assert session is not None
    assert (session.lease_owner, session.lease_expires_at) == (third, T0 + 10 + TTL + 1 + TTL)
    with pytest.raises(LeaseLost):
        await store.renew_lease(sid, second, T0 + 50, TTL)


async def test_several_leases_are_taken_at_once_skipping_sessions_held_or_at_rest(
    store: Store, other_store: Store
) -> None:
    free, held, resting, mine = (
        await new_session(store, "work"),
        await new_session(store, "work"),
        await new_session(store),
        await new_session(store, "work"),
    )
    assert await try_acquire_lease(other_store, held, PROC_B, T0, TTL)
    earlier = await try_acquire_lease(store, mine, PROC_A, T0, TTL)
    missing = SessionId("ses_" + "9" * 32)
    taken = await store.try_acquire_leases([free, held, resting, mine, missing], PROC_A, T0 + 1, TTL)
    assert taken == {free: lease_token(PROC_A, 1), mine: lease_token(PROC_A, 2)}
    assert earlier == lease_token(PROC_A, 1), "a process takes its own lease again under a new token"
    held_row = await store.get_session(held)
    assert held_row is not None and held_row.lease_owner == lease_token(PROC_B, 1)
    assert await store.try_acquire_leases([], PROC_A, T0, TTL) == {}


async def test_a_claim_starts_the_turn_in_its_transaction_and_reads_back_the_first_step(
    store: Store, other_store: Store
) -> None:
    step_view = SnapshotScope(interrupts=False)
    sid = await new_session(store, "work")
    turn_id = new_turn_id()
    decided: list[SessionSnapshot] = []

    def start(snapshot: SessionSnapshot) -> tuple[TurnRecord | None, Changes]:
        decided.append(snapshot)
        return start_turn(snapshot, turn_id, T0 + 1)

    claimed = await store.claim_and_decide(
        sid, PROC_A, T0 + 1, TTL, step_view, start, lambda _: replace(step_view, messages_from=0)
    )
    assert claimed is not None and claimed.lease == lease_token(PROC_A, 1)
    # The decision saw the claim: the lease is taken and the message still queued.
    (seen_by_decision,) = decided
    assert seen_by_decision.session.lease_owner == claimed.lease
    assert [q.text for q in seen_by_decision.queued] == ["work"]
    assert claimed.value is not None and claimed.value.id == turn_id
    after = claimed.snapshot
    assert after is not None and after.session.current_turn_id == turn_id and after.queued == ()
    assert [(m.role, m.content) for m in after.messages] == [("user", {"text": "work"})]
    assert after == await other_store.snapshot(sid, replace(step_view, messages_from=0))


async def test_a_claim_whose_decision_changes_nothing_reads_the_session_as_claimed(
    store: Store, other_store: Store
) -> None:
    step_view = SnapshotScope(interrupts=False)
    sid = await new_session(store, "work")
    claimed = await store.claim_and_decide(
        sid, PROC_A, T0, TTL, step_view, lambda s: ("nothing", Changes()), lambda _: CURRENT_TURN
    )
    assert claimed is not None and claimed.value == "nothing"
    seen = claimed.snapshot
    assert seen is not None and seen.session.lease_owner == claimed.lease == lease_token(PROC_A, 1)
    assert [q.text for q in seen.queued] == ["work"]
    assert seen == await other_store.snapshot(sid, step_view)


async def test_a_refused_claim_decides_nothing_and_writes_nothing(store: Store, other_store: Store) -> None:
    step_view = SnapshotScope(interrupts=False)
    held, resting = await new_session(store, "work"), await new_session(store)
    assert await try_acquire_lease(other_store, held, PROC_B, T0, TTL)
    before = await store.snapshot(held, step_view)

    def never(snapshot: SessionSnapshot) -> tuple[None, Changes]:
        raise AssertionError("a refused claim decides nothing")

    assert (
        await store.claim_and_decide(held, PROC_A, T0 + 1, TTL, step_view, never, lambda _: step_view) is None
    )
    assert (
        await store.claim_and_decide(resting, PROC_A, T0, TTL, step_view, never, lambda _: step_view) is None
    )
    assert await store.snapshot(held, step_view) == before
    resting_row = await store.get_session(resting)
    assert resting_row is not None and resting_row.lease_owner is None


async def test_only_a_running_session_can_be_leased(store: Store) -> None:
    sid = await new_session(store)
    assert not await try_acquire_lease(store, sid, PROC_A, T0, TTL)
    session = await store.get_session(sid)
    assert session is not None and session.lease_owner is None


async def test_renew_lease_extends_the_holders_lease_and_raises_lease_lost_for_anyone_else(
    store: Store, other_store: Store
) -> None:
    sid = await new_session(store, "work")
    assert await try_acquire_lease(store, sid, PROC_A, T0, TTL)
    renewed = await store.renew_lease(sid, LEASE_A, T0 + 5, TTL)
    assert (renewed.id, renewed.lease_owner, renewed.lease_expires_at) == (sid, LEASE_A, T0 + 5 + TTL)
    with pytest.raises(LeaseLost):
        await other_store.renew_lease(sid, LEASE_B, T0 + 6, TTL)
    session = await store.get_session(sid)
    assert session is not None and (session.lease_owner, session.lease_expires_at) == (LEASE_A, T0 + 5 + TTL)


async def test_release_lease_frees_the_session_only_for_its_holder(store: Store, other_store: Store) -> None:
    sid = await new_session(store, "work")
    assert await try_acquire_lease(store, sid, PROC_A, T0, TTL)
    await other_store.release_lease(sid, LEASE_B)
    assert not await try_acquire_lease(other_store, sid, PROC_B, T0 + 1, TTL)
    await store.release_lease(sid, LEASE_A)
    assert await try_acquire_lease(other_store, sid, PROC_B, T0 + 1, TTL)


_LeaseWrite = Callable[[Store, SessionId, TurnRecord, str], Awaitable[object]]


async def _write_start_turn(store: Store, sid: SessionId, turn: TurnRecord, lease: str) -> object:
    return await SessionSteps(store).start_turn(sid, lease, new_turn_id(), T0 + 100)


async def _write_model_step(store: Store, sid: SessionId, turn: TurnRecord, lease: str) -> object:
    await SessionSteps(store).commit_model_step(sid, lease, model_step(turn.id, 2, "gamma"), T0 + 100)
    return None


async def _write_finish_turn(store: Store, sid: SessionId, turn: TurnRecord, lease: str) -> object:
    await _finish(store, sid, lease, turn.id, "answered", "stolen", None, T0 + 100)
    return None


async def _write_tool_started(store: Store, sid: SessionId, turn: TurnRecord, lease: str) -> object:
    pending = [c for c in await store.list_tool_calls(turn.id) if c.status == "pending"]
    await SessionSteps(store).mark_tool_call_started(sid, lease, pending[0].id, T0 + 100)
    return None


async def _write_tool_result(store: Store, sid: SessionId, turn: TurnRecord, lease: str) -> object:
    pending = [c for c in await store.list_tool_calls(turn.id) if c.status == "pending"]
    await SessionSteps(store).commit_tool_result(
        sid, lease, pending[0].id, "succeeded", {"text": "x"}, T0 + 100, todos=[]
    )
    return None


async def _write_rest(store: Store, sid: SessionId, turn: TurnRecord, lease: str) -> object:
    return await SessionSteps(store).rest_session(sid, lease, T0 + 100)


LEASE_WRITES: dict[str, _LeaseWrite] = {
    "start_turn": _write_start_turn,
    "commit_model_step": _write_model_step,
    "finish_turn": _write_finish_turn,
    "mark_tool_call_started": _write_tool_started,
    "commit_tool_result": _write_tool_result,
    "rest_session": _write_rest,
}


@pytest.mark.parametrize("write", list(LEASE_WRITES))
async def test_a_lease_checked_write_by_a_process_that_lost_the_lease_raises_and_writes_nothing(
    store: Store, other_store: Store, write: str
) -> None:
    sid, turn = await running_turn(store, owner=PROC_A)
    await SessionSteps(store).commit_model_step(sid, LEASE_A, model_step(turn.id, 1, "alpha"), T0 + 2)
    assert (
        await enqueue(SessionSteps(store), sid, "alice", queued(sid, "queued next"), 10, T0 + 3) == "queued"
    )
    # LEASE_A stalls past its lease; LEASE_B takes the session over.
    assert await try_acquire_lease(other_store, sid, PROC_B, T0 + TTL + 1, TTL)
    before = await snapshot(store, sid, turn.id)

    with pytest.raises(LeaseLost):
        await LEASE_WRITES[write](store, sid, turn, LEASE_A)
    with pytest.raises(LeaseLost):
        await LEASE_WRITES[write](other_store, sid, turn, "proc_never_held_it")

    assert await snapshot(store, sid, turn.id) == before
    assert await snapshot(other_store, sid, turn.id) == before


async def test_count_leases_counts_the_sessions_whose_lease_a_process_holds_now(
    store: Store, other_store: Store
) -> None:
    held = await new_session(store, "held")
    lapsed = await new_session(store, "lapsed")
    theirs = await new_session(store, "theirs")
    assert await try_acquire_lease(store, held, PROC_A, T0 + 20, TTL)
    assert await try_acquire_lease(store, lapsed, PROC_A, T0, TTL)
    assert await try_acquire_lease(other_store, theirs, PROC_B, T0 + 20, TTL)
    assert await store.count_leases(PROC_A, T0 + 10) == 2
    assert await store.count_leases(PROC_A, T0 + TTL + 1) == 1  # the lease on `lapsed` ran out
    assert await other_store.count_leases(PROC_B, T0 + TTL + 1) == 1
    assert await store.count_leases("proc_none", T0) == 0


async def test_database_counts_count_sessions_queue_leases_and_the_trace_context_is_kept(
    store: Store,
) -> None:
    sid, _ = await running_turn(store)
    waiting = await new_session(store, "waiting for a driver")  # its first message queued
    traced = replace(
        queued(sid, "later"), trace_context={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}
    )
    assert await enqueue(SessionSteps(store), sid, "alice", traced, 10, T0 + 2) == "queued"
    counts = await store.database_counts(T0 + 2)
    assert counts.queued_messages == 2
    assert counts.leases == 1
    assert counts.sessions == {"running": 2}
    assert counts.tasks == {}
    assert await store.get_session(waiting) is not None
    [stored] = [q for q in await store.list_queued(sid) if q.id == traced.id]
    assert stored.trace_context == traced.trace_context


async def test_steer_pending_tells_whether_a_queued_message_steers_the_running_turn(store: Store) -> None:
    sid, _ = await running_turn(store)
    assert not await steer_pending(store, sid)
    assert await enqueue(SessionSteps(store), sid, "alice", queued(sid, "later"), 10, T0 + 2) == "queued"
    assert not await steer_pending(store, sid)
    steer = replace(queued(sid, "now"), steer=True)
    assert await enqueue(SessionSteps(store), sid, "alice", steer, 10, T0 + 3) == "queued"
    assert await steer_pending(store, sid)
    [stored] = [q for q in await store.list_queued(sid) if q.id == steer.id]
    assert stored.steer is True


# ---------------------------------------------------------------------------- reads


@pytest.mark.parametrize(("count", "limit", "pages"), [(7, 3, 3), (6, 3, 2), (1, 1, 1), (0, 5, 1)])
async def test_list_sessions_pages_through_every_session_once_newest_first(
    store: Store, count: int, limit: int, pages: int
) -> None:
    created: list[tuple[float, SessionId]] = []
    for i in range(count):
        # Pairs share a creation time, so the cursor must break ties.
        now = T0 + i // 2
        created.append((now, await new_session(store, owner="alice", now=now)))
    await new_session(store, owner="bob", now=T0 + 100)
    expected = [sid for _, sid in sorted(created, reverse=True)]

    seen: list[SessionId] = []
    cursor: str | None = None
    fetched = 0
    while True:
        page = await store.list_sessions("alice", None, None, cursor, limit)
        fetched += 1
        assert len(page.sessions) <= limit
        seen.extend(s.id for s in page.sessions)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
        assert fetched <= count, "paging does not end"
    assert seen == expected
    assert fetched == pages


async def test_list_sessions_filters_by_owner_status_and_agent(store: Store) -> None:
    idle_demo = await new_session(store, agent="demo", now=T0 + 1)
    busy_demo = await new_session(store, "go", agent="demo", now=T0 + 2)
    idle_helper = await new_session(store, agent="helper", now=T0 + 3)
    bobs = await new_session(store, owner="bob", agent="demo", now=T0 + 4)

    async def ids(owner: str, status: str | None, agent: str | None) -> list[SessionId]:
        page = await store.list_sessions(owner, status, agent, None, 50)
        assert page.next_cursor is None
        return [s.id for s in page.sessions]

    assert await ids("alice", None, None) == [idle_helper, busy_demo, idle_demo]
    assert await ids("alice", "idle", None) == [idle_helper, idle_demo]
    assert await ids("alice", None, "demo") == [busy_demo, idle_demo]
    assert await ids("alice", "running", "demo") == [busy_demo]
    assert await ids("alice", "closed", None) == []
    assert await ids("bob", None, None) == [bobs]
    assert await ids("carol", None, None) == []


async def test_sessions_needing_work_are_running_sessions_whose_lease_is_free_or_expired(
    store: Store,
) -> None:
    idle = await new_session(store)
    free = await new_session(store, "free")
    held = await new_session(store, "held")
    expired = await new_session(store, "expired")
    closed = await new_session(store)
    await SessionSteps(store).request_close(closed, "alice", "bye", T0)
    assert await try_acquire_lease(store, held, PROC_A, T0 + 50, TTL)
    assert await try_acquire_lease(store, expired, PROC_A, T0, TTL)

    now = T0 + 60  # the lease on `expired` ran out at T0 + 30; `held` lasts until T0 + 80
    found = await store.sessions_needing_work(now, 100)
    assert sorted(found) == sorted([free, expired])
    assert idle not in found and held not in found and closed not in found
    assert len(await store.sessions_needing_work(now, 1)) == 1
    await store.release_lease(held, LEASE_A)
    assert held in await store.sessions_needing_work(now, 100)


# ---------------------------------------------------------------------------- the step port


def _writing(changes: Changes) -> Callable[[SessionSnapshot | None], tuple[SessionSnapshot | None, Changes]]:
    """A decision that writes `changes` and returns the snapshot it was made on."""
    return lambda snapshot: (snapshot, changes)


async def test_a_decision_on_a_session_that_does_not_exist_gets_no_snapshot_and_writes_nothing(
    store: Store,
) -> None:
    sid = new_session_id()
    seen = await store.decide(sid, CURRENT_TURN, _writing(Changes(session={"phase": "model"})), T0)
    assert seen is None
    assert await store.get_session(sid) is None


async def test_a_decisions_changes_are_written_together_for_every_process(
    store: Store, other_store: Store
) -> None:
    sid = await new_session(store, "hello")
    [waiting] = await store.list_queued(sid)
    changes = Changes(
        session={"phase": "model", "todos": [{"content": "x"}]},
        queued={waiting.id: {"status": "consumed"}},
        messages=[NewMessage(None, "user", {"text": "hello"})],
        events=[NewEvent(None, "progress", {"n": 1})],
    )
    seen = await store.decide(sid, CURRENT_TURN, _writing(changes), T0 + 5)
    assert seen is not None
    assert seen.session.id == sid and [q.id for q in seen.queued] == [waiting.id]
    session = await other_store.get_session(sid)
    assert session is not None
    assert (session.phase, session.todos, session.updated_at) == ("model", [{"content": "x"}], T0 + 5)
    assert await other_store.list_queued(sid) == []
    assert [(m.seq, m.content) for m in await other_store.list_messages(sid, None, None)] == [
        (1, {"text": "hello"})
    ]
    assert (await other_store.list_events(sid, 0, 100))[-1].kind == "progress"


async def test_a_decision_that_raises_writes_nothing_and_takes_no_numbers(store: Store) -> None:
    sid = await new_session(store, "hello")
    before = await snapshot(store, sid)

    def decide_badly(snapshot: SessionSnapshot | None) -> tuple[None, Changes]:
        raise RuntimeError("decided badly")

    with pytest.raises(RuntimeError, match="decided badly"):
        await store.decide(sid, CURRENT_TURN, decide_badly, T0 + 5)
    assert await snapshot(store, sid) == before
    kept = Changes(messages=[NewMessage(None, "user", {"text": "kept"})])
    await store.decide(sid, CURRENT_TURN, _writing(kept), T0 + 6)
    assert [m.seq for m in await store.list_messages(sid, None, None)] == [1]
    assert [q.seq for q in await store.list_queued(sid)] == [1]


async def test_a_change_to_a_field_no_record_has_is_refused_and_writes_nothing(store: Store) -> None:
    sid = await new_session(store, "hello")
    before = await snapshot(store, sid)
    bad = Changes(
        session={"no_such_field": 1},  # type: ignore[typeddict-unknown-key]  # the point of the test
        new_queued=[queued(sid, "never stored")],
        messages=[NewMessage(None, "user", {"text": "never appended"})],
        events=[NewEvent(None, "progress", {})],
    )
    with pytest.raises(StorageError, match="no_such_field"):
        await store.decide(sid, CURRENT_TURN, _writing(bad), T0 + 5)
    assert await snapshot(store, sid) == before
    kept = Changes(messages=[NewMessage(None, "user", {"text": "kept"})], new_queued=[queued(sid, "next")])
    await store.decide(sid, CURRENT_TURN, _writing(kept), T0 + 6)
    assert [m.seq for m in await store.list_messages(sid, None, None)] == [1]
    assert [q.seq for q in await store.list_queued(sid)] == [1, 2]


async def test_a_decision_that_looks_after_sees_what_a_look_right_after_sees(
    store: Store, other_store: Store
) -> None:
    step_view = SnapshotScope(interrupts=False)  # what the driver reads before each step
    sid = await new_session(store, "hello")
    lease = await try_acquire_lease(store, sid, PROC_A, T0, TTL)
    assert lease is not None
    turn, after = await SessionSteps(store).start_turn_and_look(
        sid, lease, new_turn_id(), T0 + 1, look=step_view
    )
    assert turn is not None and after is not None
    assert after.session.current_turn_id == turn.id and after.turn is not None and after.turn.id == turn.id
    assert after.queued == ()  # the message the turn took
    assert after == await other_store.snapshot(sid, step_view)
    # The transcript from a sequence number on, read with it: the message the turn took.
    transcript_view = SnapshotScope(interrupts=False, messages_from=1)
    _, with_messages = await store.decide_then_look(
        sid, CURRENT_TURN, _writing(Changes()), T0 + 2, transcript_view
    )
    assert with_messages is not None
    assert [(m.seq, m.role, m.content) for m in with_messages.messages] == [(1, "user", {"text": "hello"})]
    assert list(with_messages.messages) == await other_store.list_messages(sid, 1, None)
    # A decision that writes nothing still looks; a session that does not exist is not looked at.
    value, same = await store.decide_then_look(sid, CURRENT_TURN, _writing(Changes()), T0 + 2, step_view)
    assert value is not None and same == after
    missing = new_session_id()
    assert await store.decide_then_look(missing, CURRENT_TURN, _writing(Changes()), T0, step_view) == (
        None,
        None,
    )


async def test_a_settled_look_reads_the_session_alone_while_it_runs_the_turn_and_everything_after(
    store: Store,
) -> None:
    sid, turn = await running_turn(store)
    step = model_step(turn.id, 1, "lookup")
    await SessionSteps(store).commit_model_step(sid, LEASE_A, step, T0 + 2)
    settled = SnapshotScope(turn_id=turn.id, queue=False, settled=True)
    running = await store.snapshot(sid, settled)
    assert running is not None and running.session.current_turn_id == turn.id
    assert (running.turn, running.calls, running.interrupts) == (None, (), ())
    await _finish(store, sid, LEASE_A, turn.id, "answered", "done", None, T0 + 3)
    ended = await store.snapshot(sid, settled)
    assert ended == await store.snapshot(sid, SnapshotScope(turn_id=turn.id, queue=False))
    assert ended is not None and ended.turn is not None and ended.turn.status == "answered"
    assert [c.name for c in ended.calls] == ["lookup"]


# ---------------------------------------------------------------------------- interrupts


async def _pending_approval(store: Store, sid: SessionId, turn: TurnRecord, now: float) -> InterruptRecord:
    step = model_step(turn.id, 1, "deploy")
    await SessionSteps(store).commit_model_step(sid, LEASE_A, step, now)
    interrupt = InterruptRecord(
        id=new_interrupt_id(),
        session_id=sid,
        turn_id=turn.id,
        tool_call_id=step.tool_calls[0].id,
        kind="approval",
        status="pending",
        payload={"tool": "deploy", "arguments": {"i": 0}},
        created_at=now,
        deadline=now + 600,
    )
    await SessionSteps(store).raise_interrupt(sid, LEASE_A, interrupt, now)
    return interrupt


async def test_interrupts_are_listed_per_session_and_pending_ones_across_sessions_oldest_first(
    store: Store, other_store: Store
) -> None:
    first_sid, first_turn = await running_turn(store)
    second_sid, second_turn = await running_turn(store)
    later = await _pending_approval(store, first_sid, first_turn, T0 + 20)
    earlier = await _pending_approval(store, second_sid, second_turn, T0 + 10)
    [stored] = await store.list_interrupts(first_sid, pending_only=True)
    assert (stored.id, stored.kind, stored.status, stored.payload, stored.deadline) == (
        later.id,
        "approval",
        "pending",
        {"tool": "deploy", "arguments": {"i": 0}},
        T0 + 620,
    )
    assert [i.id for i in await store.list_all_pending(10)] == [earlier.id, later.id]
    assert [i.id for i in await store.list_all_pending(1)] == [earlier.id]

    decided = await SessionSteps(other_store).resolve_interrupt(
        first_sid, later.id, Resolution(approved=True), "alice", T0 + 30
    )
    assert decided.outcome == "resolved"
    again = await SessionSteps(store).resolve_interrupt(
        first_sid, later.id, Resolution(approved=False), "bob", T0 + 31
    )
    assert again.outcome == "conflict"
    assert await store.list_interrupts(first_sid, pending_only=True) == []
    [resolved] = await store.list_interrupts(first_sid, pending_only=False)
    assert (resolved.status, resolved.resolved_by, resolved.resolved_at) == ("approved", "alice", T0 + 30)
    assert [i.id for i in await other_store.list_all_pending(10)] == [earlier.id]


# ---------------------------------------------------------------------------- summaries


async def test_the_latest_summary_is_the_one_up_to_the_highest_message_and_needs_the_lease(
    store: Store, other_store: Store
) -> None:
    sid, turn = await running_turn(store)
    assert await store.latest_summary(sid) is None
    await store.save_summary(sid, LEASE_A, turn.id, 4, "up to four", T0 + 2)
    await store.save_summary(sid, LEASE_A, turn.id, 9, "up to nine", T0 + 3)
    await store.save_summary(sid, LEASE_A, turn.id, 4, "up to four, again", T0 + 4)
    assert await other_store.latest_summary(sid) == (9, "up to nine")
    assert (await store.list_events(sid, 0, 100))[-1].kind == "compacted"
    before = await snapshot(store, sid, turn.id)
    with pytest.raises(LeaseLost):
        await other_store.save_summary(sid, LEASE_B, turn.id, 12, "not the holder's", T0 + 5)
    assert await store.latest_summary(sid) == (9, "up to nine")
    assert await snapshot(store, sid, turn.id) == before


# ---------------------------------------------------------------------------- MCP tasks


def _task(task_id: str, *, owner: str = "local", created_at: float = T0, ttl_s: float = 60.0) -> TaskRecord:
    return TaskRecord(
        id=task_id,
        owner=owner,
        generation="2025-11-25",
        tool="send_message",
        session_id=None,
        queued_message_id=None,
        turn_id=None,
        status="working",
        status_message=None,
        result=None,
        ttl_ms=int(ttl_s * 1000),
        poll_interval_ms=1000,
        created_at=created_at,
        updated_at=created_at,
        expires_at=created_at + ttl_s,
    )


async def test_a_task_changes_while_open_and_its_first_end_is_final(store: Store) -> None:
    await store.create_task(_task("task_a"))
    working = await store.update_task(
        "task_a",
        status="input_required",
        status_message="waits",
        turn_id=TurnId("turn_1"),
        result=None,
        now=T0 + 1,
    )
    assert working is not None and working.status == "input_required" and working.turn_id == "turn_1"
    done = await store.update_task(
        "task_a", status="completed", status_message="done", turn_id=None, result={"content": []}, now=T0 + 2
    )
    assert done is not None and done.status == "completed" and done.result == {"content": []}
    assert done.turn_id == "turn_1" and done.updated_at == T0 + 2
    later = await store.update_task(
        "task_a", status="cancelled", status_message="too late", turn_id=None, result=None, now=T0 + 3
    )
    assert later == done
    assert await store.get_task("task_a", T0 + 3) == done


async def test_an_expired_task_is_gone_and_purged(store: Store) -> None:
    await store.create_task(_task("task_old", ttl_s=10))
    await store.create_task(_task("task_new", ttl_s=100))
    assert await store.get_task("task_old", T0 + 5) is not None
    assert await store.get_task("task_old", T0 + 10) is None
    assert await store.purge_tasks(T0 + 50) == 1
    assert await store.get_task("task_new", T0 + 50) is not None
    assert [t.id for t in (await store.list_tasks("local", None, 10, T0 + 50)).tasks] == ["task_new"]


async def test_list_tasks_pages_through_the_owners_live_tasks_once_oldest_first(store: Store) -> None:
    for i in range(7):
        await store.create_task(_task(f"task_{i}", created_at=T0 + (i // 2)))
    await store.create_task(_task("task_other", owner="someone else"))
    seen: list[str] = []
    cursor = None
    while True:
        page = await store.list_tasks("local", cursor, 3, T0 + 5)
        seen += [t.id for t in page.tasks]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [f"task_{i}" for i in range(7)]


# ---------------------------------------------------------------------------- the SQLite file
# These open SQLite files themselves (the race of two processes creating one, a lock held by
# another process), so they run once, on SQLite only.


async def test_two_processes_opening_a_fresh_database_at_once_both_succeed(tmp_path: Path) -> None:
    # Every desktop client window starts its own server on the same default file. The race is
    # narrow, so it is tried on many fresh files; the first failure ends the test.
    for attempt in range(100):
        path = tmp_path / f"fresh{attempt}.db"
        failures: list[BaseException] = []

        async def open_once(path: Path = path, failures: list[BaseException] = failures) -> None:
            try:
                async with open_sqlite_store(path) as opened:
                    assert await opened.get_session(SessionId("ses_none")) is None
            except (StorageError, sqlite3.Error) as exc:
                failures.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(open_once)
            tg.start_soon(open_once)
        assert failures == [], f"attempt {attempt}: {failures[0]!r}"
        with sqlite3.connect(path) as conn:
            versions = [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY version")]
        assert versions == list(range(1, LATEST + 1))


async def test_a_write_cancelled_while_waiting_for_the_lock_leaves_the_database_unlocked(
    tmp_path: Path,
) -> None:
    path = tmp_path / "locked.db"
    async with open_sqlite_store(path) as store:
        session = await _one_running_session(store)
        # Another process holds the write lock, as a busy peer would.
        blocker = sqlite3.connect(
            path, timeout=TEST_DEADLINE_S, isolation_level=None, check_same_thread=False
        )
        blocker.execute("BEGIN IMMEDIATE")
        waiting = anyio.CancelScope(deadline=anyio.current_time() + 0.1)
        cancelled = anyio.Event()

        async def peer() -> None:
            # The peer holds the lock until the write has been cancelled, however slow the machine.
            await cancelled.wait()
            blocker.execute("ROLLBACK")

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(peer)
                with waiting:
                    await try_acquire_lease(store, session, "proc-a", 1000.0, 10.0)
                cancelled.set()
            assert waiting.cancelled_caught, "the write went through while the peer held the lock"
        finally:
            blocker.close()
        # The cancelled write must not have left this connection inside a transaction.
        assert await try_acquire_lease(store, session, "proc-a", 1000.0, 10.0)
        other = sqlite3.connect(path, timeout=TEST_DEADLINE_S, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        finally:
            other.close()


async def _one_running_session(store: Store) -> SessionId:
    sid = new_session_id()
    record = SessionRecord.new(sid, agent="demo", owner="local", kind="chat", now=1.0)
    first = QueuedMessageRecord.new(sid, "hi", now=1.0)
    assert await store.create_session(starting(record, first), first, 1.0)
    return sid
