"""Reads the SQL backends share, written once: the session list (list_sessions) and the counts
over the whole database (/metrics). SQLite and PostgreSQL differ here only in their placeholder
and in how a title or a tag is matched (SqlDialect)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from parley.storage.base import DatabaseCounts, SessionFilter, SessionPage, SessionRecord


@dataclass(frozen=True, slots=True)
class SqlDialect:
    placeholder: str
    # A condition true of every row (the list of all owners' sessions).
    everything: str
    # Conditions with one placeholder each: the title contains the text (any case, taken as it
    # is: % and _ included), the tags hold the tag.
    title_contains: str
    has_tag: str


SQLITE = SqlDialect(
    placeholder="?",
    everything="1 = 1",
    title_contains="instr(lower(title), lower(?)) > 0",
    has_tag="EXISTS (SELECT 1 FROM json_each(sessions.tags) WHERE value = ?)",
)
POSTGRES = SqlDialect(
    placeholder="%s",
    everything="TRUE",
    title_contains="strpos(lower(title #>> '{}'), lower(%s)) > 0",
    has_tag="tags::jsonb ? %s",
)


def session_list_query(
    dialect: SqlDialect,
    columns: str,
    owner: str | None,
    status: str | None,
    agent: str | None,
    cursor: str | None,
    limit: int,
    match: SessionFilter | None,
) -> tuple[str, list[Any]]:
    """The statement reading one page of sessions (newest first, one row more than `limit` to
    tell whether a next page exists) and its parameters."""
    p = dialect.placeholder
    where: list[str] = []
    params: list[Any] = []

    def narrow(condition: str, *values: Any) -> None:
        where.append(condition)
        params.extend(values)

    if owner is not None:
        narrow(f"owner = {p}", owner)
    if status is not None:
        narrow(f"status = {p}", status)
    if agent is not None:
        narrow(f"agent = {p}", agent)
    if match is not None:
        if match.title is not None:
            narrow(dialect.title_contains, match.title)
        if match.tag is not None:
            narrow(dialect.has_tag, match.tag)
        if match.created_from is not None:
            narrow(f"created_at >= {p}", match.created_from)
        if match.created_before is not None:
            narrow(f"created_at < {p}", match.created_before)
    if cursor is not None:
        created_at, _, last_id = cursor.partition("|")
        narrow(
            f"(created_at < {p} OR (created_at = {p} AND id < {p}))",
            float(created_at),
            float(created_at),
            last_id,
        )
    sql = (
        f"SELECT {columns} FROM sessions WHERE {' AND '.join(where) or dialect.everything} "
        f"ORDER BY created_at DESC, id DESC LIMIT {p}"
    )
    return sql, [*params, limit + 1]


def session_page(rows: Sequence[Any], limit: int, to_record: Callable[[Any], SessionRecord]) -> SessionPage:
    """The page of the rows session_list_query read, with the cursor of the next page if any."""
    sessions = [to_record(r) for r in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        last = sessions[-1]
        next_cursor = f"{last.created_at!r}|{last.id}"
    return SessionPage(sessions=sessions, next_cursor=next_cursor)


FetchAll = Callable[[str, tuple[Any, ...]], Awaitable[Sequence[Any]]]


async def read_database_counts(fetchall: FetchAll, dialect: SqlDialect, now: float) -> DatabaseCounts:
    """Sessions and MCP tasks by status, messages queued and live leases (of any process)."""
    sessions = await fetchall("SELECT status, count(*) FROM sessions GROUP BY status", ())
    tasks = await fetchall("SELECT status, count(*) FROM tasks GROUP BY status", ())
    queued = await fetchall("SELECT count(*) FROM queued_messages WHERE status = 'queued'", ())
    leases = await fetchall(
        f"SELECT count(*) FROM sessions WHERE lease_expires_at >= {dialect.placeholder}", (now,)
    )
    return DatabaseCounts(
        sessions={str(r[0]): int(r[1]) for r in sessions},
        queued_messages=int(queued[0][0]),
        leases=int(leases[0][0]),
        tasks={str(r[0]): int(r[1]) for r in tasks},
    )
