"""Fair use in the database, written once for both: a principal's lock, what it has used, and
the admissions a decision writes (see UsageScope in parley/core/changes.py).

The usage is read after the principal's lock is taken (PostgreSQL: an advisory lock held until
the transaction ends; SQLite: its one writer), so of two transactions of one principal the
second reads what the first committed, whichever process runs them: two replicas cannot both
admit the last slot of a minute or of the running turns.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from parley.core.changes import Admission, Usage, UsageScope
from parley.storage.sql.conditions import RUNNING_A_TURN
from parley.storage.sql.dialect import Dialect
from parley.storage.sql.program import Result, Stmt

_ADMITTED = "SELECT counted, count(*), min(at) FROM admissions WHERE owner = ? AND at > ? GROUP BY counted"
# An owner's sessions running a turn or about to, as fair use counts them.
RUNNING_OF_OWNER = f"SELECT count(*) FROM sessions WHERE owner = ? AND {RUNNING_A_TURN}"
_INSERT = "INSERT INTO admissions (owner, counted, at) VALUES (?, ?, ?)"
_FORGET = "DELETE FROM admissions WHERE owner = ? AND at <= ?"


def usage_reads(dialect: Dialect, scope: UsageScope, *, lock: bool = True) -> list[Stmt]:
    """The statements that read `scope`, in the order load_usage takes their results: the
    principal's lock (with `lock`, where the database needs one), its admissions and its running
    sessions (each when asked)."""
    statements = []
    if lock and dialect.lock_principal is not None:
        statements.append(Stmt(dialect.lock_principal, (scope.owner,)))
    if scope.admissions:
        statements.append(Stmt(_ADMITTED, (scope.owner, scope.since)))
    if scope.running:
        statements.append(Stmt(RUNNING_OF_OWNER, (scope.owner,)))
    return statements


def load_usage(dialect: Dialect, scope: UsageScope, results: Iterator[Result], *, lock: bool = True) -> Usage:
    """The usage the statements of usage_reads read (taken from `results` in order)."""
    if lock and dialect.lock_principal is not None:
        next(results)
    rows = next(results).rows if scope.admissions else []
    running = int(next(results).rows[0][0]) if scope.running else 0
    return Usage(
        counts={str(r[0]): int(r[1]) for r in rows},
        oldest={str(r[0]): float(r[2]) for r in rows},
        running=running,
    )


def admission_writes(
    admitted: Sequence[Admission], now: float, *, only_if: str = "", params: Sequence[object] = ()
) -> list[Stmt]:
    """The statements that store `admitted` at `now` and forget the principal's expired ones
    (of every kind).
    `only_if`: a condition (with `params`) the inserts are made under."""
    if not admitted:
        return []
    insert = (
        _INSERT
        if not only_if
        else f"INSERT INTO admissions (owner, counted, at) SELECT ?, ?, ? WHERE {only_if}"
    )
    return [
        Stmt(insert, many=[(a.owner, a.counted, now, *params) for a in admitted]),
        Stmt(_FORGET, many=sorted({(a.owner, a.forget_before) for a in admitted})),
    ]
