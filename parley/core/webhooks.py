"""Outbound webhooks' rules: which committed events a subscriber hears of, what the payload
says, and how long a failed delivery waits before the next attempt (docs/webhooks.md).

The events are derived from a decision's own changes, in the transaction that writes them, so a
delivery is stored exactly when its event is (the outbox). Payloads carry ids, kinds, statuses
and results; never a message's text, a token or a link that carries one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from parley.core.changes import Changes, SessionSnapshot

WebhookEvent = Literal[
    "session.waiting_for_input",
    "turn.ended",
    "turn.failed",
    "session.completed",
    "session.failed",
]
WEBHOOK_EVENTS: tuple[WebhookEvent, ...] = get_args(WebhookEvent)
# Where a delivery stands: waiting for its next attempt, received by the subscriber, or given up.
DeliveryStatus = Literal["pending", "delivered", "dead"]
DELIVERY_STATUSES: tuple[DeliveryStatus, ...] = get_args(DeliveryStatus)
# Sessions with this tag (evaluations, replays) tell no subscriber anything.
SILENT_TAG = "eval"


@dataclass(frozen=True, slots=True)
class OutboundEvent:
    """One event a subscriber may hear of: its type and the JSON `data` of its payload."""

    type: WebhookEvent
    data: dict[str, Any]

    def payload(self, now: float) -> dict[str, Any]:
        """The body sent, in the Standard Webhooks shape (type, timestamp, data)."""
        return {"type": self.type, "timestamp": _iso(now), "data": self.data}


def _iso(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def outbound_events(snapshot: SessionSnapshot, changes: Changes) -> list[OutboundEvent]:
    """What subscribers hear of one decision, from the events it appends and the state it writes."""
    session = snapshot.session
    if SILENT_TAG in session.tags:
        return []
    base: dict[str, Any] = {"session_id": session.id, "agent": session.agent, "kind": session.kind}
    found: list[OutboundEvent] = []
    for event in changes.events:
        if event.kind == "interrupt_raised":
            found.append(
                OutboundEvent(
                    "session.waiting_for_input",
                    base
                    | {
                        "turn_id": event.turn_id,
                        "reason": event.data.get("kind"),
                        "interrupt_id": event.data.get("interrupt_id"),
                    },
                )
            )
        elif event.kind == "turn_ended":
            found.extend(_turn_ended(snapshot, changes, base, event.turn_id, event.data))
        elif event.kind in ("session_completed", "session_failed"):
            found.append(_session_ended(snapshot, changes, base, event.kind, event.data))
    return found


def _turn_ended(
    snapshot: SessionSnapshot,
    changes: Changes,
    base: dict[str, Any],
    turn_id: str | None,
    data: dict[str, Any],
) -> list[OutboundEvent]:
    status = data.get("status")
    failed = status == "failed"
    ended = OutboundEvent(
        "turn.failed" if failed else "turn.ended",
        base | {"turn_id": turn_id, "status": status, "error": data.get("error")},
    )
    plan_status = changes.session.get("plan_status", snapshot.session.plan_status)
    if plan_status != "draft" or failed:
        return [ended]
    # A planning turn that wrote a draft ends waiting for a person to approve it.
    revision = changes.session.get("plan_revision", snapshot.session.plan_revision)
    plan = base | {"turn_id": turn_id, "reason": "plan", "plan_revision": revision}
    return [ended, OutboundEvent("session.waiting_for_input", plan)]


def _session_ended(
    snapshot: SessionSnapshot, changes: Changes, base: dict[str, Any], kind: str, data: dict[str, Any]
) -> OutboundEvent:
    if kind == "session_completed":
        result = changes.session.get("result", snapshot.session.result)
        return OutboundEvent("session.completed", base | {"status": "completed", "result": result})
    return OutboundEvent("session.failed", base | {"status": "failed", "error": data.get("error")})


def retry_delay(attempts: int, base_s: float, max_s: float, jitter: float) -> float:
    """The pause after the `attempts`-th failed attempt: `base_s` doubling, at most `max_s`, with
    `jitter` (0 to 1, the caller's random draw) spreading it over its upper half so that many
    deliveries failed together do not come back together."""
    delay: float = min(max_s, base_s * 2 ** max(0, attempts - 1))
    return delay / 2 + delay / 2 * min(1.0, max(0.0, jitter))


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """One delivery of one event to one subscription, as the outbox keeps it."""

    id: str
    subscription: str
    event_type: str
    session_id: str | None
    payload: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: float
    last_error: str | None
    created_at: float
    updated_at: float
    delivered_at: float | None


@dataclass(frozen=True, slots=True)
class OutboxRoute:
    """A subscription as the outbox sees it: its name and the events it takes."""

    name: str
    events: frozenset[str]
