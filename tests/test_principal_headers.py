"""Static per-principal secrets for a downstream server (`headers_by_principal`, issue #38 item 4):
one parley over HTTP with `auth: tokens` in the test's process, in front of a protected MCP
server that knows one token per user and records whose token each call carried. alice's calls
reach it as alice and bob's as bob, through one agent and one `shared` server; carol, who has no
entry, gets a tool error and sends nothing; no secret reaches the database or the log."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from parley.config.auth import token_digest
from parley.config.loading import load_config
from parley.errors import ConfigErrors
from parley.runtime.mcp.check import check_server_tools
from parley.testing import ManualClock, ScriptedModel, calls_tool, eventually, parley_app, reply
from tests.auth_support import token_client
from tests.mcp_servers.protected_server import ProtectedServer, protected_in_process
from tests.support import InProcessServer, call, db_rows, tokens_auth, write_config

pytestmark = pytest.mark.anyio

PEOPLE = ("alice", "bob", "carol")
AGENTS: dict[str, dict[str, Any]] = {"triage": {"mcp_servers": ["tracker"]}}
T0 = 1_800_000_000.5


@dataclass
class World:
    server: InProcessServer
    directory: Path
    tracker: ProtectedServer
    parley_tokens: dict[str, str]
    tracker_tokens: dict[str, str]  # user -> the tracker's token for them

    @property
    def env(self) -> dict[str, str]:
        return {f"TRACKER_{p.upper()}": t for p, t in self.tracker_tokens.items()}

    async def run(self, person: str, message: str) -> dict[str, Any]:
        assert self.server.url is not None
        async with token_client(self.server.url, self.parley_tokens[person]) as client:
            return await call(client, "start_session", agent="triage", message=message)


def tracker_entry(url: str, people: tuple[str, ...]) -> dict[str, Any]:
    """The tracker in parley.yaml: a header for everybody, and each person's token from ${NAME}."""
    return {
        "url": url,
        "headers": {"X-Client": "parley"},
        "headers_by_principal": {p: {"Authorization": f"Bearer ${{TRACKER_{p.upper()}}}"} for p in people},
    }


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("principal_headers")
    parley_tokens = {p: "parley_" + secrets.token_urlsafe(32) for p in PEOPLE}
    # carol has a parley token but no tracker entry.
    tracker_tokens = {p: f"trk-{p}-" + secrets.token_urlsafe(24) for p in ("alice", "bob")}
    async with protected_in_process({t: p for p, t in tracker_tokens.items()}) as tracker:
        config = write_config(
            directory,
            agents=AGENTS,
            mcp_servers={"tracker": tracker_entry(tracker.url, ("alice", "bob"))},
            auth={
                "mode": "tokens",
                "tokens": [{"name": p, "sha256": token_digest(t)} for p, t in parley_tokens.items()],
            },
        )
        world = World(None, directory, tracker, parley_tokens, tracker_tokens)  # type: ignore[arg-type]
        async with InProcessServer(config, http=True, env=world.env) as world.server:
            yield world


def _call(outcome: dict[str, Any], tool: str) -> dict[str, Any]:
    (found,) = [c for c in outcome["tool_calls"] if c["tool"] == tool]
    return dict(found)


async def test_each_persons_calls_reach_the_server_with_their_own_token(world: World) -> None:
    before = len(world.tracker.seen)
    # Interleaved, on one agent and one shared server: each keeps to a connection of their own.
    for person, project in (("alice", "apollo"), ("bob", "borealis"), ("alice", "artemis")):
        outcome = await world.run(person, f'/tool tracker__list_issues {{"project": "{project}"}}')
        assert outcome["status"] == "answered", outcome
        assert _call(outcome, "tracker__list_issues")["status"] == "succeeded", outcome
    seen = world.tracker.seen[before:]
    calls = [(s.user, s.arguments.get("project")) for s in seen if s.method == "tools/call"]
    assert calls == [("alice", "apollo"), ("bob", "borealis"), ("alice", "artemis")]
    # Every request the tracker accepted, listing included, carried a known person's token.
    assert {s.user for s in seen} <= {"alice", "bob"} and world.tracker.refused == 0


async def test_a_person_without_an_entry_is_told_why_and_nothing_is_sent(world: World) -> None:
    before, refused = len(world.tracker.seen), world.tracker.refused
    outcome = await world.run("carol", '/tool tracker__label_issue {"issue": "T-1", "label": "urgent"}')
    assert outcome["status"] == "answered", outcome
    # The tracker's tools are left out of carol's calls (they cannot be listed as her), and the
    # session records why, naming her and the setting the operator adds.
    assert outcome["tool_calls"] == [], outcome
    (warning,) = db_rows(
        world.directory / "parley.db",
        "SELECT data FROM events WHERE session_id = ? AND kind = 'tool_source_warning'",
        (outcome["session_id"],),
    )
    text = json.loads(warning[0])["text"]
    assert "principal 'carol'" in text and "headers_by_principal" in text, text
    # Nothing went to the tracker on carol's behalf: no request, not even a refused one.
    assert world.tracker.seen[before:] == [] and world.tracker.refused == refused


