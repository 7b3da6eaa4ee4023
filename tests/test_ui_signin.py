"""Signing in to /ui with `auth: oauth`, and parley served under a prefix, without a browser.

The authorization server fixture (tests/oauth_server.py, authlib) refuses what the MCP
authorization specification forbids: no PKCE, `plain` PKCE, a redirect URI that is not the
registered one, no `resource`, a spent refresh token. parley's settings for the page
(`/ui/signin.json`) come from the server's RFC 8414 metadata, and the page's CSP opens exactly
its origin. One parley with `http.base_path: /parley` sits behind a reverse proxy that strips the
prefix: /ui, /v1 and /mcp (a real MCP client) work at /parley/, the RFC 9728 metadata stays at
the root's well-known path, and requests that keep the prefix are answered too. The
configuration refuses a prefix that cannot work, with the field named.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
import yaml

from parley.config import collect_config_errors
from parley.server.ui_routes import CONTENT_SECURITY_POLICY, content_security_policy
from parley.server.ui_signin import SignInSettings, UiSignIn, metadata_urls, page_settings
from parley.tls import http_client
from tests.auth_support import bearer, claims, token_client
from tests.http_balancer import Balancer
from tests.oauth_server import OAuthState, oauth_server
from tests.support import CALL_DEADLINE_S, InProcessServer, write_config

pytestmark = pytest.mark.anyio

PREFIX = "/parley"
CLIENT_ID = "parley-ui"


@dataclass
class World:
    server: InProcessServer
    proxy: Balancer
    auth: OAuthState

    @property
    def root(self) -> str:
        """The proxy's origin: what a person's browser and a client see."""
        return self.proxy.url.removesuffix("/mcp")

    @property
    def public_url(self) -> str:
        return self.root + PREFIX + "/mcp"

    @property
    def redirect_uri(self) -> str:
        return self.root + PREFIX + "/ui/callback"

    def token(self, subject: str = "alice") -> str:
        return self.auth.key.sign(claims(self.auth.url, self.public_url, subject))


@asynccontextmanager
async def prefixed_world(directory: Path, *, strip_prefix: bool) -> AsyncIterator[World]:
    """parley with `http.base_path: /parley` and /ui sign-in behind a reverse proxy (which strips
    the prefix or passes it on), and the authorization server that knows its page."""
    with oauth_server() as auth:
        async with Balancer(backends=[], strip_prefix=PREFIX if strip_prefix else "").running() as proxy:
            root = proxy.url.removesuffix("/mcp")
            auth.resources.add(root + PREFIX + "/mcp")
            auth.register(CLIENT_ID, [root + PREFIX + "/ui/callback"])
            config = write_config(
                directory,
                auth=auth.oauth_config(),
                http={
                    "public_url": root + PREFIX + "/mcp",
                    "base_path": PREFIX,
                    "allowed_hosts": [urlsplit(root).netloc],
                },
                ui={"client_id": CLIENT_ID},
            )
            async with InProcessServer(config, http=True) as server:
                proxy.backends.append(server.base_url)
                yield World(server, proxy, auth)


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    async with prefixed_world(tmp_path_factory.mktemp("ui_signin"), strip_prefix=True) as world:
        yield world


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def authorization(world: World, **changes: str | None) -> dict[str, str]:
    """An authorization request's parameters as the page sends them, with `changes`."""
    params: dict[str, str | None] = {
        "response_type": "code",
        "client_id": CLIENT_ID,
        "redirect_uri": world.redirect_uri,
        "scope": "parley:use",
        "state": "s-1",
        "code_challenge": pkce()[1],
        "code_challenge_method": "S256",
        "resource": world.public_url,
        **changes,
    }
    return {k: v for k, v in params.items() if v is not None}


def redirect_error(response: httpx2.Response) -> dict[str, list[str]]:
    assert response.status_code == 302, response.text
    return parse_qs(urlsplit(response.headers["location"]).query)


async def test_the_authorization_server_refuses_what_the_specification_forbids(world: World) -> None:
    url = world.auth.url + "/authorize"
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        no_pkce = await http.get(
            url, params=authorization(world, code_challenge=None, code_challenge_method=None)
        )
        plain = await http.get(url, params=authorization(world, code_challenge_method="plain"))
        no_resource = await http.get(url, params=authorization(world, resource=None))
        other_resource = await http.get(
            url, params=authorization(world, resource="https://elsewhere.test/mcp")
        )
        # A redirect URI that merely starts like the registered one is not it: shown, never followed.
        wrong_redirect = await http.get(
            url, params=authorization(world, redirect_uri=world.redirect_uri + "x")
        )
        fine = await http.get(url, params=authorization(world))
    for refused in (no_pkce, plain):
        error = redirect_error(refused)
        assert error["error"] == ["invalid_request"] and error["iss"] == [world.auth.url]
        assert error["state"] == ["s-1"]
    assert (
        redirect_error(no_resource)["error"] == redirect_error(other_resource)["error"] == ["invalid_target"]
    )
    assert wrong_redirect.status_code == 400 and "location" not in wrong_redirect.headers
    assert fine.status_code == 200 and "Allow" in fine.text
    assert world.auth.codes == {}


