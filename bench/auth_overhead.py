"""What checking a bearer token costs per call: in process (the verifier alone) and over real HTTP
(`parley serve --http` with `auth: none`, `tokens` and `oauth`, the same calls).

Part 1, the verifiers in this process, N calls each:
- static tokens: SHA-256 of the token, compared in constant time with every configured entry
  (1, 10 and 100 entries);
- a JWT (ES256 and RS256) with the key set cached;
- a JWT without a cached key set: every call fetches the JWKS again over loopback HTTP (from a
  small server on a thread of this process), the worst case.

Part 2, end to end: one `parley serve --http` per mode on a fresh SQLite file, one mcp SDK client
with the mode's token, `--calls` `list_sessions` calls (each one HTTP POST, each one verified);
p50/p95 per mode, and the difference to `auth: none`.

    .venv/bin/python bench/auth_overhead.py [--calls 300] [--micro 20000]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import secrets
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import jwt
from _common import (
    base_config,
    http_server,
    latency_summary,
    machine,
    run_in_tempdir,
    server_log_excerpt,
    stop_server,
    wait_for_url,
    write_config_files,
)
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from parley.config.auth import OAuthConfig, TokenEntry
from parley.sdk_compat import create_mcp_http_client
from parley.server.auth_oauth import OAuthVerifier
from parley.server.auth_tokens import StaticTokenVerifier

PUBLIC_URL = "https://parley.bench.test/mcp"


class Keys:
    def __init__(self) -> None:
        ec_key = ec.generate_private_key(ec.SECP256R1())
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private: dict[str, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey] = {
            "ES256": ec_key,
            "RS256": rsa_key,
        }
        self.jwks = {
            "keys": [
                {
                    **ECAlgorithm.to_jwk(ec_key.public_key(), as_dict=True),
                    "kid": "es",
                    "alg": "ES256",
                    "use": "sig",
                },
                {
                    **RSAAlgorithm.to_jwk(rsa_key.public_key(), as_dict=True),
                    "kid": "rs",
                    "alg": "RS256",
                    "use": "sig",
                },
            ]
        }

    def token(self, issuer: str, alg: str = "ES256", scope: str = "parley:use") -> str:
        now = int(time.time())
        claims = {
            "iss": issuer,
            "aud": PUBLIC_URL,
            "sub": "bench",
            "scope": scope,
            "iat": now,
            "exp": now + 3600,
        }
        return jwt.encode(
            claims, self.private[alg], algorithm=alg, headers={"kid": "es" if alg == "ES256" else "rs"}
        )


def serve_jwks(keys: Keys) -> tuple[str, Callable[[], None]]:
    body = json.dumps(keys.jwks).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body are two writes: with Nagle's algorithm on, a keep-alive client waits
        # for the delayed ACK (~40 ms) before the body arrives, which is not what we measure.
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return f"http://127.0.0.1:{server.server_address[1]}", stop


async def per_call_us(check: Callable[[], Awaitable[Any]], calls: int) -> float:
    for _ in range(min(100, calls)):
        await check()
    started = time.perf_counter()
    for _ in range(calls):
        await check()
    return (time.perf_counter() - started) / calls * 1e6


async def micro(keys: Keys, issuer: str, calls: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for entries in (1, 10, 100):
        tokens = ["parley_" + secrets.token_urlsafe(32) for _ in range(entries)]
        verifier = StaticTokenVerifier(
            [
                TokenEntry(f"p{i}", frozenset({"parley:use"}), hashlib.sha256(t.encode()).digest())
                for i, t in enumerate(tokens)
            ]
        )
        good = tokens[-1]
        figures[f"static_{entries}_entries_us"] = await per_call_us(
            functools.partial(verifier.check, good), calls
        )
    async with httpx2.AsyncClient() as http:
        config = OAuthConfig(issuer=issuer, jwks_url=f"{issuer}/jwks.json")
        cached = OAuthVerifier(config, PUBLIC_URL, http)
        for alg in ("ES256", "RS256"):
            token = keys.token(issuer, alg)
            figures[f"jwt_{alg}_cached_jwks_us"] = await per_call_us(
                functools.partial(cached.check, token), calls
            )
        cold = OAuthVerifier(config.model_copy(update={"jwks_cache_s": 1e-9}), PUBLIC_URL, http)
        token = keys.token(issuer, "ES256")
        figures["jwt_ES256_jwks_fetched_every_call_us"] = await per_call_us(
            lambda: cold.check(token), max(calls // 40, 50)
        )
        assert cold.keys is not None and cold.keys.fetches > max(calls // 40, 50)
    return figures


async def end_to_end(workdir: Path, keys: Keys, issuer: str, calls: int, order: list[str]) -> dict[str, Any]:
    static = "parley_" + secrets.token_urlsafe(32)
    modes: dict[str, tuple[dict[str, Any], str | None]] = {
        "none": ({}, None),
        "tokens": (
            {
                "mode": "tokens",
                "tokens": [{"name": "bench", "sha256": hashlib.sha256(static.encode()).hexdigest()}],
            },
            static,
        ),
        "oauth": (
            {"mode": "oauth", "oauth": {"issuer": issuer, "jwks_url": f"{issuer}/jwks.json"}},
            keys.token(issuer),
        ),
    }
    results: dict[str, Any] = {}
    for mode in order:
        auth, token = modes[mode]
        directory = workdir / mode
        directory.mkdir()
        sections: dict[str, Any] = {"auth": auth} if auth else {}
        if mode == "oauth":
            sections["http"] = {"public_url": PUBLIC_URL}
        config = write_config_files(directory, base_config(**sections))
        log = directory / "server.log"
        async with http_server(directory, config, log) as process:
            url = await wait_for_url(process, log)
            headers = {"Authorization": f"Bearer {token}"} if token else None
            async with (
                create_mcp_http_client(headers=headers) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                latencies = []
                for i in range(calls + 20):
                    started = time.perf_counter()
                    result = await client.call_tool("list_sessions", {"limit": 1})
                    if result.is_error:
                        raise RuntimeError(f"list_sessions failed in mode {mode}: {result.content}")
                    if i >= 20:  # warm-up
                        latencies.append((time.perf_counter() - started) * 1000)
            results[mode] = latency_summary(latencies)
            await stop_server(process)
    for mode in ("tokens", "oauth"):
        results[f"{mode}_minus_none_p50_ms"] = round(results[mode]["p50_ms"] - results["none"]["p50_ms"], 3)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=300, help="list_sessions calls per mode (end to end)")
    parser.add_argument("--micro", type=int, default=20_000, help="verifier calls per case (in process)")
    parser.add_argument("--deadline", type=float, default=600)
    parser.add_argument(
        "--order", default="none,tokens,oauth", help="the order the three servers run in (comma separated)"
    )
    args = parser.parse_args()
    keys = Keys()
    issuer, stop = serve_jwks(keys)

    async def run(workdir: Path) -> dict[str, Any]:
        return {
            "micro": await micro(keys, issuer, args.micro),
            "http": await end_to_end(workdir, keys, issuer, args.calls, args.order.split(",")),
        }

    try:
        result = run_in_tempdir(
            run, args.deadline, lambda workdir: "\n".join(server_log_excerpt(d) for d in workdir.iterdir())
        )
    finally:
        stop()
    if result is None:
        return 1
    for name, value in result["micro"].items():
        print(f"{name:<42} {value:10.1f} µs")
    for mode in ("none", "tokens", "oauth"):
        figures = result["http"][mode]
        print(
            f"list_sessions over HTTP, auth {mode:<7} p50 {figures['p50_ms']:.2f} ms  p95 {figures['p95_ms']:.2f} ms"
        )
    print(json.dumps({"machine": machine(), **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
