"""An MCP tool result -> what parley stores and the model sees.

Text is joined; images and audio are kept as media (never inlined as base64 text: a model that
takes media gets them, others read a one-line description); structuredContent is kept; text
over the configured size is cut with a note saying so. Results are untrusted data: they are
stored and shown, never interpreted.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

# A single media item larger than this (base64 characters) is described, not stored.
MAX_MEDIA_CHARS = 2_000_000


def _media(kind: str, mime_type: str, data: str) -> tuple[dict[str, Any] | None, str]:
    size = len(data) * 3 // 4
    description = f"[{kind}: {mime_type}, {size} bytes]"
    if len(data) > MAX_MEDIA_CHARS:
        return None, description[:-1] + ", too large to keep]"
    return {"type": kind, "mime_type": mime_type, "data": data}, description


def convert_result(result: CallToolResult, max_chars: int) -> dict[str, Any]:
    texts: list[str] = []
    media: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, TextContent):
            texts.append(block.text)
        elif isinstance(block, ImageContent | AudioContent):
            kind = "image" if isinstance(block, ImageContent) else "audio"
            item, description = _media(kind, block.mime_type, block.data)
            texts.append(description)
            if item is not None:
                media.append(item)
        elif isinstance(block, ResourceLink):
            texts.append(f"[resource link: {block.name} <{block.uri}>]")
        elif isinstance(block, EmbeddedResource):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                texts.append(resource.text)
            elif isinstance(resource, BlobResourceContents):
                mime = resource.mime_type or "application/octet-stream"
                item, description = _media("resource", mime, resource.blob)
                texts.append(f"{description} <{resource.uri}>")
                if item is not None:
                    media.append(item)
    structured = result.structured_content
    if not texts and structured is not None:
        texts.append(json.dumps(structured, ensure_ascii=False))
    text = "\n".join(texts)
    truncated = len(text) > max_chars
    if truncated:
        text = (
            text[:max_chars]
            + f"\n[truncated: the result has {len(text)} characters; only the first {max_chars} are shown]"
        )
    stored: dict[str, Any] = {"text": text, "is_error": bool(result.is_error)}
    if media:
        stored["media"] = media
    if structured is not None:
        stored["structured"] = structured
    if truncated:
        stored["truncated"] = True
    return stored
