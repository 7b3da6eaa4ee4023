"""Per-principal OAuth to a downstream MCP server (`auth: {mode: user_oauth}`, issue #38 items 1
and 2), in-process over HTTP: one parley with `auth: tokens` for alice, bob and carol, in front of
a protected MCP server that accepts only the JWTs of a real authorization server (authlib, which
enforces PKCE S256, `resource`, the exact redirect URI and `iss`) and records whose token each
call carried. The browser is played with httpx2: the owner POSTs the connect link, follows the
authorization URL to the consent page, allows, and brings the redirect back to /oauth/callback
with the cookie the connect step set."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from mcp.types import ElicitRequestParams, ElicitRequestURLParams, ElicitResult

from parley.cli import main as parley_main
from parley.config.loading import load_config
from parley.errors import ConfigErrors
from parley.runtime.credentials import new_key
from parley.runtime.mcp.check import check_server_tools
from parley.runtime.model import ModelRequest, ModelResponse, RequestedCall
from parley.testing import eventually
from parley.tls import http_client
from tests.auth_support import token_client
from tests.conftest import database_for
from tests.mcp_servers.oauth_protected_server import OAuthProtectedServer, oauth_protected_in_process
from tests.mcp_servers.task_echo_server import build as build_task_server
from tests.oauth_server import OAuthState, oauth_server
from tests.support import TEST_DEADLINE_S, Database, InProcessServer, call, tokens_auth, write_config

pytestmark = pytest.mark.anyio

PEOPLE = ("alice", "bob", "carol", "dave", "erin", "frank")
CLIENT_ID = "parley-tracker"
KEY_ENV = "PARLEY_TEST_CREDENTIALS_KEY"
# A confidential client at the authorization server, for the `vault` server.
VAULT_CLIENT, VAULT_SECRET_ENV, VAULT_SECRET = (
    "parley-vault",
    "PARLEY_TEST_VAULT_SECRET",
    "vault-" + "s3cr3t" * 4,
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class CallsNamedTool:
    """A model that calls the tool its user message names ("use NAME {json}"), offered or not (as
    a model may from the conversation), then answers: each session on its own, in any order."""

    def __init__(self) -> None:
        # The names of the tools each request offered, by the text of its first message.
        self.offered: dict[str, list[str]] = {}

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.offered[request.messages[0].text] = [t.name for t in request.tools]
        last = request.messages[-1]
        if last.role == "tool":
            return ModelResponse(text=f"done: {last.text[:200]}")
        _, name, arguments = last.text.split(" ", 2)
        return ModelResponse(
            text="calling", tool_calls=(RequestedCall(name=name, arguments=json.loads(arguments)),)
        )


@dataclass
class World:
    server: InProcessServer
    directory: Path
    tracker: OAuthProtectedServer
    auth: OAuthState
    tokens: dict[str, str]  # parley's own bearer tokens, by person
    model: CallsNamedTool
    database: Database
    # Servers whose client parley registers itself: by dynamic registration, by its metadata document.
    others: dict[str, OAuthProtectedServer]

    def rows(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.database.rows(query, params)

    async def cli(self, *argv: str) -> int:
        """The command line on this parley's database, in a thread (it runs its own event loop)."""
        db = ["--db", self.database.db_arg] if self.database.db_arg else []
        args = [*argv, "--config", str(self.server.config_path), *db]
        return await anyio.to_thread.run_sync(parley_main, args)

    async def run(
        self, person: str, tool: str, arguments: dict[str, Any], agent: str = "triage"
    ) -> dict[str, Any]:
        """A session of `person` whose model calls `tool` once, then answers."""
        assert self.server.url is not None
        async with token_client(self.server.url, self.tokens[person]) as client:
            message = f"use {tool} {json.dumps(arguments)}"
            return await call(client, "start_session", agent=agent, message=message)

    async def session(self, person: str, session_id: str) -> dict[str, Any]:
        assert self.server.url is not None
        async with token_client(self.server.url, self.tokens[person]) as client:
            return await call(client, "get_session", session_id=session_id)

    async def settled(self, person: str, session_id: str) -> dict[str, Any]:
        """The session once its turn has ended (it resumes by itself after the callback)."""
        found: dict[str, Any] = {}

        async def done() -> bool:
            found.update(await self.session(person, session_id))
            return found.get("status") not in ("running", "waiting_for_input")

        await eventually(done, f"session {session_id} to finish its turn")
        return found

    def browser(self) -> httpx2.AsyncClient:
        return http_client(timeout=TEST_DEADLINE_S, follow_redirects=False)

    async def connect(self, browser: httpx2.AsyncClient, person: str, connect_url: str) -> httpx2.Response:
        flow_id = connect_url.rsplit("/", 1)[1]
        return await browser.post(
            f"{self.server.base_url}/v1/connect/{flow_id}",
            json={},
            headers={"Authorization": f"Bearer {self.tokens[person]}"},
        )

    async def consent(self, browser: httpx2.AsyncClient, authorize_url: str, subject: str) -> str:
        """The authorization server's page, allowed as `subject`: the redirect back to parley."""
        page = await browser.get(authorize_url)
        assert page.status_code == 200, page.text
        allowed = await browser.post(authorize_url, data={"subject": subject})
        assert allowed.status_code == 302, allowed.text
        return allowed.headers["location"]

    async def authorize(self, person: str, outcome: dict[str, Any]) -> httpx2.Response:
        """The owner completes the flow in their browser; the callback's answer."""
        (pending,) = outcome["pending"]
        async with self.browser() as browser:
            connected = await self.connect(browser, person, pending["connect_url"])
            assert connected.status_code == 200, connected.text
            back = await self.consent(browser, connected.json()["authorize_url"], person)
            return await browser.get(back)

    def credentials(self) -> list[tuple[Any, ...]]:
        return self.rows(
            "SELECT principal, server, issuer, updated_at FROM credentials WHERE server = 'tracker' ORDER BY principal"
        )


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
async def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("user_oauth")
    with database_for(request.param, directory, "user_oauth") as database:
        async with _world(directory, database) as world:
            yield world


