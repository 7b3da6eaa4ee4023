"""Connecting an account across crashes of parley: a real `parley serve --http` (SIGKILLed twice)
in front of the tests' authlib authorization server and a protected MCP server. The call parks,
parley dies; the next process serves the connect link, and dies after the flow started at the
authorization server; the callback then reaches a third process, which completes the flow from
what the database holds (the state's digest, the sealed PKCE verifier, the registered client),
and the parked call runs once, as the person who connected. Every span the processes exported
(OTLP) and every webhook they delivered is searched for the tokens, the authorization code and
state, and the authorization server's URL: none is there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from parley.runtime.credentials import new_key
from parley.tls import http_client
from tests.auth_support import token_client
from tests.mcp_servers.oauth_protected_server import oauth_protected_in_process
from tests.oauth_server import oauth_server
from tests.otlp_receiver import OtlpReceiver
from tests.support import TEST_DEADLINE_S, ServerProcess, call, eventually, tokens_auth, write_config
from tests.test_user_oauth import KEY_ENV, free_port
from tests.test_webhooks import SECRET_ENV, subscription
from tests.webhook_support import SECRET, Receiver, serving_receiver

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


async def _killed(server: ServerProcess) -> None:
    server.process.kill()
    await server.wait_exit()


async def test_a_flow_survives_parley_killed_after_the_park_and_after_the_connect(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    token = "parley-alice-" + os.urandom(16).hex()
    hooks = Receiver()
    with oauth_server() as auth, OtlpReceiver() as otlp:
        auth.open_registration = True
        async with (
            oauth_protected_in_process(auth.url, auth.key.public_jwk) as tracker,
            serving_receiver(hooks),
        ):
            auth.resources.add(tracker.url)
            config = write_config(
                tmp_path,
                agents={"triage": {"mcp_servers": ["tracker"]}},
                mcp_servers={
                    "tracker": {"url": tracker.url, "auth": {"mode": "user_oauth", "registration": "dynamic"}}
                },
                auth=tokens_auth({"alice": token}),
                http={"public_url": base + "/mcp"},
                credentials={"key_env": KEY_ENV},
                webhooks={"all": subscription(hooks.url("/hook"), allow_private=True)},
            )
            env = {KEY_ENV: new_key(), SECRET_ENV: SECRET, **otlp.env("parley")}

            def parley(name: str) -> ServerProcess:
                return ServerProcess(config, name=name, http=True, port=port, env=env)

            async with parley("first") as first:
                assert first.url is not None
                async with token_client(first.url, token) as client:
                    message = '/tool tracker__list_issues {"project": "across-crashes"}'
                    outcome = await call(
                        client, "start_session", agent="triage", message=message, wait_seconds=5
                    )
                assert outcome["status"] == "waiting_for_input", outcome
                (pending,) = outcome["pending"]

                # Killed once the park's webhook is out: one the process had claimed and not yet
                # sent would wait out its claim (the subscription's timeout + 30 s) first.
                async def park_told() -> bool:
                    return any(b"session.waiting_for_input" in r.body for r in hooks.at("/hook", 200))

                await eventually(park_told, "the webhook of the parked turn")
                await _killed(first)

            flow_id = pending["connect_url"].rsplit("/", 1)[1]
            async with http_client(timeout=TEST_DEADLINE_S, follow_redirects=False) as browser:
                async with parley("second") as second:
                    connected = await browser.post(
                        f"{second.base_url}/v1/connect/{flow_id}",
                        json={},
                        headers={"Authorization": f"Bearer {token}"},
                    )
                    assert connected.status_code == 200, connected.text
                    await _killed(second)
                authorize_url = connected.json()["authorize_url"]
                assert (await browser.get(authorize_url)).status_code == 200
                allowed = await browser.post(authorize_url, data={"subject": "alice"})
                assert allowed.status_code == 302, allowed.text

                async with parley("third") as third:
                    back = await browser.get(allowed.headers["location"])
                    assert back.status_code == 303, back.text

                    async def ran() -> bool:
                        return bool(tracker.calls("list_issues"))

                    await eventually(ran, "the parked call to run after the callback")
                    assert third.url is not None
                    async with token_client(third.url, token) as client:
                        session = await call(client, "get_session", session_id=outcome["session_id"])

                    async def delivered() -> bool:
                        return any(
                            b"session.waiting_for_input" in r.body for r in hooks.at("/hook", 200)
                        ) and any(b"turn.ended" in r.body for r in hooks.at("/hook", 200))

                    await eventually(delivered, "the webhooks of the parked and the ended turn")

                    async def exported() -> bool:
                        return any(s.name.startswith("execute_tool") for s in otlp.spans)

                    await eventually(exported, "the third process's spans")
                    callback = dict(
                        p.split("=", 1) for p in allowed.headers["location"].split("?", 1)[1].split("&")
                    )
    assert [(s.user, s.arguments) for s in tracker.calls("list_issues")] == [
        ("alice", {"project": "across-crashes"})
    ]
    assert session["pending"] == [], session
    secrets = {t["access_token"] for t in auth.issued} | {t["refresh_token"] for t in auth.issued}
    secrets |= {callback["code"], callback["state"], auth.url}
    assert len(secrets) == 5, secrets
    shown = repr(otlp.spans) + repr([r.body for r in hooks.received])
    assert otlp.spans and hooks.received
    assert [s for s in secrets if s in shown] == []
    # One client, registered once: the second and third processes used the one the first kept.
    assert len([c for c in auth.clients if c.startswith("dyn-")]) == 1, json.dumps(list(auth.clients))
