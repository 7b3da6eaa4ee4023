"""Server-Sent Events: the frame format, and a response that streams frames to one client for as
long as it keeps up.

Frames are produced only as fast as the client takes them (each one is read from the store when
the previous one went out), so a stream holds one page of events at most whatever the client
does. A client that takes nothing for `slow_client_s` (its connection's buffers are full) is cut
off: it gets a final frame saying so, if it reads on, and the stream ends; it resumes where it
stopped with Last-Event-ID.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

logger = logging.getLogger(__name__)

SSE_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache, no-transform",
    # Proxies such as nginx would buffer the stream otherwise.
    "x-accel-buffering": "no",
}


def frame(data: Any, *, event_id: int | str | None = None, event: str | None = None) -> bytes:
    """One SSE event: `data` as one line of JSON (a str is sent as it is)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    lines = []
    if event is not None:
        lines.append(f"event: {event}")
    if event_id is not None:
        lines.append(f"id: {event_id}")
    # JSON has no raw newline; a str might: each line of it is a data line.
    lines += [f"data: {line}" for line in text.split("\n")]
    return ("\n".join(lines) + "\n\n").encode()


def comment(text: str) -> bytes:
    """A comment line: keeps the connection alive, and is invisible to EventSource."""
    return f": {text}\n\n".encode()


class SseResponse(Response):
    """Streams `frames` as text/event-stream until they end, the client disconnects, or a frame
    waits `slow_client_s` to be taken (then `cut_off` is the last frame tried)."""

    def __init__(
        self,
        frames: AsyncGenerator[bytes, None],
        *,
        slow_client_s: float,
        cut_off: bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status_code=200)
        self._frames = frames
        self._slow_client_s = slow_client_s
        self._cut_off = cut_off
        self._sse_headers = {**SSE_HEADERS, **(headers or {})}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(k.encode(), v.encode()) for k, v in self._sse_headers.items()],
            }
        )
        async with anyio.create_task_group() as tg:

            async def until_disconnect() -> None:
                # The request body was read before the app ran; what comes now is the disconnect.
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(until_disconnect)
            ended = await self._stream(send)
            if ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()

    async def _stream(self, send: Send) -> bool:
        """Send every frame; False when the client was cut off (the response is finished then)."""
        async with aclosing(self._frames) as frames:
            async for data in frames:
                with anyio.move_on_after(self._slow_client_s) as slow:
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                if slow.cancelled_caught:
                    logger.info(
                        "cut off an event stream whose client took nothing for %gs", self._slow_client_s
                    )
                    # Written once the client reads on; a client that never does loses only the connection.
                    with anyio.move_on_after(self._slow_client_s):
                        await send({"type": "http.response.body", "body": self._cut_off, "more_body": False})
                    return False
        return True
