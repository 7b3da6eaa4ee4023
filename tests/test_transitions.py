"""The rules of core/transitions.py as tables: given a snapshot and an event, the changes.

Pure functions, no store: each row builds the smallest snapshot that shows one rule."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from parley.core import transitions, turn_steps
from parley.core.changes import Changes, SessionSnapshot
from parley.core.ids import QueuedMessageId, SessionId, ToolCallId, TurnId
from parley.core.machine import FinishTurn
from parley.core.records import (
    InterruptRecord,
    ModelStep,
    QueuedMessageRecord,
    Resolution,
    SessionRecord,
    ToolCallRecord,
    TurnRecord,
)
from parley.core.states import SessionStatus
from parley.core.transitions import TurnEnd

NOW = 1000.0
SID = SessionId("ses_" + "1" * 32)
TID = TurnId("turn_1")
CALL = ToolCallId("call_1")


def session(**fields: Any) -> SessionRecord:
    base = SessionRecord.new(SID, agent="a", owner="alice", kind="chat", now=0.0)
    return replace(base, **{"status": "running", "current_turn_id": TID, **fields})


def turn() -> TurnRecord:
    return TurnRecord(
        id=TID,
        session_id=SID,
        seq=1,
        status="running",
        queued_message_id=None,
        started_at=0.0,
        ended_at=None,
        answer=None,
        error=None,
        model_calls=1,
        input_tokens=0,
        output_tokens=0,
    )


def call(
    status: str = "pending_approval", effect: str = "non_idempotent_write", **fields: Any
) -> ToolCallRecord:
    return ToolCallRecord(
        id=fields.pop("id", CALL),
        session_id=SID,
        turn_id=TID,
        step_no=1,
        call_index=0,
        name="write",
        arguments={},
        status=status,  # type: ignore[arg-type]
        effect=effect,
        result=None,
        attempts=0,
        idempotency_key="k",
        created_at=0.0,
        updated_at=0.0,
        **fields,
    )


def result_text(changes: Changes) -> Any:
    """The text of the result `changes` give the call CALL."""
    result = changes.calls[CALL]["result"]
    assert result is not None, "the call has no result"
    return result["text"]


def interrupt(kind: str = "approval", status: str = "pending", **fields: Any) -> InterruptRecord:
    return InterruptRecord(
        id=fields.pop("id", "int_1"),
        session_id=SID,
        turn_id=TID,
        tool_call_id=fields.pop("tool_call_id", CALL),
        kind=kind,  # type: ignore[arg-type]
        status=status,  # type: ignore[arg-type]
        payload=fields.pop("payload", {}),
        created_at=0.0,
        **fields,
    )


def queued(n: int = 1) -> tuple[QueuedMessageRecord, ...]:
    return tuple(
        QueuedMessageRecord(
            id=QueuedMessageId(f"qm_{i}"),
            session_id=SID,
            seq=i,
            text="next",
            status="queued",
            turn_id=None,
            created_at=0.0,
        )
        for i in range(n)
    )


def snap(
    *, calls: tuple[ToolCallRecord, ...] = (), interrupts: tuple[InterruptRecord, ...] = (), **s: Any
) -> SessionSnapshot:
    queue = s.pop("queue", ())
    return SessionSnapshot(
        session=session(**s), turn=turn(), calls=calls, interrupts=interrupts, queued=queue
    )


def event_kinds(changes: Changes) -> list[str]:
    return [e.kind for e in changes.events]


# ---------------------------------------------------------------------- resolving an interrupt

APPROVE = Resolution(approved=True)
REJECT = Resolution(approved=False, reason="too risky")


def resolve(
    snapshot: SessionSnapshot, resolution: Resolution, owner: str | None = "alice"
) -> tuple[str, Changes]:
    result, changes = transitions.resolve_interrupt(snapshot, "int_1", resolution, "caller", NOW, owner)
    return result.outcome, changes


def test_an_approval_makes_the_call_ready_to_run_and_wakes_a_waiting_session() -> None:
    outcome, changes = resolve(
        snap(calls=(call(),), interrupts=(interrupt(),), status="waiting_for_input"), APPROVE
    )
    assert outcome == "resolved"
    assert changes.calls[CALL] == {"status": "pending", "decision": "approved"}
    assert changes.interrupts["int_1"]["status"] == "approved"
    assert changes.session == {"status": "running", "wake_at": None}
    assert not changes.messages, "an approved call has no result yet"
    assert event_kinds(changes) == ["interrupt_resolved"]


def test_a_rejection_ends_the_call_and_tells_the_model_why() -> None:
    outcome, changes = resolve(snap(calls=(call(),), interrupts=(interrupt(),)), REJECT)
    assert outcome == "resolved"
    assert changes.calls[CALL]["status"] == "rejected"
    assert result_text(changes) == "A person declined this call: too risky. It was not run."
    (message,) = changes.messages
    assert message.role == "tool" and message.content["status"] == "rejected"


@pytest.mark.parametrize(
    ("first", "second", "outcome"),
    [
        (APPROVE, APPROVE, "already_resolved"),
        (APPROVE, REJECT, "conflict"),
        (REJECT, APPROVE, "conflict"),
        (REJECT, Resolution(approved=False), "already_resolved"),
        (Resolution(expired=True), APPROVE, "conflict"),
    ],
)
def test_the_first_decision_wins(first: Resolution, second: Resolution, outcome: str) -> None:
    _, changes = resolve(snap(calls=(call(),), interrupts=(interrupt(),)), first)
    decided = interrupt(
        status=changes.interrupts["int_1"]["status"], resolution=changes.interrupts["int_1"]["resolution"]
    )
    again, nothing = resolve(snap(calls=(call(),), interrupts=(decided,)), second)
    assert again == outcome
    assert nothing.is_empty(), "a decision after the first changes nothing"


@pytest.mark.parametrize(
    ("record", "resolution", "owner", "outcome"),
    [
        (interrupt(), APPROVE, "mallory", "not_found"),
        (interrupt(id="int_other"), APPROVE, "alice", "not_found"),
        (interrupt(kind="question"), APPROVE, "alice", "wrong_kind"),
        (interrupt(), Resolution(answer="yes"), "alice", "wrong_kind"),
        (interrupt(status="cancelled"), APPROVE, "alice", "not_pending"),
    ],
)
def test_refused_decisions_change_nothing(
    record: InterruptRecord, resolution: Resolution, owner: str, outcome: str
) -> None:
    got, changes = resolve(snap(calls=(call(),), interrupts=(record,)), resolution, owner)
    assert got == outcome and changes.is_empty()


@pytest.mark.parametrize(
    ("resolution", "status", "text"),
    [
        (Resolution(answer="blue"), "answered", "The user answered: blue"),
        (Resolution(declined=True), "declined", "The user declined to answer."),
        (Resolution(expired=True), "expired", "The question was not answered before its deadline."),
    ],
)
def test_a_question_is_answered_declined_or_expires(resolution: Resolution, status: str, text: str) -> None:
    ask = call(status="pending_approval", effect="idempotent_write")
    _, changes = resolve(snap(calls=(ask,), interrupts=(interrupt(kind="question"),)), resolution)
    assert changes.interrupts["int_1"]["status"] == status
    assert changes.calls[CALL]["status"] == "succeeded"
    assert result_text(changes) == text


def test_an_expired_approval_is_not_run() -> None:
    _, changes = resolve(snap(calls=(call(),), interrupts=(interrupt(),)), Resolution(expired=True))
    assert changes.calls[CALL]["status"] == "rejected"
    assert "deadline" in result_text(changes)


def test_a_servers_questions_send_the_call_back_once_all_are_answered() -> None:
    retry = {"downstream": {"mode": "retry"}}
    waiting = call(status="awaiting_answer")
    first = interrupt(kind="question", payload=retry)
    second = interrupt(kind="question", payload=retry, id="int_2")
    _, changes = resolve(snap(calls=(waiting,), interrupts=(first, second)), Resolution(answer="a"))
    assert CALL not in changes.calls, "another question of the call is still open"
    _, changes = resolve(
        snap(calls=(waiting,), interrupts=(first, replace(second, status="answered"))), Resolution(answer="a")
    )
    assert changes.calls[CALL] == {"status": "pending"}


def test_a_question_asked_in_place_leaves_the_open_call_alone() -> None:
    in_place = interrupt(kind="question", payload={"downstream": {"mode": "in_place"}})
    _, changes = resolve(
        snap(calls=(call(status="running"),), interrupts=(in_place,)), Resolution(answer="a")
    )
    assert changes.calls == {} and changes.interrupts["int_1"]["status"] == "answered"


# ---------------------------------------------------------------------- parking a turn

PARKING = [
    # calls, interrupts -> parked?, session status, wake_at
    ((call(),), (interrupt(deadline=50.0),), True, "waiting_for_input", 50.0),
    ((call(status="waiting_for_timer", wake_at=30.0),), (), True, "running", 30.0),
    (
        (
            call(status="waiting_for_task", wake_at=40.0),
            call(id="c2", status="waiting_for_timer", wake_at=20.0),
        ),
        (),
        True,
        "running",
        20.0,
    ),
    ((call(), call(id="c2", status="pending")), (interrupt(),), False, None, None),
    ((call(status="running"),), (), False, None, None),
    ((call(status="succeeded"),), (), False, None, None),
]


@pytest.mark.parametrize(("calls", "interrupts", "parked", "status", "wake_at"), PARKING)
def test_a_turn_parks_only_when_nothing_can_run_and_something_waits(
    calls: tuple[ToolCallRecord, ...],
    interrupts: tuple[InterruptRecord, ...],
    parked: bool,
    status: str | None,
    wake_at: float | None,
) -> None:
    changes = transitions.park_turn(snap(calls=calls, interrupts=interrupts))
    if not parked:
        assert changes is None
        return
    assert changes is not None
    assert changes.session["status"] == status and changes.session["wake_at"] == wake_at
    assert changes.session["phase"] == (None if status == "waiting_for_input" else "waiting")


# ---------------------------------------------------------------------- finishing a turn


@pytest.mark.parametrize(
    ("status", "effect", "ended"),
    [
        ("pending", "non_idempotent_write", "cancelled"),
        ("pending_approval", "read", "cancelled"),
        ("waiting_for_timer", "idempotent_write", "cancelled"),
        ("waiting_for_task", "read", "cancelled"),
        ("waiting_for_task", "idempotent_write", "outcome_unknown"),
        ("waiting_for_task", "non_idempotent_write", "outcome_unknown"),
    ],
)
def test_an_ending_turn_settles_the_calls_it_leaves_behind_by_their_effect(
    status: str, effect: str, ended: str
) -> None:
    changes = transitions.finish_turn(
        snap(calls=(call(status=status, effect=effect),)), TurnEnd(status="cancelled"), NOW
    )
    assert changes.calls[CALL] == {"status": ended}


def test_finished_calls_stay_as_they_are_and_pending_interrupts_are_cancelled() -> None:
    snapshot = snap(calls=(call(status="succeeded"),), interrupts=(interrupt(),))
    changes = transitions.finish_turn(snapshot, TurnEnd(status="cancelled"), NOW)
    assert changes.calls == {}
    assert changes.interrupts["int_1"] == {
        "status": "cancelled",
        "resolved_at": NOW,
        "resolved_by": "turn_end",
    }


ENDINGS = [
    # snapshot fields, end -> session status, queue dropped?, closing event
    ({}, TurnEnd(status="answered", answer="hi"), "idle", False, None),
    ({"queue": queued(2)}, TurnEnd(status="answered"), "running", False, None),
    (
        {"queue": queued(1), "close_requested": True},
        TurnEnd(status="cancelled"),
        "closed",
        True,
        "session_closed",
    ),
    (
        {"queue": queued(1)},
        TurnEnd(status="answered", close_reason="turn limit"),
        "closed",
        True,
        "session_closed",
    ),
    (
        {"queue": queued(1), "kind": "task"},
        TurnEnd(status="completed", result={"x": 1}, session_status="completed"),
        "completed",
        True,
        "session_completed",
    ),
    (
        {"kind": "task"},
        TurnEnd(status="failed", error="no", session_status="failed"),
        "failed",
        False,
        "session_failed",
    ),
]


@pytest.mark.parametrize(("fields", "end", "status", "dropped", "closing"), ENDINGS)
def test_after_its_turn_a_session_rests_runs_on_closes_or_ends(
    fields: dict[str, Any], end: TurnEnd, status: str, dropped: bool, closing: str | None
) -> None:
    snapshot = snap(**fields)
    changes = transitions.finish_turn(snapshot, end, NOW)
    assert changes.session["status"] == status
    assert changes.session["current_turn_id"] is None
    assert changes.turn["status"] == end.status and changes.turn["ended_at"] == NOW
    assert bool(changes.queued) == dropped
    assert all(v == {"status": "dropped"} for v in changes.queued.values())
    assert event_kinds(changes)[0] == "turn_ended"
    assert event_kinds(changes)[1:2] == ([closing] if closing else [])


@pytest.mark.parametrize(
    ("kind", "turn_count", "status", "limit", "close_reason", "session_status"),
    [
        # A chat session rests after an answer, or closes once it used its turns.
        ("chat", 3, "answered", None, None, None),
        ("chat", 10, "answered", None, "reached the limit of 10 turns per session", None),
        # A session-level limit closes a chat session, but a task session only fails.
        ("chat", 3, "failed", "token limit", "token limit", None),
        ("task", 3, "failed", "token limit", None, "failed"),
        # A task session ends with its turn when the turn completes or fails, not otherwise.
        ("task", 3, "completed", None, None, "completed"),
        ("task", 3, "failed", None, None, "failed"),
        ("task", 3, "cancelled", None, None, None),
        ("task", 10, "completed", None, None, "completed"),
    ],
)
def test_how_a_turn_ends_decides_what_its_session_becomes(
    kind: str,
    turn_count: int,
    status: Any,
    limit: str | None,
    close_reason: str | None,
    session_status: str | None,
) -> None:
    action = FinishTurn(status, "the answer", "an error" if status == "failed" else None)
    end = transitions.turn_end(
        session(kind=kind, turn_count=turn_count), action, limit_reason=limit, max_turns=10
    )
    assert (end.close_reason, end.session_status) == (close_reason, session_status)
    assert (end.status, end.answer, end.error) == (action.status, action.answer, action.error)


def test_a_failed_turn_records_its_error_and_a_task_result_is_kept() -> None:
    changes = transitions.finish_turn(snap(), TurnEnd(status="failed", error="boom"), NOW)
    assert changes.session["last_error"] == "boom" and changes.turn["error"] == "boom"
    # The next turn that answers clears the session's error.
    answered = transitions.finish_turn(snap(), TurnEnd(status="answered", answer="fine"), NOW)
    assert answered.session["last_error"] is None
    done = transitions.finish_turn(
        snap(kind="task"), TurnEnd(status="completed", result={"r": 1}, session_status="completed"), NOW
    )
    assert done.session["result"] == {"r": 1}


def test_an_ended_session_is_never_reopened_by_its_last_turn() -> None:
    changes = transitions.finish_turn(
        snap(status="closed", queue=queued(1)), TurnEnd(status="cancelled"), NOW
    )
    assert "status" not in changes.session or changes.session["status"] == "closed"


# ---------------------------------------------------------------------- resting


@pytest.mark.parametrize(
    ("fields", "rests", "status"),
    [
        ({"current_turn_id": None}, True, "idle"),
        ({"current_turn_id": None, "queue": queued(1)}, False, "running"),
        ({"current_turn_id": None, "close_requested": True}, True, "closed"),
        ({}, False, None),
    ],
)
def test_a_session_without_a_turn_rests_runs_on_or_closes(
    fields: dict[str, Any], rests: bool, status: str | None
) -> None:
    got, changes = transitions.rest_session(snap(**fields))
    assert got == rests
    assert changes.session.get("status") == status


# ---------------------------------------------------------------------- the queue, cancel and close


def message(
    steer: bool = False, client_message_id: str | None = None, settings: dict[str, Any] | None = None
) -> QueuedMessageRecord:
    return QueuedMessageRecord(
        id=QueuedMessageId("qm_new"),
        session_id=SID,
        seq=0,
        text="hello",
        status="queued",
        turn_id=None,
        created_at=NOW,
        client_message_id=client_message_id,
        steer=steer,
        settings=settings,
    )


@pytest.mark.parametrize(
    ("fields", "owner", "outcome"),
    [
        ({}, "mallory", "not_found"),
        ({"status": "closed"}, "alice", "closed"),
        ({"status": "completed"}, "alice", "closed"),
        ({"close_requested": True}, "alice", "closed"),
        ({"turn_count": 2, "queue": queued(1)}, "alice", "turn_limit"),
        ({"sent": queued(1)[0]}, "alice", "duplicate"),
    ],
)
def test_a_message_is_refused_for_a_foreign_ended_full_or_repeated_session(
    fields: dict[str, Any], owner: str, outcome: str
) -> None:
    sent = fields.pop("sent", None)
    snapshot = replace(snap(**fields), sent=sent)
    got, changes = transitions.queue_message(snapshot, owner, message(client_message_id="c1"), max_turns=3)
    assert got == outcome and changes.is_empty()


def test_a_message_to_an_idle_session_is_queued_and_makes_it_run() -> None:
    got, changes = transitions.queue_message(
        snap(status="idle", current_turn_id=None), "alice", message(), 10
    )
    assert got == "queued"
    assert [q.id for q in changes.new_queued] == ["qm_new"]
    assert changes.session == {"status": "running", "phase": "queued"}


def test_a_steering_message_wakes_a_parked_turn() -> None:
    got, changes = transitions.queue_message(
        snap(status="waiting_for_input"), "alice", message(steer=True), 10
    )
    assert got == "queued"
    assert changes.session == {"wake_at": None, "status": "running"}
    assert event_kinds(changes) == ["message_queued", "steer_requested"]


def test_a_turn_takes_every_steered_message_or_else_the_oldest_one() -> None:
    plain = queued(2)
    steered = (replace(plain[1], steer=True, settings={"model": "quick"}),)
    turn_record, changes = turn_steps.start_turn(
        snap(current_turn_id=None, queue=(plain[0], *steered)), TID, NOW
    )
    assert turn_record is not None and turn_record.queued_message_id == "qm_1"
    assert set(changes.queued) == {QueuedMessageId("qm_1")}
    assert turn_record.settings == {"model": "quick"}, "the message's settings apply from its turn on"
    turn_record, changes = turn_steps.start_turn(snap(current_turn_id=None, queue=plain), TID, NOW)
    assert turn_record is not None and set(changes.queued) == {QueuedMessageId("qm_0")}
    assert changes.session["turn_count"] == 1 and changes.session["current_turn_id"] == TID


def test_no_turn_starts_without_a_message_or_after_a_close() -> None:
    assert turn_steps.start_turn(snap(current_turn_id=None), TID, NOW)[0] is None
    assert (
        turn_steps.start_turn(snap(current_turn_id=None, queue=queued(1), close_requested=True), TID, NOW)[0]
        is None
    )


def test_cancel_marks_the_running_turn_and_wakes_it_if_parked() -> None:
    turn_id, changes = transitions.request_cancel(
        snap(status="waiting_for_input"), "alice", TurnId("t_q"), NOW
    )
    assert turn_id == TID
    assert changes.session == {"cancel_requested_turn": TID, "wake_at": None, "status": "running"}


def test_cancel_before_a_queued_message_starts_records_a_cancelled_turn() -> None:
    snapshot = snap(current_turn_id=None, queue=queued(2))
    turn_id, changes = transitions.request_cancel(snapshot, "alice", TurnId("t_q"), NOW)
    assert turn_id == "t_q"
    assert changes.new_turn is not None and changes.new_turn.status == "cancelled"
    assert changes.queued == {QueuedMessageId("qm_0"): {"status": "consumed", "turn_id": "t_q"}}
    assert changes.session["status"] == "running", "the second message still waits"


@pytest.mark.parametrize(
    ("fields", "owner", "changed"),
    [
        ({}, "mallory", False),
        ({"status": "idle", "current_turn_id": None}, "mallory", False),
        ({"status": "idle"}, "bob", False),
    ],
)
def test_nobody_but_the_owner_cancels_or_closes(fields: dict[str, Any], owner: str, changed: bool) -> None:
    assert transitions.request_cancel(snap(**fields), owner, TurnId("t"), NOW)[1].is_empty()
    assert transitions.request_close(snap(**fields), owner, "bye").is_empty()


def test_close_ends_a_resting_session_at_once_and_a_working_one_after_its_turn() -> None:
    at_rest = transitions.request_close(
        snap(status="idle", current_turn_id=None, queue=queued(1)), "alice", "bye"
    )
    assert at_rest.session["status"] == "closed" and at_rest.queued
    working = transitions.request_close(snap(), "alice", "bye")
    assert working.session["close_requested"] is True and working.session["cancel_requested_turn"] == TID
    assert "status" not in working.session


# ---------------------------------------------------------------------- a turn's steps


def test_a_tool_result_ends_the_call_cancels_its_open_questions_and_wakes_the_session() -> None:
    question = interrupt(kind="question", payload={"downstream": {"mode": "in_place"}})
    snapshot = snap(calls=(call(status="running"),), interrupts=(question,), status="waiting_for_input")
    changes = turn_steps.tool_result(snapshot, CALL, "succeeded", {"text": "ok", "is_error": False}, NOW)
    assert changes is not None
    assert changes.calls[CALL]["status"] == "succeeded"
    assert changes.interrupts["int_1"]["resolved_by"] == "call_ended"
    assert changes.session["status"] == "running"
    assert turn_steps.tool_result(snapshot, ToolCallId("nope"), "succeeded", {}, NOW) is None


def test_an_approval_parks_the_call_and_a_question_asked_in_place_shows_the_session_waiting() -> None:
    changes = turn_steps.raise_interrupt(snap(calls=(call(status="pending"),)), interrupt(), NOW)
    assert changes.calls[CALL] == {"status": "pending_approval"}
    in_place = interrupt(kind="question", payload={"downstream": {"mode": "in_place"}})
    changes = turn_steps.raise_interrupt(snap(calls=(call(status="running"),)), in_place, NOW)
    assert changes.calls == {} and changes.session == {"status": "waiting_for_input", "phase": None}


def test_questions_asked_in_place_by_a_stopped_process_are_dropped() -> None:
    in_place = interrupt(kind="question", payload={"downstream": {"mode": "in_place"}})
    retry = interrupt(kind="question", id="int_2", payload={"downstream": {"mode": "retry"}})
    dropped, changes = turn_steps.drop_questions_in_place(
        snap(interrupts=(in_place, retry), status="waiting_for_input"), NOW
    )
    assert dropped == 1 and set(changes.interrupts) == {"int_1"}
    assert "status" not in changes.session, "the retried question still waits"


def test_a_model_step_adds_its_calls_and_counts_its_usage() -> None:
    from parley.core.records import ModelStep, NewToolCall

    step = ModelStep(
        turn_id=TID,
        step_no=1,
        assistant={"text": "let me"},
        tool_calls=[NewToolCall(id=ToolCallId("c9"), call_index=0, name="read", arguments={}, effect="read")],
        input_tokens=10,
        output_tokens=5,
    )
    changes = turn_steps.model_step(snap(), step, "proc_a", NOW)
    assert changes.new_step is not None and changes.new_step.process_id == "proc_a"
    (new,) = changes.new_calls
    assert new.status == "pending" and new.idempotency_key == f"{SID}/{TID}/c9"
    assert changes.turn["model_calls"] == 2 and changes.session["input_tokens"] == 10
    assert changes.session["phase"] == "tools"


@pytest.mark.parametrize(
    ("effect", "durable"),
    [("read", False), ("idempotent_write", False), ("non_idempotent_write", True), ("unclassified", True)],
)
def test_the_start_of_a_call_that_must_not_run_twice_is_committed_durably(effect: str, durable: bool) -> None:
    changes = turn_steps.tool_started(snap(calls=(call("pending", effect),)), CALL)
    assert changes.calls[CALL]["status"] == "running"
    assert changes.durable == durable


def test_streamed_text_not_yet_published_goes_out_with_the_model_step_before_its_event() -> None:
    step = ModelStep(
        turn_id=TID, step_no=2, assistant={"text": "whole"}, tool_calls=[], input_tokens=1, output_tokens=1
    )
    assert event_kinds(turn_steps.model_step(snap(), step, "p#1", NOW)) == ["model_step"]
    tailed = turn_steps.model_step(snap(), replace(step, streamed_tail="le"), "p#1", NOW)
    assert event_kinds(tailed) == ["text_delta", "model_step"]
    assert tailed.events[0].data == {"text": "le"}


def _answer(text: str = "done", calls: int = 0) -> Any:
    from parley.core.records import ModelStep, NewToolCall

    return ModelStep(
        turn_id=TID,
        step_no=2,
        assistant={"text": text},
        tool_calls=[
            NewToolCall(id=ToolCallId(f"c{i}"), call_index=i, name="read", arguments={}, effect="read")
            for i in range(calls)
        ],
        input_tokens=3,
        output_tokens=4,
    )


ANSWERED = TurnEnd(status="answered", answer="done")


def test_a_step_that_answers_ends_its_turn_in_the_same_write_as_a_separate_end_would() -> None:
    snapshot = snap(lease_owner="proc_a#1", lease_expires_at=NOW + 30, interrupts=(interrupt(),))
    (ended, rested), changes = turn_steps.answering_step(snapshot, _answer(), "proc_a#1", NOW, ANSWERED)
    assert (ended, rested) == (True, "idle")
    step = turn_steps.model_step(snapshot, _answer(), "proc_a#1", NOW)
    finish = transitions.finish_turn(snapshot, ANSWERED, NOW)
    transitions.let_go_if_resting(snapshot, finish)
    # Everything the two writes would have written, in their order, the end winning a field both set.
    assert changes.new_step == step.new_step and changes.messages == step.messages
    assert event_kinds(changes) == ["model_step", "turn_ended"]
    assert changes.turn == {**step.turn, **finish.turn} and changes.turn["status"] == "answered"
    assert changes.session == {**step.session, **finish.session}
    assert changes.session["lease_owner"] is None and changes.session["phase"] is None
    assert changes.interrupts == finish.interrupts != {}


@pytest.mark.parametrize(
    ("why", "snapshot", "step"),
    [
        ("it asked for a tool", snap(), _answer(calls=1)),
        ("a cancel was asked for the turn", snap(cancel_requested_turn=TID), _answer()),
        ("a steering message waits", snap(queue=(replace(queued()[0], steer=True),)), _answer()),
        ("a task session is reminded of its result", snap(kind="task"), _answer()),
    ],
)
def test_a_step_leaves_its_turn_to_the_next_step_when_something_holds_it(
    why: str, snapshot: SessionSnapshot, step: Any
) -> None:
    (ended, rested), changes = turn_steps.answering_step(snapshot, step, "proc_a#1", NOW, ANSWERED)
    assert (ended, rested) == (False, None), why
    assert changes.turn == turn_steps.model_step(snapshot, step, "proc_a#1", NOW).turn
    assert "turn_ended" not in event_kinds(changes)


def test_an_answer_with_a_message_queued_ends_the_turn_and_keeps_the_lease_for_the_next() -> None:
    snapshot = snap(queue=queued(), lease_owner="proc_a#1", lease_expires_at=NOW + 30)
    (ended, rested), changes = turn_steps.answering_step(snapshot, _answer(), "proc_a#1", NOW, ANSWERED)
    assert (ended, rested) == (True, None)
    assert changes.session["status"] == "running" and "lease_owner" not in changes.session


def test_an_answer_that_uses_the_last_turn_closes_the_session() -> None:
    end = TurnEnd(status="answered", answer="done", close_reason="reached the limit of 1 turns per session")
    (ended, rested), changes = turn_steps.answering_step(snap(), _answer(), "proc_a#1", NOW, end)
    assert (ended, rested) == (True, "closed")
    assert event_kinds(changes) == ["model_step", "turn_ended", "session_closed"]


# ---------------------------------------------------------------- letting go of the lease


@pytest.mark.parametrize(
    ("after", "lets_go"),
    [("idle", True), ("closed", True), ("completed", True), ("failed", True), ("running", False)],
)
def test_a_turn_end_lets_go_of_the_lease_only_when_the_session_rests(
    after: SessionStatus, lets_go: bool
) -> None:
    snapshot = snap(status="running", lease_owner="proc_a#1", lease_expires_at=NOW + 30)
    changes = Changes()
    changes.session["status"] = after
    rested = transitions.let_go_if_resting(snapshot, changes)
    assert rested == (after if lets_go else None)
    released = {"lease_owner": None, "lease_expires_at": None}
    assert (released.items() <= changes.session.items()) is lets_go
