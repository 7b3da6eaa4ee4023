"""Transcripts kept in memory between model calls: a kept prefix stays true, each use reads only
what came after it, and the cache stays within its bounds."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from parley.core.changes import SessionSnapshot
from parley.core.ids import SessionId, TurnId
from parley.core.records import MessageRecord, SessionRecord, lease_token
from parley.runtime.leased_transcript import TranscriptCache

pytestmark = pytest.mark.anyio


class CountingTranscripts:
    """A transcript store that counts what it is asked to read (all the cache may use)."""

    def __init__(self) -> None:
        self.messages: dict[SessionId, list[MessageRecord]] = {}
        self.read: list[tuple[SessionId, int | None]] = []
        self.summaries: dict[SessionId, tuple[int, str]] = {}
        self.summary_reads = 0

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
        self.summary_reads += 1
        return self.summaries.get(session_id)

    async def save_summary(
        self, session_id: SessionId, lease: str, turn_id: TurnId, upto_seq: int, text: str, now: float
    ) -> None:
        self.summaries[session_id] = (upto_seq, text)


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


async def test_the_summary_is_read_again_only_when_another_holding_came_between() -> None:
    store = CountingTranscripts()
    cache = TranscriptCache(store)  # type: ignore[arg-type]
    store.summaries[A] = (3, "so far")
    first = cache.leased(A, lease_token("proc_a", 4))
    assert await first.latest_summary() == (3, "so far")
    assert await first.latest_summary() == (3, "so far")
    assert store.summary_reads == 1, "once per holding"
    # The next holding (epoch 5) follows this process's own: nobody else can have written one.
    following = cache.leased(A, lease_token("proc_a", 5))
    assert await following.latest_summary() == (3, "so far") and store.summary_reads == 1
    await following.save_summary(lease_token("proc_a", 5), TurnId("turn_1"), 9, "newer", 0.0)
    assert await cache.leased(A, lease_token("proc_a", 6)).latest_summary() == (9, "newer")
    assert store.summary_reads == 1
    # Epoch 7 was another process's holding, which may have written a summary: read it.
    store.summaries[A] = (12, "written elsewhere")
    assert await cache.leased(A, lease_token("proc_a", 8)).latest_summary() == (12, "written elsewhere")
    assert store.summary_reads == 2
    # A lease whose epoch cannot be told: read, and keep nothing for the next holding.
    assert await cache.leased(A, None).latest_summary() == (12, "written elsewhere")
    assert await cache.leased(A, lease_token("proc_a", 9)).latest_summary() == (12, "written elsewhere")
    assert store.summary_reads == 4


async def test_a_step_on_the_snapshot_that_caught_the_copy_up_reads_nothing_and_any_other_reads() -> None:
    store = CountingTranscripts()
    cache = TranscriptCache(store)  # type: ignore[arg-type]
    store.append(A, "one")
    transcript = cache.leased(A)
    await transcript.current()
    assert transcript.next_seq == 2
    store.append(A, "two")  # the turn's start writes it and reads it back with its snapshot
    started = SessionSnapshot(
        session=SessionRecord.new(A, agent="demo", owner="me", kind="chat", now=0.0),
        turn=None,
        messages=tuple(store.messages[A]),
    )
    transcript.caught_up(started)
    store.read.clear()
    assert [m.content["text"] for m in await transcript.current(started)] == ["one", "two"]
    assert store.read == []
    store.append(A, "three")
    assert [m.content["text"] for m in await transcript.current(started)] == ["one", "two", "three"]
    assert store.read == [(A, 3)]  # the snapshot serves one step only


async def test_a_session_caught_up_before_its_first_turn_reads_no_summary() -> None:
    store = CountingTranscripts()
    cache = TranscriptCache(store)  # type: ignore[arg-type]
    store.append(A, "the first message")
    transcript = cache.leased(A, lease_token("proc", 1))
    started = SessionSnapshot(
        session=SessionRecord.new(A, agent="demo", owner="me", kind="chat", now=0.0),
        turn=None,
        messages=tuple(store.messages[A]),
    )
    transcript.caught_up(started, whole=True)
    assert [m.content["text"] for m in await transcript.current(started)] == ["the first message"]
    assert await transcript.latest_summary() is None
    assert (store.read, store.summary_reads) == ([], 0)
