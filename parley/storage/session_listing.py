"""The session list query (list_sessions) of the SQL backends, written once: SQLite and
PostgreSQL differ only in their placeholder and in how a title or a tag is matched."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from parley.storage.base import SessionFilter, SessionPage, SessionRecord


@dataclass(frozen=True, slots=True)
class ListingDialect:
    placeholder: str
    # A condition true of every row (the list of all owners' sessions).
    everything: str
    # Conditions with one placeholder each: the title contains the text (any case, taken as it
    # is: % and _ included), the tags hold the tag.
    title_contains: str
    has_tag: str


SQLITE_LISTING = ListingDialect(
    placeholder="?",
    everything="1 = 1",
    title_contains="instr(lower(title), lower(?)) > 0",
    has_tag="EXISTS (SELECT 1 FROM json_each(sessions.tags) WHERE value = ?)",
)
POSTGRES_LISTING = ListingDialect(
    placeholder="%s",
    everything="TRUE",
    title_contains="strpos(lower(title #>> '{}'), lower(%s)) > 0",
    has_tag="tags::jsonb ? %s",
)


def session_list_query(
    dialect: ListingDialect,
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
