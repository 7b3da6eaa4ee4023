"""Log records about one session.

A record made with `extra=about(session)` names the session and its owner. Besides going to
the server's own log, such a record may be forwarded to the MCP client that follows that session
(its owner's client, and nobody else's): see parley/server/client_logs.py. Records without these
attributes concern the process, not a caller, and never leave the server.

Write these messages for the session's owner: what happened to their session, with ids, never a
secret (provider errors are redacted before they get here) and never another session's data.
"""

from __future__ import annotations

from typing import Protocol

SESSION_ATTR = "parley_session_id"
OWNER_ATTR = "parley_owner"


class _OwnedSession(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def owner(self) -> str: ...


def about(session: _OwnedSession) -> dict[str, str]:
    """`extra=` for a log record about `session`."""
    return {SESSION_ATTR: session.id, OWNER_ATTR: session.owner}
