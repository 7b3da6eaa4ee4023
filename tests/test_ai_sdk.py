"""The AI SDK chat routes behind the token gate, against parley served over HTTP (in this
process): every /v1 route the AI SDK uses refuses without a valid token. The chats themselves,
driven by the real npm `ai` package on Node.js, are tests/test_e2e_ai_sdk.py."""

from __future__ import annotations

import base64
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from parley.testing import parley_app
from parley.tls import http_client
from tests.auth_support import bearer
from tests.sse_support import frames
from tests.support import TEST_DEADLINE_S, InProcessServer, tokens_auth, write_config

pytestmark = pytest.mark.anyio


@dataclass
class World:
    server: InProcessServer

    @property
    def base(self) -> str:
        return self.server.base_url


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("ai_sdk_routes")
    tokens = {name: "parley_" + secrets.token_urlsafe(24) for name in ("alice", "bob")}
    config = write_config(directory, agents={"worker": {}}, auth=tokens_auth(tokens))
    async with InProcessServer(config, http=True) as server:
        yield World(server)
        assert "Traceback" not in server.log(), server.log()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/chat"),
        ("GET", "/v1/chat/any/stream"),
        ("GET", "/v1/sessions/ses_00000000000000000000000000000000/events"),
    ],
)
async def test_every_v1_route_refuses_without_a_valid_token(world: World, method: str, path: str) -> None:
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        missing = await http.request(method, world.base + path, json={})
        wrong = await http.request(method, world.base + path, json={}, headers=bearer("parley_not-a-token"))
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert wrong.status_code == 401


async def test_a_chats_history_carries_its_files_at_their_download_path(tmp_path: Path) -> None:
    """A file part sent to /v1/chat comes back in GET /v1/chat/{id}/messages as a file part whose
    url is the bytes' download path under http.base_path, which serves the same bytes."""
    pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    file_part = {
        "type": "file",
        "mediaType": "image/png",
        "filename": "dot.png",
        "url": f"data:image/png;base64,{pixel}",
    }
    message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "look"}, file_part]}
    async with (
        parley_app({"http": {"base_path": "/parley"}}, directory=tmp_path) as parley,
        (await parley.http()).client() as http,
    ):
        async with http.stream(
            "POST", "/parley/v1/chat?agent=demo", json={"id": "c1", "messages": [message]}
        ) as sent:
            assert sent.status_code == 200, await sent.aread()
            with anyio.fail_after(TEST_DEADLINE_S):
                async for frame in frames(sent):
                    if frame.data == "[DONE]":
                        break
        history = (await http.get("/parley/v1/chat/c1/messages")).json()["messages"]
        user = history[0]
        assert user["id"] == "u1" and user["parts"][0] == {"type": "text", "text": "look"}, user
        (restored,) = user["parts"][1:]
        assert (restored["type"], restored["mediaType"], restored["filename"]) == (
            "file",
            "image/png",
            "dot.png",
        )
        assert restored["url"].startswith("/parley/v1/sessions/ses_"), restored
        served = await http.get(restored["url"])
    assert served.status_code == 200 and served.content == base64.b64decode(pixel)
