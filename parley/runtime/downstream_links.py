"""A page a downstream MCP server asks the person to visit (its URL-mode elicitation), put to the
session's owner through a parley link (docs/credentials.md#pages-a-server-asks-you-to-open).

The question names the server and the page's host, never its address: the address is kept in the
question's record, and only the session's owner, signed in, gets it by opening the link
(`POST /v1/sessions/{id}/interrupts/{id}/open`), which is what tells the server "accept". parley
never fetches the page itself. The model never sees the address either.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from mcp.types import ElicitRequestURLParams

from parley.core.records import ToolCallRecord
from parley.redaction import shown_host

# The page of /ui that opens such a link (its route in ui/app.js).
OPEN_PAGE = "/ui/#/open/{session}/{interrupt}"
MAX_URL_CHARS = 4096
MAX_MESSAGE_CHARS = 2000
# Plain http only to this machine (a server under development); anything else must be https.
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
# The answer an opened page's question is resolved with.
OPENED = "opened"


def url_problem(url: str) -> str | None:
    """Why the page cannot be offered to a person (None: it can)."""
    if len(url) > MAX_URL_CHARS:
        return f"its URL is longer than {MAX_URL_CHARS} characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        return "its URL cannot be read"
    if not parts.hostname:
        return "its URL names no host"
    if parts.username is not None or parts.password is not None:
        return "its URL carries a user name or password"
    if parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in _LOOPBACK):
        return None
    return "its URL is not https (plain http is taken only for localhost)"


def link_payload(
    params: ElicitRequestURLParams, call: ToolCallRecord, interrupt_id: str, public_base: str
) -> dict[str, Any]:
    """The question's payload: what the person is told and the link they open; the page's own
    address only under `downstream`, which no view shows."""
    host = shown_host(params.url)
    message = " ".join(str(params.message).split())[:MAX_MESSAGE_CHARS]
    return {
        "question": f"{call.server} asks you to open a page at {host}: {message}",
        "choices": [],
        "allows_free_text": False,
        "server": call.server,
        "host": host,
        "connect_url": public_base + OPEN_PAGE.format(session=call.session_id, interrupt=interrupt_id),
        "downstream": {
            "server": call.server,
            "tool": call.tool or call.name,
            "mode": "in_place",
            "url": params.url,
            "elicitation_id": params.elicitation_id,
        },
        "tool": call.name,
    }
