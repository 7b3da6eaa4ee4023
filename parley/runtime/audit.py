"""Recording the audit trail: who (principal and client) sent, decided, cancelled, closed,
deleted what, and which attempts were refused. One entry per act, written in the act's own
transaction where the act is one decision (a message sent), else after the act committed (or
was refused); the trail outlives the session and is purged by its own age
(`audit.retention_days`).

Entries hold ids and kinds, never the text of a message or an answer: the trail says who did
what, the session (while it exists) says what was said.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import TaskStatus

from parley.errors import StorageError
from parley.runtime.access import Principal
from parley.storage.base import AuditOutcome, AuditRecord
from parley.storage.ports import AuditLog

logger = logging.getLogger(__name__)

# What a principal can do that the trail records (`action` of an entry).
MESSAGE = "message"  # start_session with a message, send_message
START = "start_session"  # start_session without a message
STEER = "steer"
APPROVE = "approve"
REJECT = "reject"
ANSWER = "answer"
DECLINE = "decline"
CANCEL = "cancel"
CLOSE = "close"
DELETE = "delete_session"
UPDATE = "update_session"  # a title or tags set
RETENTION = "retention"  # a session removed by the retention policy (principal "retention")
DELETE_QUEUED = "delete_queued_message"
TASK = "task"  # an MCP task created
TASK_CANCEL = "task_cancel"
DECISIONS = frozenset({APPROVE, REJECT, ANSWER, DECLINE})


class Audit:
    def __init__(self, log: AuditLog, clock: Callable[[], float]) -> None:
        self._log = log
        self._clock = clock

    def entry(
        self,
        who: Principal,
        action: str,
        *,
        session_id: str | None,
        target: str | None = None,
        outcome: AuditOutcome = "ok",
        **detail: Any,
    ) -> AuditRecord:
        """The entry for an act, to commit in the act's own transaction (`Changes.audit`)."""
        return AuditRecord(
            id=0,
            at=self._clock(),
            principal=who.id,
            client=who.client,
            action=action,
            outcome=outcome,
            session_id=session_id,  # type: ignore[arg-type]
            target=target,
            detail={k: v for k, v in detail.items() if v is not None},
        )

    async def record(
        self,
        who: Principal,
        action: str,
        *,
        session_id: str | None,
        target: str | None = None,
        outcome: AuditOutcome = "ok",
        **detail: Any,
    ) -> None:
        """Append an entry after the act. A database that cannot take it is logged, not raised:
        the act itself has been committed (or refused) already."""
        entry = self.entry(who, action, session_id=session_id, target=target, outcome=outcome, **detail)
        try:
            with anyio.CancelScope(shield=True):
                await self._log.record_audit(entry)
        except StorageError as exc:
            logger.error(
                "the audit entry %s %s of %s could not be written: %s", action, target, session_id, exc
            )

    async def refused(
        self, who: Principal, action: str, session_id: str | None, target: str | None, why: str
    ) -> None:
        await self.record(
            who, action, session_id=session_id, target=target, outcome="refused", error=why[:500]
        )

    async def run_purge(
        self,
        retention_s: float,
        interval_s: float,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Delete entries older than `retention_s` now and every `interval_s`."""
        task_status.started()
        while True:
            try:
                purged = await self._log.purge_audit(self._clock() - retention_s)
                if purged:
                    logger.info("deleted %d audit entries older than the retention", purged)
            except Exception:
                logger.exception("purging the audit trail failed; trying again later")
            await anyio.sleep(interval_s)
