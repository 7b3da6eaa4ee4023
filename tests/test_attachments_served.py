"""Attachments end to end against one parley served over HTTP in the test's process (two token
users, the app of `parley serve --http`) and the fake providers, which speak the Anthropic and
OpenAI wire formats over real HTTP: an image reaches each in its own format, the demo model reads
a description, get_session shows references and the owner fetches the bytes, a bad attachment is
refused with nothing stored, and the same bytes are stored once. One test drives a second
parley, bound in memory (what stdio carries), on the same database."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client

from parley.client import attachments as pc_attachments
from parley.client import connect_http
from parley.tls import http_client
from tests.auth_support import bearer, token_client
from tests.fake_providers import FakeProviders, serving_fake_providers
from tests.support import (
    CALL_DEADLINE_S,
    Database,
    InProcessServer,
    call,
    call_error,
    eventually,
    tokens_auth,
    write_config,
)

pytestmark = pytest.mark.anyio

# A real 1x1 PNG.
PIXEL_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
PIXEL = base64.b64decode(PIXEL_B64)
PIXEL_SHA = hashlib.sha256(PIXEL).hexdigest()
NOTES = {
    "type": "resource",
    "resource": {"uri": "file:///home/me/notes.md", "mimeType": "text/markdown", "text": "# notes\nbuy milk"},
}
LINK = {"type": "resource_link", "uri": "https://example.com/report.pdf", "name": "report.pdf"}
MAX_BYTES = 4096
KEY = "sk-attachments-test-key"
# The tables a refused call must leave as they were.
TABLES = ("sessions", "queued_messages", "messages", "attachments", "attachment_refs")


def pixel(name: str = "pixel.png") -> dict[str, Any]:
    return {"type": "image", "data": PIXEL_B64, "mimeType": "image/png", "name": name}


@dataclass
class World:
    server: InProcessServer
    fake: FakeProviders
    db: Database
    config: Path
    tokens: dict[str, str]
    alice: Client

    @property
    def base(self) -> str:
        return self.server.base_url

    async def v1(self, method: str, path: str, who: str = "alice", **kwargs: Any) -> httpx2.Response:
        async with http_client(timeout=CALL_DEADLINE_S) as http:
            return await http.request(method, self.base + path, headers=bearer(self.tokens[who]), **kwargs)

    def bodies(self, provider: str) -> list[dict[str, Any]]:
        return [r.body for r in self.fake.requests if r.provider == provider]

    def counts(self) -> dict[str, int]:
        return {table: self.db.rows(f"SELECT count(*) FROM {table}")[0][0] for table in TABLES}


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("attachments")
    tokens = {name: "parley_" + secrets.token_urlsafe(32) for name in ("alice", "bob")}
    async with serving_fake_providers() as fake:
        model: dict[str, Any] = {"api_key_env": "FAKE_PROVIDER_KEY", "options": {"max_tokens": 256}}
        config = write_config(
            directory,
            agents={
                "claude": {"model": fake.anthropic_model(**model)},
                "gpt": {
                    "model": {"provider": "openai", "name": "gpt-test", "base_url": fake.openai_url, **model}
                },
            },
            attachments={
                "max_bytes": MAX_BYTES,
                "max_count": 3,
                "mime_types": ["image/png", "image/jpeg", "text/*", "audio/wav", "application/pdf"],
                # Deleted sessions' bytes go within a test's wait.
                "collect_interval_s": 0.2,
                "collect_grace_s": 0.05,
            },
            auth=tokens_auth(tokens),
        )
        async with InProcessServer(
            config, name="attachments", http=True, env={"FAKE_PROVIDER_KEY": KEY}
        ) as server:
            assert server.url is not None
            async with token_client(server.url, tokens["alice"]) as alice:
                yield World(server, fake, Database(path=directory / "parley.db"), config, tokens, alice)
            assert "Traceback" not in server.log(), server.log()


async def test_an_image_reaches_anthropic_as_an_image_block_and_a_document_as_its_text(world: World) -> None:
    started = await call(
        world.alice,
        "start_session",
        agent="claude",
        message="what is in the picture?",
        attachments=[pixel(), NOTES],
    )
    assert started["status"] == "answered"
    [user] = world.bodies("anthropic")[-1]["messages"]
    assert user["content"][0] == {"type": "text", "text": "what is in the picture?"}
    assert {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PIXEL_B64},
    } in user["content"]
    [document] = [b for b in user["content"] if b["type"] == "text" and "buy milk" in b["text"]]
    assert document["text"].startswith("[attached document 'notes.md' (text/markdown, 16 bytes)]")
    # The next turn's request carries the picture again, read back from the store by its hash.
    await call(world.alice, "send_message", session_id=started["session_id"], message="and the colour?")
    first = world.bodies("anthropic")[-1]["messages"][0]
    assert any(b.get("type") == "image" and b["source"]["data"] == PIXEL_B64 for b in first["content"])


async def test_an_image_reaches_openai_as_an_image_url_part(world: World) -> None:
    started = await call(
        world.alice, "start_session", agent="gpt", message="describe it", attachments=[pixel()]
    )
    assert started["status"] == "answered"
    assert started["answer"] == "echo: describe it"
    user = world.bodies("openai")[-1]["messages"][-1]
    assert user == {
        "role": "user",
        "content": [
            {"type": "text", "text": "describe it"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL_B64}"}},
        ],
    }


PDF_B64 = base64.b64encode(b"%PDF-1.4\n%fake but enough\n").decode()
WAV_B64 = base64.b64encode(b"RIFF\x24\x00\x00\x00WAVEfmt ").decode()


async def test_a_pdf_reaches_anthropic_as_a_document_and_audio_reaches_openai_as_input_audio(
    world: World,
) -> None:
    pdf = {
        "type": "resource",
        "resource": {"uri": "file:///report.pdf", "mimeType": "application/pdf", "blob": PDF_B64},
    }
    wav = {"type": "audio", "data": WAV_B64, "mimeType": "audio/wav", "name": "hello.wav"}
    await call(world.alice, "start_session", agent="claude", message="read this", attachments=[pdf, wav])
    [user] = world.bodies("anthropic")[-1]["messages"]
    assert {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": PDF_B64},
        "title": "report.pdf",
    } in user["content"], user["content"]
    # Anthropic takes no audio: it is described as text.
    assert any(b["type"] == "text" and "hello.wav" in b["text"] for b in user["content"]), user["content"]
    await call(world.alice, "start_session", agent="gpt", message="listen", attachments=[wav, pdf])
    content = world.bodies("openai")[-1]["messages"][-1]["content"]
    assert {"type": "input_audio", "input_audio": {"data": WAV_B64, "format": "wav"}} in content, content
    # Chat Completions gets no PDF bytes here: it is described as text.
    assert any(p["type"] == "text" and "report.pdf" in p["text"] for p in content), content


async def test_the_demo_model_reads_a_description_and_get_session_shows_references_not_bytes(
    world: World,
) -> None:
    started = await call(
        world.alice, "start_session", agent="demo", message="see attached", attachments=[pixel(), LINK]
    )
    assert started["answer"].splitlines()[1:] == [
        f"[attached image 'pixel.png' (image/png, {len(PIXEL)} bytes)]",
        "[attached resource link 'report.pdf' <https://example.com/report.pdf>]",
    ]
    result = await world.alice.call_tool("get_session", {"session_id": started["session_id"]})
    snapshot = result.structured_content
    assert snapshot is not None
    assert snapshot["messages"][0]["attachments"] == [
        {
            "kind": "image",
            "name": "pixel.png",
            "mime_type": "image/png",
            "size": len(PIXEL),
            "sha256": PIXEL_SHA,
            "uri": None,
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
    text = result.content[0].text  # type: ignore[union-attr]
    assert f"attached image 'pixel.png' (image/png, {len(PIXEL)} bytes, sha256 {PIXEL_SHA})" in text
    assert PIXEL_B64 not in json.dumps(snapshot) and PIXEL_B64 not in text


async def test_the_owner_fetches_the_bytes_and_nobody_else_does(world: World) -> None:
    started = await call(
        world.alice, "start_session", agent="demo", message="keep this", attachments=[pixel()]
    )
    sid = started["session_id"]
    fetched = await world.v1("GET", f"/v1/sessions/{sid}/attachments/{PIXEL_SHA}")
    assert fetched.status_code == 200
    assert fetched.content == PIXEL
    assert fetched.headers["content-type"] == "image/png"
    assert fetched.headers["x-content-type-options"] == "nosniff"
    assert fetched.headers["content-disposition"] == "attachment"
    # Another principal: the session is not found, as an unknown one.
    foreign = await world.v1("GET", f"/v1/sessions/{sid}/attachments/{PIXEL_SHA}", who="bob")
    assert foreign.status_code == 404 and foreign.json()["type"] == "urn:parley:problem:session-not-found"
    # A session of the owner's that never carried these bytes: the hash is no way in.
    other = await call(world.alice, "start_session", agent="demo")
    missing = await world.v1("GET", f"/v1/sessions/{other['session_id']}/attachments/{PIXEL_SHA}")
    assert missing.status_code == 404 and missing.json()["type"] == "urn:parley:problem:attachment-not-found"


BAD = [
    (
        {
            "type": "image",
            "data": base64.b64encode(PIXEL + b"\0" * MAX_BYTES).decode(),
            "mimeType": "image/png",
        },
        "attachments[0].data",
        "attachments.max_bytes",
    ),
    (
        {"type": "image", "data": "this is not base64!", "mimeType": "image/png"},
        "attachments[0].data",
        "not valid base64",
    ),
    (
        {"type": "image", "data": PIXEL_B64, "mimeType": "image/gif"},
        "attachments[0].mimeType",
        "image/gif is not accepted",
    ),
    ({"type": "text", "text": "hello"}, "attachments[0].type", "send plain text as the message"),
]


async def test_a_bad_attachment_is_refused_naming_the_field_and_nothing_is_stored(world: World) -> None:
    idle = await call(world.alice, "start_session", agent="demo")
    before = world.counts()
    for block, field, fix in BAD:
        started = await call_error(
            world.alice, "start_session", agent="claude", message="look", attachments=[block]
        )
        sent = await call_error(
            world.alice,
            "send_message",
            session_id=idle["session_id"],
            message="look",
            attachments=[pixel(), block],
        )
        assert f"Invalid argument '{field}'" in started and fix in started
        assert f"Invalid argument '{field.replace('[0]', '[1]')}'" in sent and fix in sent
        response = await world.v1(
            "POST", "/v1/sessions", json={"agent": "gpt", "message": "look", "attachments": [block]}
        )
        assert response.status_code == 400
        assert response.json()["field"] == field and fix in response.json()["detail"]
        assert world.counts() == before, block
    too_many = await call_error(
        world.alice, "start_session", agent="demo", message="look", attachments=[pixel()] * 4
    )
    assert "at most 3 per message (attachments.max_count)" in too_many
    assert world.counts() == before


async def test_the_same_bytes_sent_again_are_stored_once(world: World) -> None:
    first = await call(
        world.alice, "start_session", agent="demo", message="one", attachments=[pixel("a.png")]
    )
    response = await world.v1(
        "POST",
        "/v1/sessions",
        json={"agent": "demo", "message": "two", "attachments": [pixel("b.png"), pixel("c.png")]},
    )
    assert response.status_code == 201, response.text
    second = response.json()["session_id"]
    again = await world.v1(
        "POST", f"/v1/sessions/{second}/messages", json={"message": "three", "attachments": [pixel("d.png")]}
    )
    assert again.status_code == 200, again.text
    assert world.db.rows("SELECT count(*), sum(size) FROM attachments WHERE sha256 = ?", (PIXEL_SHA,)) == [
        (1, len(PIXEL))
    ]
    refs = world.db.rows(
        "SELECT session_id FROM attachment_refs WHERE sha256 = ? AND session_id IN (?, ?) ORDER BY session_id",
        (PIXEL_SHA, first["session_id"], second),
    )
    assert sorted(r[0] for r in refs) == sorted([first["session_id"], second])
    names = [
        a["name"]
        for m in json.loads((await world.v1("GET", f"/v1/sessions/{second}")).text)["messages"]
        for a in m["attachments"]
    ]
    assert names == ["b.png", "c.png", "d.png"]


async def test_over_stdio_and_through_the_python_client(world: World) -> None:
    # stdio's caller (the local user), in memory: a second app on the same database.
    async with InProcessServer(world.config) as stdio, stdio.client() as client:
        started = await call(
            client, "start_session", agent="demo", message="over stdio", attachments=[pixel()]
        )
        assert f"[attached image 'pixel.png' (image/png, {len(PIXEL)} bytes)]" in started["answer"]
        refused = await call_error(
            client,
            "start_session",
            agent="demo",
            message="x",
            attachments=[{"type": "image", "data": "%%", "mimeType": "image/png"}],
        )
        assert "Invalid argument 'attachments[0].data'" in refused
        # Over MCP the bytes come with get_session(attachment=<sha256>), as a content block.
        read = await client.call_tool(
            "get_session", {"session_id": started["session_id"], "attachment": PIXEL_SHA}
        )
        assert not read.is_error
        [image] = [b for b in read.content if b.type == "image"]
        assert (image.data, image.mime_type) == (PIXEL_B64, "image/png")
        other = await call(client, "start_session", agent="demo")
        absent = await call_error(client, "get_session", session_id=other["session_id"], attachment=PIXEL_SHA)
        assert f"No attachment '{PIXEL_SHA}' in session {other['session_id']}" in absent
    assert world.server.url is not None
    async with connect_http(world.server.url, world.tokens["alice"]) as parley:
        session = await parley.start(
            "demo", "from the client", attachments=[pc_attachments.image(PIXEL, "image/png", "client.png")]
        )
        assert session.last is not None and "[attached image 'client.png'" in (session.last.answer or "")
        state = await session.state()
        assert [(a.name, a.sha256) for a in state.messages[0].attachments] == [("client.png", PIXEL_SHA)]
        assert await session.attachment(PIXEL_SHA) == PIXEL
        notes = await parley.start("demo", "and notes", attachments=[NOTES])
        [ref] = (await notes.state()).messages[0].attachments
        assert ref.sha256 is not None and await notes.attachment(ref.sha256) == b"# notes\nbuy milk"
    assert world.db.rows("SELECT count(*) FROM attachments WHERE sha256 = ?", (PIXEL_SHA,)) == [(1,)]


async def test_a_retry_with_the_same_client_message_id_must_carry_the_same_attachments(world: World) -> None:
    first = await call(
        world.alice,
        "start_session",
        agent="demo",
        message="once",
        attachments=[pixel()],
        client_message_id="att-1",
    )
    again = await call(
        world.alice,
        "start_session",
        agent="demo",
        message="once",
        attachments=[pixel()],
        client_message_id="att-1",
    )
    assert (again["session_id"], again["turn_id"]) == (first["session_id"], first["turn_id"])
    other = await call_error(
        world.alice,
        "start_session",
        agent="demo",
        message="once",
        attachments=[NOTES],
        client_message_id="att-1",
    )
    assert "client_message_id" in other and "different agent or message" in other
    sent = await call(
        world.alice, "send_message", session_id=first["session_id"], message="more", client_message_id="att-2"
    )
    refused = await call_error(
        world.alice,
        "send_message",
        session_id=first["session_id"],
        message="more",
        attachments=[pixel()],
        client_message_id="att-2",
    )
    assert "was already used for a different message" in refused
    assert sent["status"] == "answered"


async def test_deleting_a_session_deletes_the_bytes_only_it_carried(world: World) -> None:
    own = b"\x89PNG\r\n\x1a\n" + secrets.token_bytes(32)
    own_sha = hashlib.sha256(own).hexdigest()
    block = {"type": "image", "data": base64.b64encode(own).decode(), "mimeType": "image/png"}
    started = await call(
        world.alice, "start_session", agent="demo", message="mine", attachments=[block, pixel()]
    )
    sid = started["session_id"]
    assert world.db.rows("SELECT count(*) FROM attachments WHERE sha256 = ?", (own_sha,)) == [(1,)]
    await call(world.alice, "delete_session", session_id=sid)

    async def collected() -> bool:
        return world.db.rows("SELECT count(*) FROM attachments WHERE sha256 = ?", (own_sha,)) == [(0,)]

    await eventually(collected, "the deleted session's own bytes to be collected")
    assert world.db.rows("SELECT count(*) FROM attachment_refs WHERE session_id = ?", (sid,)) == [(0,)]
    # Bytes other sessions still carry stay.
    assert world.db.rows("SELECT count(*) FROM attachments WHERE sha256 = ?", (PIXEL_SHA,)) == [(1,)]


async def test_removing_a_queued_message_frees_the_bytes_only_it_carried(world: World) -> None:
    def image(data: bytes) -> dict[str, Any]:
        return {"type": "image", "data": base64.b64encode(data).decode(), "mimeType": "image/png"}

    own, shared = (b"\x89PNG\r\n\x1a\n" + secrets.token_bytes(32) for _ in range(2))
    own_sha, shared_sha = hashlib.sha256(own).hexdigest(), hashlib.sha256(shared).hexdigest()
    parked = await call(world.alice, "start_session", agent="demo", message="/ask Ready? | yes | no")
    sid = parked["session_id"]
    assert parked["status"] == "waiting_for_input", parked
    queued = []
    for attachments in ([image(own), image(shared)], [image(shared)]):
        sent = await world.v1(
            "POST",
            f"/v1/sessions/{sid}/messages",
            json={"message": "later", "attachments": attachments, "wait_seconds": 0},
        )
        assert sent.status_code == 200, sent.text
        queued.append(sent.json()["queued_message_id"])
    removed = await world.v1("DELETE", f"/v1/sessions/{sid}/queue/{queued[0]}")
    assert removed.json()["status"] == "deleted", removed.text
    refs = world.db.rows("SELECT sha256 FROM attachment_refs WHERE session_id = ?", (sid,))
    # The other queued message still carries the shared bytes; nothing carries the own ones.
    assert [r[0] for r in refs] == [shared_sha], refs
    gone = await world.v1("GET", f"/v1/sessions/{sid}/attachments/{own_sha}")
    kept = await world.v1("GET", f"/v1/sessions/{sid}/attachments/{shared_sha}")
    assert gone.status_code == 404 and kept.status_code == 200 and kept.content == shared

    async def collected() -> bool:
        return world.db.rows("SELECT count(*) FROM attachments WHERE sha256 = ?", (own_sha,)) == [(0,)]

    await eventually(collected, "the removed message's own bytes to be collected")
    assert world.db.rows("SELECT count(*) FROM attachments WHERE sha256 = ?", (shared_sha,)) == [(1,)]
