"""The in-memory store's attachment bytes (the same queries as sqlite_attachments.py)."""

from __future__ import annotations

from collections.abc import Sequence

from parley.ids import SessionId
from parley.storage.base import AttachmentBlob
from parley.storage.memory_tasks import MemoryTasks


class MemoryAttachments(MemoryTasks):
    async def attachment_data(self, hashes: Sequence[str]) -> dict[str, AttachmentBlob]:
        tables = await self._committed()
        return {h: tables.attachments[h] for h in set(hashes) if h in tables.attachments}

    async def session_attachment(self, session_id: SessionId, sha256: str) -> AttachmentBlob | None:
        tables = await self._committed()
        if (session_id, sha256) not in tables.attachment_refs:
            return None
        return tables.attachments.get(sha256)

    async def collect_attachments(self, stored_before: float) -> int:
        async with self._db.write() as tables:
            for key in [k for k in tables.attachment_refs if k[0] not in tables.sessions]:
                del tables.attachment_refs[key]
            held = {sha256 for _, sha256 in tables.attachment_refs}
            gone = [h for h, at in tables.attachments_stored.items() if at < stored_before and h not in held]
            for sha256 in gone:
                del tables.attachments[sha256]
                del tables.attachments_stored[sha256]
            return len(gone)