@asynccontextmanager
async def _world(directory: Path, database: Database) -> AsyncIterator[World]:
    port = free_port()
    public_base = f"http://127.0.0.1:{port}"
    tokens = {p: f"parley-{p}-" + os.urandom(16).hex() for p in PEOPLE}
    with oauth_server() as auth:
        auth.open_registration = True
        async with (
            oauth_protected_in_process(
                auth.url, auth.key.public_jwk, wider={"label_issue": "tracker:write"}
            ) as tracker,
            oauth_protected_in_process(auth.url, auth.key.public_jwk) as wiki,
            oauth_protected_in_process(auth.url, auth.key.public_jwk) as docs,
            # A server whose `ask` runs as a downstream task (2026-07-28) that needs an answer.
            oauth_protected_in_process(auth.url, auth.key.public_jwk, server=build_task_server()) as tasks,
            # Behind a confidential client parley was registered as (its secret in the environment).
            oauth_protected_in_process(auth.url, auth.key.public_jwk) as vault,
        ):
            for protected in (tracker, wiki, docs, tasks, vault):
                auth.resources.add(protected.url)
            auth.register(CLIENT_ID, [public_base + "/oauth/callback"], scope="tracker:read tracker:write")
            auth.register(VAULT_CLIENT, [public_base + "/oauth/callback"], "tracker:read", VAULT_SECRET)
            config = write_config(
                directory,
                agents={
                    "triage": {"mcp_servers": ["tracker"]},
                    "reader": {"mcp_servers": ["wiki", "docs"]},
                    "librarian": {"mcp_servers": ["docs"], "mcp_resources": True},
                    "asker": {"mcp_servers": ["tasks"]},
                    "keeper": {"mcp_servers": ["vault"]},
                },
                mcp_servers={
                    "tracker": {
                        "url": tracker.url,
                        "auth": {"mode": "user_oauth", "client_id": CLIENT_ID, "scopes": ["tracker:read"]},
                    },
                    "wiki": {"url": wiki.url, "auth": {"mode": "user_oauth", "registration": "dynamic"}},
                    # auto, without a client id: the metadata document, which the server supports.
                    "docs": {"url": docs.url, "auth": {"mode": "user_oauth"}},
                    "vault": {
                        "url": vault.url,
                        "auth": {
                            "mode": "user_oauth",
                            "client_id": VAULT_CLIENT,
                            "client_secret_env": VAULT_SECRET_ENV,
                            "scopes": ["tracker:read"],
                        },
                    },
                    "tasks": {
                        "url": tasks.url,
                        "auth": {"mode": "user_oauth", "registration": "dynamic"},
                        "task_poll_min_s": 0.1,
                        "task_poll_max_s": 0.5,
                        "tools": {"ask": {"approval": "never"}},
                    },
                },
                auth=tokens_auth(tokens),
                http={"public_url": public_base + "/mcp"},
                credentials={"key_env": KEY_ENV},
                database=database,
            )
            env = {KEY_ENV: new_key(), VAULT_SECRET_ENV: VAULT_SECRET}
            model = CallsNamedTool()
            async with InProcessServer(
                config, http=True, db=database.db_arg, port=port, env=env, model=model
            ) as server:
                yield World(
                    server,
                    directory,
                    tracker,
                    auth,
                    tokens,
                    model,
                    database,
                    {"wiki": wiki, "docs": docs, "tasks": tasks, "vault": vault},
                )


def _parked(outcome: dict[str, Any], world: World, server: str = "tracker") -> dict[str, Any]:
    assert outcome["status"] == "waiting_for_input", outcome
    (pending,) = outcome["pending"]
    assert pending["kind"] == "authorization_required", pending
    url = world.tracker.url if server == "tracker" else world.others[server].url
    assert pending["server"] == server and pending["host"] == urlsplit(url).netloc
    assert pending["connect_url"].startswith(world.server.base_url + "/ui/#/connect/flow_")
    # A parley link only: never the authorization server's URL.
    assert world.auth.url not in str(outcome)
    return dict(pending)


