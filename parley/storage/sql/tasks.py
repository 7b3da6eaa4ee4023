"""Written once for both databases: MCP tasks (stored handles on turns) and attachment bytes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parley.core.ids import SessionId, TurnId
from parley.core.records import AttachmentBlob, TaskPage, TaskRecord, TaskStatus
from parley.errors import StorageError
from parley.storage.sql.base import SqlBase, page
from parley.storage.sql.conditions import OPEN_TASK
from parley.storage.sql.program import Announce, Row, Stmt
from parley.storage.sql.rows import FIELDS, listing
from parley.storage.sql.steps import insert_sql
from parley.storage.wakeups import Wake

_TASK = listing("tasks")
_LIVE_TASK = "(expires_at IS NULL OR expires_at > ?)"


def _blob(row: Row) -> AttachmentBlob:
    return AttachmentBlob(sha256=row[0], mime_type=row[1], size=int(row[2]), data=bytes(row[3]))


class SqlTasks(SqlBase):
    # ------------------------------------------------------------------ MCP tasks

    async def create_task(self, task: TaskRecord) -> None:
        (inserted,) = await self._change(
            Stmt(
                f"{insert_sql('tasks', FIELDS['tasks'])} ON CONFLICT (id) DO NOTHING",
                self.codec.record_params("tasks", task),
            )
        )
        if inserted.count == 0:
            raise StorageError(f"task {task.id} is already stored")

    async def get_task(self, task_id: str, now: float) -> TaskRecord | None:
        row = await self._row(f"SELECT {_TASK} FROM tasks WHERE id = ? AND {_LIVE_TASK}", (task_id, now))
        return self.codec.task(row) if row is not None else None

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
        # An ended task is never changed: the first end wins, and the task as stored is returned.
        param = self.codec.param
        _, stored = await self._change(
            Stmt(
                "UPDATE tasks SET status = ?, status_message = ?, turn_id = coalesce(?, turn_id), result = ?, "
                f"updated_at = ? WHERE id = ? AND {OPEN_TASK}",
                (
                    status,
                    param("tasks", "status_message", status_message),
                    turn_id,
                    param("tasks", "result", result),
                    now,
                    task_id,
                ),
            ),
            Stmt(f"SELECT {_TASK} FROM tasks WHERE id = ?", (task_id,)),
            # A task that changed wakes whoever follows its session in other processes.
            announce=[
                Announce(
                    Wake(SessionId("")),
                    session_from="FROM tasks WHERE id = ? AND session_id IS NOT NULL AND updated_at = ?",
                    params=(task_id, now),
                )
            ],
        )
        return self.codec.task(stored.rows[0]) if stored.rows else None

    async def list_tasks(self, owner: str, cursor: str | None, limit: int, now: float) -> TaskPage:
        where = ["owner = ?", _LIVE_TASK]
        params: list[Any] = [owner, now]
        if cursor is not None:
            created_at, _, last_id = cursor.partition("|")
            where.append("(created_at > ? OR (created_at = ? AND id > ?))")
            params.extend([float(created_at), float(created_at), last_id])
        rows = await self._rows(
            f"SELECT {_TASK} FROM tasks WHERE {' AND '.join(where)} ORDER BY created_at, id LIMIT ?",
            (*params, self.dialect.limit(limit + 1)),
        )
        tasks, next_cursor = page(rows, limit, self.codec.task)
        return TaskPage(tasks=tasks, next_cursor=next_cursor)

    async def purge_tasks(self, now: float) -> int:
        (gone,) = await self._change(
            Stmt("DELETE FROM tasks WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))
        )
        return gone.count

    # ------------------------------------------------------------------ attachment bytes

    async def attachment_data(self, hashes: Sequence[str]) -> dict[str, AttachmentBlob]:
        wanted = sorted(set(hashes))
        if not wanted:
            return {}
        among, params = self.dialect.in_list("sha256", wanted)
        rows = await self._rows(
            f"SELECT sha256, mime_type, size, data FROM attachments WHERE {among}", params
        )
        return {row[0]: _blob(row) for row in rows}

    async def session_attachment(self, session_id: SessionId, sha256: str) -> AttachmentBlob | None:
        row = await self._row(
            "SELECT a.sha256, a.mime_type, a.size, a.data FROM attachment_refs r "
            "JOIN attachments a ON a.sha256 = r.sha256 WHERE r.session_id = ? AND r.sha256 = ?",
            (session_id, sha256),
        )
        return _blob(row) if row is not None else None

    async def collect_attachments(self, stored_before: float) -> int:
        # A blob whose last reference goes in the first statement is seen unreferenced by the
        # second; one stored again meanwhile has a fresh stored_at, and is spared.
        _, gone = await self._change(
            Stmt(
                "DELETE FROM attachment_refs WHERE NOT EXISTS "
                "(SELECT 1 FROM sessions s WHERE s.id = attachment_refs.session_id)"
            ),
            Stmt(
                "DELETE FROM attachments WHERE stored_at < ? AND NOT EXISTS "
                "(SELECT 1 FROM attachment_refs r WHERE r.sha256 = attachments.sha256)",
                (stored_before,),
            ),
        )
        return gone.count
