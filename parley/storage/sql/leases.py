"""Leases and the work scan, written once for both databases: which process drives which
session, and which sessions need a driver (docs/design.md#leases-and-the-work-scan)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from parley.core.changes import Changes, Claimed, SessionSnapshot, SnapshotScope
from parley.core.ids import SessionId
from parley.core.records import SessionRecord, lease_token
from parley.core.states import RUNNING_SESSION
from parley.errors import LeaseLost
from parley.storage.sql.base import SqlBase
from parley.storage.sql.conditions import DRIVEN, LEASE_OF_PROCESS, process_range, work_scan
from parley.storage.sql.dialect import Dialect
from parley.storage.sql.program import Announce, Batch, Program, Stmt
from parley.storage.sql.rows import SESSION_COLUMNS, Codec
from parley.storage.sql.steps import Outbox, load_snapshot, snapshot_reads, written
from parley.storage.wakeups import Wake

T = TypeVar("T")


def claimed_and_decided(
    codec: Codec,
    claim: Stmt,
    session_id: SessionId,
    scope: SnapshotScope,
    decide: Callable[[SessionSnapshot], tuple[T, Changes]],
    now: float,
    outbox: Outbox | None,
    after: Callable[[SessionSnapshot], SnapshotScope],
) -> Program[Claimed[T] | None]:
    """The claim of one session's lease with its snapshot of `scope` in one batch (the reads see
    the claim, and its row lock covers them), the decision on it, and its writes with the
    snapshot of `after` in a second; a decision that changes nothing keeps the claim's snapshot."""
    results = yield Batch([claim, *snapshot_reads(codec, session_id, scope, lock=False)])
    loaded = load_snapshot(codec, scope, results[1:], lock=False) if results[0].rows else None
    if loaded is None:
        return None  # not claimed: the transaction ends with nothing written
    lease = str(results[0].rows[0][1])
    value, changes = decide(loaded[0])
    if changes.is_empty():
        return Claimed(lease, value, loaded[0])
    look = after(loaded[0])
    seen = yield from written(codec, loaded, changes, now, outbox, look)
    return Claimed(lease, value, seen)


def claim_statement(
    dialect: Dialect, session_ids: Sequence[SessionId], owner: str, now: float, ttl_s: float
) -> Stmt:
    """Take the leases of those of `session_ids` that are free, expired or `owner`'s own and need
    a driver; RETURNING each one's id and new token."""
    prefix = lease_token(owner, 0)[:-1]  # "<owner>#": any earlier holding of this process
    among, among_params = dialect.in_list("id", session_ids)
    # SKIP LOCKED (PostgreSQL): a session whose row another transaction holds (a decision being
    # written, another process claiming it) is not waited for; the next scan looks again.
    return Stmt(
        "UPDATE sessions SET lease_epoch = lease_epoch + 1, "
        "lease_owner = CAST(? AS TEXT) || (lease_epoch + 1), lease_expires_at = ? "
        f"WHERE id IN (SELECT id FROM sessions WHERE {among} AND {DRIVEN} "
        f"AND (lease_owner IS NULL OR lease_expires_at < ? OR {LEASE_OF_PROCESS})"
        f"{dialect.skip_locked}) RETURNING id, lease_owner",
        (prefix, now + ttl_s, *among_params, now, *process_range(prefix)),
    )


class SqlLeases(SqlBase):
    async def try_acquire_leases(
        self, session_ids: Sequence[SessionId], owner: str, now: float, ttl_s: float
    ) -> dict[SessionId, str]:
        if not session_ids:
            return {}
        (result,) = await self._change(claim_statement(self.dialect, session_ids, owner, now, ttl_s))
        return {SessionId(row[0]): str(row[1]) for row in result.rows}

    async def renew_lease(self, session_id: SessionId, lease: str, now: float, ttl_s: float) -> SessionRecord:
        (result,) = await self._change(
            Stmt(
                f"UPDATE sessions SET lease_expires_at = ? WHERE id = ? AND lease_owner = ? RETURNING {SESSION_COLUMNS}",
                (now + ttl_s, session_id, lease),
            )
        )
        if not result.rows:
            raise LeaseLost(session_id)
        return self.codec.session(result.rows[0])

    async def release_lease(self, session_id: SessionId, lease: str) -> None:
        # A session let go with work left (this process stops, or a message came as it let go)
        # wakes the other processes; a parked one waits for its timer or a person.
        still_running = (
            f"EXISTS (SELECT 1 FROM sessions WHERE id = ? AND status = '{RUNNING_SESSION}' "
            "AND wake_at IS NULL AND lease_owner IS NULL)"
        )
        await self._change(
            Stmt(
                "UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL WHERE id = ? AND lease_owner = ?",
                (session_id, lease),
            ),
            announce=[Announce(Wake(session_id, work=True), where=still_running, params=(session_id,))],
        )

    async def count_leases(self, owner: str, now: float) -> int:
        prefix = lease_token(owner, 0)[:-1]
        return await self._count(
            f"SELECT count(*) FROM sessions WHERE {LEASE_OF_PROCESS} AND lease_expires_at >= ?",
            (*process_range(prefix), now),
        )

    async def sessions_needing_work(self, now: float, limit: int) -> list[SessionId]:
        rows = await self._rows(work_scan(self.dialect), (now, now, now, now, now, self.dialect.limit(limit)))
        return [SessionId(row[0]) for row in rows]