@pytest.mark.parametrize("server", ["wiki", "docs"])
async def test_parley_registers_itself_without_a_client_id(world: World, server: str) -> None:
    """wiki: dynamic registration (RFC 7591); docs: a Client ID Metadata Document parley serves,
    which the authorization server fetches."""
    outcome = await world.run("bob", f"{server}__list_issues", {"project": server}, agent="reader")
    pending = _parked(outcome, world, server)
    async with world.browser() as browser:
        connected = await world.connect(browser, "bob", pending["connect_url"])
        authorize_url = connected.json()["authorize_url"]
        client_id = parse_qs(urlsplit(authorize_url).query)["client_id"][0]
        back = await world.consent(browser, authorize_url, "bob")
        assert (await browser.get(back)).status_code == 303
    await world.settled("bob", outcome["session_id"])
    assert [(s.user, s.arguments) for s in world.others[server].calls()] == [("bob", {"project": server})]
    if server == "wiki":
        assert client_id.startswith("dyn-"), client_id
    else:
        assert client_id == world.server.base_url + "/oauth/client-metadata.json"
        assert client_id in world.auth.fetched_documents
        async with world.browser() as plain:
            document = (await plain.get(client_id)).json()
        assert document["client_id"] == client_id
        assert document["redirect_uris"] == [world.server.base_url + "/oauth/callback"]


async def test_a_dynamically_registered_client_is_kept_for_a_restart_and_the_other_replicas(
    world: World,
) -> None:
    """The client parley registered at wiki's authorization server is kept in the database: a
    second parley on the same database (a replica, or the next process) uses it, rather than
    registering again (refresh tokens are bound to the client that got them)."""
    outcome = await world.run("carol", "wiki__list_issues", {"project": "kept"}, agent="reader")
    pending = _parked(outcome, world, "wiki")
    async with world.browser() as browser:
        connected = await world.connect(browser, "carol", pending["connect_url"])
    first = parse_qs(urlsplit(connected.json()["authorize_url"]).query)["client_id"][0]
    assert world.rows("SELECT client_id FROM oauth_clients WHERE server = 'wiki'") == [(first,)]

    env = {KEY_ENV: world.server.env[KEY_ENV]}
    async with InProcessServer(
        world.server.config_path, http=True, db=world.database.db_arg, env=env, model=world.model
    ) as replica:
        assert replica.url is not None
        async with token_client(replica.url, world.tokens["dave"]) as client:
            message = f"use wiki__list_issues {json.dumps({'project': 'kept-too'})}"
            again = await call(client, "start_session", agent="reader", message=message)
        (parked,) = again["pending"]
        flow_id = parked["connect_url"].rsplit("/", 1)[1]
        async with world.browser() as browser:
            connected = await browser.post(
                f"{replica.base_url}/v1/connect/{flow_id}",
                json={},
                headers={"Authorization": f"Bearer {world.tokens['dave']}"},
            )
    assert connected.status_code == 200, connected.text
    second = parse_qs(urlsplit(connected.json()["authorize_url"]).query)["client_id"][0]
    assert second == first
    assert [c for c in world.auth.clients if c.startswith("dyn-")] == [first]


async def test_a_resource_read_without_an_account_parks_and_reads_once_after_the_owner_connects(
    world: World,
) -> None:
    reads = [s for s in world.others["docs"].seen if s.method == "resources/read"]
    outcome = await world.run(
        "carol", "mcp_read_resource", {"server": "docs", "uri": "issues://summary"}, agent="librarian"
    )
    pending = _parked(outcome, world, "docs")
    assert "mcp_read_resource" in pending["question"], pending
    assert (await world.authorize("carol", outcome)).status_code == 303
    session = await world.settled("carol", outcome["session_id"])
    assert session["status"] == "idle", session
    assert "3 open issues" in str(_call(session, "mcp_read_resource")), session
    now = [s for s in world.others["docs"].seen if s.method == "resources/read"]
    assert [s.user for s in now[len(reads) :]] == ["carol"]


async def test_a_downstream_task_whose_token_went_away_parks_and_goes_on_once_reconnected(
    world: World,
) -> None:
    """bob's `ask` runs as a task at `tasks`; while it waits for his answer his account is revoked.
    Sending the answer needs his token: the call parks for him to connect again (it is not sent
    again, nor given up as unreachable), and once he has, the answer goes to the same task."""
    outcome = await world.run("bob", "tasks__ask", {"question": "Your name?"}, agent="asker")
    _parked(outcome, world, "tasks")
    assert (await world.authorize("bob", outcome)).status_code == 303
    sid = outcome["session_id"]
    question: dict[str, Any] = {}

    async def asked() -> bool:
        pending = (await world.session("bob", sid))["pending"]
        question.update(next((p for p in pending if p["kind"] == "question"), {}))
        return bool(question)

    await eventually(asked, "the task's question to reach bob")
    assert await world.cli("credentials", "revoke", "bob", "tasks") == 0
    assert world.server.url is not None
    async with token_client(world.server.url, world.tokens["bob"]) as client:
        await call(client, "answer_question", session_id=sid, interrupt_id=question["id"], answer="Ada")
    parked: dict[str, Any] = {}

    async def parked_again() -> bool:
        pending = (await world.session("bob", sid))["pending"]
        parked.update(next((p for p in pending if p["kind"] == "authorization_required"), {}))
        return bool(parked)

    await eventually(parked_again, "the task's call to park for bob's account")
    assert (await world.authorize("bob", {"pending": [parked]})).status_code == 303
    session = await world.settled("bob", sid)
    ask = _call(session, "tasks__ask")
    assert ask["status"] == "succeeded" and "answer: Ada" in str(ask), ask
    calls = [s for s in world.others["tasks"].calls("ask")]
    assert [s.user for s in calls] == ["bob"], calls  # the tool was called once: one task


