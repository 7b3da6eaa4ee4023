"""The MCP tasks table of the PostgreSQL store (the same queries as sqlite_tasks.py)."""

from __future__ import annotations

from typing import Any

from parley.errors import StorageError
from parley.ids import TurnId
from parley.storage.base import TaskPage, TaskRecord, TaskStatus
from parley.storage.postgres_plumbing import PostgresBase
from parley.storage.postgres_rows import TASK_FIELDS, json_value, listing, record_values, task_row

_TASK = listing(TASK_FIELDS)
_OPEN = "status NOT IN ('completed', 'failed', 'cancelled')"
_LIVE = "(expires_at IS NULL OR expires_at > %s)"


def page_limit(limit: int | None) -> int | None:
    """A LIMIT as SQLite reads it: none, or a negative one, takes everything (NULL in PostgreSQL)."""
    return None if limit is None or limit < 0 else limit


class PostgresTasks(PostgresBase):
    async def create_task(self, task: TaskRecord) -> None:
        rows = await self._write(
            f"INSERT INTO tasks ({_TASK}) VALUES ({', '.join(['%s'] * len(TASK_FIELDS))}) "
            "ON CONFLICT (id) DO NOTHING RETURNING id",
            record_values("tasks", TASK_FIELDS, task),
        )
        if not rows:
            raise StorageError(f"task {task.id} is already stored")

    async def get_task(self, task_id: str, now: float) -> TaskRecord | None:
        row = await self._fetchone(f"SELECT {_TASK} FROM tasks WHERE id = %s AND {_LIVE}", (task_id, now))
        return task_row(row) if row is not None else None

    async def update_task(
        self,
        task_id: str,
        *,
        status: TaskStatus,
        status_message: str | None,
        turn_id: TurnId | None,
        result: dict[str, Any] | None,
        now: float,
    ) -> TaskRecord | None:
        # One statement: the update of an open task, or else the task as it is (an ended one is
        # never changed). Both branches read the row as it is before the statement; the UNION
        # takes the updated one when there is one.
        # A task that changed wakes whoever follows it on other replicas (its session's waiters).
        rows = await self._write(
            f"WITH changed AS (UPDATE tasks SET status = %(status)s, status_message = %(message)s, "
            f"turn_id = coalesce(%(turn)s, turn_id), result = %(result)s, updated_at = %(now)s "
            # RETURNING is computed for every updated row, whatever the query reads of it.
            f"WHERE id = %(id)s AND {_OPEN} RETURNING {_TASK}, {self._task_notify()}) "
            f"SELECT {_TASK} FROM changed UNION ALL "
            f"SELECT {_TASK} FROM tasks WHERE id = %(id)s AND NOT EXISTS (SELECT 1 FROM changed)",
            {
                "status": status,
                "message": json_value(status_message),
                "turn": turn_id,
                "result": json_value(result),
                "now": now,
                "id": task_id,
                "wake_channel": self._channel,
                "wake_origin": self._origin,
            },
        )
        return task_row(rows[0]) if rows else None

    def _task_notify(self) -> str:
        """The expression that announces a change of a task row's session (see postgres_feed.py)."""
        if self._channel is None:
            return "NULL"
        return (
            "CASE WHEN session_id IS NOT NULL THEN "
            "pg_notify(%(wake_channel)s, '-/' || %(wake_origin)s || '/' || session_id) END"
        )

    async def list_tasks(self, owner: str, cursor: str | None, limit: int, now: float) -> TaskPage:
        where = ["owner = %s", _LIVE]
        params: list[Any] = [owner, now]
        if cursor is not None:
            created_at, _, last_id = cursor.partition("|")
            where.append("(created_at > %s OR (created_at = %s AND id > %s))")
            params.extend([float(created_at), float(created_at), last_id])
        rows = await self._fetchall(
            f"SELECT {_TASK} FROM tasks WHERE {' AND '.join(where)} ORDER BY created_at, id LIMIT %s",
            (*params, page_limit(limit + 1)),
        )
        tasks = [task_row(r) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = tasks[-1]
            next_cursor = f"{last.created_at!r}|{last.id}"
        return TaskPage(tasks=tasks, next_cursor=next_cursor)

    async def purge_tasks(self, now: float) -> int:
        rows = await self._write(
            "WITH gone AS (DELETE FROM tasks WHERE expires_at IS NOT NULL AND expires_at <= %s RETURNING 1) "
            "SELECT count(*) FROM gone",
            (now,),
        )
        return int(rows[0][0])
