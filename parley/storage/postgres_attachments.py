"""The PostgreSQL store's attachment bytes (the same queries as sqlite_attachments.py)."""

from __future__ import annotations

from collections.abc import Sequence

from parley.ids import SessionId
from parley.storage.base import AttachmentBlob
from parley.storage.postgres_plumbing import PostgresBase


class PostgresAttachments(PostgresBase):
    async def attachment_data(self, hashes: Sequence[str]) -> dict[str, AttachmentBlob]:
        wanted = sorted(set(hashes))
        if not wanted:
            return {}
        rows = await self._fetchall(
            "SELECT sha256, mime_type, size, data FROM attachments WHERE sha256 = ANY(%s)", (wanted,)
        )
        return {
            r[0]: AttachmentBlob(sha256=r[0], mime_type=r[1], size=int(r[2]), data=bytes(r[3])) for r in rows
        }

    async def session_attachment(self, session_id: SessionId, sha256: str) -> AttachmentBlob | None:
        row = await self._fetchone(
            "SELECT a.sha256, a.mime_type, a.size, a.data FROM attachment_refs r "
            "JOIN attachments a ON a.sha256 = r.sha256 WHERE r.session_id = %s AND r.sha256 = %s",
            (session_id, sha256),
        )
        if row is None:
            return None
        return AttachmentBlob(sha256=row[0], mime_type=row[1], size=int(row[2]), data=bytes(row[3]))

    async def collect_attachments(self, stored_before: float) -> int:
        # Two statements: a blob whose last reference goes in the first is seen unreferenced by
        # the second. A blob stored again meanwhile has a fresh stored_at, and is spared.
        await self._write(
            "DELETE FROM attachment_refs r WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = r.session_id)"
        )
        rows = await self._write(
            "DELETE FROM attachments a WHERE stored_at < %s AND NOT EXISTS "
            "(SELECT 1 FROM attachment_refs r WHERE r.sha256 = a.sha256) RETURNING 1",
            (stored_before,),
        )
        return len(rows)