@pytest.mark.parametrize("misbehaviour", ["wrong_iss", "no_iss"])
async def test_a_callback_from_another_issuer_or_without_iss_is_refused_and_stores_nothing(
    world: World, misbehaviour: str
) -> None:
    """RFC 9207: the authorization response must name the issuer parley discovered (which says it
    sends iss), so a mix-up with another authorization server's response is refused."""
    assert await world.cli("credentials", "revoke", "erin", "tracker") == 0
    outcome = await world.run("erin", "tracker__list_issues", {"project": misbehaviour})
    _parked(outcome, world)
    world.auth.misbehave = misbehaviour  # type: ignore[assignment]
    try:
        back = await world.authorize("erin", outcome)
    finally:
        world.auth.misbehave = None
    assert back.status_code == 400, back.text
    assert "issuer" in back.text or "iss" in back.text, back.text
    assert world.rows("SELECT 1 FROM credentials WHERE principal = 'erin' AND server = 'tracker'") == []
    session = await world.session("erin", outcome["session_id"])
    assert session["status"] == "waiting_for_input", session


async def test_an_expired_connect_link_gives_the_model_a_clear_tool_error(world: World) -> None:
    assert await world.cli("credentials", "revoke", "erin", "tracker") == 0
    outcome = await world.run("erin", "tracker__list_issues", {"project": "never-connected"})
    pending = _parked(outcome, world)
    world.rows("UPDATE interrupts SET deadline = 1 WHERE id = ?", (pending["id"],))
    world.rows("UPDATE sessions SET wake_at = 1 WHERE id = ?", (outcome["session_id"],))
    session = await world.settled("erin", outcome["session_id"])
    call_ = _call(session, "tracker__list_issues")
    assert call_["status"] == "failed", call_
    assert "did not connect their account before the connect link expired" in str(call_), call_
    assert not [s for s in world.tracker.calls("list_issues") if s.arguments["project"] == "never-connected"]


async def test_the_v1_stream_names_the_connect_link_and_never_the_authorization_server(world: World) -> None:
    assert await world.cli("credentials", "revoke", "erin", "tracker") == 0
    outcome = await world.run("erin", "tracker__list_issues", {"project": "streamed"})
    pending = _parked(outcome, world)
    raised: dict[str, Any] = {}
    url = f"{world.server.base_url}/v1/sessions/{outcome['session_id']}/events"
    async with world.browser() as http:
        headers = {"Authorization": f"Bearer {world.tokens['erin']}", "Accept": "text/event-stream"}
        async with http.stream("GET", url, headers=headers) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data:") and '"interrupt_raised"' in line:
                    raised.update(json.loads(line.removeprefix("data:")))
                    break
    interrupt = raised["interrupt"]
    assert interrupt["kind"] == "authorization_required" and interrupt["id"] == pending["id"], raised
    assert interrupt["connect_url"] == pending["connect_url"] and interrupt["host"] == pending["host"]
    assert world.auth.url not in json.dumps(raised)


def _call(session: dict[str, Any], tool: str) -> dict[str, Any]:
    calls = session["last_turn"]["tool_calls"] if "last_turn" in session else session["tool_calls"]
    (found,) = [c for c in calls if c["tool"] == tool]
    return dict(found)


async def test_the_first_call_parks_and_runs_once_after_the_owner_connects(world: World) -> None:
    before = len(world.tracker.calls())
    outcome = await world.run("alice", "tracker__list_issues", {"project": "apollo"})
    pending = _parked(outcome, world)
    # What a client shows its user (the tools' text) names the link too.
    assert world.server.url is not None
    async with token_client(world.server.url, world.tokens["alice"]) as client:
        shown = await client.call_tool("list_pending", {})
    text = " ".join(getattr(c, "text", "") for c in shown.content)
    assert f"authorization_required {pending['id']}" in text and pending["connect_url"] in text, text
    assert world.tracker.calls()[before:] == []  # nothing was sent

    (parked,) = outcome["pending"]
    async with world.browser() as browser:
        started = await world.connect(browser, "alice", parked["connect_url"])
    # tracker names a client id: the pre-registered client is the one used.
    assert parse_qs(urlsplit(started.json()["authorize_url"]).query)["client_id"] == [CLIENT_ID]
    back = await world.authorize("alice", outcome)
    assert back.status_code == 303, back.text
    assert back.headers["location"] == f"{world.server.base_url}/ui/#/s/{outcome['session_id']}"

    session = await world.settled("alice", outcome["session_id"])
    assert _call(session, "tracker__list_issues")["status"] == "succeeded", session
    assert session["pending"] == []
    assert [(s.user, s.arguments) for s in world.tracker.calls()[before:]] == [
        ("alice", {"project": "apollo"})
    ]
    assert [row[:3] for row in world.credentials()] == [("alice", "tracker", world.auth.url)]


async def test_an_unconnected_person_is_offered_a_connect_tool_instead(world: World) -> None:
    """The model is not shown tools it cannot call yet; it is shown one that asks to connect."""
    outcome = await world.run("dave", "tracker__connect_account", {})
    offered = world.model.offered["use tracker__connect_account {}"]
    assert "tracker__connect_account" in offered and "tracker__list_issues" not in offered
    _parked(outcome, world)
    assert (await world.authorize("dave", outcome)).status_code == 303
    session = await world.settled("dave", outcome["session_id"])
    connected = _call(session, "tracker__connect_account")
    assert connected["status"] == "succeeded" and "connected" in connected["result"], connected
    assert not [s for s in world.tracker.calls() if s.user == "dave"]  # no tool ran for it
    # From now on dave is shown the tracker's own tools.
    await world.run("dave", "tracker__list_issues", {"project": "dione"})
    assert "tracker__list_issues" in world.model.offered['use tracker__list_issues {"project": "dione"}']
    assert world.tracker.calls("list_issues")[-1].user == "dave"


