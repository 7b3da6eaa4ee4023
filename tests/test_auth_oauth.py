"""parley as an OAuth 2.1 resource server (`auth: oauth`), end to end: JWT access tokens signed by
a test authorization server (keys made per run, its JWKS served over loopback) reach one parley
served over HTTP in the test's process (the app of `parley serve --http`). A valid token works;
each way a token can be wrong gets 401/403 with the right `WWW-Authenticate` and stores nothing;
the protected resource metadata names the authorization server; a rotated key is picked up
without a restart; owners are issuer + subject; a caller's token never reaches a downstream MCP
server or a model provider."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest

from parley.tls import http_client
from tests.auth_support import AuthServer, SigningKey, auth_server, bearer, claims, initialize, token_client
from tests.support import (
    MCP_HEADERS,
    TEST_DEADLINE_S,
    InProcessServer,
    call,
    call_error,
    db_rows,
    write_config,
)

pytestmark = pytest.mark.anyio

PUBLIC_URL = "https://parley.example.test/mcp"
METADATA_URL = "https://parley.example.test/.well-known/oauth-protected-resource/mcp"
PROVIDER_KEY_ENV = "PARLEY_TEST_PROVIDER_KEY"
DOWNSTREAM_ENV = "PARLEY_TEST_DOWNSTREAM_TOKEN"
PROVIDER_KEY = "sk-test-provider-key-from-config-0001"
DOWNSTREAM_TOKEN = "downstream-token-from-config-0001"


@dataclass
class World:
    server: InProcessServer
    directory: Path
    auth: AuthServer
    key: SigningKey
    used: list[str]

    @property
    def url(self) -> str:
        assert self.server.url is not None
        return self.server.url

    @property
    def db(self) -> Path:
        return self.directory / "parley.db"

    def token(self, subject: str = "alice", key: SigningKey | None = None, **extra: Any) -> str:
        token = (key or self.key).sign(claims(self.auth.url, PUBLIC_URL, subject, **extra))
        self.used.append(token)
        return token

    def stored(self) -> tuple[int, int]:
        return (
            int(db_rows(self.db, "SELECT count(*) FROM sessions")[0][0]),
            int(db_rows(self.db, "SELECT count(*) FROM audit")[0][0]),
        )


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("auth_oauth")
    key = SigningKey.ec()
    with auth_server(key) as auth:
        config = write_config(
            directory,
            agents={
                # Its model and its MCP server are the recorder of the test authorization server.
                "leaky": {
                    "model": {
                        "provider": "openai",
                        "name": "m",
                        "base_url": f"{auth.url}/v1",
                        "api_key_env": PROVIDER_KEY_ENV,
                    },
                    "mcp_servers": ["recorder"],
                }
            },
            mcp_servers={
                "recorder": {
                    "url": f"{auth.url}/mcp",
                    "headers": {"Authorization": f"Bearer ${{{DOWNSTREAM_ENV}}}"},
                    "scope": "per_session",
                }
            },
            auth={
                "mode": "oauth",
                "oauth": {
                    "issuer": auth.url,
                    "jwks_url": f"{auth.url}/jwks.json",
                    "leeway_s": 5,
                    # A rotated key is looked for at once (the default waits 10 s between refetches).
                    "jwks_refresh_min_s": 0,
                },
            },
            http={"public_url": PUBLIC_URL},
        )
        env = {PROVIDER_KEY_ENV: PROVIDER_KEY, DOWNSTREAM_ENV: DOWNSTREAM_TOKEN}
        async with InProcessServer(config, name="auth_oauth", http=True, env=env) as server:
            yield World(server, directory, auth, key, [])


async def _post_call(world: World, headers: dict[str, str]) -> httpx2.Response:
    request = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "start_session", "arguments": {"agent": "demo", "message": "let me in"}},
    }
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        return await http.post(world.url, json=request, headers={**MCP_HEADERS, **headers})


def _params(challenge: str) -> dict[str, str]:
    """The auth-params of a `Bearer` challenge (RFC 6750: name="value", comma separated)."""
    assert challenge.startswith("Bearer "), challenge
    return dict(re.findall(r'(\w+)="([^"]*)"', challenge))


# ------------------------------------------------------------------ a valid token


async def test_a_valid_token_works_and_its_issuer_and_subject_own_the_session(world: World) -> None:
    async with token_client(world.url, world.token("alice")) as client:
        outcome = await call(client, "start_session", agent="demo", message="hello")
    assert outcome["answer"] == "You said: hello (message 1 of this session)"
    owner = db_rows(world.db, "SELECT owner FROM sessions WHERE id = ?", (outcome["session_id"],))
    assert owner == [(f"{world.auth.url}#alice",)]


async def test_the_protected_resource_metadata_names_the_authorization_server(world: World) -> None:
    base = world.server.base_url
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
            response = await http.get(base + path)
            assert response.status_code == 200, (path, response.text)
            document = response.json()
            assert document["resource"] == PUBLIC_URL
            assert document["authorization_servers"] == [world.auth.url]
            assert {"parley:use", "parley:admin"} <= set(document["scopes_supported"])
            assert document["bearer_methods_supported"] == ["header"]


# ------------------------------------------------------------------ every way to be wrong


def _alg_none(world: World) -> str:
    return jwt.encode(
        claims(world.auth.url, PUBLIC_URL, "mallory"), "", algorithm="none", headers={"kid": world.key.kid}
    )


REFUSED: dict[str, tuple[Callable[[World], dict[str, str]], int, str | None]] = {
    "no token": (lambda w: {}, 401, None),
    "wrong audience": (
        lambda w: bearer(w.key.sign(claims(w.auth.url, "https://other.example/mcp", "mallory"))),
        401,
        "invalid_token",
    ),
    "wrong issuer": (
        lambda w: bearer(w.key.sign(claims("https://evil.example", PUBLIC_URL, "mallory"))),
        401,
        "invalid_token",
    ),
    "expired": (lambda w: bearer(w.token("mallory", exp=int(time.time()) - 60)), 401, "invalid_token"),
    "not yet valid": (lambda w: bearer(w.token("mallory", nbf=int(time.time()) + 600)), 401, "invalid_token"),
    "bad signature": (
        lambda w: bearer(SigningKey.ec(kid=w.key.kid).sign(claims(w.auth.url, PUBLIC_URL, "mallory"))),
        401,
        "invalid_token",
    ),
    "unknown kid": (
        lambda w: bearer(SigningKey.ec().sign(claims(w.auth.url, PUBLIC_URL, "mallory"))),
        401,
        "invalid_token",
    ),
    "alg none": (lambda w: bearer(_alg_none(w)), 401, "invalid_token"),
    "missing scope": (lambda w: bearer(w.token("mallory", scope="profile email")), 403, "insufficient_scope"),
    "malformed header": (lambda w: {"Authorization": "Bearer"}, 401, "invalid_request"),
    "another scheme": (lambda w: {"Authorization": "Basic bWFsbG9yeTp4"}, 401, "invalid_request"),
    "garbage token": (lambda w: bearer("a.b.c"), 401, "invalid_token"),
}


@pytest.mark.parametrize("case", list(REFUSED))
async def test_a_wrong_token_is_refused_with_the_right_challenge_and_nothing_is_stored(
    world: World, case: str
) -> None:
    headers, status, error = REFUSED[case]
    before = world.stored()
    response = await _post_call(world, headers(world))
    assert response.status_code == status, (case, response.status_code, response.text)
    challenge = _params(response.headers["www-authenticate"])
    assert challenge["resource_metadata"] == METADATA_URL
    assert challenge["scope"] == "parley:use"
    if error is None:
        assert "error" not in challenge, "no credentials: no error code (RFC 6750)"
    else:
        assert challenge["error"] == error
        assert response.json()["error"] == error
    assert world.stored() == before, "a refused request changes nothing"


async def test_a_rotated_key_is_picked_up_without_a_restart(world: World) -> None:
    new = SigningKey.rsa()
    refused = await initialize(world.url, bearer(world.token("alice", key=new)))
    assert refused.status_code == 401
    fetches = world.auth.fetches()
    world.auth.keys.append(new)  # the authorization server publishes its next key
    async with token_client(world.url, world.token("alice", key=new)) as client:
        assert (await call(client, "start_session", agent="demo", message="new key"))["status"] == "answered"
    assert world.auth.fetches() == fetches + 1
    async with token_client(world.url, world.token("alice")) as client:
        assert (await call(client, "list_agents"))["agents"], "the old key still works"
    assert world.auth.fetches() == fetches + 1, "known keys are served from the cache"


# ------------------------------------------------------------------ owners and scopes


async def test_two_subjects_are_two_owners_and_an_admin_scope_sees_both(world: World) -> None:
    async with (
        token_client(world.url, world.token("alice")) as alice,
        token_client(world.url, world.token("bob")) as bob,
    ):
        mine = await call(alice, "start_session", agent="demo", message="alice's")
        assert "No session" in await call_error(bob, "get_session", session_id=mine["session_id"])
        assert mine["session_id"] not in [
            s["session_id"] for s in (await call(bob, "list_sessions"))["sessions"]
        ]
    admin = world.token("root", scope="parley:admin")
    async with token_client(world.url, admin) as root:
        seen = await call(root, "get_session", session_id=mine["session_id"])
    assert seen["owner"] == f"{world.auth.url}#alice"


# ------------------------------------------------------------------ credentials stay where they are


async def test_a_callers_token_never_reaches_a_downstream_server_or_a_model_provider(world: World) -> None:
    caller = world.token("carol")
    async with token_client(world.url, caller) as client:
        outcome = await call(client, "start_session", agent="leaky", message="hello")
    assert outcome["status"] == "failed", outcome  # the recorder is no model
    downstream = [r for r in world.auth.requests if r.path.startswith("/mcp")]
    provider = [r for r in world.auth.requests if r.path.startswith("/v1")]
    assert downstream and provider, [r.path for r in world.auth.requests]
    for request in world.auth.requests:
        seen = json.dumps(request.headers) + request.body.decode(errors="replace")
        assert caller not in seen and caller.split(".")[2] not in seen, request.path
    assert {r.headers.get("authorization") for r in downstream} == {f"Bearer {DOWNSTREAM_TOKEN}"}
    assert {r.headers.get("authorization") for r in provider} == {f"Bearer {PROVIDER_KEY}"}


async def test_no_access_token_reaches_the_log_or_the_database(world: World) -> None:
    """Last in the module: the tokens of every test above were used by now."""
    log = world.server.log()
    stored = b"".join(p.read_bytes() for p in world.directory.glob("parley.db*") if p.is_file())
    assert world.used
    for token in world.used:
        signature = token.split(".")[2]
        assert signature not in log and signature.encode() not in stored
