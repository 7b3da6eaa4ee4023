"""The commands that stop, end, relabel or remove a session: cancel_turn, close_session,
update_session and delete_session."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from parley.core.ids import TurnId, is_session_id, new_turn_id
from parley.core.records import DeleteOutcome, SessionRecord
from parley.errors import InvalidArgument, SessionBusy, SessionNotFound
from parley.runtime import audit
from parley.runtime.access import Principal
from parley.runtime.service.checks import Checks
from parley.runtime.service.outcomes import TurnOutcome, turn_outcome
from parley.runtime.service.parts import Parts
from parley.runtime.service.requests import Waiting
from parley.runtime.service.waits import Waits
from parley.runtime.session_labels import check_tags, check_title

logger = logging.getLogger("parley.runtime.service")


class LifecycleCommands:
    def __init__(self, parts: Parts, checks: Checks, waits: Waits) -> None:
        self._parts = parts
        self._checks = checks
        self._waits = waits

    async def cancel_turn(
        self, caller: Principal, session_id: str, waiting: Waiting, turn_id: str | None = None
    ) -> TurnOutcome:
        """Cancel the running turn (only if it is `turn_id`, given one), then wait for it to end."""
        p = self._parts
        session = await p.access.visible(caller, session_id, audit.CANCEL, [turn_id or ""])
        wait_s = self._checks.wait_s(waiting.seconds)
        if turn_id is not None and turn_id != session.current_turn_id:
            # A stale cancel (the turn it meant has ended) must not stop a newer turn.
            old = await p.store.get_turn(TurnId(turn_id))
            if old is None or old.session_id != session.id:
                raise InvalidArgument("turn_id", f"no turn {turn_id} in session {session.id}")
            outcome = await turn_outcome(p.steps, old)
            return replace(
                outcome, notes=[f"Turn {turn_id} is not running ({old.status}); nothing was cancelled."]
            )
        cancelled = await p.steps.request_cancel(session.id, session.owner, p.clock(), new_turn_id())
        if cancelled is None:
            # Nothing runs: cancelling is idempotent, so report how the last turn ended.
            latest = await p.store.get_session(session.id) or session
            last = await p.store.get_turn(latest.last_turn_id) if latest.last_turn_id else None
            if last is not None:
                outcome = await turn_outcome(p.steps, last)
                return replace(outcome, notes=["Nothing was running; this is how the last turn ended."])
            return TurnOutcome(
                session_id=session.id, turn_id=None, status="idle", session_status=latest.status
            )
        await p.audit.record(caller, audit.CANCEL, session_id=session.id, target=cancelled)
        p.signals.request_cancel(session.id)
        return await self._waits.wait_for_turn(session.id, cancelled, wait_s, waiting.on_progress)

    async def close_session(
        self, caller: Principal, session_id: str, wait_seconds: float | None
    ) -> SessionRecord:
        p = self._parts
        session = await p.access.visible(caller, session_id, audit.CLOSE)
        wait_s = self._checks.wait_s(wait_seconds)
        if session.status != "closed":
            await p.steps.request_close(session.id, session.owner, "closed by the caller", p.clock())
            await p.audit.record(caller, audit.CLOSE, session_id=session.id)
            p.signals.request_cancel(session.id)
            p.signals.work_available(session.id)

        async def closed(last: bool) -> SessionRecord | None:
            latest = await p.store.get_session(session.id)
            if latest is None:
                raise SessionNotFound(session_id)
            return latest if latest.status == "closed" or last else None

        return await self._waits.until(session.id, wait_s, closed)

    async def update_session(
        self, caller: Principal, session_id: str, title: str | None, tags: Sequence[str] | None
    ) -> SessionRecord:
        """Set the session's title ("" clears it) and/or replace its tags (None: unchanged)."""
        p = self._parts
        session = await p.access.visible(caller, session_id, audit.UPDATE)
        if title is None and tags is None:
            raise InvalidArgument("title", "give a title, tags, or both; nothing was changed")
        new_title = check_title(title) if title is not None else session.title
        new_tags = check_tags(tags) if tags is not None else session.tags
        if not await p.store.set_labels(session.id, new_title, new_tags):
            raise SessionNotFound(session_id)
        # Live views (the /v1 streams) show the new labels as they show everything else.
        await p.store.record_event(
            session.id, None, "session_updated", {"title": new_title, "tags": new_tags}, p.clock()
        )
        p.signals.notify(session.id)
        await p.audit.record(caller, audit.UPDATE, session_id=session.id)
        return replace(session, title=new_title, tags=new_tags)

    async def delete_session(
        self, caller: Principal, session_id: str, wait_seconds: float | None = None
    ) -> Literal["deleted", "already deleted"]:
        """Remove the session and everything of it; the audit keeps the fact. A session that runs
        a turn is closed first (the turn cancelled, queued messages dropped, so no other turn
        starts) and deleted as soon as it rests, within `wait_seconds`."""
        p = self._parts
        try:
            session = await p.access.visible(caller, session_id)
        except SessionNotFound:
            # A retry of a delete that went through: idempotent, for its deleter only.
            earlier = (
                await p.store.list_audit(session_id, caller.id, None, 20) if is_session_id(session_id) else []
            )
            if any(e.action == audit.DELETE and e.outcome == "ok" for e in earlier):
                return "already deleted"
            await p.access.refuse_unseen(caller, session_id, audit.DELETE)
            raise
        outcome = await p.store.delete_session(session.id, p.clock())
        if outcome == "busy":
            outcome = await self._close_then_delete(caller, session, self._checks.wait_s(wait_seconds))
        if outcome == "busy":
            raise SessionBusy(session.id)
        if outcome == "not_found":
            raise SessionNotFound(session_id)
        await p.audit.record(
            caller, audit.DELETE, session_id=session.id, owner=session.owner, agent=session.agent
        )
        logger.info("session %s deleted by %s", session.id, caller.id)
        return "deleted"

    async def _close_then_delete(
        self, caller: Principal, session: SessionRecord, wait_s: float
    ) -> DeleteOutcome:
        p = self._parts
        await p.steps.request_close(session.id, session.owner, "closed to be deleted", p.clock())
        await p.audit.record(caller, audit.CLOSE, session_id=session.id, reason="delete_session")
        p.signals.request_cancel(session.id)
        p.signals.work_available(session.id)

        async def deleted(last: bool) -> DeleteOutcome | None:
            outcome = await p.store.delete_session(session.id, p.clock())
            return outcome if outcome != "busy" or last else None

        return await self._waits.until(session.id, wait_s, deleted)
