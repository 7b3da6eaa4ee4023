"""The MCP tasks of the in-memory store (the same queries as sqlite_tasks.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from anyio.lowlevel import checkpoint

from parley.errors import StorageError
from parley.ids import TurnId
from parley.storage.base import TaskPage, TaskRecord, TaskStatus
from parley.storage.memory_tables import MemoryDatabase, MemoryTables, row


def _live(task: TaskRecord, now: float) -> bool:
    return task.expires_at is None or task.expires_at > now


class MemoryTasks:
    def __init__(self, database: MemoryDatabase) -> None:
        self._db = database

    async def _committed(self) -> MemoryTables:
        """The tables as the last write left them; a read yields once, as a query would."""
        await checkpoint()
        return self._db.tables

    async def create_task(self, task: TaskRecord) -> None:
        async with self._db.write() as tables:
            if task.id in tables.tasks:
                raise StorageError(f"task {task.id} is already stored")
            tables.tasks[task.id] = row(task)

    async def get_task(self, task_id: str, now: float) -> TaskRecord | None:
        task = (await self._committed()).tasks.get(task_id)
        return row(task) if task is not None and _live(task, now) else None

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
        async with self._db.write() as tables:
            task = tables.tasks.get(task_id)
            if task is None:
                return None
            if not task.is_terminal:
                task = row(
                    replace(
                        task,
                        status=status,
                        status_message=status_message,
                        turn_id=turn_id if turn_id is not None else task.turn_id,
                        result=result,
                        updated_at=now,
                    )
                )
                tables.tasks[task_id] = task
            return row(task)

    async def list_tasks(self, owner: str, cursor: str | None, limit: int, now: float) -> TaskPage:
        tasks = [t for t in (await self._committed()).tasks.values() if t.owner == owner and _live(t, now)]
        if cursor is not None:
            created_at, _, last_id = cursor.partition("|")
            after = (float(created_at), last_id)
            tasks = [t for t in tasks if (t.created_at, t.id) > after]
        tasks.sort(key=lambda t: (t.created_at, t.id))
        found = tasks[: limit + 1]
        page = [row(t) for t in found[:limit]]
        next_cursor = None
        if len(found) > limit:
            last = page[-1]
            next_cursor = f"{last.created_at!r}|{last.id}"
        return TaskPage(tasks=page, next_cursor=next_cursor)

    async def purge_tasks(self, now: float) -> int:
        async with self._db.write() as tables:
            expired = [
                t.id for t in tables.tasks.values() if t.expires_at is not None and t.expires_at <= now
            ]
            for task_id in expired:
                del tables.tasks[task_id]
            return len(expired)
