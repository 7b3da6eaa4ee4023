"""`GET /v1/sessions/{id}/events`: a session's events as Server-Sent Events, resumable.

Each stored event is one SSE event whose `id:` is its sequence number and whose data is
`{"seq", "kind", "session_id", "turn_id", "at", "data", ...}` (tool events add the call, interrupt
events the interrupt). A client that reconnects with `Last-Event-ID` (or `?after=N`) gets exactly
the events after it: those stored, then live ones. Control events have no `id:` of their own:
`reset` (the events after the position are no longer kept; a `state` event with the session's
current state and the position to go on from follows), `cut_off` (the client fell behind; it
reconnects), `session_deleted`. Heartbeats are SSE comments.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import ExitStack, aclosing
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from parley.core.ids import SessionId
from parley.core.records import EventRecord, InterruptRecord, SessionRecord, ToolCallRecord
from parley.core.states import DRIVEN_SESSION
from parley.errors import SessionNotFound
from parley.runtime.access import Principal, may_see
from parley.runtime.service import SessionQuery
from parley.runtime.session_events import EVENT_PAGE, INTERRUPT_KINDS, EventPage, Idle, Reset
from parley.server import owner_cursor
from parley.server.owner_cursor import OwnerPosition
from parley.server.sse import SseResponse, comment, frame
from parley.server.v1_common import V1Context, caller, event_position, guarded
from parley.server.wire import (
    draft_item,
    iso,
    pending_item,
    pending_view,
    session_summary,
    session_view,
    tool_call_view,
)

# What an approver who is not the owner sees of a session: what waits for a decision (its
# interrupts, its draft plan) and how it was decided.
APPROVER_KINDS = INTERRUPT_KINDS | {"plan_updated", "plan_execution_started"}
# What an EventSource waits before reconnecting after the stream ends.
RECONNECT_MS = 1000


def event_json(event: EventRecord, page: EventPage) -> dict[str, Any]:
    """A stored event as the stream shows it, with the tool call or interrupt it names. What is
    attached is what the event made true (a call's result only with `tool_finished`, a decision
    only with `interrupt_resolved`), so a replay shows every event exactly as it was shown live."""
    out: dict[str, Any] = {
        "seq": event.seq,
        "kind": event.kind,
        "session_id": event.session_id,
        "turn_id": event.turn_id,
        "at": iso(event.created_at),
        "data": event.data,
    }
    call_id = event.data.get("call_id")
    if call_id is not None and call_id in page.calls:
        out["call"] = call_json(page.calls[call_id], with_result=event.kind == "tool_finished")
    if event.kind == "model_step":
        step_no = event.data.get("step_no")
        step = [c for c in page.calls.values() if c.turn_id == event.turn_id and c.step_no == step_no]
        out["calls"] = [call_json(c, with_result=False) for c in sorted(step, key=lambda c: c.call_index)]
    interrupt_id = event.data.get("interrupt_id")
    if interrupt_id is not None and interrupt_id in page.interrupts:
        interrupt = page.interrupts[interrupt_id]
        out["interrupt"] = interrupt_json(interrupt, resolved=event.kind == "interrupt_resolved")
    return out


def call_json(call: ToolCallRecord, *, with_result: bool) -> dict[str, Any]:
    view = tool_call_view(call).model_dump(mode="json")
    if with_result:
        return view
    return {k: v for k, v in view.items() if k not in ("status", "result", "is_error")}


def interrupt_json(interrupt: InterruptRecord, *, resolved: bool) -> dict[str, Any]:
    view = pending_view(interrupt).model_dump(mode="json")
    if not resolved:
        return view
    return {**view, "status": interrupt.status, "resolution": interrupt.resolution}


def cut_off_frame(slow_client_s: float) -> bytes:
    return frame(
        {
            "kind": "cut_off",
            "detail": (
                f"this stream's client took nothing for {slow_client_s:g}s, so the stream ended; "
                "reconnect with Last-Event-ID to go on where it stopped"
            ),
        }
    )


class SessionStream:
    def __init__(self, ctx: V1Context) -> None:
        self._ctx = ctx

    async def endpoint(self, request: Request) -> Response:
        return await guarded(self._open)(request)

    async def _open(self, request: Request) -> Response:
        who = caller(request)
        session = await self._ctx.service.access.visible(who, request.path_params["session_id"])
        after = event_position(request)
        if after is None:
            after = await self._ctx.events.latest_seq(session.id)
        streams = self._ctx.streams
        return SseResponse(
            self._frames(who, session, after),
            slow_client_s=streams.slow_client_s,
            cut_off=cut_off_frame(streams.slow_client_s),
        )

    async def _frames(
        self, who: Principal, session: SessionRecord, after: int
    ) -> AsyncGenerator[bytes, None]:
        session_id = session.id
        yield f"retry: {RECONNECT_MS}\n\n".encode()
        follow = self._ctx.events.follow(session_id, after, self._ctx.streams.heartbeat_s)
        async with aclosing(follow) as items:
            async for item in items:
                if isinstance(item, Idle):
                    if not await self._still_there(who, session_id):
                        yield frame({"kind": "session_deleted", "session_id": session_id})
                        return
                    yield comment("heartbeat")
                elif isinstance(item, Reset):
                    yield frame(
                        {
                            "kind": "reset",
                            "detail": "the events after the position asked for are no longer kept; "
                            "start over from the state that follows",
                            "oldest_kept_seq": item.oldest_kept_seq,
                            "latest_seq": item.latest_seq,
                        }
                    )
                    yield frame(await self._state(who, session_id, item.latest_seq), event_id=item.latest_seq)
                else:
                    for event in item.events:
                        shown = event_json(event, item)
                        if event.kind == "interrupt_raised":
                            # Whether this caller may decide it (else who does), as /v1/pending says.
                            decider = self._ctx.service.reads.decider(who, session)
                            shown |= {"may_decide": decider.may_decide, "decided_by": decider.decided_by}
                        yield frame(shown, event_id=event.seq)

    async def _still_there(self, who: Principal, session_id: SessionId) -> bool:
        try:
            await self._ctx.service.access.visible(who, session_id)
        except SessionNotFound:
            return False
        return True

    async def _state(self, who: Principal, session_id: SessionId, seq: int) -> dict[str, Any]:
        reads = self._ctx.service.reads
        details = await reads.get_session(who, session_id)
        last = await reads.turn_outcome(details.last_turn) if details.last_turn else None
        return {"kind": "state", "seq": seq, "session": session_view(details, last).model_dump(mode="json")}


# The caller's sessions at rest or not that an owner-wide stream keeps positions for.
OWNER_SESSIONS = 500
# Sessions of other owners an owner-wide stream remembers as not its own (so it asks once).
FOREIGN_REMEMBERED = 10_000
# Events of a session first seen mid-stream that are looked at for ones made since the stream opened.
LATE_WINDOW = 50
# Clock slack between the stream's start and an event's time (another process writes the event).
LATE_SLACK_S = 2.0
# The caller's newest sessions a resumed stream looks at for ones that changed while it was away.
RESUME_NEWEST = 50


class OwnerStream:
    """`GET /v1/events`: everything that happens to the caller's sessions, and the interrupts that
    wait for the caller's decision (its own sessions', and those of agents it approves for).

    It opens with a `snapshot` event (the caller's running and waiting sessions with their latest
    event number, the pending interrupts and the draft plans waiting for review), then sends each
    event as it is committed, in the session stream's form (`session_id`, `seq`). Every frame's
    `id:` is the stream's position (owner_cursor.py): a client that reconnects with it as
    `Last-Event-ID` gets no new snapshot but the events after it, then live ones, with no gap and
    no repeat for the sessions the stream followed."""

    def __init__(self, ctx: V1Context) -> None:
        self._ctx = ctx

    async def endpoint(self, request: Request) -> Response:
        return await guarded(self._open)(request)

    async def _open(self, request: Request) -> Response:
        who = caller(request)
        resume = owner_cursor.decode(request.headers.get("last-event-id"))
        streams = self._ctx.streams
        return SseResponse(
            self._frames(who, resume),
            slow_client_s=streams.slow_client_s,
            cut_off=cut_off_frame(streams.slow_client_s),
        )

    async def _frames(self, who: Principal, resume: OwnerPosition | None) -> AsyncGenerator[bytes, None]:
        events = self._ctx.events
        with ExitStack() as following, events.signals.tapping() as tap:
            following.enter_context(events.watch.following_owner(who.id))
            follow = _Following(positions={}, approving={}, opened_at=time.time())
            if resume is None:
                snapshot = await self._snapshot(who, follow)
            else:
                await self._resumed(who, resume, follow)
            for session_id in follow.positions:
                following.enter_context(events.watch.following(session_id))
            yield f"retry: {RECONNECT_MS}\n\n".encode()
            if resume is None:
                yield frame(snapshot, event_id=follow.cursor())
            else:
                # What happened while the client was away, before anything live.
                for session_id in sorted({*follow.positions, *follow.approving}):
                    async for data in self._new_events(session_id, follow):
                        yield data
            while True:
                changed = await tap.wait(self._ctx.streams.heartbeat_s)
                if not changed:
                    yield comment("heartbeat")
                    continue
                for session_id in sorted(changed):
                    if session_id in follow.foreign:
                        continue
                    if session_id not in follow.positions and session_id not in follow.approving:
                        if not await self._take(who, session_id, follow):
                            continue
                        if session_id in follow.positions:
                            following.enter_context(events.watch.following(session_id))
                    async for data in self._new_events(session_id, follow):
                        yield data

    async def _snapshot(self, who: Principal, follow: _Following) -> dict[str, Any]:
        """The opening event, and the sessions it shows followed from their latest event."""
        reads, events = self._ctx.service.reads, self._ctx.events
        active: list[SessionRecord] = []
        for status in sorted(DRIVEN_SESSION):  # sorted: the same order every time
            found, _ = await reads.list_sessions(who, SessionQuery(limit=100, status=status))
            active += found
        follow.positions.update(await events.latest_seqs([s.id for s in active]))
        pending = await reads.list_pending(who, 200)
        drafts = await reads.list_drafts(who, 200)
        return {
            "kind": "snapshot",
            "sessions": [
                {**session_summary(s).model_dump(mode="json"), "latest_seq": follow.positions.get(s.id, 0)}
                for s in active
            ],
            "pending": [pending_item(p, reads.decider(who, p)).model_dump(mode="json") for p in pending],
            # Draft plans waiting for the caller's review, as /v1/pending lists them.
            "drafts": [draft_item(d, reads.decider(who, d)).model_dump(mode="json") for d in drafts],
        }

    async def _resumed(self, who: Principal, resume: OwnerPosition, follow: _Following) -> None:
        """Positions for a reconnect: those the client names (if it still may see them), and the
        caller's sessions that changed since, from their events made since the client's frame."""
        follow.opened_at = resume.at
        for session_id, seq in resume.seqs.items():
            try:
                session = await self._ctx.service.access.decidable(who, session_id)
            except SessionNotFound:
                continue
            latest = await self._ctx.events.latest_seq(session_id)
            table = follow.positions if may_see(who, session.owner) else follow.approving
            table[session_id] = min(seq, latest)
        reads = self._ctx.service.reads
        recent, _ = await reads.list_sessions(who, SessionQuery(limit=RESUME_NEWEST))
        for session in recent:
            if session.updated_at >= resume.at - LATE_SLACK_S and session.id not in follow.positions:
                await self._take(who, session.id, follow)
        for pending in await reads.list_pending(who, 200):
            session_id = pending.interrupt.session_id
            if session_id not in follow.positions and session_id not in follow.approving:
                await self._take(who, session_id, follow)

    async def _take(self, who: Principal, session_id: SessionId, follow: _Following) -> bool:
        """Follow a session first seen after the stream opened (False: nothing of it is shown)."""
        interest = await self._interest(who, session_id, follow.opened_at)
        if interest is None:
            if len(follow.foreign) < FOREIGN_REMEMBERED:
                follow.foreign.add(session_id)
            return False
        owned, start = interest
        if owned and len(follow.positions) < OWNER_SESSIONS:
            follow.positions[session_id] = start
        else:
            follow.approving[session_id] = start
        return True

    async def _interest(
        self, who: Principal, session_id: SessionId, opened_at: float
    ) -> tuple[bool, int] | None:
        """Whether the session is the caller's (else only its interrupts are), and the position to
        follow it from: its events made since the stream opened. None: nothing of it is shown."""
        try:
            session = await self._ctx.service.access.decidable(who, session_id)
        except SessionNotFound:
            return None
        latest = await self._ctx.events.latest_seq(session_id)
        start = max(0, latest - LATE_WINDOW)
        recent = await self._ctx.events.read(session_id, start, LATE_WINDOW)
        fresh = [e for e in recent if e.created_at >= opened_at - LATE_SLACK_S]
        return may_see(who, session.owner), (fresh[0].seq - 1 if fresh else latest)

    async def _new_events(self, session_id: SessionId, follow: _Following) -> AsyncGenerator[bytes, None]:
        decisions_only = session_id not in follow.positions
        table = follow.approving if decisions_only else follow.positions
        while True:
            found = await self._ctx.events.read(session_id, table[session_id], EVENT_PAGE)
            if not found:
                return
            page = await self._ctx.events.page(session_id, found)
            for event in found:
                # Each frame's position counts it as sent, whether it is shown or not.
                table[session_id] = event.seq
                if decisions_only and event.kind not in APPROVER_KINDS:
                    continue
                yield frame(event_json(event, page), event_id=follow.cursor())


@dataclass(slots=True)
class _Following:
    """What an owner-wide stream follows: the caller's sessions and those it approves for, each at
    the last event sent; sessions known to be of no interest; and since when it looks."""

    positions: dict[SessionId, int]
    approving: dict[SessionId, int]
    opened_at: float
    foreign: set[SessionId] = field(default_factory=set)

    def cursor(self) -> str:
        return owner_cursor.encode(time.time(), {**self.approving, **self.positions})
