"""Attachments: the MCP content blocks a message carries besides its text.

A caller sends images, audio, embedded resources and resource links as MCP content blocks
(`{"type": "image", "data": <base64>, "mimeType": ...}`, ...). They are checked here, at the
boundary, before anything is stored: a malformed, oversized or unaccepted one refuses the whole
call, naming the field and the fix. The bytes are stored once by their sha256 (with the message,
in its transaction); the message keeps a reference (`kind, name, mime_type, size, sha256, uri`),
which is what transcripts, get_session and compaction see. Before a model call the references
get their bytes back (`with_attachment_data`); each provider passes on what its wire format
takes and describes the rest as text (`describe`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import unquote

import anyio
from anyio.abc import TaskStatus

from parley.config.attachments import AttachmentsConfig
from parley.core.records import AttachmentBlob
from parley.errors import InvalidArgument
from parley.runtime.background import log_pass_failure
from parley.runtime.model import ChatMessage
from parley.storage.ports import AttachmentStore

logger = logging.getLogger(__name__)

FIELD = "attachments"
KINDS = ("image", "audio", "resource", "resource_link")
# What each kind of block may hold (annotations and _meta are MCP's own, kept out of storage;
# name is parley's: how the transcript names an image or a sound).
_KEYS = {
    "image": {"type", "data", "mimeType", "name", "annotations", "_meta"},
    "audio": {"type", "data", "mimeType", "name", "annotations", "_meta"},
    "resource": {"type", "resource", "annotations", "_meta"},
    "resource_link": {
        "type",
        "uri",
        "name",
        "title",
        "description",
        "mimeType",
        "size",
        "annotations",
        "_meta",
    },
}
_RESOURCE_KEYS = {"uri", "mimeType", "text", "blob", "_meta"}
# The first bytes of each image type models take: a picture that says it is a PNG and is not
# would be refused by the provider on every later call of the session.
_IMAGE_MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
# Text resources are shown to every model as text.
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/yaml")
MAX_NAME_CHARS = 200
MAX_URI_CHARS = 2048


def is_text(mime_type: str) -> bool:
    return any(mime_type.startswith(t) if t.endswith("/") else mime_type == t for t in TEXT_TYPES)


def check_attachments(
    value: Any, config: AttachmentsConfig
) -> tuple[list[dict[str, Any]], tuple[AttachmentBlob, ...]]:
    """The references to store with the message and the bytes to store once each, or
    InvalidArgument naming the first attachment that cannot be taken (nothing is stored then)."""
    if value is None:
        return [], ()
    if not isinstance(value, list):
        raise InvalidArgument(
            FIELD, "must be a list of MCP content blocks (image, audio, resource, resource_link)"
        )
    if len(value) > config.max_count:
        raise InvalidArgument(
            FIELD,
            f"has {len(value)} attachments; this server takes at most {config.max_count} per message "
            "(attachments.max_count). Send fewer, or split them over several messages.",
        )
    refs: list[dict[str, Any]] = []
    blobs: dict[str, AttachmentBlob] = {}
    for index, block in enumerate(value):
        ref, blob = _check_block(f"{FIELD}[{index}]", block, config)
        refs.append(ref)
        if blob is not None:
            blobs.setdefault(blob.sha256, blob)
    return refs, tuple(blobs.values())


def _check_block(
    where: str, block: Any, config: AttachmentsConfig
) -> tuple[dict[str, Any], AttachmentBlob | None]:
    if not isinstance(block, dict):
        raise InvalidArgument(where, "must be an object: an MCP content block with a type")
    kind = block.get("type")
    if kind not in KINDS:
        raise InvalidArgument(
            f"{where}.type",
            f"is {kind!r}; an attachment is one of {', '.join(KINDS)} (send plain text as the message itself)",
        )
    unknown = sorted(set(block) - _KEYS[kind])
    if unknown:
        raise InvalidArgument(
            f"{where}.{unknown[0]}", f"is not a field of a {kind} block; use {', '.join(sorted(_KEYS[kind]))}"
        )
    if kind == "resource_link":
        return _check_link(where, block, config), None
    if kind == "resource":
        return _check_resource(where, block, config)
    mime_type = _mime(f"{where}.mimeType", block.get("mimeType"), config, required=True)
    if not mime_type.startswith(f"{kind}/"):
        raise InvalidArgument(f"{where}.mimeType", f"is {mime_type}, not an {kind} type ({kind}/...)")
    data = _decode(f"{where}.data", block.get("data"), config)
    blob = _blob(f"{where}.data", mime_type, data)
    name = _name(f"{where}.name", block.get("name")) or f"{kind}-{blob.sha256[:12]}"
    return _ref(kind, name, blob, None), blob


def _check_resource(
    where: str, block: dict[str, Any], config: AttachmentsConfig
) -> tuple[dict[str, Any], AttachmentBlob]:
    resource = block.get("resource")
    if not isinstance(resource, dict):
        raise InvalidArgument(
            f"{where}.resource", "must be an object: {uri, mimeType, text} or {uri, mimeType, blob}"
        )
    unknown = sorted(set(resource) - _RESOURCE_KEYS)
    if unknown:
        raise InvalidArgument(
            f"{where}.resource.{unknown[0]}",
            f"is not a field of a resource; use {', '.join(sorted(_RESOURCE_KEYS))}",
        )
    uri = _uri(f"{where}.resource.uri", resource.get("uri"))
    has_text, has_blob = "text" in resource, "blob" in resource
    if has_text == has_blob:
        raise InvalidArgument(f"{where}.resource", "needs exactly one of text (a string) or blob (base64)")
    if has_text:
        text = resource["text"]
        if not isinstance(text, str):
            raise InvalidArgument(f"{where}.resource.text", "must be a string")
        data = text.encode("utf-8", "surrogatepass")
        if len(data) > config.max_bytes:
            raise InvalidArgument(f"{where}.resource.text", _too_large(len(data), config))
        mime_type = _mime(f"{where}.resource.mimeType", resource.get("mimeType") or "text/plain", config)
        if not is_text(mime_type):
            raise InvalidArgument(
                f"{where}.resource.mimeType",
                f"is {mime_type}, not a text type; send other bytes as blob (base64)",
            )
        blob = _blob(f"{where}.resource.text", mime_type, data)
    else:
        data = _decode(f"{where}.resource.blob", resource["blob"], config)
        mime_type = _mime(f"{where}.resource.mimeType", resource.get("mimeType"), config, required=True)
        blob = _blob(f"{where}.resource.blob", mime_type, data)
    # The URI's last part, as a person wrote it (a file name in a URI is percent-encoded).
    name = unquote(uri.rstrip("/").rsplit("/", 1)[-1])[:MAX_NAME_CHARS] or uri[:MAX_NAME_CHARS]
    return _ref("resource", name, blob, uri), blob


def _check_link(where: str, block: dict[str, Any], config: AttachmentsConfig) -> dict[str, Any]:
    uri = _uri(f"{where}.uri", block.get("uri"))
    name = _name(f"{where}.name", block.get("name"))
    if name is None:
        raise InvalidArgument(f"{where}.name", "is required: a resource link names its resource")
    mime_type = block.get("mimeType")
    if mime_type is not None:
        mime_type = _mime(f"{where}.mimeType", mime_type, config)
    size = block.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise InvalidArgument(f"{where}.size", "must be a whole number of bytes (0 or more)")
    return {
        "kind": "resource_link",
        "name": name,
        "mime_type": mime_type,
        "size": size,
        "sha256": None,
        "uri": uri,
    }


def _mime(where: str, value: Any, config: AttachmentsConfig, *, required: bool = False) -> str:
    if value is None and required:
        raise InvalidArgument(where, "is required: the media type of the bytes, e.g. image/png")
    if not isinstance(value, str) or "/" not in value or len(value) > 255:
        raise InvalidArgument(where, "must be a media type such as image/png")
    mime_type = value.split(";", 1)[0].strip().lower()
    if not config.accepts(mime_type):
        raise InvalidArgument(
            where,
            f"{mime_type} is not accepted by this server; it takes {', '.join(config.mime_types)} "
            "(attachments.mime_types in parley.yaml)",
        )
    return mime_type


def _decode(where: str, value: Any, config: AttachmentsConfig) -> bytes:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(where, "must be the bytes as a base64 string")
    # Refused before decoding: base64 takes 4 characters per 3 bytes.
    if len(value) // 4 * 3 > config.max_bytes + 2:
        raise InvalidArgument(where, _too_large(len(value) // 4 * 3, config))
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument(
            where, "is not valid base64 (standard alphabet A-Z a-z 0-9 + /, padded with =, no line breaks)"
        ) from None
    if len(data) > config.max_bytes:
        raise InvalidArgument(where, _too_large(len(data), config))
    if not data:
        raise InvalidArgument(where, "is empty; attach something")
    return data


def _too_large(size: int, config: AttachmentsConfig) -> str:
    return (
        f"is about {size} bytes; this server takes at most {config.max_bytes} bytes per attachment "
        "(attachments.max_bytes). Send a smaller file (a smaller image, a shorter text)."
    )


def _uri(where: str, value: Any) -> str:
    if not isinstance(value, str) or ":" not in value or len(value) > MAX_URI_CHARS:
        raise InvalidArgument(where, f"must be a URI (scheme:..., at most {MAX_URI_CHARS} characters)")
    return value


def _name(where: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_CHARS:
        raise InvalidArgument(where, f"must be a name of 1 to {MAX_NAME_CHARS} characters")
    return value


def _blob(where: str, mime_type: str, data: bytes) -> AttachmentBlob:
    magic = _IMAGE_MAGIC.get(mime_type)
    if magic is not None and not data.startswith(magic):
        raise InvalidArgument(
            where, f"is not a {mime_type} image (its first bytes say otherwise); send the file's bytes"
        )
    if is_text(mime_type):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument(where, f"is not UTF-8 text, as {mime_type} must be here") from None
    return AttachmentBlob(
        sha256=hashlib.sha256(data).hexdigest(), mime_type=mime_type, size=len(data), data=data
    )


def _ref(kind: str, name: str, blob: AttachmentBlob, uri: str | None) -> dict[str, Any]:
    return {
        "kind": kind,
        "name": name,
        "mime_type": blob.mime_type,
        "size": blob.size,
        "sha256": blob.sha256,
        "uri": uri,
    }


# ---------------------------------------------------------------------- what models are shown


def describe(ref: Mapping[str, Any]) -> str:
    """One line that stands for an attachment where its bytes cannot go (text of text resources
    follows it, see `as_text`)."""
    kind = {"resource_link": "resource link", "resource": "document"}.get(
        ref.get("kind", ""), ref.get("kind", "")
    )
    facts = [str(ref["mime_type"])] if ref.get("mime_type") else []
    if ref.get("size") is not None:
        facts.append(f"{ref['size']} bytes")
    where = f" <{ref['uri']}>" if ref.get("kind") == "resource_link" and ref.get("uri") else ""
    return f"[attached {kind} '{ref.get('name', '')}'{where}{' (' + ', '.join(facts) + ')' if facts else ''}]"


def as_text(item: Mapping[str, Any]) -> str:
    """An attachment as text for a model that cannot take it: its description, and the text of a
    text document."""
    line = describe(item)
    return f"{line}\n{item['text']}" if isinstance(item.get("text"), str) else line


def with_descriptions(message: ChatMessage) -> str:
    """A user message's text followed by its attachments as text."""
    return (
        "\n".join([message.text, *(as_text(a) for a in message.attachments)])
        if message.attachments
        else message.text
    )


