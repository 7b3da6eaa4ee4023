"""The MCP tasks table of the SQLite store."""

from __future__ import annotations

import json
import sqlite3
from typing import Any, cast

from parley.ids import QueuedMessageId, SessionId, TurnId
from parley.storage.base import TaskPage, TaskRecord, TaskStatus
from parley.storage.sqlite_plumbing import Connection, SqliteBase, dumps

_TASK_COLUMNS = (
    "id, owner, generation, tool, session_id, queued_message_id, turn_id, status, status_message, "
    "result, ttl_ms, poll_interval_ms, created_at, updated_at, expires_at"
)
_OPEN = "status NOT IN ('completed', 'failed', 'cancelled')"
_LIVE = "(expires_at IS NULL OR expires_at > ?)"


def _task(row: sqlite3.Row) -> TaskRecord:
    return TaskRecord(
        id=row["id"],
        owner=row["owner"],
        generation=row["generation"],
        tool=row["tool"],
        session_id=SessionId(row["session_id"]) if row["session_id"] else None,
        queued_message_id=QueuedMessageId(row["queued_message_id"]) if row["queued_message_id"] else None,
        turn_id=TurnId(row["turn_id"]) if row["turn_id"] else None,
        status=cast(TaskStatus, row["status"]),
        status_message=row["status_message"],
        result=json.loads(row["result"]) if row["result"] else None,
        ttl_ms=row["ttl_ms"],
        poll_interval_ms=row["poll_interval_ms"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        expires_at=row["expires_at"],
    )


class SqliteTasks(SqliteBase):
    async def create_task(self, task: TaskRecord) -> None:
        def insert(db: Connection) -> None:
            db.execute(
                f"INSERT INTO tasks ({_TASK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    task.id,
                    task.owner,
                    task.generation,
                    task.tool,
                    task.session_id,
                    task.queued_message_id,
                    task.turn_id,
                    task.status,
                    task.status_message,
                    dumps(task.result) if task.result is not None else None,
                    task.ttl_ms,
                    task.poll_interval_ms,
                    task.created_at,
                    task.updated_at,
                    task.expires_at,
                ),
            )

        await self._write(insert)

    async def get_task(self, task_id: str, now: float) -> TaskRecord | None:
        row = await self._fetchone(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ? AND {_LIVE}", (task_id, now)
        )
        return _task(row) if row is not None else None

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
        def update(db: Connection) -> sqlite3.Row | None:
            db.execute(
                f"UPDATE tasks SET status = ?, status_message = ?, turn_id = COALESCE(?, turn_id), result = ?, "
                f"updated_at = ? WHERE id = ? AND {_OPEN}",
                (
                    status,
                    status_message,
                    turn_id,
                    dumps(result) if result is not None else None,
                    now,
                    task_id,
                ),
            )
            row: sqlite3.Row | None = db.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,)
            ).fetchone()
            return row

        row = await self._write(update)
        return _task(row) if row is not None else None

    async def list_tasks(self, owner: str, cursor: str | None, limit: int, now: float) -> TaskPage:
        where = ["owner = ?", _LIVE]
        params: list[Any] = [owner, now]
        if cursor is not None:
            created_at, _, last_id = cursor.partition("|")
            where.append("(created_at > ? OR (created_at = ? AND id > ?))")
            params.extend([float(created_at), float(created_at), last_id])
        rows = await self._fetchall(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE {' AND '.join(where)} ORDER BY created_at, id LIMIT ?",
            (*params, limit + 1),
        )
        tasks = [_task(r) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = tasks[-1]
            next_cursor = f"{last.created_at!r}|{last.id}"
        return TaskPage(tasks=tasks, next_cursor=next_cursor)

    async def purge_tasks(self, now: float) -> int:
        def purge(db: Connection) -> int:
            cur = db.execute("DELETE FROM tasks WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))
            return cur.rowcount

        return await self._write(purge)
