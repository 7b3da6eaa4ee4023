"""Attachments at the boundary (what is refused, naming the field and the fix) and in each
provider's wire format (what a model that takes a kind gets, and the description the others read)."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from parley.config import load_config
from parley.config.attachments import AttachmentsConfig
from parley.core.ids import SessionId
from parley.core.records import AttachmentBlob, MessageRecord, QueuedMessageRecord, SessionRecord
from parley.core.transitions import starting
from parley.errors import InvalidArgument
from parley.runtime import attachments, compaction
from parley.runtime.demo_model import DemoModelClient
from parley.runtime.model import ChatMessage, ModelRequest
from parley.runtime.providers import anthropic, openai
from parley.runtime.transcript import to_chat_messages
from tests.support import open_test_store
from tests.test_config import assert_names, only_error, project

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
PNG_B64 = base64.b64encode(PNG).decode()
CONFIG = AttachmentsConfig(max_bytes=64, max_count=3)


def _image(**extra: Any) -> dict[str, Any]:
    return {"type": "image", "data": PNG_B64, "mimeType": "image/png", **extra}


def test_an_image_a_text_document_and_a_link_become_references_and_bytes_stored_once() -> None:
    document = {
        "type": "resource",
        "resource": {"uri": "file:///tmp/notes.md", "mimeType": "text/markdown", "text": "hi"},
    }
    link = {"type": "resource_link", "uri": "https://example.com/report.pdf", "name": "report.pdf"}
    refs, blobs = attachments.check_attachments(
        [_image(name="shot.png"), document, link, _image()][:3], CONFIG
    )
    digest = hashlib.sha256(PNG).hexdigest()
    assert refs == [
        {
            "kind": "image",
            "name": "shot.png",
            "mime_type": "image/png",
            "size": len(PNG),
            "sha256": digest,
            "uri": None,
        },
        {
            "kind": "resource",
            "name": "notes.md",
            "mime_type": "text/markdown",
            "size": 2,
            "sha256": hashlib.sha256(b"hi").hexdigest(),
            "uri": "file:///tmp/notes.md",
        },
        {
            "kind": "resource_link",
            "name": "report.pdf",
            "mime_type": None,
            "size": None,
            "sha256": None,
            "uri": "https://example.com/report.pdf",
        },
    ]
    assert [b.data for b in blobs] == [PNG, b"hi"]
    _, twice = attachments.check_attachments([_image(), _image(name="again.png")], CONFIG)
    assert len(twice) == 1


@pytest.mark.parametrize(
    ("blocks", "field", "says"),
    [
        ("x", "attachments", "must be a list"),
        ([_image()] * 4, "attachments", "at most 3 per message (attachments.max_count)"),
        ([{"type": "text", "text": "hi"}], "attachments[0].type", "send plain text as the message"),
        ([_image(data="not base64!")], "attachments[0].data", "not valid base64"),
        (
            [_image(data=base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"0" * 100).decode())],
            "attachments[0].data",
            "attachments.max_bytes",
        ),
        ([_image(mimeType="image/bmp")], "attachments[0].mimeType", "image/bmp is not accepted"),
        ([_image(mimeType="audio/wav")], "attachments[0].mimeType", "not an image type"),
        (
            [_image(data=base64.b64encode(b"GIF89a....").decode())],
            "attachments[0].data",
            "not a image/png image",
        ),
        ([_image(colour="red")], "attachments[0].colour", "not a field of a image block"),
        (
            [{"type": "resource", "resource": {"uri": "file:///a", "text": "x", "blob": "eA=="}}],
            "attachments[0].resource",
            "exactly one of text",
        ),
        (
            [{"type": "resource", "resource": {"uri": "nope", "text": "x"}}],
            "attachments[0].resource.uri",
            "must be a URI",
        ),
        ([{"type": "resource_link", "uri": "https://x.example/a"}], "attachments[0].name", "is required"),
        ([_image(), {"type": "audio", "data": PNG_B64}], "attachments[1].mimeType", "is required"),
    ],
)
def test_a_bad_attachment_is_refused_naming_the_field_and_the_fix(blocks: Any, field: str, says: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        attachments.check_attachments(blocks, CONFIG)
    assert refused.value.field == field
    assert says in str(refused.value)


def test_the_configuration_takes_type_wildcards_and_refuses_what_is_not_a_media_type() -> None:
    assert AttachmentsConfig(mime_types=("image/*",)).accepts("image/heic")
    assert not AttachmentsConfig(mime_types=("image/*",)).accepts("audio/wav")
    with pytest.raises(ValidationError, match="type/subtype"):
        AttachmentsConfig(mime_types=("png",))


def _loaded_message() -> ChatMessage:
    ref = {
        "kind": "image",
        "name": "shot.png",
        "mime_type": "image/png",
        "size": len(PNG),
        "sha256": "x",
        "uri": None,
    }
    document = {
        "kind": "resource",
        "name": "notes.md",
        "mime_type": "text/markdown",
        "size": 2,
        "sha256": "y",
        "uri": "file:///notes.md",
    }
    return ChatMessage(
        role="user", text="look", attachments=({**ref, "data": PNG_B64}, {**document, "text": "hi"})
    )


def test_anthropic_gets_an_image_block_and_a_document_as_text() -> None:
    [user] = anthropic.build_messages((_loaded_message(),))
    assert user["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
        {"type": "text", "text": "[attached document 'notes.md' (text/markdown, 2 bytes)]\nhi"},
    ]


def test_openai_gets_an_image_url_part_and_a_document_as_text() -> None:
    [user] = openai.build_messages("", (_loaded_message(),))
    assert user["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
        {"type": "text", "text": "[attached document 'notes.md' (text/markdown, 2 bytes)]\nhi"},
    ]


def test_bytes_that_are_gone_or_a_kind_a_provider_cannot_take_are_described() -> None:
    ref = {
        "kind": "audio",
        "name": "hello.wav",
        "mime_type": "audio/wav",
        "size": 9,
        "sha256": "z",
        "uri": None,
    }
    message = ChatMessage(role="user", text="listen", attachments=(ref,))
    [user] = openai.build_messages("", (message,))
    assert user["content"][1] == {"type": "text", "text": "[attached audio 'hello.wav' (audio/wav, 9 bytes)]"}


@pytest.mark.anyio
async def test_a_model_call_loads_the_bytes_by_hash_and_leaves_missing_ones_as_references(
    tmp_path: Path,
) -> None:
    refs, blobs = attachments.check_attachments([_image()], CONFIG)
    async with open_test_store(tmp_path / "parley.db") as store:
        message = ChatMessage(role="user", text="look", attachments=tuple(refs))
        [missing] = await attachments.with_attachment_data([message], store)
        assert "data" not in missing.attachments[0]
        record = SessionRecord.new("ses_" + "0" * 32, agent="demo", owner="me", kind="chat", now=1.0)  # type: ignore[arg-type]
        queued = QueuedMessageRecord(
            id="qm_" + "0" * 32,  # type: ignore[arg-type]
            session_id=record.id,
            seq=0,
            text="look",
            status="queued",
            turn_id=None,
            created_at=1.0,
        )
        queued = replace(queued, attachments=refs, blobs=blobs)
        assert await store.create_session(starting(record, queued), queued, 1.0)
        [loaded] = await attachments.with_attachment_data([message], store)
        assert loaded.attachments[0]["data"] == PNG_B64


def test_parley_yaml_sets_the_limits_and_names_a_bad_media_type_with_its_field(tmp_path: Any) -> None:
    config = load_config(
        project(tmp_path / "ok", {"attachments": {"max_bytes": 10, "mime_types": ["image/*"]}}), None
    )
    assert (config.attachments.max_bytes, config.attachments.mime_types) == (10, ("image/*",))
    config_path = project(tmp_path / "bad", {"attachments": {"mime_types": ["png"]}})
    error = only_error(config_path)
    assert_names(error, "PARLEY-C002", config_path, "attachments.mime_types")
    assert "type/subtype" in error.problem


def _user_record(seq: int, text: str, refs: list[dict[str, Any]]) -> MessageRecord:
    content: dict[str, Any] = {"text": text, "attachments": refs} if refs else {"text": text}
    return MessageRecord(
        session_id=SessionId("ses_x"), seq=seq, turn_id=None, role="user", content=content, created_at=1.0
    )


@pytest.mark.anyio
async def test_compaction_counts_attachments_and_the_summary_puts_them_in_words() -> None:
    refs, _ = attachments.check_attachments([_image(name="plan.png")], CONFIG)
    chat = to_chat_messages([_user_record(1, "see the plan", refs), _user_record(2, "thanks", [])])
    assert chat[0].attachments == tuple(refs)
    bare = to_chat_messages([_user_record(1, "see the plan", []), _user_record(2, "thanks", [])])
    # An image weighs like a large one, about 1,600 tokens.
    assert compaction.estimate_tokens(chat) - compaction.estimate_tokens(bare) == 1600
    request = ModelRequest(
        model="demo",
        instructions=compaction.COMPACTION_INSTRUCTION,
        messages=(*chat, ChatMessage(role="user", text=compaction.SUMMARY_REQUEST)),
        tools=(),
    )
    summary = (await DemoModelClient().complete(request)).text
    assert "Earlier the user said: see the plan [attached image 'plan.png' (image/png" in summary


class _CountingStore:
    def __init__(self, blobs: dict[str, AttachmentBlob]) -> None:
        self.blobs = blobs
        self.asked: list[list[str]] = []

    async def attachment_data(self, hashes: Any) -> dict[str, AttachmentBlob]:
        self.asked.append(sorted(hashes))
        return {h: self.blobs[h] for h in hashes if h in self.blobs}


@pytest.mark.anyio
async def test_bytes_shown_to_a_model_are_read_once_and_the_least_recent_go_beyond_the_budget() -> None:
    _, (a,) = attachments.check_attachments([_image()], CONFIG)
    b = AttachmentBlob(sha256="b" * 64, mime_type="text/plain", size=len(PNG), data=b"x" * len(PNG))
    store = _CountingStore({a.sha256: a, b.sha256: b})
    kept = attachments.AttachmentBytes(store, max_bytes=len(PNG))  # type: ignore[arg-type]
    assert await kept.get([a.sha256]) == {a.sha256: a}
    assert await kept.get([a.sha256]) == {a.sha256: a}
    assert store.asked == [[a.sha256]]
    assert await kept.get([b.sha256, a.sha256]) == {a.sha256: a, b.sha256: b}
    await kept.get([a.sha256])  # b pushed a out: read again
    assert store.asked == [[a.sha256], [b.sha256], [a.sha256]]
