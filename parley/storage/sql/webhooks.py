"""The outbox of outbound webhooks: a delivery row per subscription for each event a decision
commits, written in that decision's transaction (so it survives whatever happens next), and the
claims, outcomes, listings and redeliveries of the delivery worker and the command line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parley.core.changes import Changes, SessionSnapshot
from parley.core.ids import new_delivery_id
from parley.core.webhooks import DeliveryRecord, DeliveryStatus, OutboxRoute, outbound_events
from parley.storage.sql.base import SqlBase
from parley.storage.sql.dialect import dumps
from parley.storage.sql.program import Row, Stmt

_COLUMNS = (
    "id, subscription, event_type, session_id, payload, status, attempts, next_attempt_at, "
    "last_error, created_at, updated_at, delivered_at"
)
_INSERT = (
    "INSERT INTO webhook_deliveries (id, subscription, event_type, session_id, payload, status, "
    "attempts, next_attempt_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?)"
)
# The longest error text kept of a failed attempt.
ERROR_CHARS = 300


def outbox_statements(
    routes: Sequence[OutboxRoute], snapshot: SessionSnapshot, changes: Changes, now: float
) -> list[Stmt]:
    """The delivery rows of one decision's events, one per subscription that takes each."""
    if not routes:
        return []
    rows = []
    for event in outbound_events(snapshot, changes):
        body = dumps(event.payload(now))
        for route in routes:
            if event.type in route.events:
                rows.append(
                    (new_delivery_id(), route.name, event.type, snapshot.session.id, body, now, now, now)
                )
    return [Stmt(_INSERT, many=rows)] if rows else []


def _record(row: Row) -> DeliveryRecord:
    return DeliveryRecord(
        id=row[0],
        subscription=row[1],
        event_type=row[2],
        session_id=row[3],
        payload=row[4],
        status=row[5],
        attempts=int(row[6]),
        next_attempt_at=float(row[7]),
        last_error=row[8],
        created_at=float(row[9]),
        updated_at=float(row[10]),
        delivered_at=None if row[11] is None else float(row[11]),
    )


class SqlWebhooks(SqlBase):
    webhook_routes: tuple[OutboxRoute, ...] = ()

    def route_webhooks(self, routes: Sequence[OutboxRoute]) -> None:
        self.webhook_routes = tuple(routes)

    async def claim_deliveries(
        self, subscriptions: Sequence[str], owner: str, now: float, lease_s: float, limit: int
    ) -> list[DeliveryRecord]:
        if not subscriptions:
            return []
        among, among_params = self.dialect.in_list("subscription", subscriptions)
        # A claim is a lease: another process takes a delivery only once this one's has lapsed
        # (it died mid-delivery), so each attempt is made by one process.
        (result,) = await self._change(
            Stmt(
                "UPDATE webhook_deliveries SET lease_owner = ?, lease_expires_at = ? WHERE id IN ("
                "SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= ? "
                f"AND {among} AND (lease_owner IS NULL OR lease_expires_at < ?) ORDER BY next_attempt_at "
                f"LIMIT ?{self.dialect.skip_locked}) RETURNING {_COLUMNS}",
                (owner, now + lease_s, now, *among_params, now, limit),
            )
        )
        return sorted((_record(row) for row in result.rows), key=lambda d: (d.next_attempt_at, d.id))

    async def settle_delivery(
        self,
        delivery_id: str,
        owner: str,
        status: DeliveryStatus,
        now: float,
        *,
        next_attempt_at: float | None = None,
        error: str | None = None,
    ) -> bool:
        """An attempt's outcome, written only while `owner` still holds the claim."""
        delivered = now if status == "delivered" else None
        (result,) = await self._change(
            Stmt(
                "UPDATE webhook_deliveries SET status = ?, attempts = attempts + 1, next_attempt_at = ?, "
                "last_error = ?, updated_at = ?, delivered_at = ?, lease_owner = NULL, lease_expires_at = NULL "
                "WHERE id = ? AND lease_owner = ?",
                (
                    status,
                    next_attempt_at if next_attempt_at is not None else now,
                    None if error is None else error[:ERROR_CHARS],
                    now,
                    delivered,
                    delivery_id,
                    owner,
                ),
            )
        )
        return result.count > 0

    async def purge_deliveries(self, before: float, limit: int) -> int:
        (result,) = await self._change(
            Stmt(
                "DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries "
                "WHERE status IN ('delivered', 'dead') AND updated_at < ? "
                f"LIMIT ?{self.dialect.skip_locked})",
                (before, self.dialect.limit(limit)),
            )
        )
        return result.count

    async def list_deliveries(self, status: DeliveryStatus | None, limit: int) -> list[DeliveryRecord]:
        where, params = ("WHERE status = ? ", [status]) if status is not None else ("", [])
        rows = await self._rows(
            f"SELECT {_COLUMNS} FROM webhook_deliveries {where}ORDER BY created_at DESC, id DESC LIMIT ?",
            (*params, limit),
        )
        return [_record(row) for row in rows]

    async def redeliver(self, delivery_id: str, now: float) -> DeliveryRecord | None:
        """Back to pending with its attempts counted afresh, due now; the same id and payload."""
        (result,) = await self._change(
            Stmt(
                "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?, "
                "updated_at = ?, lease_owner = NULL, lease_expires_at = NULL WHERE id = ? "
                f"RETURNING {_COLUMNS}",
                (now, now, delivery_id),
            )
        )
        return _record(result.rows[0]) if result.rows else None

    async def delivery_counts(self) -> dict[str, int]:
        rows: list[Any] = await self._rows("SELECT status, COUNT(*) FROM webhook_deliveries GROUP BY status")
        return {str(row[0]): int(row[1]) for row in rows}
