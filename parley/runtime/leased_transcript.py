"""A leased session's transcript, kept in memory by the process that drives it.

The transcript is append-only, so the driver reads it whole once per lease and afterwards only
what was committed after the last message it has (its own steps, and the text of a decision
made by a caller in any process). A model call then costs the same at turn 2,000 as at turn 2.
The copy lives as long as one `drive` of the session under one lease: when the lease is lost or
released it is dropped with the driver's frame, so another process's writes are never shadowed. The newest
compaction summary is kept the same way (only the lease holder writes one).
"""

from __future__ import annotations

from parley.ids import SessionId, TurnId
from parley.storage.base import MessageRecord
from parley.storage.ports import Transcripts


class LeasedTranscript:
    def __init__(self, store: Transcripts, session_id: SessionId) -> None:
        self._store = store
        self._session_id = session_id
        self._records: list[MessageRecord] = []
        # (upto_seq, text) of the newest compaction summary; only the lease holder writes one.
        self._summary: tuple[int, str] | None = None
        self._summary_loaded = False

    async def current(self) -> list[MessageRecord]:
        """Every message of the session, oldest first, as committed now. The list is the
        cache itself: read it, never change it."""
        after = self._records[-1].seq + 1 if self._records else None
        self._records.extend(await self._store.list_messages(self._session_id, after, None))
        return self._records

    @property
    def records(self) -> list[MessageRecord]:
        """The messages as `current` last read them (read, never change)."""
        return self._records

    async def latest_summary(self) -> tuple[int, str] | None:
        """(upto_seq, text) of the newest compaction summary, read once per lease."""
        if not self._summary_loaded:
            self._summary = await self._store.latest_summary(self._session_id)
            self._summary_loaded = True
        return self._summary

    async def save_summary(self, lease: str, turn_id: TurnId, upto_seq: int, text: str, now: float) -> None:
        """Store a new summary (LeaseLost unless `lease` is current) and keep it."""
        await self._store.save_summary(self._session_id, lease, turn_id, upto_seq, text, now)
        self._summary, self._summary_loaded = (upto_seq, text), True
