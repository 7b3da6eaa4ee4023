"""What McpToolSources keeps per server: a cached listing, a connection's slot, a request's time
limit that a question to the user puts back, and the bearer tokens of per-user OAuth servers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import anyio
from mcp.types import ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult, Tool

from parley.config import McpServerConfig
from parley.runtime.mcp.connection import Asker, McpConnection


@dataclass(slots=True)
class Listing:
    """A server's cached tool listing (one per principal for a per-principal server)."""

    tools: list[Tool] | None = None
    expires_at: float = 0.0
    failures: int = 0
    retry_at: float = 0.0
    error: str | None = None
    refreshing: bool = False
    # Set once the warm-up's first listing ended (a turn that needs the tools waits for it
    # instead of listing a second time).
    warmed: anyio.Event | None = None


@dataclass(slots=True)
class Slot:
    """Where one connection is kept, and the lock that makes it once."""

    lock: anyio.Lock = field(default_factory=anyio.Lock)
    connection: McpConnection | None = None


class Limit:
    """A request's time limit, put back while the server's question waits for the user: the time
    to answer is the asker's own bound (input_wait_s), not the call's."""

    def __init__(self) -> None:
        self.scope: anyio.CancelScope | None = None

    def extended_by(self, asker: Asker) -> Asker:
        async def ask(params: ElicitRequestFormParams | ElicitRequestURLParams) -> ElicitResult:
            scope = self.scope
            started, deadline = anyio.current_time(), scope.deadline if scope is not None else math.inf
            if scope is not None:
                scope.deadline = math.inf
            try:
                return await asker(params)
            finally:
                if scope is not None:
                    # The question's time does not count against the call.
                    scope.deadline = deadline + (anyio.current_time() - started)

        return ask


class BearerTokens(Protocol):
    """Each principal's bearer token for a user_oauth server (runtime/oauth/bearer.py)."""

    async def access_token(self, server: str, principal: str) -> str | None: ...

    def rejected(self, server: str, principal: str, token: str) -> None: ...


def per_principal(cfg: McpServerConfig) -> bool:
    """Whether the server's connections and listings are each principal's own."""
    return bool(cfg.headers_by_principal) or cfg.auth is not None
