"""Verifying bearer tokens, without a server: static tokens by their hash; OAuth JWTs against a
key set served through httpx2's mock transport (keys made per run); RFC 7662 introspection."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx2
import jwt
import pytest
from mcp.server.auth.provider import AccessToken

from parley.config.auth import Introspection, OAuthConfig, TokenEntry, token_digest
from parley.redaction import REDACTED
from parley.server.auth_oauth import OAuthVerifier
from parley.server.auth_tokens import Refusal, StaticTokenVerifier, principal_of
from parley.tls import http_client
from tests.auth_support import SigningKey, claims

pytestmark = pytest.mark.anyio

ISSUER = "https://auth.example.test"
RESOURCE = "https://parley.example.test/mcp"
ALICE_TOKEN = "parley_" + "a" * 43


# ---------------------------------------------------------------------------- static tokens


async def test_a_configured_token_is_its_principal_with_its_scopes_and_the_token_is_not_kept() -> None:
    verifier = StaticTokenVerifier(
        [
            TokenEntry("alice", frozenset({"parley:use"}), bytes.fromhex(token_digest(ALICE_TOKEN))),
            TokenEntry("ops", frozenset({"parley:admin"}), bytes.fromhex(token_digest("parley_" + "o" * 43))),
        ]
    )
    access = await verifier.check(ALICE_TOKEN)
    assert isinstance(access, AccessToken)
    assert access.token == REDACTED
    who = principal_of(access)
    assert (who.id, who.scopes, who.authenticated, who.is_admin) == (
        "alice",
        frozenset({"parley:use"}),
        True,
        False,
    )


@pytest.mark.parametrize(
    "token", ["", "parley_" + "b" * 43, ALICE_TOKEN + "x", ALICE_TOKEN[:-1], "x" * 20_000]
)
async def test_a_token_that_is_not_configured_is_refused(token: str) -> None:
    verifier = StaticTokenVerifier(
        [TokenEntry("alice", frozenset({"parley:use"}), bytes.fromhex(token_digest(ALICE_TOKEN)))]
    )
    refused = await verifier.check(token)
    assert isinstance(refused, Refusal) and refused.status == 401
    assert await verifier.verify_token(token) is None


# ---------------------------------------------------------------------------- OAuth JWTs


class KeySet:
    """The authorization server's published keys, behind a mock transport that counts fetches."""

    def __init__(self, *keys: SigningKey) -> None:
        self.keys = list(keys)
        self.fetches = 0
        self.introspected: dict[str, dict[str, Any]] = {}
        self.introspections: list[httpx2.Request] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/introspect":
            self.introspections.append(request)
            token = dict(x.split("=", 1) for x in request.content.decode().split("&"))["token"]
            return httpx2.Response(200, json=self.introspected.get(token, {"active": False}))
        self.fetches += 1
        return httpx2.Response(200, json={"keys": [k.public_jwk for k in self.keys]})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def verifier(keys: KeySet, monotonic: Callable[[], float] = time.monotonic, **config: Any) -> OAuthVerifier:
    settings = OAuthConfig(issuer=ISSUER, jwks_url=f"{ISSUER}/jwks.json", **config)
    http = http_client(transport=httpx2.MockTransport(keys.handler))
    return OAuthVerifier(settings, RESOURCE, http, monotonic=monotonic, introspection_secret="s3cret")


def good(**extra: Any) -> dict[str, Any]:
    return claims(ISSUER, RESOURCE, "alice-sub", **extra)


async def test_a_valid_jwt_names_issuer_and_subject_its_scopes_and_its_client() -> None:
    key = SigningKey.ec()
    access = await verifier(KeySet(key)).check(
        key.sign(good(scope="parley:use parley:metrics", client_id="claude"))
    )
    assert isinstance(access, AccessToken), access
    who = principal_of(access)
    assert who.id == f"{ISSUER}#alice-sub"
    assert who.scopes == frozenset({"parley:use", "parley:metrics"})
    assert who.client == "claude" and who.authenticated
    assert access.token == REDACTED and access.resource == RESOURCE


async def test_scopes_may_come_as_a_scp_list_and_the_client_as_azp() -> None:
    key = SigningKey.rsa()
    token = key.sign(
        {
            k: v
            for k, v in good(scp=["parley:admin"], azp="inspector").items()
            if k not in ("scope", "client_id")
        }
    )
    access = await verifier(KeySet(key)).check(token)
    assert isinstance(access, AccessToken), access
    assert principal_of(access).is_admin and principal_of(access).client == "inspector"


def _forged(key: SigningKey) -> str:
    """Signed by another key that claims `key`'s kid."""
    other = SigningKey.ec(kid=key.kid)
    return other.sign(good())


def _alg_none(key: SigningKey) -> str:
    return jwt.encode(good(), "", algorithm="none", headers={"kid": key.kid})


def _hs256_with_the_public_key(key: SigningKey) -> str:
    # The classic confusion: an HMAC "signed" with the public key's text.
    return jwt.encode(
        good(), json.dumps(key.public_jwk).encode() * 2, algorithm="HS256", headers={"kid": key.kid}
    )