async def test_codes_need_their_verifier_and_refresh_tokens_rotate(world: World) -> None:
    verifier, challenge = pkce()
    params = authorization(world, code_challenge=challenge)
    async with http_client(timeout=CALL_DEADLINE_S) as http:

        async def code() -> str:
            answer = await http.post(world.auth.url + "/authorize", params=params, data={"subject": "bob"})
            query = parse_qs(urlsplit(answer.headers["location"]).query)
            assert query["iss"] == [world.auth.url] and query["state"] == ["s-1"]
            return query["code"][0]

        async def token(**form: str) -> httpx2.Response:
            return await http.post(world.auth.url + "/token", data={"client_id": CLIENT_ID, **form})

        exchange = {"grant_type": "authorization_code", "redirect_uri": world.redirect_uri}
        wrong_verifier = await token(
            **exchange, code=await code(), code_verifier=pkce()[0], resource=world.public_url
        )
        no_resource = await token(**exchange, code=await code(), code_verifier=verifier)
        granted = await token(
            **exchange, code=await code(), code_verifier=verifier, resource=world.public_url
        )
        first = granted.json()
        refresh = {"grant_type": "refresh_token", "resource": world.public_url}
        rotated = (await token(**refresh, refresh_token=first["refresh_token"])).json()
        spent = await token(**refresh, refresh_token=first["refresh_token"])
        # The access token works at parley, through the proxy, as bob.
        agents = await http.get(world.root + PREFIX + "/v1/agents", headers=bearer(rotated["access_token"]))
    assert wrong_verifier.json()["error"] == "invalid_grant"
    assert no_resource.json()["error"] == "invalid_target"
    assert rotated["refresh_token"] != first["refresh_token"] and spent.json()["error"] == "invalid_grant"
    assert agents.status_code == 200, agents.text


async def test_the_page_learns_the_authorization_server_and_may_reach_only_its_origin(world: World) -> None:
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        moved = await http.get(world.root + PREFIX + "/ui")
        page = await http.get(world.root + PREFIX + "/ui/")
        callback = await http.get(world.root + PREFIX + "/ui/callback?code=x&state=y")
        settings = (await http.get(world.root + PREFIX + "/ui/signin.json")).json()
        module = await http.get(world.root + PREFIX + "/ui/signin.js")
    assert (moved.status_code, moved.headers["location"]) == (308, "ui/")
    assert page.status_code == callback.status_code == 200 and page.text == callback.text
    policy = page.headers["content-security-policy"]
    assert policy == content_security_policy(world.auth.url)
    assert f"connect-src 'self' {world.auth.url};" in policy
    assert module.headers["content-security-policy"] == CONTENT_SECURITY_POLICY  # only the page widens
    assert settings == {
        "method": "oauth",
        "issuer": world.auth.url,
        "authorization_endpoint": world.auth.url + "/authorize",
        "token_endpoint": world.auth.url + "/token",
        "revocation_endpoint": world.auth.url + "/revoke",
        "client_id": CLIENT_ID,
        "scope": "parley:use",
        "resource": world.public_url,
        "iss_parameter_supported": True,
    }


async def test_v1_and_mcp_work_under_the_prefix_and_the_metadata_stays_at_the_root(world: World) -> None:
    token = world.token("carol")
    metadata_url = world.root + "/.well-known/oauth-protected-resource" + PREFIX + "/mcp"
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        unauthenticated = await http.get(world.root + PREFIX + "/v1/agents")
        agents = await http.get(world.root + PREFIX + "/v1/agents", headers=bearer(token))
        metadata = (await http.get(metadata_url)).json()
        # A proxy that keeps the prefix: parley answers the same request with it.
        kept = await http.get(world.server.base_url + PREFIX + "/v1/agents", headers=bearer(token))
    assert unauthenticated.status_code == 401
    assert f'resource_metadata="{metadata_url}"' in unauthenticated.headers["www-authenticate"]
    assert agents.status_code == kept.status_code == 200
    assert metadata["resource"] == world.public_url and metadata["authorization_servers"] == [world.auth.url]
    async with token_client(world.public_url, token) as client:
        started = await client.call_tool("start_session", {"agent": "demo", "message": "hello"})
    assert not started.is_error, started
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        listed = await http.get(world.root + PREFIX + "/v1/sessions", headers=bearer(token))
    assert [s["agent"] for s in listed.json()["sessions"]] == ["demo"]


