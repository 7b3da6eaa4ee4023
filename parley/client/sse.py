"""PROVISIONAL: the HTTP event stream of a session (`GET /v1/sessions/{id}/events`, server-sent
events, issue #19), built beside this client and not on its branch yet.

`Session.events()` tries it first over HTTP: a server that answers 404 (or 405) has no stream (or
does not know the session), and the client falls back to the progress of its own calls. Each event's
data is read as parley stores its events, `{"kind": ..., "data": {...}}` (or the SSE event name as
the kind and the whole data as its fields); events.from_stream maps them. When #19 fixes the
format, adjust `_parse` and events.from_stream, and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import httpx2

from parley.client.errors import ProtocolError
from parley.client.events import Event, from_stream

# A stream may be quiet for as long as nothing happens in the session: no read timeout.
STREAM_TIMEOUT = httpx2.Timeout(30.0, read=None)
# Statuses that mean "this server has no event stream".
_NOT_OFFERED = frozenset({404, 405})


def events_base(mcp_url: str) -> str:
    """Where /v1 lives beside an MCP endpoint: `https://host/prefix/mcp` -> `https://host/prefix`."""
    base = mcp_url.rstrip("/")
    return base.removesuffix("/mcp")


class SessionEvents:
    """One open event stream; use as an async context manager and iterate it."""

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response

    async def __aenter__(self) -> SessionEvents:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._response.aclose()

    async def __aiter__(self) -> AsyncIterator[Event]:
        name, data_lines = "", list[str]()
        async for line in self._response.aiter_lines():
            if line == "":
                for event in _parse(name, "\n".join(data_lines)):
                    yield event
                name, data_lines = "", []
            elif line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data_lines.append(line[5:].removeprefix(" "))


def _parse(name: str, data: str) -> list[Event]:
    if not data:
        return []
    try:
        body: Any = json.loads(data)
    except ValueError:
        return []
    if not isinstance(body, dict):
        return []
    kind = str(body.get("kind") or name)
    fields = body.get("data")
    return from_stream(kind, fields if isinstance(fields, dict) else body)


class EventStream:
    """Opens the event stream of a session on an HTTP server, while the server offers it."""

    def __init__(self, http: httpx2.AsyncClient, mcp_url: str) -> None:
        self._http = http
        self._base = events_base(mcp_url)

    async def open(self, session_id: str) -> SessionEvents | None:
        """The open stream, or None when the server has none."""
        request = self._http.build_request(
            "GET",
            f"{self._base}/v1/sessions/{session_id}/events",
            headers={"Accept": "text/event-stream"},
            timeout=STREAM_TIMEOUT,
        )
        try:
            response = await self._http.send(request, stream=True)
        except httpx2.TransportError:
            return None  # no stream to be had: the progress of the client's own calls it is
        if response.status_code in _NOT_OFFERED:
            await response.aclose()
            return None
        if response.status_code != 200:
            await response.aclose()
            raise ProtocolError(
                response.status_code, f"the event stream of {session_id} answered {response.status_code}"
            )
        return SessionEvents(response)