async def test_each_persons_calls_reach_the_server_as_them(world: World) -> None:
    outcome = await world.run("bob", "tracker__list_issues", {"project": "borealis"})
    _parked(outcome, world)
    assert (await world.authorize("bob", outcome)).status_code == 303
    await world.settled("bob", outcome["session_id"])
    # alice is connected already: her call goes at once, as her, on one shared server.
    again = await world.run("alice", "tracker__list_issues", {"project": "artemis"})
    assert again["status"] == "answered", again
    calls = [(s.user, s.arguments["project"]) for s in world.tracker.calls("list_issues")]
    assert calls[-2:] == [("bob", "borealis"), ("alice", "artemis")]
    # At once, interleaved on the one agent and server: each call still goes as its owner.
    async with anyio.create_task_group() as tg:
        for n in range(3):
            for person in ("alice", "bob"):
                tg.start_soon(world.run, person, "tracker__list_issues", {"project": f"{person}-at-once-{n}"})
    at_once = [
        (s.user, s.arguments["project"])
        for s in world.tracker.calls("list_issues")
        if "-at-once-" in s.arguments["project"]
    ]
    assert sorted(at_once) == sorted((p, f"{p}-at-once-{n}") for n in range(3) for p in ("alice", "bob"))


async def test_someone_elses_connect_link_is_refused_and_nothing_is_stored(world: World) -> None:
    outcome = await world.run("carol", "tracker__list_issues", {"project": "ceres"})
    pending = _parked(outcome, world)
    stored = world.credentials()
    async with world.browser() as browser:
        refused = await world.connect(browser, "alice", pending["connect_url"])
        assert refused.status_code == 403, refused.text
        assert "authorize_url" not in refused.text and not browser.cookies
    assert world.credentials() == stored
    audited = world.rows(
        "SELECT principal, outcome, target FROM audit WHERE action = 'connect_account' AND session_id = ?",
        (outcome["session_id"],),
    )
    assert audited == [("alice", "refused", "tracker")], audited
    # The link still works for its owner, once.
    assert (await world.authorize("carol", outcome)).status_code == 303
    session = await world.settled("carol", outcome["session_id"])
    assert _call(session, "tracker__list_issues")["status"] == "succeeded"
    assert world.tracker.calls("list_issues")[-1].user == "carol"
    trail = world.rows(
        "SELECT principal, action, outcome FROM audit WHERE action LIKE '%_account' AND session_id = ? ORDER BY id",
        (outcome["session_id"],),
    )
    assert trail == [
        ("alice", "connect_account", "refused"),
        ("carol", "connect_account", "ok"),
        ("carol", "authorize_account", "ok"),
    ], trail


async def test_a_forged_replayed_or_expired_state_is_refused_and_changes_nothing(world: World) -> None:
    outcome = await world.run("bob", "tracker__label_issue", {"issue": "T-1", "label": "x"})
    # bob is connected with tracker:read only: labelling needs tracker:write (step-up).
    pending = _parked(outcome, world)
    assert pending.get("tool") == "tracker__label_issue"
    async with world.browser() as browser:
        connected = await world.connect(browser, "bob", pending["connect_url"])
        authorize_url = connected.json()["authorize_url"]
        assert "tracker:write" in parse_qs(urlsplit(authorize_url).query)["scope"][0]
        back = await world.consent(browser, authorize_url, "bob")
        stored = world.credentials()
        forged = back.replace("state=", "state=forged")
        assert (await browser.get(forged)).status_code == 400
        # Another browser (without the cookie) cannot bring the code back either.
        async with world.browser() as other:
            assert (await other.get(back)).status_code == 400
        assert world.credentials() == stored
        assert (await browser.get(back)).status_code == 303
        replayed = await browser.get(back)
        assert replayed.status_code == 400, replayed.text
    session = await world.settled("bob", outcome["session_id"])
    assert _call(session, "tracker__label_issue")["status"] == "succeeded", session
    assert len([s for s in world.tracker.calls("label_issue") if s.arguments["issue"] == "T-1"]) == 1

    # An expired flow: its link and its callback are refused.
    late = await world.run("alice", "tracker__label_issue", {"issue": "T-2", "label": "y"})
    late_pending = _parked(late, world)
    async with world.browser() as browser:
        connected = await world.connect(browser, "alice", late_pending["connect_url"])
        back = await world.consent(browser, connected.json()["authorize_url"], "alice")
        stored = world.credentials()
        world.rows(
            "UPDATE oauth_flows SET expires_at = 0 WHERE id = ?",
            (late_pending["connect_url"].rsplit("/", 1)[1],),
        )
        assert (await browser.get(back)).status_code == 400
        assert (await world.connect(browser, "alice", late_pending["connect_url"])).status_code == 410
    assert world.credentials() == stored


