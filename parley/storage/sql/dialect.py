"""What really differs between SQLite and PostgreSQL for the shared store: placeholders, how JSON
and outside text travel, list parameters, row locks, and a few expressions. Everything else
(every query, every write, every rule) is written once in parley/storage/sql/
(docs/design.md#one-sql-store).

Statements are written with `?` placeholders. SQLite takes them as they are; PostgreSQL's
driver wants `%s` (and a literal `%` doubled), which `render` produces once per statement text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any


def dumps(value: Any) -> str:
    """JSON as both databases keep it: compact, not ASCII-escaped (so a value reads back the same)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@lru_cache(maxsize=2048)
def _percent_placeholders(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


def _same(sql: str) -> str:
    return sql


def _sqlite_json(value: Any) -> Any:
    return dumps(value) if value is not None else None


def _postgres_json(value: Any) -> Any:
    # Imported here: a process on SQLite never loads psycopg (about 60 ms of its start).
    from psycopg.types.json import Json

    return Json(value, dumps=dumps) if value is not None else None


def _load_sqlite_json(value: Any) -> Any:
    return json.loads(value) if value is not None else None


def _load_postgres_json(value: Any) -> Any:
    return value  # psycopg decodes `json` columns itself


def _text(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    # The statement as the driver takes it.
    render: Callable[[str], str]
    # A JSON value as a parameter, and a JSON column's value as read (None stays NULL).
    json: Callable[[Any], Any]
    load_json: Callable[[Any], Any]
    # Text that comes from users, models and tools, as a parameter. PostgreSQL keeps it as a JSON
    # string (its `text` cannot hold U+0000, which a message may carry); psycopg reads it back as
    # the string, so reading needs nothing.
    outside_text: Callable[[Any], Any]
    # Appended to a SELECT that must lock its rows until the transaction ends (SQLite's one
    # writer holds the whole database already: nothing to add), and one that skips rows another
    # transaction holds instead of waiting for them.
    for_update: str
    skip_locked: str
    # A statement with one placeholder (a principal) that takes a lock of that principal held
    # until the transaction ends, so its fair-use counts are read and written by one transaction
    # at a time (None: SQLite's one writer already holds the whole database). PostgreSQL's
    # advisory locks are the database's: the key names the schema, so deployments in other
    # schemas of one database do not wait for each other.
    lock_principal: str | None
    # Conditions with one placeholder: the title contains the text (any case, `%` and `_` taken
    # as they are), the tags hold the tag.
    title_contains: str
    has_tag: str
    # A time compared with a session's wake-up time where "no wake-up time" counts as due, in
    # the form each database's work-scan index answers (see conditions.py).
    due: str
    # Index hints of the work scan's two branches (SQLite without statistics picks the index on
    # status alone; PostgreSQL plans well by itself).
    running_index: str
    parked_index: str
    # The type a JSON parameter is cast to where its type must be spelt (None: no cast needed).
    json_type: str | None
    # A list parameter: SQLite spells one placeholder per value, PostgreSQL takes an array.
    expand_lists: bool

    def in_list(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """`column` is one of `values`: the condition and its parameters."""
        if self.expand_lists:
            if not values:
                return "0 = 1", []
            return f"{column} IN ({', '.join('?' * len(values))})", list(values)
        return f"{column} = ANY(?)", [list(values)]

    def skip_locked_of(self, alias: str) -> str:
        """Like skip_locked, locking only the rows of `alias` in a join."""
        return f" FOR UPDATE OF {alias} SKIP LOCKED" if self.skip_locked else ""

    def limit(self, limit: int | None) -> int | None:
        """A LIMIT parameter: None (or negative) takes everything, as SQLite reads -1."""
        if limit is None or limit < 0:
            return -1 if self.expand_lists else None
        return limit


SQLITE = Dialect(
    name="sqlite",
    render=_same,
    json=_sqlite_json,
    load_json=_load_sqlite_json,
    outside_text=_text,
    for_update="",
    skip_locked="",
    lock_principal=None,
    title_contains="instr(lower(title), lower(?)) > 0",
    has_tag="EXISTS (SELECT 1 FROM json_each(sessions.tags) WHERE value = ?)",
    due="(wake_at IS NULL OR wake_at <= ?)",
    running_index=" INDEXED BY sessions_running",
    parked_index=" INDEXED BY sessions_waiting_work",
    json_type=None,
    expand_lists=True,
)
POSTGRES = Dialect(
    name="postgresql",
    render=_percent_placeholders,
    json=_postgres_json,
    load_json=_load_postgres_json,
    outside_text=_postgres_json,
    for_update=" FOR UPDATE",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    lock_principal=(
        "SELECT pg_advisory_xact_lock(hashtextextended('parley fair use ' || current_schema() || ' ' || ?, 0))"
    ),
    title_contains="strpos(lower(title #>> '{}'), lower(?)) > 0",
    has_tag="jsonb_exists(tags::jsonb, ?)",
    due="coalesce(wake_at, '-Infinity'::double precision) <= ?",
    running_index="",
    parked_index="",
    json_type="json",
    expand_lists=False,
)
