"""Reading parley's Server-Sent Events in tests: frames as they arrive, bounded by the test
deadline, over httpx2 (as any HTTP client would read them)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2

from parley.tls import http_client
from tests.support import TEST_DEADLINE_S


@dataclass(frozen=True)
class Frame:
    """One SSE event (`data` parsed as JSON; `id` its id line: a number, or the owner-wide stream's
    position as text) or a comment (a heartbeat)."""

    id: int | str | None = None
    data: Any = None
    comment: str | None = None

    @property
    def kind(self) -> str | None:
        return self.data.get("kind") if isinstance(self.data, dict) else None


async def frames(response: httpx2.Response) -> AsyncIterator[Frame]:
    event_id: int | str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                text = "\n".join(data)
                yield Frame(event_id, text if text == "[DONE]" else json.loads(text))
            event_id, data = None, []
        elif line.startswith(":"):
            yield Frame(comment=line[1:].strip())
        elif line.startswith("id: "):
            event_id = int(line[4:]) if line[4:].isdigit() else line[4:]
        elif line.startswith("data: "):
            data.append(line[6:])


async def read_until(
    url: str,
    stop: Callable[[Frame], bool],
    headers: dict[str, str] | None = None,
    method: str = "GET",
    json_body: Any = None,
) -> list[Frame]:
    """Open a stream and collect its frames up to the first one `stop` accepts (included)."""
    seen: list[Frame] = []
    with anyio.fail_after(TEST_DEADLINE_S):
        async with (
            http_client(timeout=TEST_DEADLINE_S) as http,
            http.stream(method, url, headers=headers, json=json_body) as response,
        ):
            assert response.status_code == 200, (response.status_code, await response.aread())
            async for frame in frames(response):
                seen.append(frame)
                if stop(frame):
                    return seen
            raise AssertionError(f"the stream ended before the frame waited for: {seen}")


def events(seen: list[Frame]) -> list[Frame]:
    """The stored events among `seen` (frames with an id)."""
    return [f for f in seen if f.id is not None]


def heartbeat(frame: Frame) -> bool:
    return frame.comment == "heartbeat"
