"""The transcripts of the sessions a process drives, kept in memory between model calls.

A transcript is append-only: a message, once committed at a sequence number, never changes. So
a copy of its first messages stays true for good, and every use reads only what was committed
after the last message the copy has (the driver's own steps, a message taken into a turn, the
text of a decision made by a caller in any process). A model call then costs the same at turn
2,000 as at turn 2, and a session that comes back to this process after a rest does not read its
history again. Nothing can be shadowed: the copy is never trusted for what comes after it.

The newest compaction summary is another matter (a later one replaces it), but only the lease
holder writes one. So it is read once per holding of the lease, and not at all when this process
also held the holding before (the epoch of the lease is one more than the one the copy knows):
no other process can have written one in between.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from parley.core.changes import SessionSnapshot
from parley.core.ids import SessionId, TurnId
from parley.core.records import MessageRecord, lease_epoch
from parley.runtime.model import ChatMessage
from parley.storage.ports import Transcripts


class TranscriptCache:
    """The copies of the transcripts this process read lately: those of the `max_sessions`
    sessions used last, and no more than `max_messages` messages in all (the least recently used
    copies go first; a session whose copy went reads its history again when it comes back)."""

    def __init__(self, store: Transcripts, max_sessions: int = 256, max_messages: int = 100_000) -> None:
        self._store = store
        self._max_sessions = max_sessions
        self._max_messages = max_messages
        self._copies: OrderedDict[SessionId, _Copy] = OrderedDict()

    def leased(self, session_id: SessionId, lease: str | None = None) -> LeasedTranscript:
        """The transcript for one holding of the session's lease (`lease`, its token)."""
        copy = self._copies.pop(session_id, None) or _Copy()
        epoch = lease_epoch(lease)
        # The summary the copy knows stays true through the next holding only when no other
        # holding came between (every acquisition adds one to the epoch).
        copy.summary_epoch = epoch if epoch is not None and copy.summary_epoch == epoch - 1 else None
        self._copies[session_id] = copy  # the most recently used last
        kept = sum(len(c.records) for c in self._copies.values())
        while len(self._copies) > 1 and (len(self._copies) > self._max_sessions or kept > self._max_messages):
            _, gone = self._copies.popitem(last=False)
            kept -= len(gone.records)
        return LeasedTranscript(self._store, session_id, copy, epoch)

    def next_seq(self, session_id: SessionId) -> int | None:
        """LeasedTranscript.next_seq of the session's copy as it is now (None: none is kept)."""
        copy = self._copies.get(session_id)
        return copy.records[-1].seq + 1 if copy is not None and copy.records else None

    def forget(self, session_id: SessionId) -> None:
        """The session ended: it will take no more turns here."""
        self._copies.pop(session_id, None)


@dataclass(slots=True)
class _Copy:
    """A transcript's first messages as read, and the model's view of each (see to_chat_messages)."""

    records: list[MessageRecord] = field(default_factory=list)
    chat: dict[int, ChatMessage] = field(default_factory=dict)
    # (upto_seq, text) of the newest compaction summary, true during the holding of epoch
    # `summary_epoch` (None: not known, read it).
    summary: tuple[int, str] | None = None
    summary_epoch: int | None = None


class LeasedTranscript:
    def __init__(
        self, store: Transcripts, session_id: SessionId, copy: _Copy | None = None, epoch: int | None = None
    ) -> None:
        self._store = store
        self._session_id = session_id
        copy = copy if copy is not None else _Copy()
        # Shared with the cache: extended in place, never changed otherwise.
        self._records = copy.records
        self.chat_memo = copy.chat
        self._copy = copy
        # The holding's epoch (None: not known; the summary is read once and not kept past it).
        self._epoch = epoch
        # (upto_seq, text) of the newest compaction summary; only the lease holder writes one.
        self._summary: tuple[int, str] | None = copy.summary
        self._summary_loaded = copy.summary_epoch is not None
        # The snapshot whose messages the copy has taken (see `caught_up`).
        self._caught_up_by: SessionSnapshot | None = None

    async def current(self, snapshot: SessionSnapshot | None = None) -> list[MessageRecord]:
        """Every message of the session, oldest first, as committed now, or as `snapshot` saw
        them when it is the one last given to `caught_up`. The list is the cache itself: read
        it, never change it."""
        if snapshot is None or snapshot is not self._caught_up_by:
            self._records.extend(await self._store.list_messages(self._session_id, self.next_seq, None))
        self._caught_up_by = None
        return self._records

    @property
    def next_seq(self) -> int | None:
        """The sequence number of the first message the copy does not have (None: it has none,
        and a read takes the whole transcript)."""
        return self._records[-1].seq + 1 if self._records else None

    def caught_up(self, snapshot: SessionSnapshot, *, whole: bool = False) -> None:
        """`snapshot.messages`: the messages from `next_seq` on, as a transaction of this holding
        read them with the snapshot (SnapshotScope.messages_from). A step on that snapshot
        reads none (see `current`). `whole`: they are the session's first ones, before any turn
        of its own, so it has no compaction summary either (only a turn writes one)."""
        after = self.next_seq
        self._records.extend(m for m in snapshot.messages if after is None or m.seq >= after)
        self._caught_up_by = snapshot
        if whole and not self._summary_loaded:
            self._summary, self._summary_loaded = None, True
            self._keep_summary()

    @property
    def records(self) -> list[MessageRecord]:
        """The messages as `current` last read them (read, never change)."""
        return self._records

    async def latest_summary(self) -> tuple[int, str] | None:
        """(upto_seq, text) of the newest compaction summary, read at most once per lease."""
        if not self._summary_loaded:
            self._summary = await self._store.latest_summary(self._session_id)
            self._summary_loaded = True
            self._keep_summary()
        return self._summary

    async def save_summary(self, lease: str, turn_id: TurnId, upto_seq: int, text: str, now: float) -> None:
        """Store a new summary (LeaseLost unless `lease` is current) and keep it."""
        await self._store.save_summary(self._session_id, lease, turn_id, upto_seq, text, now)
        self._summary, self._summary_loaded = (upto_seq, text), True
        self._keep_summary()

    def _keep_summary(self) -> None:
        """The copy learns the summary as this holding knows it (for the next holding here)."""
        self._copy.summary = self._summary
        self._copy.summary_epoch = self._epoch
