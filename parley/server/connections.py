"""The per-client connection behind a request's session (its per-connection state and teardown)."""

from __future__ import annotations

from typing import Any

from mcp.server.connection import Connection


def connection_of(session: Any) -> Connection | None:
    """The `Connection` of a request's `ServerSession`, or None if there is none.

    SDK 2.3 keeps it private on the session; per-connection state (a log level, the watchers
    pushing to the client) must live there and end when the client goes."""
    connection = getattr(session, "_connection", None)
    return connection if isinstance(connection, Connection) else None
