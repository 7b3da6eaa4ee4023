"""The HTTP event stream of a session (`GET /v1/sessions/{id}/events`, server-sent events).

`Session.events()` tries it first over HTTP: a server that answers 404 (or 405) has no stream (or
does not know the session), and the client falls back to the progress of its own calls. The stream
is opened at `?after=latest`, so a feed shows what happens from the moment it was made, not the
session's history. Each frame's data is one stored event, `{"seq", "kind", "data": {...}, ...}`;
events.from_stream maps it. The stream resumes by itself where it stopped (`Last-Event-ID`) when the
server cuts it off or the connection drops, for up to the client's reconnect window; the events
are numbered, so nothing is missed or repeated.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
import httpx2

from parley.client.errors import ConnectionFailed, ProtocolError
from parley.client.events import Event, Notice, Text, from_stream

# A stream may be quiet for as long as nothing happens in the session: no read timeout.
STREAM_TIMEOUT = httpx2.Timeout(30.0, read=None)
# Statuses that mean "this server has no event stream".
_NOT_OFFERED = frozenset({404, 405})
# The pause between attempts to reopen a stream that dropped.
_REOPEN_PAUSE_S = 0.2


def events_base(mcp_url: str) -> str:
    """Where /v1 lives beside an MCP endpoint: `https://host/prefix/mcp` -> `https://host/prefix`."""
    base = mcp_url.rstrip("/")
    return base.removesuffix("/mcp")


@dataclass(frozen=True, slots=True)
class _Frame:
    event_id: str | None
    body: dict[str, Any]


class SessionEvents:
    """One session's stream, reopened where it stopped when it drops; use as an async context
    manager and iterate it. Iteration ends when the session is deleted."""

    def __init__(self, opener: EventStream, session_id: str, response: httpx2.Response) -> None:
        self._opener = opener
        self._session_id = session_id
        self._response: httpx2.Response | None = response
        self._last_id: str | None = None
        # Text that went out piece by piece while it streamed is not repeated by the model's step.
        self._streamed = False

    async def __aenter__(self) -> SessionEvents:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            await response.aclose()

    async def __aiter__(self) -> AsyncIterator[Event]:
        while self._response is not None:
            ended = False
            try:
                async for found in _frames(self._response):
                    if found.event_id is not None:
                        self._last_id = found.event_id
                    kind = str(found.body.get("kind") or "")
                    if kind == "session_deleted":
                        ended = True
                        break
                    for event in self._events(kind, found.body):
                        yield event
            except httpx2.TransportError:
                pass  # the connection dropped: reopen where it stopped
            if ended:
                await self.close()
                return
            if self._response is None:
                return  # closed while reading
            await self._response.aclose()
            self._response = await self._opener.reopen(self._session_id, self._last_id)

    def _events(self, kind: str, body: dict[str, Any]) -> list[Event]:
        if kind == "reset":
            # Events this feed had not seen yet are no longer kept: say so, and go on from now.
            return [Notice("some events of this session are no longer kept; following from now")]
        fields = body.get("data")
        events = from_stream(kind, fields if isinstance(fields, dict) else {})
        if kind == "text_delta":
            self._streamed = True
        elif kind == "attempt_discarded":
            self._streamed = False  # the retry's text replaces what went out
        elif kind == "model_step" and self._streamed:
            self._streamed = False
            events = [e for e in events if not isinstance(e, Text)]
        return events


async def _frames(response: httpx2.Response) -> AsyncIterator[_Frame]:
    """The stream's events with JSON object data (comments, `retry:` and other data skipped)."""
    event_id: str | None = None
    data_lines: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            body = _json_object("\n".join(data_lines))
            if body is not None:
                yield _Frame(event_id, body)
            event_id, data_lines = None, []
        elif line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data_lines.append(line[5:].removeprefix(" "))


def _json_object(data: str) -> dict[str, Any] | None:
    if not data:
        return None
    try:
        body: Any = json.loads(data)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


class EventStream:
    """Opens the event stream of a session on an HTTP server, while the server offers it."""

    def __init__(self, http: httpx2.AsyncClient, mcp_url: str, *, reconnect_s: float) -> None:
        self._http = http
        self._base = events_base(mcp_url)
        self._reconnect_s = reconnect_s

    async def open(self, session_id: str) -> SessionEvents | None:
        """The stream from now on, or None when the server has none."""
        try:
            response = await self._send(session_id, {"after": "latest"}, {})
        except httpx2.TransportError:
            return None  # no stream to be had: the progress of the client's own calls it is
        if response.status_code in _NOT_OFFERED:
            await response.aclose()
            return None
        await _check(response, session_id)
        return SessionEvents(self, session_id, response)

    async def reopen(self, session_id: str, last_id: str | None) -> httpx2.Response | None:
        """The stream again after the last event seen (None: the session is gone), trying for up
        to the reconnect window."""
        params = {} if last_id is not None else {"after": "latest"}
        headers = {"Last-Event-ID": last_id} if last_id is not None else {}
        deadline = anyio.current_time() + self._reconnect_s
        while True:
            try:
                response = await self._send(session_id, params, headers)
            except httpx2.TransportError as exc:
                if anyio.current_time() >= deadline:
                    raise ConnectionFailed(
                        f"the event stream of {session_id} dropped and could not be reopened "
                        f"within {self._reconnect_s:g} s: {exc}"
                    ) from exc
                await anyio.sleep(_REOPEN_PAUSE_S)
                continue
            if response.status_code == 404:
                await response.aclose()
                return None
            await _check(response, session_id)
            return response

    async def _send(
        self, session_id: str, params: dict[str, str], headers: dict[str, str]
    ) -> httpx2.Response:
        request = self._http.build_request(
            "GET",
            f"{self._base}/v1/sessions/{session_id}/events",
            params=params,
            headers={"Accept": "text/event-stream", **headers},
            timeout=STREAM_TIMEOUT,
        )
        return await self._http.send(request, stream=True)


async def _check(response: httpx2.Response, session_id: str) -> None:
    if response.status_code != 200:
        await response.aclose()
        raise ProtocolError(
            response.status_code, f"the event stream of {session_id} answered {response.status_code}"
        )
