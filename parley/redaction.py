"""Removing secrets from text that came from outside: a provider's error message may repeat the
API key it was sent (some do, in a 401 or a stream error), and that text would otherwise reach
an exception, the log, the database and a caller.

One function, applied where provider text enters parley (the model clients) and again where
parley's own log records leave for an MCP client.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

REDACTED = "[redacted]"

# Secrets shorter than this are not searched for verbatim: replacing every "abc" in a message
# would mangle it and protect nothing (a real key is long).
MIN_SECRET_CHARS = 8

# The usual shapes of a credential in an error text or a header dump.
_CREDENTIAL_SHAPES = re.compile(
    r"""
    (?P<scheme>\b(?:Bearer|Basic)\s+)[A-Za-z0-9._~+/=-]{6,}            # Authorization values
    | (?P<header>\b(?:x-api-key|api[-_]?key|x-goog-api-key|authorization)\b["']?\s*[:=]\s*["']?
        (?:(?:Bearer|Basic)\s+)?)
      [^\s"',;}]{6,}                                                    # key: value, key=value
    | \bsk-[A-Za-z0-9][A-Za-z0-9_-]{7,}                                 # sk-..., sk-ant-..., sk-proj-...
    """,
    re.IGNORECASE | re.VERBOSE,
)


def _credential(match: re.Match[str]) -> str:
    prefix = match.group("scheme") or match.group("header") or ""
    return prefix + REDACTED


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` without the given secret values and without anything shaped like a credential."""
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_CHARS:
            text = text.replace(secret, REDACTED)
    return _CREDENTIAL_SHAPES.sub(_credential, text)


# A database URL's password: in the user part (scheme://user:PASSWORD@host) or as a parameter
# (?password=... / &password=...).
_URL_USERINFO = re.compile(
    # Up to the last @ before the host, so a password with an (unencoded) @ is masked whole.
    r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:@/?#]*:)[^/?#]*(?=@[^@/?#]*(?:[/?#]|$))"
)
_URL_PASSWORD_PARAM = re.compile(r"(?P<head>[?&]password=)[^&#]*", re.IGNORECASE)


def mask_url(url: str) -> str:
    """`url` with its password, if it holds one, replaced by [redacted]: what logs, messages and
    /healthz may show of a database URL."""
    url = _URL_USERINFO.sub(lambda m: m.group("head") + REDACTED, url, count=1)
    return _URL_PASSWORD_PARAM.sub(lambda m: m.group("head") + REDACTED, url)


def shown_host(url: str) -> str:
    """The host (and port) of `url` as people are shown it: never a user name, password, path or
    query it may carry; "?" for what cannot be read."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:
        return "?"
    try:
        port = parts.port
    except ValueError:  # not a number: the connection will say so
        port = None
    return f"{hostname or '?'}{f':{port}' if port else ''}"
