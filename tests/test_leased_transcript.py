"""Transcripts kept in memory between model calls: a kept prefix stays true, each use reads only
what came after it, and the cache stays within its bounds."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from parley.ids import SessionId, TurnId
from parley.runtime.leased_transcript import TranscriptCache
from parley.storage.base import MessageRecord

pytestmark = pytest.mark.anyio


class CountingTranscripts:
    """A transcript store that counts what it is asked to read (all the cache may use)."""

    def __init__(self) -> None:
        self.messages: dict[SessionId, list[MessageRecord]] = {}
        self.read: list[tuple[SessionId, int | None]] = []

    def append(self, session_id: SessionId, text: str) -> None:
        records = self.messages.setdefault(session_id, [])
        records.append(
            MessageRecord(
                session_id=session_id,
                seq=len(records) + 1,
                turn_id=TurnId("turn_1"),
                role="user",
                content={"text": text},
                created_at=0.0,
            )
        )

    async def list_messages(
        self, session_id: SessionId, from_seq: int | None, limit: int | None
    ) -> Sequence[MessageRecord]:
        self.read.append((session_id, from_seq))
        return [m for m in self.messages.get(session_id, []) if from_seq is None or m.seq >= from_seq]

    async def latest_summary(self, session_id: SessionId) -> tuple[int, str] | None:
        return None


A, B, C = SessionId("ses_a"), SessionId("ses_b"), SessionId("ses_c")


async def test_a_session_back_from_a_rest_reads_only_what_came_after_its_copy() -> None:
    store = CountingTranscripts()
    cache = TranscriptCache(store)  # type: ignore[arg-type]
    store.append(A, "one")
    assert [m.content["text"] for m in await cache.leased(A).current()] == ["one"]
    store.append(A, "two")  # written while the session rested, by any process
    assert [m.content["text"] for m in await cache.leased(A).current()] == ["one", "two"]
    assert store.read == [(A, None), (A, 2)]


async def test_the_least_recently_used_copies_go_when_the_cache_is_full() -> None:
    store = CountingTranscripts()
    cache = TranscriptCache(store, max_sessions=2, max_messages=3)  # type: ignore[arg-type]
    for session, n in ((A, 2), (B, 1)):
        for i in range(n):
            store.append(session, f"{session} {i}")
        await cache.leased(session).current()
    store.append(C, "c 0")
    store.append(C, "c 1")
    await cache.leased(C).current()  # over both bounds: A (used least recently) goes
    store.read.clear()
    await cache.leased(B).current()
    await cache.leased(A).current()
    assert store.read == [(B, 2), (A, None)], "B kept its copy, A reads its history again"