async def test_declining_gives_the_model_a_clear_tool_error(world: World) -> None:
    outcome = await world.run("carol", "tracker__label_issue", {"issue": "T-3", "label": "z"})
    pending = _parked(outcome, world)
    async with world.browser() as browser:
        connected = await world.connect(browser, "carol", pending["connect_url"])
        state = parse_qs(urlsplit(connected.json()["authorize_url"]).query)["state"][0]
        # What the authorization server sends back when the person declines.
        declined = await browser.get(
            f"{world.server.base_url}/oauth/callback",
            params={"error": "access_denied", "state": state, "iss": world.auth.url},
        )
        assert declined.status_code == 303
    session = await world.settled("carol", outcome["session_id"])
    failed = _call(session, "tracker__label_issue")
    assert failed["status"] == "failed" and "declined" in failed["result"], failed
    assert not [s for s in world.tracker.calls("label_issue") if s.arguments["issue"] == "T-3"]


async def test_a_revoked_credential_parks_again(world: World) -> None:
    assert await world.cli("credentials", "revoke", "alice", "tracker") == 0
    assert all(row[0] != "alice" for row in world.credentials())
    outcome = await world.run("alice", "tracker__list_issues", {"project": "after-revoke"})
    _parked(outcome, world)
    assert not [s for s in world.tracker.calls("list_issues") if s.arguments["project"] == "after-revoke"]
    assert (await world.authorize("alice", outcome)).status_code == 303
    await world.settled("alice", outcome["session_id"])
    assert world.tracker.calls("list_issues")[-1].user == "alice"


async def test_a_token_about_to_expire_is_refreshed_before_the_call(world: World) -> None:
    """Tokens are refreshed a minute before they expire: with 30-second tokens, every call
    spends the refresh token (which the authorization server rotates) and goes with a new one."""
    assert await world.cli("credentials", "revoke", "carol") == 0
    world.auth.access_token_s = 30
    try:
        outcome = await world.run("carol", "tracker__list_issues", {"project": "refresh-1"})
        assert (await world.authorize("carol", outcome)).status_code == 303
        await world.settled("carol", outcome["session_id"])
        refreshes = [r for r in world.auth.requests if r.params.get("grant_type") == "refresh_token"]
        again = await world.run("carol", "tracker__list_issues", {"project": "refresh-2"})
        assert again["status"] == "answered", again
    finally:
        world.auth.access_token_s = 300
    spent = [r for r in world.auth.requests if r.params.get("grant_type") == "refresh_token"]
    assert len(spent) > len(refreshes) >= 1
    assert all(r.params["resource"] == world.tracker.url for r in spent)
    assert [s.user for s in world.tracker.calls("list_issues")[-2:]] == ["carol", "carol"]


async def test_two_replicas_calling_at_once_spend_a_refresh_token_once(world: World) -> None:
    """carol's token is a few seconds from the refresh margin's end on a database two parleys
    share; four calls at once, two on each, refresh it once (one replica holds the claim, the
    other sends the token that is still good), and every refresh token is spent once."""
    assert await world.cli("credentials", "revoke", "carol", "tracker") == 0
    outcome = await world.run("carol", "tracker__list_issues", {"project": "replicas-0"})
    assert (await world.authorize("carol", outcome)).status_code == 303
    await world.settled("carol", outcome["session_id"])
    env = {KEY_ENV: world.server.env[KEY_ENV]}
    async with InProcessServer(
        world.server.config_path, http=True, db=world.database.db_arg, env=env, model=world.model
    ) as replica:
        assert replica.url is not None and world.server.url is not None
        world.rows(
            "UPDATE credentials SET expires_at = ? WHERE principal = 'carol' AND server = 'tracker'",
            (time.time() + 30,),
        )
        before = [r for r in world.auth.requests if r.params.get("grant_type") == "refresh_token"]
        answers: list[str] = []

        async def one(url: str, n: int) -> None:
            async with token_client(url, world.tokens["carol"]) as client:
                message = f"use tracker__list_issues {json.dumps({'project': f'replicas-{n}'})}"
                answers.append(
                    (await call(client, "start_session", agent="triage", message=message))["status"]
                )

        async with anyio.create_task_group() as tg:
            for n, url in enumerate([world.server.url, replica.url, world.server.url, replica.url], 1):
                tg.start_soon(one, url, n)
    spent = [r for r in world.auth.requests if r.params.get("grant_type") == "refresh_token"][len(before) :]
    assert answers == ["answered"] * 4, answers
    assert len(spent) == 1, [r.params for r in spent]
    every = [
        r.params["refresh_token"]
        for r in world.auth.requests
        if r.params.get("grant_type") == "refresh_token"
    ]
    assert len(every) == len(set(every)), "a refresh token was spent twice"
    ran = {s.arguments["project"] for s in world.tracker.calls("list_issues") if s.user == "carol"}
    assert {f"replicas-{n}" for n in range(1, 5)} <= ran


