"""Progress for a waiting caller: the session's events, turned into short messages."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import anyio

from parley.core.ids import SessionId
from parley.core.records import EventRecord
from parley.storage.ports import Store

# Receives (an increasing progress value, a short message).
ProgressFn = Callable[[float, str], Awaitable[None]]
PROGRESS_TEXT_CHARS = 300
STREAMED_TEXT_CHARS = 4000


class ProgressFeed:
    """Turns the session's events into progress notifications for one waiting caller."""

    def __init__(
        self, store: Store, session_id: SessionId, emit: ProgressFn | None, interval_s: float
    ) -> None:
        self._store = store
        self._session_id = session_id
        self._emit_fn = emit
        self._interval_s = interval_s
        self._after_seq = 0
        self._count = 0
        self._last_emit = anyio.current_time()
        self._streamed = False

    async def start(self) -> None:
        if self._emit_fn is not None:
            self._after_seq = await self._store.latest_event_seq(self._session_id)

    async def poll(self) -> None:
        if self._emit_fn is None:
            return
        for event in await self._store.list_events(self._session_id, self._after_seq, 100):
            self._after_seq = event.seq
            if event.kind == "text_delta":
                self._streamed = True
            elif event.kind == "attempt_discarded":
                # The retry's text (streamed or whole with its step) replaces what went out.
                self._streamed = False
            elif event.kind == "model_step" and self._streamed:
                # The text already went out piece by piece while it streamed: do not repeat it.
                self._streamed = False
                event = replace(event, data={**event.data, "text": ""})
            text = describe_event(event)
            if text:
                await self._emit(text)
        if anyio.current_time() - self._last_emit >= self._interval_s:
            await self._emit("still working")

    async def _emit(self, text: str) -> None:
        assert self._emit_fn is not None
        self._count += 1
        self._last_emit = anyio.current_time()
        try:
            await self._emit_fn(float(self._count), text)
        except Exception:
            # A caller that went away cannot take progress; its wait ends on its own.
            self._emit_fn = None


def describe_event(event: EventRecord) -> str | None:
    data = event.data
    if event.kind == "turn_started":
        return "turn started"
    if event.kind == "model_step":
        text = str(data.get("text") or "")[:PROGRESS_TEXT_CHARS]
        calls = int(data.get("tool_calls") or 0)
        return text + (f" (calling {calls} tool(s))" if calls else "") if text or calls else None
    if event.kind == "tool_started":
        return f"tool {data.get('tool')} started"
    if event.kind == "tool_finished":
        return f"tool {data.get('tool')} finished: {data.get('status')}"
    if event.kind == "turn_ended":
        return f"turn {data.get('status')}"
    if event.kind == "text_delta":
        # Streamed text passes whole (the driver batches it in pieces of about 400 characters).
        return str(data.get("text") or "")[:STREAMED_TEXT_CHARS] or None
    if event.kind == "attempt_discarded":
        return "the model call failed part-way; disregard its text above"
    if event.kind == "model_retry":
        return f"model call attempt {data.get('attempt')} failed; retrying in {data.get('retry_in_s')}s"
    if event.kind == "tool_progress":
        total = data.get("total")
        amount = f"{data.get('progress')}/{total}" if total else f"{data.get('progress')}"
        message = str(data.get("message") or "")[:PROGRESS_TEXT_CHARS]
        return (
            f"tool {data.get('tool')}: {message} ({amount})"
            if message
            else f"tool {data.get('tool')}: {amount}"
        )
    if event.kind == "tool_source_warning":
        return str(data.get("text") or "")[:PROGRESS_TEXT_CHARS]
    if event.kind == "compacted":
        return "summarized the earlier conversation to fit the model's context"
    if event.kind == "compaction_failed":
        return "could not summarize the earlier conversation; continuing without"
    if event.kind == "nudged":
        return "reminded the agent to hand in its result"
    return None
