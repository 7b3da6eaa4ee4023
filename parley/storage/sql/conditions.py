"""The engine's conditions as SQL, rendered from parley/core/states.py: which sessions need a
driver, which a lease may be taken on, which are busy (not to be deleted), which retention sweeps,
and which count as running a turn. Written here once for both databases; a status never appears
as a literal in a query. Leases and the work scan: docs/design.md#leases-and-the-work-scan."""

from __future__ import annotations

from collections.abc import Iterable

from parley.core.states import (
    DRIVEN_SESSION,
    ENDED_SESSION,
    IDLE_SESSION,
    PARKED_SESSION,
    PENDING_INTERRUPT,
    QUEUED_MESSAGE,
    RUNNING_SESSION,
    TERMINAL_TASK_STATUSES,
    WAITING_PHASE,
)
from parley.storage.sql.dialect import Dialect


def quoted(statuses: Iterable[str]) -> str:
    """Statuses as an SQL list of literals, in a stable order (they are ours, never a caller's)."""
    return ", ".join(f"'{status}'" for status in sorted(statuses))


# A lease is free, or expired at the time the first placeholder gives.
LEASE_FREE = "(lease_owner IS NULL OR lease_expires_at < ?)"
# A live lease holds the session at the time the placeholder gives (delete and retention spare it).
LEASE_LIVE = "(lease_owner IS NOT NULL AND coalesce(lease_expires_at, 0) > ?)"
# A lease token of one process: "<process>#<epoch>", so all of them lie in ["<process>#",
# "<process>$") in byte order (the range an index answers; both databases compare ids bytewise).
LEASE_OF_PROCESS = "(lease_owner >= ? AND lease_owner < ?)"


def process_range(prefix: str) -> tuple[str, str]:
    """The bounds of LEASE_OF_PROCESS for a token prefix "<process>#"."""
    return prefix, prefix[:-1] + "$"


# A queued message still waiting for its turn; an interrupt waiting for its decision (the
# column named `status`; a query over a join prefixes its table's alias).
QUEUED = f"status = '{QUEUED_MESSAGE}'"
PENDING = f"status = '{PENDING_INTERRUPT}'"
# A session that runs no turn now.
NOT_RUNNING = f"status != '{RUNNING_SESSION}'"
# Sessions a lease may be taken on.
DRIVEN = f"status IN ({quoted(DRIVEN_SESSION)})"
# A session running a turn (or about to), except one parked on a timer or a downstream task.
RUNNING_A_TURN = f"status = '{RUNNING_SESSION}' AND (phase IS NULL OR phase != '{WAITING_PHASE}')"
# The session (first placeholder) runs the turn (second) still, as a follower sees it: no
# more than that is read until it stops (SnapshotScope.settled).
RUNS_TURN = f"SELECT 1 FROM sessions WHERE id = ? AND current_turn_id = ? AND status = '{RUNNING_SESSION}'"
# A session that must not be deleted: it runs, or a live lease holds it.
BUSY = f"(status = '{RUNNING_SESSION}' OR {LEASE_LIVE})"
# Retention: ended and unchanged since the first time, or idle and unchanged since the second
# (a NULL time selects nothing of its kind).
SWEEPABLE = (
    f"((status IN ({quoted(ENDED_SESSION)}) AND updated_at < ?) "
    f"OR (status = '{IDLE_SESSION}' AND updated_at < ?))"
)
# An MCP task that has not ended.
OPEN_TASK = f"status NOT IN ({quoted(TERMINAL_TASK_STATUSES)})"


def work_scan(dialect: Dialect) -> str:
    """Sessions that need a driver, oldest change first: running ones that are due, parked ones
    whose timer is due, and parked ones left with a lapsed lease (a server asked a question during
    a call whose process died; a parked session holds no lease, and the new holder drops the
    question), each with its lease free or expired. Parameters: the time five times, then the
    limit.

    Each branch is one range scan of a small partial index, so a poll reads the sessions that are
    due, never the ones parked on a person (tests/test_storage_postgres.py checks the plan)."""
    running = (
        f"SELECT id, updated_at FROM sessions{dialect.running_index} WHERE status = '{RUNNING_SESSION}' "
        f"AND {dialect.due} AND {LEASE_FREE}"
    )
    timer_due = (
        f"SELECT id, updated_at FROM sessions{dialect.parked_index} WHERE status = '{PARKED_SESSION}' "
        f"AND wake_at IS NOT NULL AND {dialect.due} AND {LEASE_FREE}"
    )
    lease_lapsed = (
        f"SELECT id, updated_at FROM sessions{dialect.parked_index} WHERE status = '{PARKED_SESSION}' "
        "AND lease_owner IS NOT NULL AND lease_expires_at < ?"
    )
    return (
        f"SELECT id FROM ({running} UNION {timer_due} UNION {lease_lapsed}) due ORDER BY updated_at LIMIT ?"
    )
