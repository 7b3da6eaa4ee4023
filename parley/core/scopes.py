"""The scopes a caller's token may carry and the principal of unauthenticated callers: what the
configuration (auth tokens, `users:`, `approvers:`) and the access rules (runtime/access.py) both
name. A leaf module: it imports nothing of parley."""

from __future__ import annotations

USE = "parley:use"
ADMIN = "parley:admin"
METRICS = "parley:metrics"
SCOPES = (USE, ADMIN, METRICS)

# The owner of everything made over stdio and over HTTP without authentication.
LOCAL = "local"
