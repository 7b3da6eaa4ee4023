"""GET /metrics end to end: one parley served over HTTP (in this process) with static tokens; a scripted scenario (3
turns, 1 approval, 1 failed tool call) moves the counters, the text parses with Prometheus's own
parser, and the bearer gate applies (401 without a token, 403 without parley:metrics)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from parley.config.auth import token_digest
from parley.tls import http_client
from tests.auth_support import bearer, token_client
from tests.support import TEST_DEADLINE_S, InProcessServer, call, eventually, fixture_in_process, write_config

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class World:
    server: InProcessServer
    tokens: dict[str, str]

    @property
    def base(self) -> str:
        return self.server.base_url

    async def scrape(self, token: str | None = "watcher") -> httpx2.Response:
        headers = bearer(self.tokens[token]) if token else {}
        async with http_client(timeout=TEST_DEADLINE_S) as http:
            return await http.get(self.base + "/metrics", headers=headers)

    async def samples(self) -> Samples:
        response = await self.scrape()
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/plain")
        found: Samples = {}
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                found[(sample.name, frozenset(sample.labels.items()))] = sample.value
        return found


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("metrics")
    tokens = {name: "parley_" + secrets.token_urlsafe(32) for name in ("alice", "watcher")}
    scopes = {"alice": ["parley:use"], "watcher": ["parley:metrics"]}
    entries = [{"name": n, "sha256": token_digest(tokens[n]), "scopes": scopes[n]} for n in tokens]
    async with fixture_in_process(directory / "fixture.jsonl") as fixture:
        config = write_config(
            directory,
            agents={"worker": {"mcp_servers": ["fixture"]}},
            mcp_servers={"fixture": fixture},
            auth={"mode": "tokens", "tokens": entries},
        )
        async with InProcessServer(config, http=True) as server:
            yield World(server, tokens)


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_counters_move_as_three_turns_an_approval_and_a_failed_tool_run(world: World) -> None:
    before = await world.samples()
    assert world.server.url is not None
    async with token_client(world.server.url, world.tokens["alice"]) as client:
        # 1: a plain answer.
        out = await call(
            client, "start_session", agent="worker", message="hello", wait_seconds=TEST_DEADLINE_S
        )
        assert out["status"] == "answered", out
        sid = out["session_id"]
        # 2: a write that needs an approval, approved.
        parked = await call(
            client, "send_message", session_id=sid, message='/tool fixture__bare {"text": "approve me"}'
        )
        assert parked["status"] == "waiting_for_input", parked
        waiting = await world.samples()
        assert _value(waiting, "parley_parked_sessions", scope="database") >= 1
        assert (
            _value(waiting, "parley_pending_interrupts", scope="database", kind="approval", age="lt_1m") >= 1
        )
        [pending] = parked["pending"]
        decisions = [{"interrupt_id": pending["id"], "approved": True}]
        approved = await call(client, "approve", session_id=sid, decisions=decisions)
        assert approved["status"] == "answered", approved
        # 3: a tool call that fails (the fixture server refuses its arguments).
        failed = await call(
            client, "send_message", session_id=sid, message='/tool fixture__read_thing {"wrong": 1}'
        )
        assert failed["status"] == "answered", failed
        assert [c["status"] for c in failed["tool_calls"]] == ["failed"], failed
    after = await world.samples()

    def moved(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    async def third_turn_counted() -> bool:
        # A turn is counted just after its end is committed, which may wake the caller first.
        nonlocal after
        after = await world.samples()
        turns = moved("parley_turns_total", agent="worker", status="answered")
        return turns >= 3 and _value(after, "parley_running_turns") == 0

    await eventually(third_turn_counted, "the three turns counted and no step in progress")

    assert moved("parley_turns_total", agent="worker", status="answered") == 3
    assert moved("parley_turn_duration_seconds_count", agent="worker") == 3
    assert moved("parley_interrupts_raised_total", kind="approval") == 1
    assert moved("parley_tool_calls_total", server="fixture", status="succeeded") == 1
    assert moved("parley_tool_calls_total", server="fixture", status="failed") == 1
    assert moved("parley_tool_call_duration_seconds_count", server="fixture") == 2
    # Model calls: one per turn plus one after each tool result.
    assert moved("parley_model_call_duration_seconds_count", provider="demo", model="demo") == 5
    assert moved("parley_model_tokens_total", provider="demo", model="demo", type="input") > 0
    assert _value(after, "parley_pending_interrupts", scope="database", kind="approval", age="lt_1m") == 0
    # No series names a session.
    assert not any(sid in str(labels) for (_, labels) in after)


async def test_metrics_need_a_token_with_the_metrics_scope(world: World) -> None:
    missing = await world.scrape(None)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong_scope = await world.scrape("alice")
    assert wrong_scope.status_code == 403
    assert 'scope="parley:metrics"' in wrong_scope.headers["www-authenticate"]
    assert (await world.scrape("watcher")).status_code == 200


async def test_metrics_are_served_without_auth_on_loopback_when_auth_is_off(tmp_path: Path) -> None:
    config = write_config(tmp_path, agents={"demo": {}})
    async with InProcessServer(config, http=True) as server:
        assert server.url is not None
        async with http_client(timeout=TEST_DEADLINE_S) as http:
            response = await http.get(server.base_url + "/metrics")
    assert response.status_code == 200
    names = {f.name for f in text_string_to_metric_families(response.text)}
    assert {"parley_turns", "parley_sessions", "parley_leases_held"} <= names
