"""Streamable HTTP: the same tools at exactly /mcp, plus /healthz."""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from contextlib import contextmanager
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from parley.errors import ConfigError

LOOPBACK_NAMES = ("localhost",)

Health = Callable[[], Awaitable[dict[str, Any]]]


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, insecure_bind: bool) -> None:
    """Refuse a non-loopback address: parley has no authentication yet, so anyone who can reach
    the port could drive every session."""
    if not is_loopback(host) and not insecure_bind:
        raise ConfigError(
            "PARLEY-C010",
            "(command line)",
            "--host",
            f"{host} is not a loopback address and parley has no authentication yet; bind 127.0.0.1, "
            "or pass --insecure-bind if a proxy in front of parley authenticates callers (unsafe otherwise)",
        )


def build_http_app(server: MCPServer[Any], host: str, health: Health) -> Starlette:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", **(await health())})

    server.custom_route("/healthz", methods=["GET"])(healthz)

    # Stateful streaming (SSE) mode: progress notifications and, later, elicitation need it.
    # For a loopback host the SDK turns on Host/Origin validation against DNS rebinding.
    return server.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=False, json_response=False, host=host
    )


class QuietUvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: parley drains its sessions on SIGTERM itself,
    and uvicorn would re-raise the signal (killing the process) once it stops serving."""

    @contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield
