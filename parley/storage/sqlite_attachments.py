"""The SQLite store's attachment bytes: read by hash, by a session that refers to them, and
collected when no session does (the AttachmentStore port)."""

from __future__ import annotations

from collections.abc import Sequence

from parley.ids import SessionId
from parley.storage.base import AttachmentBlob
from parley.storage.sqlite_plumbing import Connection, SqliteBase


class SqliteAttachments(SqliteBase):
    async def attachment_data(self, hashes: Sequence[str]) -> dict[str, AttachmentBlob]:
        wanted = sorted(set(hashes))
        if not wanted:
            return {}
        marks = ", ".join("?" * len(wanted))
        rows = await self._fetchall(
            f"SELECT sha256, mime_type, size, data FROM attachments WHERE sha256 IN ({marks})", tuple(wanted)
        )
        return {
            r["sha256"]: AttachmentBlob(
                sha256=r["sha256"], mime_type=r["mime_type"], size=r["size"], data=r["data"]
            )
            for r in rows
        }

    async def session_attachment(self, session_id: SessionId, sha256: str) -> AttachmentBlob | None:
        row = await self._fetchone(
            "SELECT a.sha256, a.mime_type, a.size, a.data FROM attachment_refs r "
            "JOIN attachments a ON a.sha256 = r.sha256 WHERE r.session_id = ? AND r.sha256 = ?",
            (session_id, sha256),
        )
        if row is None:
            return None
        return AttachmentBlob(
            sha256=row["sha256"], mime_type=row["mime_type"], size=row["size"], data=row["data"]
        )

    async def collect_attachments(self, stored_before: float) -> int:
        def collect(db: Connection) -> int:
            db.execute(
                "DELETE FROM attachment_refs WHERE NOT EXISTS "
                "(SELECT 1 FROM sessions s WHERE s.id = attachment_refs.session_id)"
            )
            cursor = db.execute(
                "DELETE FROM attachments WHERE stored_at < ? AND NOT EXISTS "
                "(SELECT 1 FROM attachment_refs r WHERE r.sha256 = attachments.sha256)",
                (stored_before,),
            )
            return int(cursor.rowcount)

        return await self._write(collect)
