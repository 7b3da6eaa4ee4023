"""The scopes a caller's token may carry and the principal of unauthenticated callers: what the
configuration (auth tokens, `users:`, `approvers:`) and the access rules (runtime/access.py) both
name. A leaf module: it imports nothing of parley."""

from __future__ import annotations

USE = "parley:use"
ADMIN = "parley:admin"
METRICS = "parley:metrics"
# POST /v1/triggers/{name} with auth: bearer; a trigger may name its own, parley:trigger:<word>.
TRIGGER = "parley:trigger"
SCOPES = (USE, ADMIN, METRICS, TRIGGER)


def is_known_scope(scope: str) -> bool:
    """One of SCOPES, or a trigger's own scope (parley:trigger:<word>)."""
    return scope in SCOPES or (scope.startswith(TRIGGER + ":") and len(scope) > len(TRIGGER) + 1)


# The owner of everything made over stdio and over HTTP without authentication.
LOCAL = "local"