class AttachmentBytes:
    """The bytes of attachments recently shown to a model, kept in this process (the least recently
    used go first beyond `max_bytes`), so a long conversation's pictures are not read again for
    every model call. Bytes never change under their hash, so a kept copy is always right."""

    def __init__(self, store: AttachmentStore, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._store = store
        self._max_bytes = max_bytes
        self._kept: OrderedDict[str, AttachmentBlob] = OrderedDict()
        self._size = 0

    async def get(self, hashes: Sequence[str]) -> dict[str, AttachmentBlob]:
        found = {h: self._kept[h] for h in hashes if h in self._kept}
        for sha256 in found:
            self._kept.move_to_end(sha256)
        missing = [h for h in hashes if h not in found]
        if missing:
            for sha256, blob in (await self._store.attachment_data(missing)).items():
                found[sha256] = blob
                self._keep(blob)
        return found

    def _keep(self, blob: AttachmentBlob) -> None:
        if blob.sha256 in self._kept or blob.size > self._max_bytes:
            return
        self._kept[blob.sha256] = blob
        self._size += blob.size
        while self._size > self._max_bytes:
            _, gone = self._kept.popitem(last=False)
            self._size -= gone.size


async def with_attachment_data(
    messages: Sequence[ChatMessage], store: AttachmentStore | AttachmentBytes
) -> tuple[ChatMessage, ...]:
    """The messages with their attachments' bytes loaded for one model call: images and audio as
    `data` (base64), text documents as `text`. Bytes no longer stored stay a description."""
    hashes = sorted({a["sha256"] for m in messages for a in m.attachments if a.get("sha256")})
    if not hashes:
        return tuple(messages)
    blobs = await (store.get(hashes) if isinstance(store, AttachmentBytes) else store.attachment_data(hashes))
    out = []
    for message in messages:
        if message.attachments:
            loaded = tuple(_loaded(a, blobs.get(a.get("sha256") or "")) for a in message.attachments)
            message = replace(message, attachments=loaded)
        out.append(message)
    return tuple(out)


def _loaded(ref: Mapping[str, Any], blob: AttachmentBlob | None) -> dict[str, Any]:
    item = dict(ref)
    if blob is None:
        return item
    if is_text(blob.mime_type):
        item["text"] = blob.data.decode("utf-8", "replace")
    else:
        item["data"] = base64.b64encode(blob.data).decode("ascii")
    return item


# ---------------------------------------------------------------------- deleted sessions' bytes


async def run_collect(
    store: AttachmentStore,
    clock: Callable[[], float],
    config: AttachmentsConfig,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Delete the bytes no session refers to any more (those of deleted sessions) now and every
    `collect_interval_s`, sparing those stored within `collect_grace_s`."""
    task_status.started()
    while True:
        try:
            collected = await store.collect_attachments(clock() - config.collect_grace_s)
            if collected:
                logger.info("deleted %d attachment(s) no session refers to any more", collected)
        except Exception:
            log_pass_failure(logger, "collecting unreferenced attachments")
        await anyio.sleep(config.collect_interval_s)
