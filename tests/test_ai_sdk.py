"""The AI SDK chat routes behind the token gate, against parley served over HTTP (in this
process): every /v1 route the AI SDK uses refuses without a valid token. The chats themselves,
driven by the real npm `ai` package on Node.js, are tests/test_e2e_ai_sdk.py."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx2
import pytest

from tests.auth_support import bearer
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
    async with httpx2.AsyncClient(timeout=TEST_DEADLINE_S) as http:
        missing = await http.request(method, world.base + path, json={})
        wrong = await http.request(method, world.base + path, json={}, headers=bearer("parley_not-a-token"))
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert wrong.status_code == 401