async def test_a_refused_token_is_refreshed_and_the_call_goes_on(world: World) -> None:
    """The server stops accepting bob's access token (401): parley does not send it again but
    refreshes it and goes on, without asking bob; when the refresh token is revoked as well, the
    call parks for bob to connect again."""
    world.tracker.revoked |= world.tracker.tokens_seen
    outcome = await world.run("bob", "tracker__list_issues", {"project": "after-401"})
    assert outcome["status"] == "answered", outcome
    assert world.tracker.calls("list_issues")[-1].arguments == {"project": "after-401"}

    world.tracker.revoked |= world.tracker.tokens_seen
    for token in world.auth.refresh_tokens.values():
        token.revoked = True
    parked = await world.run("bob", "tracker__list_issues", {"project": "after-revoke-at-as"})
    _parked(parked, world)
    assert not [
        s for s in world.tracker.calls("list_issues") if s.arguments["project"] == "after-revoke-at-as"
    ]
    assert (await world.authorize("bob", parked)).status_code == 303
    await world.settled("bob", parked["session_id"])
    assert world.tracker.calls("list_issues")[-1].arguments == {"project": "after-revoke-at-as"}


async def test_two_links_opened_in_one_browser_both_complete(world: World) -> None:
    """Each flow has its own binding cookie: starting a second does not undo the first."""
    assert await world.cli("credentials", "revoke", "alice", "tracker") == 0
    first = await world.run("alice", "tracker__list_issues", {"project": "tab-1"})
    second = await world.run("alice", "tracker__list_issues", {"project": "tab-2"})
    async with world.browser() as browser:
        backs = []
        for outcome in (first, second):
            connected = await world.connect(browser, "alice", _parked(outcome, world)["connect_url"])
            backs.append(await world.consent(browser, connected.json()["authorize_url"], "alice"))
        assert [(await browser.get(back)).status_code for back in reversed(backs)] == [303, 303]
    for outcome, project in ((first, "tab-1"), (second, "tab-2")):
        await world.settled("alice", outcome["session_id"])
        assert len([s for s in world.tracker.calls("list_issues") if s.arguments["project"] == project]) == 1


async def test_connecting_once_resumes_the_owners_other_parked_calls(world: World) -> None:
    assert await world.cli("credentials", "revoke", "alice", "tracker") == 0
    first = await world.run("alice", "tracker__list_issues", {"project": "one-of-two"})
    second = await world.run("alice", "tracker__list_issues", {"project": "two-of-two"})
    assert (await world.authorize("alice", first)).status_code == 303
    for outcome, project in ((first, "one-of-two"), (second, "two-of-two")):
        session = await world.settled("alice", outcome["session_id"])
        assert _call(session, "tracker__list_issues")["status"] == "succeeded", session
        assert len([s for s in world.tracker.calls("list_issues") if s.arguments["project"] == project]) == 1
    # The second link is done with: it opens nothing any more.
    async with world.browser() as browser:
        late = await world.connect(browser, "alice", _parked(second, world)["connect_url"])
    assert late.status_code == 410, late.text


async def test_a_call_whose_owner_connected_goes_on_at_its_deadline(world: World) -> None:
    """If the callback's process stopped after storing the credential but before resuming the
    call (here: the link was opened, then the account connected through another one), the
    interrupt's deadline finds the account connected and the call runs instead of failing."""
    assert await world.cli("credentials", "revoke", "alice", "tracker") == 0
    stuck = await world.run("alice", "tracker__list_issues", {"project": "stuck"})
    pending = _parked(stuck, world)
    async with world.browser() as browser:
        # Under way in a browser: connecting elsewhere leaves it to finish.
        assert (await world.connect(browser, "alice", pending["connect_url"])).status_code == 200
    other = await world.run("alice", "tracker__list_issues", {"project": "other"})
    assert (await world.authorize("alice", other)).status_code == 303
    await world.settled("alice", other["session_id"])
    assert (await world.session("alice", stuck["session_id"]))["status"] == "waiting_for_input"
    world.rows("UPDATE interrupts SET deadline = 1 WHERE id = ?", (pending["id"],))
    world.rows("UPDATE sessions SET wake_at = 1 WHERE id = ?", (stuck["session_id"],))
    session = await world.settled("alice", stuck["session_id"])
    assert _call(session, "tracker__list_issues")["status"] == "succeeded", session
    assert len([s for s in world.tracker.calls("list_issues") if s.arguments["project"] == "stuck"]) == 1


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_with_url_elicitation_is_sent_the_connect_link(world: World, mode: str) -> None:
    """An MCP client that declares URL-mode elicitation is shown parley's connect link: while
    start_session waits (2025-11-25), or in its input-required round (2026-07-28). Here it
    completes the flow in the person's browser at once, and the same start_session call comes
    back with the call run once."""
    assert await world.cli("credentials", "revoke", "alice", "tracker") == 0
    shown: list[ElicitRequestURLParams] = []

    async def on_elicit(context: Any, params: ElicitRequestParams) -> ElicitResult:
        assert isinstance(params, ElicitRequestURLParams), params
        shown.append(params)
        async with world.browser() as browser:
            connected = await world.connect(browser, "alice", params.url)
            back = await world.consent(browser, connected.json()["authorize_url"], "alice")
            assert (await browser.get(back)).status_code == 303
        return ElicitResult(action="accept")

    project = f"by-{mode}"
    assert world.server.url is not None
    async with token_client(
        world.server.url, world.tokens["alice"], mode=mode, elicitation_callback=on_elicit
    ) as client:
        message = f"use tracker__list_issues {json.dumps({'project': project})}"
        outcome = await call(client, "start_session", agent="triage", message=message)
    assert outcome["status"] == "answered", (shown, outcome)
    (params,) = shown
    assert params.url.startswith(world.server.base_url + "/ui/#/connect/flow_"), params
    assert "tracker" in params.message and world.auth.url not in params.url
    ran = [s for s in world.tracker.calls("list_issues") if s.arguments["project"] == project]
    assert len(ran) == 1