CASES: dict[str, tuple[Callable[[SigningKey], str], str]] = {
    "wrong audience": (
        lambda k: k.sign(claims(ISSUER, "https://other.example/mcp", "a")),
        "not issued for this server",
    ),
    "wrong issuer": (
        lambda k: k.sign(claims("https://evil.example", RESOURCE, "a")),
        "another authorization server",
    ),
    "expired": (lambda k: k.sign(good(exp=int(time.time()) - 120)), "expired"),
    "not yet valid": (lambda k: k.sign(good(nbf=int(time.time()) + 300)), "not valid yet"),
    "bad signature": (_forged, "signature is not valid"),
    "unknown kid": (lambda k: SigningKey.ec().sign(good()), "key the authorization server does not publish"),
    "alg none": (_alg_none, "algorithm is not accepted"),
    "HS256 confusion": (_hs256_with_the_public_key, "algorithm is not accepted"),
    "no subject": (lambda k: k.sign({c: v for c, v in good().items() if c != "sub"}), "no sub claim"),
    "no expiry": (lambda k: k.sign({c: v for c, v in good().items() if c != "exp"}), "no exp claim"),
    "control character in sub": (lambda k: k.sign(good(sub="al\u0000ice")), "not usable text"),
    "malformed": (lambda k: "not.a.jwt", "malformed"),
    "not a jwt": (lambda k: "opaque-token-without-dots", "not a JWT"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_jwt_that_fails_a_check_is_refused_saying_which(case: str) -> None:
    key = SigningKey.ec()
    make, why = CASES[case]
    refused = await verifier(KeySet(key)).check(make(key))
    assert isinstance(refused, Refusal), refused
    assert why in refused.description and refused.status == 401
    assert '"' not in refused.description


async def test_a_small_clock_skew_is_allowed() -> None:
    key = SigningKey.ec()
    access = await verifier(KeySet(key), leeway_s=30).check(key.sign(good(exp=int(time.time()) - 10)))
    assert isinstance(access, AccessToken)


async def test_keys_are_fetched_once_and_a_rotated_key_is_picked_up_on_its_unknown_kid() -> None:
    old, new = SigningKey.ec(), SigningKey.ec()
    keys = KeySet(old)
    clock = Clock()
    check = verifier(keys, monotonic=clock, jwks_refresh_min_s=10)
    for _ in range(3):
        assert isinstance(await check.check(old.sign(good())), AccessToken)
    assert keys.fetches == 1
    keys.keys = [old, new]  # the authorization server rotates
    clock.now += 11
    assert isinstance(await check.check(new.sign(good())), AccessToken)
    assert keys.fetches == 2


async def test_unknown_kids_refetch_the_keys_at_most_every_refresh_interval() -> None:
    key = SigningKey.ec()
    keys = KeySet(key)
    clock = Clock()
    check = verifier(keys, monotonic=clock, jwks_refresh_min_s=10)
    assert isinstance(await check.check(key.sign(good())), AccessToken)
    for _ in range(5):
        assert isinstance(await check.check(SigningKey.ec().sign(good())), Refusal)
    assert keys.fetches == 1, "a flood of unknown kids must not flood the authorization server"
    clock.now += 10
    assert isinstance(await check.check(SigningKey.ec().sign(good())), Refusal)
    assert keys.fetches == 2


async def test_cached_keys_expire_after_jwks_cache_s() -> None:
    key = SigningKey.ec()
    keys = KeySet(key)
    clock = Clock()
    check = verifier(keys, monotonic=clock, jwks_cache_s=60)
    await check.check(key.sign(good()))
    clock.now += 61
    await check.check(key.sign(good()))
    assert keys.fetches == 2


async def test_unreachable_keys_are_a_503_not_a_verdict_on_the_token() -> None:
    def down(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    http = http_client(transport=httpx2.MockTransport(down))
    check = OAuthVerifier(OAuthConfig(issuer=ISSUER, jwks_url=f"{ISSUER}/jwks.json"), RESOURCE, http)
    refused = await check.check(SigningKey.ec().sign(good()))
    assert isinstance(refused, Refusal) and refused.status == 503


# ---------------------------------------------------------------------------- introspection


def _introspecting(keys: KeySet) -> OAuthVerifier:
    return verifier(keys, introspection=Introspection(url=f"{ISSUER}/introspect", client_id="parley"))


async def test_an_opaque_token_is_introspected_checked_and_cached() -> None:
    keys = KeySet(SigningKey.ec())
    keys.introspected["opaque-1"] = {
        "active": True,
        "sub": "bob",
        "iss": ISSUER,
        "aud": [RESOURCE],
        "scope": "parley:use",
        "exp": int(time.time()) + 600,
        "client_id": "cli-tool",
    }
    check = _introspecting(keys)
    for _ in range(2):
        access = await check.check("opaque-1")
        assert isinstance(access, AccessToken), access
        assert principal_of(access).id == f"{ISSUER}#bob"
    assert len(keys.introspections) == 1, "the answer is cached"
    assert keys.introspections[0].headers["authorization"].startswith("Basic ")


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"active": False}, "not active"),
        ({"active": True, "sub": "b", "aud": "https://other.example/mcp"}, "not issued for this server"),
        (
            {"active": True, "sub": "b", "aud": RESOURCE, "iss": "https://evil.example"},
            "another authorization server",
        ),
        ({"active": True, "sub": "b", "aud": RESOURCE, "exp": 10}, "expired"),
    ],
)
async def test_an_introspected_token_that_fails_a_check_is_refused(answer: dict[str, Any], why: str) -> None:
    keys = KeySet(SigningKey.ec())
    keys.introspected["opaque"] = answer
    refused = await _introspecting(keys).check("opaque")
    assert isinstance(refused, Refusal) and why in refused.description
