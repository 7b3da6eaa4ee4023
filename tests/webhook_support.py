"""A webhook receiver for the tests: a real HTTP server (Starlette on uvicorn) on loopback that
records every request and answers each path as the test says (fail N times, then succeed;
always fail; take its time)."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support import TEST_DEADLINE_S

SECRET = "whsec_" + "c2VjcmV0LW9mLXRoZS10ZXN0LXJlY2VpdmVy"  # base64 of "secret-of-the-test-receiver"


@dataclass(frozen=True, slots=True)
class Received:
    """One request as the receiver saw it, and how it answered."""

    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def payload(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.body)
        return loaded


@dataclass
class Receiver:
    port: int = 0
    # Per path: how many requests fail (500) before the path succeeds; -1: every one fails.
    failures: dict[str, int] = field(default_factory=dict)
    # Per path: seconds each answer takes.
    delays: dict[str, float] = field(default_factory=dict)
    # Paths that answer 307 to /elsewhere.
    redirects: set[str] = field(default_factory=set)
    received: list[Received] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str, status: int | None = None) -> list[Received]:
        return [r for r in self.received if r.path == path and (status is None or r.status == status)]

    async def _hook(self, request: Request) -> Response:
        path = request.url.path
        body = await request.body()
        await anyio.sleep(self.delays.get(path, 0.0))
        if path in self.redirects:
            self.received.append(Received(path, dict(request.headers), body, 307))
            return Response(status_code=307, headers={"location": self.url("/elsewhere")})
        left = self.failures.get(path, 0)
        status = 500 if left != 0 else 200
        if left > 0:
            self.failures[path] = left - 1
        self.received.append(Received(path, dict(request.headers), body, status))
        return Response(status_code=status)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/{path:path}", self._hook, methods=["POST"])])


@asynccontextmanager
async def serving_receiver(receiver: Receiver | None = None) -> AsyncIterator[Receiver]:
    receiver = receiver or Receiver()
    # receiver.port: a port chosen before (0: any free one).
    server = uvicorn.Server(
        uvicorn.Config(
            receiver.app(), host="127.0.0.1", port=receiver.port, log_level="warning", lifespan="off"
        )
    )
    server.capture_signals = _no_signals  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(TEST_DEADLINE_S):
            while not server.started:  # noqa: ASYNC110 - uvicorn exposes only a flag
                await anyio.sleep(0.02)
        receiver.port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield receiver
        finally:
            server.should_exit = True


@contextmanager
def _no_signals() -> Iterator[None]:
    yield


def free_port() -> int:
    """A loopback port nothing listens on now (for a receiver started later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
