"""Forking a session: what a fork copies of the original up to the end of one turn, and the plan
as it stood then. Pure: the caller passes the original as read in one transaction, the new ids
and `now`; the store writes the result in one transaction (docs/forks.md).

A fork is an ordinary session at rest: its transcript is the original's messages of turns
1..at_turn, renumbered from 1 with their turns (which keep their numbers, under new ids), the
compaction summaries that end within them, the events of those turns (so a live view tells the
same story), the attachments its messages carry (shared by hash, never copied), the original's
kind, inputs and settings as they were at that turn, and the plan as the latest `plan_updated`
at or before the turn's end left it. It is not in plan mode and has approved no revision.
Interrupts, tool calls, queued messages and anything after the turn are left behind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from parley.core.ids import SessionId, TurnId
from parley.core.records import (
    EventRecord,
    MessageRecord,
    PlanStatus,
    SessionRecord,
    SummaryRecord,
    TurnRecord,
)
from parley.core.states import PLAN_STATUSES

ForkOutcome = Literal["forked", "not_found", "out_of_range", "running"]

# Events of no turn that belong to the story of the turns a fork keeps (a plan approved or
# discarded between turns). The rest (the session's creation, queue changes, its end) are not
# the fork's: it gets its own `session_created`.
SESSION_EVENTS_KEPT = frozenset({"plan_updated", "plan_execution_started"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkSource:
    """The original as one transaction read it: the session, all its turns, the messages of turns
    1..at_turn, the events up to the end of turn at_turn, its summaries up to the last of those
    messages, and the attachment hashes it refers to."""

    session: SessionRecord
    turns: Sequence[TurnRecord]
    messages: Sequence[MessageRecord]
    events: Sequence[EventRecord]
    summaries: Sequence[SummaryRecord]
    attachments: frozenset[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkRequest:
    """What the caller asks for, with what the core may not make itself: the ids and the time."""

    at_turn: int
    fork_id: SessionId
    turn_ids: Sequence[TurnId]  # one per turn kept, in order (at least at_turn of them)
    owner: str
    title: str | None
    agent_version_pin: str | None
    now: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkPlan:
    """The todos, revision and status of a session's plan at one point."""

    status: PlanStatus
    revision: int
    todos: list[dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkedSession:
    """Every row of a new fork (message_seq and event_seq are the lengths of its lists)."""

    session: SessionRecord
    turns: list[TurnRecord]
    messages: list[MessageRecord]
    events: list[EventRecord]
    summaries: list[SummaryRecord]
    attachments: list[str]


def plan_at(events: Sequence[EventRecord]) -> ForkPlan:
    """The plan as the latest `plan_updated` of `events` left it; none: cleared."""
    for event in reversed(events):
        if event.kind == "plan_updated":
            data = event.data
            status = data.get("status")
            todos = data.get("todos")
            return ForkPlan(
                status=cast(PlanStatus, status) if status in PLAN_STATUSES else "cleared",
                revision=int(data.get("revision") or 0),
                todos=list(todos) if isinstance(todos, list) else [],
            )
    return ForkPlan(status="cleared", revision=0, todos=[])


def check_fork(source: ForkSource | None, at_turn: int) -> ForkOutcome:
    """Whether the original can be forked at `at_turn`: it exists, the turn is in 0..turn_count,
    and the turn has ended (a running turn's end is not known yet)."""
    if source is None:
        return "not_found"
    if not 0 <= at_turn <= source.session.turn_count:
        return "out_of_range"
    turn = next((t for t in source.turns if t.seq == at_turn), None)
    if at_turn > 0 and (turn is None or turn.status == "running"):
        return "running" if turn is not None else "out_of_range"
    return "forked"


def fork(source: ForkSource | None, request: ForkRequest) -> tuple[ForkOutcome, ForkedSession | None]:
    """The fork of `source` at `request.at_turn`, or why there is none (nothing is written then)."""
    outcome = check_fork(source, request.at_turn)
    if outcome != "forked" or source is None:
        return outcome, None
    k, fork_id, now = request.at_turn, request.fork_id, request.now
    kept = sorted((t for t in source.turns if t.seq <= k), key=lambda t: t.seq)
    new_ids = {t.id: request.turn_ids[i] for i, t in enumerate(kept)}
    turns = [replace(t, id=new_ids[t.id], session_id=fork_id, queued_message_id=None) for t in kept]
    messages, renumbered = _messages(source.messages, new_ids, fork_id)
    summaries = [
        replace(
            s,
            session_id=fork_id,
            upto_seq=renumbered(s.upto_seq),
            turn_id=new_ids.get(s.turn_id) if s.turn_id is not None else None,
        )
        for s in source.summaries
        if renumbered(s.upto_seq) > 0
    ]
    original = source.session
    plan = plan_at(source.events)
    created = EventRecord(
        session_id=fork_id,
        seq=1,
        turn_id=None,
        kind="session_created",
        data={"agent": original.agent, "forked_from": {"session_id": original.id, "turn": k}},
        created_at=now,
    )
    events = [created, *_events(source.events, new_ids, fork_id)]
    session = SessionRecord.new(
        fork_id,
        agent=original.agent,
        owner=request.owner,
        kind=original.kind,
        now=now,
        inputs=original.inputs,
        settings=_settings_at(original, source.turns, k),
        title=request.title,
    )
    session = replace(
        session,
        turn_count=k,
        last_turn_id=turns[-1].id if turns else None,
        input_tokens=sum(t.input_tokens for t in turns),
        output_tokens=sum(t.output_tokens for t in turns),
        cached_tokens=sum(t.cached_tokens for t in turns),
        model_calls=sum(t.model_calls for t in turns),
        todos=plan.todos,
        plan_status=plan.status,
        plan_revision=plan.revision,
        parent_session_id=original.id,
        parent_turn=k,
        agent_version_pin=request.agent_version_pin,
    )
    attachments = sorted(_attachments(messages) & source.attachments)
    return "forked", ForkedSession(
        session=session,
        turns=turns,
        messages=messages,
        events=events,
        summaries=summaries,
        attachments=attachments,
    )


def _messages(
    records: Sequence[MessageRecord], new_ids: dict[TurnId, TurnId], fork_id: SessionId
) -> tuple[list[MessageRecord], Callable[[int], int]]:
    """The messages of the kept turns numbered from 1, and the map of an original message number
    to the fork's (the number of kept messages up to it: a summary's `upto_seq` follows it)."""
    kept = sorted((m for m in records if m.turn_id is not None and m.turn_id in new_ids), key=lambda m: m.seq)
    old_seqs = [m.seq for m in kept]
    messages = [
        replace(m, session_id=fork_id, seq=i, turn_id=new_ids[m.turn_id] if m.turn_id is not None else None)
        for i, m in enumerate(kept, start=1)
    ]

    def renumbered(seq: int) -> int:
        return sum(1 for old in old_seqs if old <= seq)

    return messages, renumbered


def _events(
    records: Sequence[EventRecord], new_ids: dict[TurnId, TurnId], fork_id: SessionId
) -> list[EventRecord]:
    """The events of the kept turns (and the plan's between them), numbered from 2."""
    kept = [
        e
        for e in sorted(records, key=lambda e: e.seq)
        if (e.turn_id in new_ids) or (e.turn_id is None and e.kind in SESSION_EVENTS_KEPT)
    ]
    return [
        replace(
            e,
            session_id=fork_id,
            seq=i,
            turn_id=new_ids[e.turn_id] if e.turn_id is not None else None,
        )
        for i, e in enumerate(kept, start=2)
    ]


def _settings_at(original: SessionRecord, turns: Sequence[TurnRecord], k: int) -> dict[str, Any]:
    """The session's settings as turn k ran with them (each turn keeps its own copy); before the
    first turn, those the first turn started with, else the session's own."""
    by_seq = {t.seq: t for t in turns}
    turn = by_seq.get(k) or by_seq.get(1)
    return dict(turn.settings) if turn is not None else dict(original.settings)


def _attachments(messages: Sequence[MessageRecord]) -> set[str]:
    """The hashes of the attachments the messages carry (a user message's references)."""
    hashes: set[str] = set()
    for message in messages:
        for ref in message.content.get("attachments") or ():
            if isinstance(ref, dict) and isinstance(ref.get("sha256"), str):
                hashes.add(ref["sha256"])
    return hashes
