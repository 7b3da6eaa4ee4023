"""Live views without a server: a failed model attempt's streamed text is discarded (and said to
be), following a session's events (replay, live, reset), the AI SDK parts of a turn, and an event
stream whose client takes nothing being cut off."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from parley.config import AgentConfig, ModelSpec
from parley.core.ids import SessionId, new_session_id
from parley.core.records import EventRecord, QueuedMessageRecord, SessionRecord
from parley.core.transitions import starting
from parley.errors import ModelError
from parley.runtime.agent_catalog import AgentCatalog
from parley.runtime.driver import DriveSettings, SessionDriver
from parley.runtime.model import ModelRequest, ModelResponse
from parley.runtime.session_events import EventPage, EventWatch, Idle, Reset, SessionEvents
from parley.runtime.signals import SessionSignals
from parley.runtime.toolbox import Toolbox
from parley.server.ai_sdk_parts import TurnRenderer
from parley.server.sse import SseResponse, frame
from parley.storage.ports import Store
from tests.store_support import try_acquire_lease
from tests.support import TEST_DEADLINE_S, open_test_store

pytestmark = pytest.mark.anyio

PROC = "proc_live_views"
# More than the driver holds back before publishing streamed text (TEXT_FLUSH_CHARS).
LONG_PIECE = "x" * 500


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with open_test_store(tmp_path / "parley.db") as opened:
        yield opened


class FailsAfterStreaming:
    """A model whose first attempt streams text and then breaks; later attempts answer."""

    def __init__(self, *first_pieces: str) -> None:
        self.first_pieces = first_pieces
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        assert request.on_text is not None
        if self.calls == 1:
            for piece in self.first_pieces:
                await request.on_text(piece)
            raise ModelError("the stream broke", transient=True)
        await request.on_text("the retry's answer")
        return ModelResponse(text="the retry's answer")


async def _session(store: Store) -> SessionId:
    now = time.time()
    sid = new_session_id()
    record = SessionRecord.new(sid, agent="talker", owner="alice", kind="chat", now=now)
    first = QueuedMessageRecord.new(sid, "hi", now=now)
    await store.create_session(starting(record, first), first, now)
    return sid


async def _drive(store: Store, model: Any, signals: SessionSignals | None = None) -> SessionId:
    talker = AgentConfig(name="talker", instructions="Talk.", model=ModelSpec(provider="scripted", name="s"))
    sid = await _session(store)
    driver = SessionDriver(
        store=store,
        agents=AgentCatalog({"talker": talker}, store),
        models=lambda spec: model,
        toolbox=Toolbox(None),
        signals=signals or SessionSignals(),
        process_id=PROC,
        timings=DriveSettings(lease_ttl_s=30, poll_interval_s=0.05, model_retry_backoff_s=0.01),
        clock=time.time,
    )
    lease = await try_acquire_lease(store, sid, PROC, time.time(), 30)
    assert lease is not None
    with anyio.fail_after(TEST_DEADLINE_S):
        await driver.drive(sid, lease)
    return sid


async def test_text_a_failed_attempt_published_is_followed_by_attempt_discarded(store: Store) -> None:
    sid = await _drive(store, FailsAfterStreaming(LONG_PIECE))
    events = await store.list_events(sid, 0, 100)
    kinds = [e.kind for e in events]
    at = kinds.index("attempt_discarded")
    assert kinds[at - 1] == "text_delta" and events[at - 1].data["text"] == LONG_PIECE
    assert kinds[at + 1] == "model_retry"
    assert events[at].data == {"attempt": 1, "error": "the stream broke"}
    # The retry's text is not published piece by piece (short and quick): its step carries it whole.
    step = next(e for e in events[at:] if e.kind == "model_step")
    assert step.data["text"] == "the retry's answer"
    assert "text_delta" not in kinds[at:], "nothing of the failed attempt is carried into the retry's text"


async def test_text_a_failed_attempt_held_back_is_dropped_without_an_event(store: Store) -> None:
    sid = await _drive(store, FailsAfterStreaming("short"))
    kinds = [e.kind for e in await store.list_events(sid, 0, 100)]
    assert "attempt_discarded" not in kinds and "text_delta" not in kinds, kinds
    [turn] = await store.list_turns(sid)
    assert turn.answer == "the retry's answer", "the held-back piece is not glued to the retry's text"


async def test_following_replays_then_goes_live_and_resets_past_deleted_events(store: Store) -> None:
    signals = SessionSignals()
    events = SessionEvents(store, signals, EventWatch(store, signals, 60))
    sid = await _session(store)
    stored = await store.list_events(sid, 0, 100)
    seen: list[int] = []
    with anyio.fail_after(TEST_DEADLINE_S):
        async with anyio.create_task_group() as tg:

            async def follow() -> None:
                async for item in events.follow(sid, 0, heartbeat_s=0.05):
                    if isinstance(item, EventPage):
                        seen.extend(e.seq for e in item.events)
                        if len(seen) == len(stored) + 1:
                            tg.cancel_scope.cancel()
                    elif isinstance(item, Idle) and len(seen) == len(stored):
                        await store.record_event(sid, None, "note", {"text": "live"}, time.time())
                        signals.notify(sid)

            tg.start_soon(follow)
    assert seen == list(range(1, len(stored) + 2))
    # A position past the session's latest event starts over.
    first = await anext(aiter(events.follow(sid, 99, heartbeat_s=0.05)))
    assert isinstance(first, Reset) and first.latest_seq == len(stored) + 1


def _event(seq: int, kind: str, **data: Any) -> EventRecord:
    return EventRecord(
        session_id=SessionId("ses_x"), seq=seq, turn_id=None, kind=kind, data=data, created_at=0.0
    )


@pytest.mark.parametrize("v7", [True, False], ids=["ai-sdk-7", "both-versions"])
def test_a_discarded_attempt_resets_its_step_and_the_retry_streams_into_a_new_text_part(v7: bool) -> None:
    renderer = TurnRenderer("ses_x", "turn_x", v7)
    page = EventPage([])
    chunks = renderer.start()
    chunks += renderer.event(_event(1, "text_delta", text="dropped"), page)
    chunks += renderer.event(_event(2, "attempt_discarded", attempt=1, error="boom"), page)
    chunks += renderer.event(_event(3, "text_delta", text="kept"), page)
    chunks += renderer.event(_event(4, "model_step", step_no=1, text="kept", tool_calls=0), page)
    chunks += renderer.finish("answered")
    types = [c["type"] for c in chunks]
    assert types == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        *(["reset-step"] if v7 else []),  # version 6 knows no reset-step
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ], types
    starts = [c["id"] for c in chunks if c["type"] == "text-start"]
    assert len(set(starts)) == 2, "the retry's text is a new part"
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}


async def test_a_client_that_takes_nothing_is_cut_off_with_a_final_event() -> None:
    sent: list[MutableMapping[str, Any]] = []

    async def frames() -> AsyncIterator[bytes]:
        for n in range(1000):
            yield frame({"n": n})

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)
        if len([m for m in sent if m.get("more_body")]) >= 3:
            await anyio.sleep_forever()  # the client's buffers are full

    async def receive() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError

    response = SseResponse(frames(), slow_client_s=0.05, cut_off=frame({"kind": "cut_off"}))  # type: ignore[arg-type]
    with anyio.fail_after(TEST_DEADLINE_S):
        await response({"type": "http"}, receive, send)
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert len(bodies) == 4, "two frames went out, the third waited, then the cut-off was tried"
    assert bodies[-1] == {
        "type": "http.response.body",
        "body": frame({"kind": "cut_off"}),
        "more_body": False,
    }
