"""A page a downstream server asks the person to open (URL-mode elicitation, 2025-11-25), in-process
over HTTP: one parley with `auth: tokens` for alice and bob in front of our fixture server, whose
`visit` tool asks for the page its argument names and reports what it was told.

The page reaches the session's owner only as a parley link; its address is handed out only to the
owner, signed in, opening that link (which is what tells the server "accept"); anyone else is
refused and nothing changes; a decline is a decline; a page that is not https, or a parley with no
public URL to link to, is declined without asking anybody.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp.types import ElicitRequestParams, ElicitRequestURLParams, ElicitResult

from parley.tls import http_client
from tests.auth_support import token_client
from tests.mcp_servers.fixture_server import VISIT_TICKET
from tests.support import (
    TEST_DEADLINE_S,
    InProcessServer,
    call,
    call_error,
    db_rows,
    eventually,
    fixture_calls,
    fixture_in_process,
    tokens_auth,
    write_config,
)

pytestmark = pytest.mark.anyio

PAGE = "https://forms.example.com/sign"
NOT_FOR_PEOPLE = [
    "javascript:alert(1)",
    "http://forms.example.com/sign",
    "https://someone:secret@forms.example.com/sign",
    "https://forms.example.com:99999/sign",
    "file:///etc/passwd",
]


def _asked(url: str) -> str:
    """The page the server asks for when `visit` is given `url`: with its own ticket."""
    return url + ("&" if "?" in url else "?") + VISIT_TICKET


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class World:
    server: InProcessServer
    tokens: dict[str, str]
    log: Path
    db: Path

    async def start(self, person: str, url: str, protocol: str = "legacy", **options: Any) -> dict[str, Any]:
        """A session of `person` whose agent calls `visit` with `url`: on a 2025-11-25 server
        (legacy: it asks while the call is open), or a 2026-07-28 one (modern: input-required)."""
        assert self.server.url is not None
        server, tool = ("pages", "visit") if protocol == "legacy" else ("pages_later", "visit_later")
        async with token_client(self.server.url, self.tokens[person], **options) as client:
            message = f"/tool {server}__{tool} {json.dumps({'url': url})}"
            return await call(client, "start_session", agent=server, message=message)

    async def mcp(self, person: str, tool: str, **arguments: Any) -> dict[str, Any]:
        assert self.server.url is not None
        async with token_client(self.server.url, self.tokens[person]) as client:
            return await call(client, tool, **arguments)

    async def mcp_error(self, person: str, tool: str, **arguments: Any) -> str:
        assert self.server.url is not None
        async with token_client(self.server.url, self.tokens[person]) as client:
            return await call_error(client, tool, **arguments)

    async def open(self, person: str, session_id: str, interrupt_id: str, **options: Any) -> Any:
        async with http_client(timeout=TEST_DEADLINE_S) as http:
            return await http.post(
                f"{self.server.base_url}/v1/sessions/{session_id}/interrupts/{interrupt_id}/open",
                headers={"Authorization": f"Bearer {self.tokens[person]}"},
                **({"json": {}} | options),
            )

    def visits(self, url: str) -> list[str]:
        """What the server was told, each time its `visit` of `url` asked for the page."""
        return [
            r["arguments"]["action"]
            for r in fixture_calls(self.log)
            if r["tool"] == "visit" and r["arguments"]["url"] == _asked(url)
        ]

    async def ended(self, person: str, session_id: str) -> dict[str, Any]:
        found: dict[str, Any] = {}

        async def done() -> bool:
            found.update(await self.mcp(person, "get_session", session_id=session_id))
            return found.get("status") not in ("running", "waiting_for_input")

        await eventually(done, f"session {session_id} to end its turn")
        return found


def _config(directory: Path, pages: dict[str, Any], tokens: dict[str, str], port: int | None) -> Path:
    http = {"public_url": f"http://127.0.0.1:{port}/mcp"} if port is not None else {}
    patient = {"input_wait_s": 4 * TEST_DEADLINE_S}
    return write_config(
        directory,
        agents={"pages": {"mcp_servers": ["pages"]}, "pages_later": {"mcp_servers": ["pages_later"]}},
        mcp_servers={
            "pages": {**pages, "protocol": "legacy", **patient},
            "pages_later": {**pages, **patient},
        },
        auth=tokens_auth(tokens),
        http=http,
    )


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("pages")
    log = directory / "fixture.jsonl"
    tokens = {p: f"parley-{p}-" + os.urandom(16).hex() for p in ("alice", "bob")}
    port = _free_port()
    async with AsyncExitStack() as stack:
        pages = await stack.enter_async_context(fixture_in_process(log))
        config = _config(directory, pages, tokens, port)
        server = await stack.enter_async_context(InProcessServer(config, http=True, port=port))
        yield World(server, tokens, log, directory / "parley.db")
        assert "Traceback" not in server.log(), server.log()


def _page_question(outcome: dict[str, Any], world: World) -> dict[str, Any]:
    assert outcome["status"] == "waiting_for_input", outcome
    (pending,) = outcome["pending"]
    assert pending["kind"] == "question" and pending["server"].startswith("pages"), pending
    assert pending["host"] == "forms.example.com" and pending["choices"] == []
    assert "Sign the form there." in pending["question"] and "forms.example.com" in pending["question"]
    link = f"{world.server.base_url}/ui/#/open/{outcome['session_id']}/{pending['id']}"
    assert pending["connect_url"] == link, pending
    return dict(pending)


@pytest.mark.parametrize("protocol", ["legacy", "modern"])
async def test_the_owner_opening_the_parley_link_gets_the_page_and_the_server_is_told_accept(
    world: World, protocol: str
) -> None:
    page = f"{PAGE}/{protocol}"
    outcome = await world.start("alice", page, protocol)
    sid = outcome["session_id"]
    pending = _page_question(outcome, world)
    # Nobody is shown the page's own address before the owner opens the link, not the model either.
    seen = await world.mcp("alice", "get_session", session_id=sid)
    assert VISIT_TICKET not in json.dumps(outcome) + json.dumps(seen)

    # bob is told there is no such session; a form post from another site is refused: nothing changes.
    refused = await world.open("bob", sid, pending["id"])
    assert refused.status_code == 404, refused.text
    not_json = await world.open("alice", sid, pending["id"], json=None, data={"x": "1"})
    assert not_json.status_code == 415, not_json.text
    assert (await world.mcp("alice", "get_session", session_id=sid))["status"] == "waiting_for_input"
    assert world.visits(page) == []

    opened = await world.open("alice", sid, pending["id"])
    assert opened.status_code == 200, opened.text
    assert opened.json() == {"url": _asked(page)} and opened.headers["cache-control"] == "no-store"
    ended = await world.ended("alice", sid)
    assert world.visits(page) == ["accept"]
    (ran,) = ended["last_turn"]["tool_calls"]
    assert ran["status"] == "succeeded" and "the person chose accept" in str(ran), ran
    again = await world.open("alice", sid, pending["id"])
    assert again.status_code == 409, again.text
    # bob's try names no session of the trail (the owner's decisions never show a stranger's).
    audit = db_rows(
        world.db,
        "SELECT principal, outcome, session_id FROM audit WHERE action = 'open_page' AND target = ? ORDER BY id",
        (pending["id"],),
    )
    assert audit == [("bob", "refused", None), ("alice", "ok", sid)], audit


@pytest.mark.parametrize("protocol", ["legacy", "modern"])
async def test_a_declined_page_tells_the_server_decline_and_an_answer_is_refused(
    world: World, protocol: str
) -> None:
    page = f"{PAGE}/declined-{protocol}"
    outcome = await world.start("alice", page, protocol)
    sid, pending = outcome["session_id"], _page_question(outcome, world)
    refused = await world.mcp_error(
        "alice", "answer_question", session_id=sid, interrupt_id=pending["id"], answer="done"
    )
    assert "connect_url" in refused and "decline=true" in refused, refused
    assert world.visits(page) == []
    declined = await world.mcp(
        "alice", "answer_question", session_id=sid, interrupt_id=pending["id"], decline=True
    )
    assert declined["status"] == "answered" and declined["pending"] == [], declined
    await world.ended("alice", sid)
    assert world.visits(page) == ["decline"]
    gone = await world.open("alice", sid, pending["id"])
    assert gone.status_code == 409, gone.text


@pytest.mark.parametrize("protocol", ["legacy", "modern"])
@pytest.mark.parametrize("url", NOT_FOR_PEOPLE)
async def test_a_page_that_is_not_plain_https_is_declined_without_asking_anybody(
    world: World, url: str, protocol: str
) -> None:
    url = f"{url}#{protocol}"
    outcome = await world.start("alice", url, protocol)
    assert outcome["status"] == "answered" and outcome["pending"] == [], outcome
    assert world.visits(url) == ["decline"]


async def test_a_client_that_takes_urls_is_shown_the_parley_link_never_the_page(world: World) -> None:
    shown: list[ElicitRequestURLParams] = []

    async def on_elicit(context: Any, params: ElicitRequestParams) -> ElicitResult:
        assert isinstance(params, ElicitRequestURLParams), params
        shown.append(params)
        session_id, interrupt_id = params.url.rsplit("/", 2)[1:]
        opened = await world.open("alice", session_id, interrupt_id)
        assert opened.status_code == 200, opened.text
        return ElicitResult(action="accept")

    page = PAGE + "-by-client"
    outcome = await world.start("alice", page, elicitation_callback=on_elicit)
    assert outcome["status"] == "answered", (shown, outcome)
    (params,) = shown
    assert params.url.startswith(world.server.base_url + "/ui/#/open/") and VISIT_TICKET not in params.url
    assert "forms.example.com" in params.message
    assert world.visits(page) == ["accept"]


async def test_without_a_public_url_the_page_is_declined_and_the_log_says_why(tmp_path: Path) -> None:
    log = tmp_path / "fixture.jsonl"
    tokens = {"alice": "parley-alice-" + os.urandom(16).hex()}
    async with fixture_in_process(log) as pages:
        config = _config(tmp_path, pages, tokens, port=None)
        async with InProcessServer(config, http=True) as server:
            world = World(server, tokens, log, tmp_path / "parley.db")
            outcome = await world.start("alice", PAGE)
            text = server.log()
    assert outcome["status"] == "answered" and outcome["pending"] == [], outcome
    assert world.visits(PAGE) == ["decline"]
    assert "http.public_url is not set" in text, text
