"""The HTTP clients of one process share one TLS context.

httpx2 builds a new context for every client it makes, and each one reads the system's
certificate authorities again. That costs about 50 ms of CPU. parley makes clients at start-up,
per downstream connection and per principal, so it builds the context once and hands it to each.
The context is the one httpx2 would build (`SSL_CERT_FILE` and `SSL_CERT_DIR` included, unless a
client ignores the environment).
"""

from __future__ import annotations

import ssl
from functools import cache
from typing import Any

import httpx2


@cache
def shared_tls(trust_env: bool = True) -> ssl.SSLContext:
    """The process's TLS context for `trust_env`, made on first use. Contexts are safe to share."""
    return httpx2.create_ssl_context(trust_env=trust_env)


def http_client(**options: Any) -> httpx2.AsyncClient:
    """`httpx2.AsyncClient(**options)` on the shared TLS context (unless `verify` is given)."""
    options.setdefault("verify", shared_tls(bool(options.get("trust_env", True))))
    return httpx2.AsyncClient(**options)
