"""An attachment's bytes as an MCP content block, for get_session(attachment=<sha256>): the way
to fetch them over MCP (stdio has no /v1 route)."""

from __future__ import annotations

import base64

from mcp.types import (
    AudioContent,
    BlobResourceContents,
    EmbeddedResource,
    ImageContent,
    TextResourceContents,
)

from parley.core.records import AttachmentBlob
from parley.runtime.attachments import is_text

ContentBlock = ImageContent | AudioContent | EmbeddedResource


def attachment_block(session_id: str, blob: AttachmentBlob) -> ContentBlock:
    """Images and sounds as such; anything else as an embedded resource named by a parley URI."""
    data = base64.b64encode(blob.data).decode("ascii")
    if blob.mime_type.startswith("image/"):
        return ImageContent(type="image", data=data, mime_type=blob.mime_type)
    if blob.mime_type.startswith("audio/"):
        return AudioContent(type="audio", data=data, mime_type=blob.mime_type)
    uri = f"parley://sessions/{session_id}/attachments/{blob.sha256}"
    if is_text(blob.mime_type):
        text = blob.data.decode("utf-8", "replace")
        return EmbeddedResource(
            type="resource", resource=TextResourceContents(uri=uri, mime_type=blob.mime_type, text=text)
        )
    return EmbeddedResource(
        type="resource", resource=BlobResourceContents(uri=uri, mime_type=blob.mime_type, blob=data)
    )
