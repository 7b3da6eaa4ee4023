"""Attachments as MCP content blocks, made from bytes or files, for `Parley.start(...,
attachments=[...])` and `Session.send(..., attachments=[...])`."""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path
from typing import Any


def image(data: bytes, mime_type: str, name: str | None = None) -> dict[str, Any]:
    """An image block (`mime_type` such as image/png)."""
    return _media("image", data, mime_type, name)


def audio(data: bytes, mime_type: str, name: str | None = None) -> dict[str, Any]:
    """An audio block (`mime_type` such as audio/wav)."""
    return _media("audio", data, mime_type, name)


def text_document(uri: str, text: str, mime_type: str = "text/plain") -> dict[str, Any]:
    """An embedded text resource: every model reads its text."""
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "text": text}}


def resource_link(uri: str, name: str, mime_type: str | None = None) -> dict[str, Any]:
    """A link to a resource; parley keeps no bytes of it, the model reads its name and URI."""
    block: dict[str, Any] = {"type": "resource_link", "uri": uri, "name": name}
    if mime_type is not None:
        block["mimeType"] = mime_type
    return block


def from_file(path: str | Path) -> dict[str, Any]:
    """A file as the block its type suggests: an image, a sound, a text document, or other bytes
    as an embedded resource (the server's attachments.mime_types decides what it takes)."""
    file = Path(path)
    mime_type = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    data = file.read_bytes()
    if mime_type.startswith("image/"):
        return image(data, mime_type, file.name)
    if mime_type.startswith("audio/"):
        return audio(data, mime_type, file.name)
    uri = file.resolve().as_uri()
    if mime_type.startswith("text/") or mime_type == "application/json":
        return text_document(uri, data.decode("utf-8"), mime_type)
    blob = base64.b64encode(data).decode("ascii")
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "blob": blob}}


def _media(kind: str, data: bytes, mime_type: str, name: str | None) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": kind,
        "data": base64.b64encode(data).decode("ascii"),
        "mimeType": mime_type,
    }
    if name is not None:
        block["name"] = name
    return block
