"""The AI SDK's file parts (`{type: "file", mediaType, filename?, url}`) of a chat's user message,
as the MCP content blocks parley's attachments are (runtime/attachments.py checks them then, with
the server's limits, as it checks those of the tools and /v1).

Only `data:` URLs are taken: the bytes come with the request. A URL of any other scheme is refused,
never fetched (a client must not make the server reach where it says). An image becomes an image
block, a sound an audio block, anything else an embedded resource named by its file name.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any
from urllib.parse import quote, unquote_to_bytes

from parley.server.v1_common import BadRequest

# data:[<media type>][;base64],<data>
_DATA_URL = re.compile(r"data:([^,;]*)((?:;[^,;]*)*),(.*)", re.DOTALL)


def file_attachments(message: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The attachments of the message's file parts (None: it has none)."""
    blocks = []
    for index, part in enumerate(message.get("parts") or []):
        if isinstance(part, dict) and part.get("type") == "file":
            blocks.append(_block(f"the last message's parts[{index}]", part))
    return blocks or None


def _block(where: str, part: dict[str, Any]) -> dict[str, Any]:
    url = part.get("url")
    if not isinstance(url, str) or not url.startswith("data:"):
        raise BadRequest(
            f"{where}.url must be a data: URL with the file's bytes (parley never fetches a URL a client "
            f"names; convert the file to a data URL first), got {str(url)[:40]!r}; nothing was sent"
        )
    match = _DATA_URL.fullmatch(url)
    if match is None:
        raise BadRequest(f"{where}.url is not a data: URL (data:<type>;base64,<data>); nothing was sent")
    declared, params, payload = match.groups()
    media_type = part.get("mediaType") or declared or "application/octet-stream"
    if not isinstance(media_type, str):
        raise BadRequest(f"{where}.mediaType must be a media type such as image/png; nothing was sent")
    if ";base64" in params:
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"{where}.url has data that is not base64; nothing was sent") from None
    else:
        data = unquote_to_bytes(payload)
    encoded = base64.b64encode(data).decode()
    filename = part.get("filename")
    name = filename if isinstance(filename, str) and filename else None
    kind = media_type.split("/", 1)[0]
    if kind in ("image", "audio"):
        block: dict[str, Any] = {"type": kind, "data": encoded, "mimeType": media_type}
        if name:
            block["name"] = name
        return block
    uri = "file:///" + quote(name or "attachment", safe="")
    return {"type": "resource", "resource": {"uri": uri, "mimeType": media_type, "blob": encoded}}