async def test_a_tool_named_anyway_gets_a_tool_error_naming_the_fix(world: World) -> None:
    """A model may name a tool it was not offered (from the conversation, say): carol's call of
    the tracker is not sent, and the model reads why."""
    model = ScriptedModel([calls_tool("tracker__label_issue", {"issue": "T-9", "label": "x"}), reply("ok")])
    before = len(world.tracker.seen)
    async with InProcessServer(world.server.config_path, http=True, env=world.env, model=model) as other:
        assert other.url is not None
        async with token_client(other.url, world.parley_tokens["carol"]) as client:
            outcome = await call(client, "start_session", agent="triage", message="label T-9")
    failed = _call(outcome, "tracker__label_issue")
    assert failed["status"] == "failed", failed
    assert "not called" in failed["result"] and "principal 'carol'" in failed["result"], failed
    assert "headers_by_principal" in failed["result"], failed
    assert world.tracker.seen[before:] == []
    model.assert_complete()


async def test_one_persons_missing_entry_does_not_hold_back_another(world: World) -> None:
    """carol's refusal is not the server's failure: no back-off that would delay alice."""
    await world.run("carol", '/tool tracker__list_issues {"project": "x"}')
    outcome = await world.run("alice", '/tool tracker__list_issues {"project": "after-carol"}')
    assert _call(outcome, "tracker__list_issues")["status"] == "succeeded", outcome
    assert world.tracker.calls("list_issues")[-1].user == "alice"


async def test_no_tracker_token_reaches_the_database_or_the_log(world: World) -> None:
    await world.run("bob", '/tool tracker__label_issue {"issue": "T-2", "label": "later"}')
    stored = b"".join(p.read_bytes() for p in world.directory.glob("parley.db*") if p.is_file())
    log = world.server.log()
    for token in world.tracker_tokens.values():
        assert token.encode() not in stored
        assert token not in log


async def test_the_check_lists_the_server_as_each_person_and_names_a_refused_one(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = tracker_entry(world.tracker.url, ("alice", "bob"))
    entry["headers_by_principal"]["mallory"] = {"Authorization": "Bearer not-a-tracker-token"}
    entry["tools"] = {"list_issues": {}}
    for person, token in world.tracker_tokens.items():
        monkeypatch.setenv(f"TRACKER_{person.upper()}", token)
    config = load_config(write_config(tmp_path, agents=AGENTS, mcp_servers={"tracker": entry}), None)
    errors, warnings = await check_server_tools(config)
    assert errors == []
    (warning,) = warnings
    assert "as principal 'mallory'" in warning and "not-a-tracker-token" not in warning, warning


def test_headers_by_principal_is_for_http_servers(tmp_path: Path) -> None:
    stdio = {"command": "some-server", "headers_by_principal": {"alice": {"Authorization": "x"}}}
    path = write_config(tmp_path, mcp_servers={"tracker": stdio})
    with pytest.raises(ConfigErrors) as refused:
        load_config(path, None)
    assert "headers_by_principal" in str(refused.value) and "'env'" in str(refused.value)


async def test_a_schedule_an_admin_made_for_someone_never_carries_their_credentials(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ops (an admin) schedules runs for alice: they are alice's sessions, but alice never agreed
    to them, so they reach the tracker with nobody's token. A schedule in parley.yaml (the
    operator's) and one ops made for itself carry their owner's."""
    tokens = {"alice": secrets.token_urlsafe(24), "ops": secrets.token_urlsafe(24)}
    tracker_tokens = {**world.tracker_tokens, "ops": world.tracker_tokens["bob"]}  # ops reaches it as bob
    for person, token in tracker_tokens.items():
        monkeypatch.setenv(f"TRACKER_{person.upper()}", token)
    auth = tokens_auth({"alice": tokens["alice"]})
    auth["tokens"] += tokens_auth({"ops": tokens["ops"]}, ("parley:admin",))["tokens"]
    line = '/tool tracker__list_issues {{"project": "{}"}}'
    config = {
        "auth": auth,
        "mcp_servers": {"tracker": tracker_entry(world.tracker.url, ("alice", "bob", "ops"))},
        "schedules": {
            "from_file": {"every": "1m", "agent": "triage", "owner": "alice", "message": line.format("file")}
        },
    }
    before = len(world.tracker.seen)
    async with parley_app(config, agents=AGENTS, clock=ManualClock(T0), directory=tmp_path) as parley:
        url = (await parley.http()).url
        async with token_client(url, tokens["ops"]) as ops:
            for name, owner in (("for_alice", "alice"), ("for_ops", "ops")):
                made = await call(
                    ops,
                    "create_schedule",
                    name=name,
                    agent="triage",
                    every="1m",
                    message=line.format(name),
                    owner=owner,
                )
                assert made["status"] == "created", made
            await parley.app.schedules.run_due()
            listed = {s["name"]: s for s in (await call(ops, "list_schedules"))["schedules"]}
            started = {name: s["last_run"]["session_id"] for name, s in listed.items()}

            async def ended() -> bool:
                views = [await call(ops, "get_session", session_id=sid) for sid in started.values()]
                return all(v["status"] == "idle" for v in views)

            await eventually(ended, "the three scheduled sessions' turns")
    projects = [
        (s.user, s.arguments["project"]) for s in world.tracker.seen[before:] if s.method == "tools/call"
    ]
    assert sorted(projects) == [("alice", "file"), ("bob", "for_ops")], projects
    (warning,) = db_rows(
        tmp_path / "parley.db",
        "SELECT data FROM events WHERE session_id = ? AND kind = 'tool_source_warning'",
        (started["for_alice"],),
    )
    assert "a schedule another principal made for its owner" in json.loads(warning[0])["text"]
