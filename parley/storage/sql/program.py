"""What the shared SQL store hands a backend to run: a program of statement batches.

Every Store method is written once (parley/storage/sql/) as a generator that yields batches of
statements and receives their results. A backend runs a program in one transaction:

- SQLite runs it on its connection under `BEGIN IMMEDIATE` (one hand-off to the database
  thread for the whole program, or inline);
- PostgreSQL sends each batch as one pipeline: a batch is one round trip, the last one carrying
  the COMMIT.

So a program that can say everything in one batch is one round trip on PostgreSQL, and a
decision (read the snapshot, decide, write) is two. Statements use `?` placeholders; the dialect
renders them (parley/storage/sql/dialect.py). See docs/design.md#one-sql-store.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from parley.core.ids import SessionId
from parley.storage.wakeups import Wake

T = TypeVar("T")

Row = tuple[Any, ...]
Params = Sequence[Any]


@dataclass(frozen=True, slots=True)
class Stmt:
    """One statement: run once with `params`, or once per parameter set of `many`."""

    sql: str
    params: Params = ()
    many: Sequence[Params] | None = None


@dataclass(frozen=True, slots=True)
class Announce:
    """A wake other processes hear of when the transaction commits (PostgreSQL's NOTIFY; SQLite
    has no one to tell). With `where`, only if that condition holds once the batch's writes are
    made; with `session_from`, for the `session_id` of each row that query selects (the wake's
    own session id is then ignored)."""

    wake: Wake
    where: str | None = None
    session_from: str | None = None
    params: Params = ()


@dataclass(frozen=True, slots=True)
class Result:
    """What a statement returned: its rows (RETURNING or SELECT) and how many rows it changed."""

    rows: list[Row]
    count: int


@dataclass(frozen=True, slots=True)
class Batch:
    """Statements sent together. `last`: the program ends after it (PostgreSQL commits in the
    same round trip). `writes`: it changes something (a batch of reads alone is safe to send again
    on a fresh connection). `announce`: wakes sent at commit. `durable`: the commit must reach the
    disk before the program returns. `step_of`: a duplicate step key in this batch means the
    session's lease was lost (another holding committed the same step)."""

    statements: Sequence[Stmt]
    last: bool = False
    writes: bool = True
    announce: Sequence[Announce] = field(default_factory=tuple)
    durable: bool = False
    step_of: SessionId | None = None


# A program: yields batches, is sent each batch's results (one per statement), returns its value.
Program = Generator[Batch, list[Result], T]


def reads(*statements: Stmt) -> Program[list[Result]]:
    """A program of one batch of reads."""
    results = yield Batch(statements, last=True, writes=False)
    return results


def writes(*statements: Stmt, announce: Sequence[Announce] = ()) -> Program[list[Result]]:
    """A program of one batch of writes, committed together."""
    results = yield Batch(statements, last=True, announce=tuple(announce))
    return results


def finish(program: Program[T], results: list[Result]) -> T:
    """Send the last batch's results and return the program's value."""
    try:
        program.send(results)
    except StopIteration as stop:
        value: T = stop.value
        return value
    raise RuntimeError("a program of the store went on after its last batch")