async def test_no_token_is_found_in_clear_anywhere(world: World) -> None:
    secrets_seen = set(world.tracker.tokens_seen)
    secrets_seen |= {t["refresh_token"] for t in world.auth.issued if t.get("refresh_token")}
    secrets_seen |= {t["access_token"] for t in world.auth.issued}
    assert secrets_seen
    # SQLite: the database file itself; PostgreSQL: every row of every table, as text.
    stored = b"".join(p.read_bytes() for p in world.directory.glob("parley.db*") if p.is_file())
    if world.database.url is not None:
        tables = [
            r[0]
            for r in world.rows(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        ]
        stored = "".join(str(world.rows(f"SELECT * FROM {table}")) for table in tables).encode()
    assert stored
    # The test's own authorization server (authlib) logs its token responses in this process.
    log = world.server.parley.log(without=("authlib",))
    events = "".join(str(row) for row in world.rows("SELECT data FROM events"))
    calls = "".join(str(row) for row in world.rows("SELECT result, remote FROM tool_calls"))
    interrupts = "".join(str(row) for row in world.rows("SELECT payload, resolution FROM interrupts"))
    for token in secrets_seen:
        assert token.encode() not in stored
        assert token not in log and token not in events and token not in calls and token not in interrupts
    # Nor a PKCE verifier or a state: the flows keep digests and ciphertexts.
    for row in world.rows("SELECT state_digest, verifier_ciphertext FROM oauth_flows"):
        assert row[1] is None or isinstance(row[1], bytes)


def test_user_oauth_needs_the_credentials_key(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        mcp_servers={"tracker": {"url": "https://tracker.example.test/mcp", "auth": {"mode": "user_oauth"}}},
    )
    with pytest.raises(ConfigErrors) as caught:
        load_config(config, None)
    text = str(caught.value)
    assert "credentials" in text and "tracker" in text, text
    # Without http.public_url its links are served on 127.0.0.1 (tests/test_user_oauth_loopback.py).
    assert "http.public_url" not in text, text


def test_user_oauth_and_headers_by_principal_do_not_go_together(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        mcp_servers={
            "tracker": {
                "url": "https://tracker.example.test/mcp",
                "auth": {"mode": "user_oauth"},
                "headers_by_principal": {"alice": {"Authorization": "Bearer x"}},
            }
        },
    )
    with pytest.raises(ConfigErrors, match="headers_by_principal"):
        load_config(config, None)


async def test_parley_check_says_a_user_oauth_server_is_not_listed(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        mcp_servers={"tracker": {"url": "https://tracker.example.test/mcp", "auth": {"mode": "user_oauth"}}},
        http={"public_url": "https://parley.example.test/mcp"},
        credentials={"key_env": KEY_ENV},
    )
    errors, warnings = await check_server_tools(load_config(config, None))
    assert errors == []
    assert ["user_oauth" in w and "tracker" in w for w in warnings] == [True], warnings


async def test_a_callback_cut_after_its_flow_was_used_can_be_done_again_from_the_same_link(
    world: World,
) -> None:
    """The callback's process died after it used the flow (single use) and before it stored the
    account: the call still waits, so the same connect link starts a new flow, and the call runs
    once when that one completes. The first authorization cannot come back."""
    outcome = await world.run("frank", "tracker__list_issues", {"project": "cut-callback"})
    pending = _parked(outcome, world)
    async with world.browser() as browser:
        connected = await world.connect(browser, "frank", pending["connect_url"])
        back = await world.consent(browser, connected.json()["authorize_url"], "frank")
        world.rows(
            "UPDATE oauth_flows SET used_at = 1 WHERE principal = 'frank'"
        )  # as the cut callback left it
        assert (await browser.get(back)).status_code == 400
    assert (await world.authorize("frank", outcome)).status_code == 303
    await world.settled("frank", outcome["session_id"])
    ran = [s for s in world.tracker.calls("list_issues") if s.arguments["project"] == "cut-callback"]
    assert [s.user for s in ran] == ["frank"]


async def test_a_confidential_client_sends_its_secret_from_the_environment(world: World) -> None:
    """vault's client is confidential: the authorization server takes the code only with the
    secret parley reads from client_secret_env, and the secret is nowhere in what parley wrote."""
    outcome = await world.run("frank", "vault__list_issues", {"project": "secret-client"}, agent="keeper")
    pending = _parked(outcome, world, "vault")
    async with world.browser() as browser:
        connected = await world.connect(browser, "frank", pending["connect_url"])
    assert parse_qs(urlsplit(connected.json()["authorize_url"]).query)["client_id"] == [VAULT_CLIENT]
    assert (await world.authorize("frank", outcome)).status_code == 303
    await world.settled("frank", outcome["session_id"])
    assert [s.user for s in world.others["vault"].calls("list_issues")] == ["frank"]
    stored = b"".join(p.read_bytes() for p in world.directory.glob("parley.db*") if p.is_file())
    # The log holds the test authorization server's own (authlib) lines too: parley's are searched.
    ours = [line for line in world.server.log().splitlines() if "authlib" not in line]
    assert VAULT_SECRET.encode() not in stored and not [line for line in ours if VAULT_SECRET in line]