def field_errors(tmp_path: Path, config: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    path = tmp_path / "parley.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return [(e.code, e.field, str(e)) for e in collect_config_errors(path)]


OAUTH = {
    "mode": "oauth",
    "oauth": {"issuer": "https://auth.example.test", "jwks_url": "https://auth.example.test/k"},
}


@pytest.mark.parametrize(
    ("config", "field", "says"),
    [
        ({"ui": {"client_id": "parley-ui"}}, "ui.client_id", "only with auth mode oauth"),
        ({"http": {"base_path": "parley/"}}, "http.base_path", "a leading /, no trailing /"),
        ({"http": {"base_path": "/v1"}}, "http.base_path", "parley's own paths"),
        (
            {"http": {"base_path": "/parley", "public_url": "https://p.example.test/mcp"}, "auth": OAUTH},
            "http.public_url",
            "end the URL with that",
        ),
    ],
)
def test_a_base_path_or_sign_in_that_cannot_work_is_refused_naming_the_field(
    tmp_path: Path, config: dict[str, Any], field: str, says: str
) -> None:
    errors = field_errors(tmp_path, config)
    assert [(code, name) for code, name, _ in errors] == [("PARLEY-C002", field)]
    assert says in errors[0][2]


def test_a_base_path_with_its_public_url_and_a_client_id_is_accepted(tmp_path: Path) -> None:
    config = {
        "http": {"base_path": "/tools/parley", "public_url": "https://p.example.test/tools/parley/mcp"},
        "auth": OAUTH,
        "ui": {"client_id": "parley-ui", "scope": "parley:use parley:admin"},
    }
    assert field_errors(tmp_path, config) == []


SETTINGS = SignInSettings(
    "https://as.example.test/realms/acme", CLIENT_ID, "parley:use", "https://p.example.test/mcp"
)
METADATA = {
    "issuer": SETTINGS.issuer,
    "authorization_endpoint": "https://as.example.test/realms/acme/auth",
    "token_endpoint": "https://as.example.test/realms/acme/token",
    "revocation_endpoint": "https://revoke.example.test/revoke",
    "response_types_supported": ["code"],
    "code_challenge_methods_supported": ["S256"],
}


def test_metadata_is_looked_for_where_rfc_8414_then_openid_connect_put_it() -> None:
    assert metadata_urls(SETTINGS.issuer) == [
        "https://as.example.test/.well-known/oauth-authorization-server/realms/acme",
        "https://as.example.test/realms/acme/.well-known/openid-configuration",
    ]
    page = page_settings(SETTINGS, METADATA)
    # A revocation endpoint on another origin is left out: the page may reach one origin only.
    assert page.token_endpoint == METADATA["token_endpoint"] and page.revocation_endpoint is None
    assert page.iss_parameter_supported is False


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"issuer": "https://evil.example.test"}, "names the issuer"),
        ({"code_challenge_methods_supported": ["plain"]}, "PKCE with S256"),
        ({"response_types_supported": ["token"]}, "authorization code flow"),
        ({"token_endpoint": "http://as.example.test/token"}, "must be an https URL"),
        ({"authorization_endpoint": "javascript:alert(1)"}, "not an http(s) URL"),
    ],
)
def test_metadata_that_cannot_serve_a_browser_sign_in_is_refused(change: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        page_settings(SETTINGS, {**METADATA, **change})


async def test_without_readable_metadata_sign_in_is_unavailable_and_the_policy_opens_nothing(
    world: World,
) -> None:
    elsewhere = SignInSettings(world.auth.url + "/no-such-realm", CLIENT_ID, "parley:use", world.public_url)
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        sign_in = UiSignIn(elsewhere, http)
        page = await sign_in.page()
        assert page.method == "unavailable" and page.token_endpoint is None
        assert await sign_in.connect_origin() is None
    assert content_security_policy(None) == CONTENT_SECURITY_POLICY


async def test_a_confidential_client_must_authenticate_at_the_token_endpoint(world: World) -> None:
    """What a client with a pre-registered secret (parley as a client of downstream servers) gets."""
    redirect = "http://127.0.0.1:9/callback"
    world.auth.register("confidential", [redirect], secret="s3cret-value")
    verifier, challenge = pkce()
    params = authorization(world, client_id="confidential", redirect_uri=redirect, code_challenge=challenge)
    async with http_client(timeout=CALL_DEADLINE_S) as http:

        async def exchange(secret: str | None) -> httpx2.Response:
            answer = await http.post(world.auth.url + "/authorize", params=params)
            code = parse_qs(urlsplit(answer.headers["location"]).query)["code"][0]
            form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect}
            form |= {"code_verifier": verifier, "resource": world.public_url, "client_id": "confidential"}
            if secret is None:
                return await http.post(world.auth.url + "/token", data=form)
            basic = httpx2.BasicAuth("confidential", secret)
            return await http.post(world.auth.url + "/token", data=form, auth=basic)

        without, wrong, right = [await exchange(secret) for secret in (None, "not-it", "s3cret-value")]
    assert without.json()["error"] == wrong.json()["error"] == "invalid_client"
    assert right.status_code == 200 and right.json()["token_type"] == "Bearer"
