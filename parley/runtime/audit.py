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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskStatus

from parley.core.records import AuditOutcome, AuditRecord
from parley.errors import StorageError
from parley.runtime.access import Principal
from parley.runtime.background import log_pass_failure
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
EXECUTE_PLAN = "execute_plan"  # a plan's revision approved
DISCARD_PLAN = "discard_plan"
REPLAY = "replay"  # a replay of a session started (target: the session replayed)
FORK = "fork"  # a session forked (the entry names the fork; its target is the original)
TASK = "task"  # an MCP task created
TASK_CANCEL = "task_cancel"
SCHEDULED = "scheduled_start"  # a schedule's tick started a session (principal: its owner)
SCHEDULE = "schedule"  # a schedule made, paused, resumed or deleted with the tools (detail: what)
REVOKE_CREDENTIALS = "revoke_credentials"  # a principal's downstream credentials deleted (target: whose)
ROTATE_KEY = "rotate_credential_key"  # every credential encrypted again under the current key
CONNECT = "connect_account"  # a connect link opened (target: the server); refused for anyone but the owner
OPEN_PAGE = (
    "open_page"  # the owner opened a page a downstream server asked them to visit (target: the interrupt)
)
AUTHORIZE = "authorize_account"  # a connect flow's callback: the account connected, declined or failed
DECISIONS = frozenset({APPROVE, REJECT, ANSWER, DECLINE, EXECUTE_PLAN})


# Refused attempts the trail records of one principal a minute at most.
REFUSED_PER_MINUTE = 30
_WINDOW_S = 60.0
# Principals whose refusals of the current minute are counted at most (idle ones are forgotten).
_MAX_TRACKED = 100_000


@dataclass(slots=True)
class _Window:
    started: float
    written: int = 0
    left_out: int = 0


class RefusalBudget:
    """How many refused attempts of each principal are recorded: `per_minute` a minute, the
    rest counted and left out."""

    def __init__(self, per_minute: int = REFUSED_PER_MINUTE) -> None:
        self._per_minute = per_minute
        self._windows: dict[str, _Window] = {}

    def admit(self, principal: str, now: float) -> int | None:
        """None: leave this refusal out. Else record it; the number is how many of this
        principal's refusals were left out since the last one recorded."""
        window = self._windows.get(principal)
        if window is None or now - window.started >= _WINDOW_S or now < window.started:
            if window is None and len(self._windows) >= _MAX_TRACKED:
                self._forget_idle(now)
            carried = window.left_out if window is not None else 0
            window = self._windows[principal] = _Window(started=now, left_out=carried)
        if window.written >= self._per_minute:
            if window.left_out == 0:
                logger.warning(
                    "%s was refused more than %d times this minute; the audit records no more of its "
                    "refused attempts for up to %.0f s",
                    principal,
                    self._per_minute,
                    _WINDOW_S,
                )
            window.left_out += 1
            return None
        window.written += 1
        left_out, window.left_out = window.left_out, 0
        return left_out

    def _forget_idle(self, now: float) -> None:
        for name in [n for n, w in self._windows.items() if now - w.started >= _WINDOW_S and not w.left_out]:
            del self._windows[name]


class Audit:
    def __init__(self, log: AuditLog, clock: Callable[[], float]) -> None:
        self._log = log
        self._clock = clock
        self._refusals = RefusalBudget()

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
        self,
        who: Principal,
        action: str,
        session_id: str | None,
        target: str | None,
        why: str,
        **detail: Any,
    ) -> None:
        """Record a refused attempt and log it, naming principal, action, session and target. At
        most `REFUSED_PER_MINUTE` entries a principal a minute: a flood of refused calls cannot
        fill the trail; the first entry after a flood says how many were left out."""
        left_out = self._refusals.admit(who.id, self._clock())
        if left_out is None:
            return
        session = session_id or detail.get("session")
        logger.info(
            "refused %s by %s on session %s%s: %s",
            action,
            who.id,
            session or "-",
            f" ({target})" if target else "",
            why[:200],
        )
        await self.record(
            who,
            action,
            session_id=session_id,
            target=target,
            outcome="refused",
            error=why[:500],
            left_out=left_out or None,
            **detail,
        )

    async def not_found(
        self, who: Principal, action: str, session: str, targets: Sequence[str], why: str
    ) -> None:
        """Record an attempt on a session `who` may not see (another principal's, or none): the
        caller was told "not found". The entry names no session of the trail (`session_id` is
        empty, so the owner's `decisions` never show a stranger's attempts); `session` in its
        detail holds the id asked for."""
        for target in targets or [""]:
            await self.refused(
                who,
                action,
                None,
                target[:100] or None,
                f"not found: {why}",
                reason="not_found",
                session=session[:100],
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
                log_pass_failure(logger, "purging the audit trail")
            await anyio.sleep(interval_s)
