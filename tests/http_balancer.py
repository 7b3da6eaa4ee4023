"""A load balancer for the tests: one address in front of several `parley serve --http` replicas,
as a deployment puts them behind one.

`sticky=False` sends each request to the next replica in turn (no affinity at all); `sticky=True`
sends a request that carries an `Mcp-Session-Id` to the replica that issued that id (what a load
balancer hashing that header does) and the others in turn. Bodies stream both ways, so SSE streams
and progress pass as they come. `routed` records which replica each request reached.
`strip_prefix` makes it a reverse proxy that serves parley under a path and removes that path
before passing a request on (as nginx's `location /parley/ { proxy_pass http://parley/; }`).
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import uvicorn
from starlette.types import Receive, Scope, Send

from parley.tls import http_client

_SESSION = b"mcp-session-id"
# Headers that describe one hop, not the message.
_HOP = {b"host", b"connection", b"keep-alive", b"transfer-encoding", b"content-length"}


class _Quiet(uvicorn.Server):
    """uvicorn without its signal handlers: the test process keeps its own."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class Balancer:
    backends: list[str]  # base URLs, e.g. http://127.0.0.1:8123
    sticky: bool = False
    strip_prefix: str = ""
    routed: list[tuple[str, str]] = field(default_factory=list)  # (backend, HTTP method)
    url: str = ""
    _pins: dict[bytes, str] = field(default_factory=dict)
    _turns: Iterator[int] = field(default_factory=itertools.count)

    def _next(self) -> str:
        return self.backends[next(self._turns) % len(self.backends)]

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Balancer]:
        """Serve on a free loopback port (`url` then names its /mcp) while the context is open."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            server = _Quiet(uvicorn.Config(self, log_level="warning", lifespan="off"))
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: server.serve(sockets=[sock]))
                # uvicorn exposes only a flag for "listening"; there is no event to await.
                while not server.started:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
                self.url = f"http://127.0.0.1:{port}/mcp"
                try:
                    yield self
                finally:
                    # Stopped the way uvicorn stops (a cancelled uvicorn leaves its state behind).
                    server.should_exit = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k not in _HOP]
        pinned = dict(scope["headers"]).get(_SESSION) if self.sticky else None
        backend = self._pins.get(pinned, "") if pinned else ""
        backend = backend or self._next()
        self.routed.append((backend, scope["method"]))
        query = scope.get("query_string", b"").decode()
        path = scope["path"]
        if self.strip_prefix and path.startswith(self.strip_prefix + "/"):
            path = path[len(self.strip_prefix) :]
        target = backend + path + (f"?{query}" if query else "")
        async with http_client(timeout=None) as http:
            request = http.build_request(scope["method"], target, headers=headers, content=body)
            try:
                response = await http.send(request, stream=True)
            except httpx2.TransportError:
                await _reply(send, 502, b"the replica did not answer")
                return
            try:
                issued = response.headers.get("mcp-session-id")
                if self.sticky and issued:
                    self._pins[issued.encode()] = backend
                out: list[Any] = [(k.lower(), v) for k, v in response.headers.raw if k.lower() not in _HOP]
                await send({"type": "http.response.start", "status": response.status_code, "headers": out})
                try:
                    async for chunk in response.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                except httpx2.TransportError:
                    pass  # the replica went away mid-stream: end the stream here too
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                await response.aclose()


async def _reply(send: Send, status: int, text: bytes) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]}
    )
    await send({"type": "http.response.body", "body": text, "more_body": False})
