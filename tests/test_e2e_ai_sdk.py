"""The AI SDK chat protocol with the real library: the npm `ai` package (pinned, run on Node.js 22)
drives `POST /v1/chat` and `GET /v1/chat/{id}/stream` with its own chat (what `useChat` runs) and
transport, which read parley's UI message stream with the SDK's reader and check every part
against the SDK's schema. With tokens: two owners (every /v1 route refusing without one is
tests/test_ai_sdk.py). parley runs in this process; the SDK's chats run on Node.js."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from parley.tls import http_client
from tests.auth_support import bearer
from tests.fake_providers import serving_fake_providers
from tests.npm_servers import ai_sdk6_chat, ai_sdk_chat, node22  # noqa: F401  (fixtures)
from tests.sse_support import read_until
from tests.support import (
    CALL_DEADLINE_S,
    FIXTURE_LOG,
    STATE_WINDOW_S,
    TEST_DEADLINE_S,
    InProcessServer,
    fixture_in_process,
    fixture_runs,
    tokens_auth,
    write_config,
)

pytestmark = pytest.mark.anyio

USERS = ("alice", "bob")


@dataclass
class World:
    server: InProcessServer
    tokens: dict[str, str]
    # The chat driver on each AI SDK major version, each with its own parser.
    chats: dict[int, list[str]]

    @property
    def base(self) -> str:
        return self.server.base_url

    def api(self, agent: str = "worker", query: str = "") -> str:
        return f"{self.base}/v1/chat?agent={agent}{query}"

    async def run(
        self, user: str, steps: list[dict[str, Any]], agent: str = "worker", sdk: int = 7, query: str = ""
    ) -> list[dict[str, Any]]:
        """Play `steps` with the chat of AI SDK `sdk` as `user`; the chat's state after each step."""
        scenario = {
            "api": self.api(agent, query),
            "headers": bearer(self.tokens[user]),
            "steps": steps,
            "deadline_ms": int(TEST_DEADLINE_S * 1000),
        }
        with anyio.fail_after(CALL_DEADLINE_S):
            done = await anyio.run_process([*self.chats[sdk], json.dumps(scenario)], check=False)
        assert done.returncode == 0, done.stderr.decode()
        out = json.loads(done.stdout.decode().strip().splitlines()[-1])
        for asked, step in zip(steps, out["steps"], strict=True):
            # A step that expects a refusal sees it in the chat's errors; no other step has any.
            assert bool(step["errors"]) == bool(asked.get("expect_error")), step
        return list(out["steps"])


@pytest.fixture(scope="module")
async def world(
    tmp_path_factory: pytest.TempPathFactory,
    ai_sdk_chat: list[str],  # noqa: F811
    ai_sdk6_chat: list[str],  # noqa: F811
) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("ai_sdk")
    tokens = {name: "parley_" + secrets.token_urlsafe(24) for name in USERS}
    async with (
        serving_fake_providers() as fake,
        fixture_in_process(directory / FIXTURE_LOG) as fixture,
    ):
        config = write_config(
            directory,
            agents={
                "worker": {"mcp_servers": ["fixture"], "tools": ["write_todos", "ask_user"]},
                "planner": {
                    "mcp_servers": ["fixture"],
                    "tools": ["write_todos", "ask_user"],
                    "plan_mode": True,
                },
                "claude": {
                    "model": fake.anthropic_model(),
                },
            },
            runtime={"model_retry_backoff_s": 0.1},
            mcp_servers={"fixture": fixture},
            http={"stream_heartbeat_s": 0.2},
            auth=tokens_auth(tokens),
        )
        # parley in this process; the AI SDK's chats run on Node.js, processes of their own.
        async with InProcessServer(config, http=True, env={"FAKE_PROVIDER_KEY": "sk-fake"}) as server:
            yield World(server, tokens, {6: ai_sdk6_chat, 7: ai_sdk_chat})
            assert "Traceback" not in server.log(), server.log()


def _assistant(step: dict[str, Any]) -> dict[str, Any]:
    message = step["messages"][-1]
    assert message["role"] == "assistant", step
    return dict(message)


def _texts(message: dict[str, Any]) -> list[str]:
    return [p["text"] for p in message["parts"] if p["type"] == "text"]


def _tools(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"] == "dynamic-tool"]


@pytest.mark.parametrize("sdk", [6, 7])
async def test_the_sdk_reads_the_assistant_message_with_its_text_and_tool_parts(
    world: World, sdk: int
) -> None:
    [step] = await world.run(
        "alice",
        [{"chat": f"tools-{sdk}", "send": 'plan\n/tool write_todos {"todos": [{"content": "a"}]}'}],
        sdk=sdk,
    )
    assert step["status"] == "ready"
    message = _assistant(step)
    texts = _texts(message)
    assert texts[0] == "Calling write_todos." and texts[1].startswith("You said: plan (message 1"), texts
    [tool] = _tools(message)
    assert tool["toolName"] == "write_todos" and tool["state"] == "output-available", tool
    assert tool["input"] == {"todos": [{"content": "a"}]}
    assert [p["type"] for p in message["parts"]].count("step-start") == 2, "each model call is a step"
    assert message["metadata"]["parley"]["sessionId"].startswith("ses_")


@pytest.mark.parametrize("sdk", [6, 7])
async def test_an_approval_round_trips_through_the_sdks_approval_response(world: World, sdk: int) -> None:
    directory = world.server.config_path.parent
    approves, rejects = f"sdk{sdk} approves", f"sdk{sdk} rejects"
    asked, approved, _, rejected = await world.run(
        "alice",
        [
            {"chat": f"approvals-{sdk}", "send": f'/tool fixture__bare {{"text": "{approves}"}}'},
            {"chat": f"approvals-{sdk}", "approve": True},
            # A rejection: the call never runs and the SDK shows it denied.
            {"chat": f"rejections-{sdk}", "send": f'/tool fixture__bare {{"text": "{rejects}"}}'},
            {"chat": f"rejections-{sdk}", "approve": False, "reason": "not today"},
        ],
        sdk=sdk,
    )
    [waiting] = _tools(_assistant(asked))
    assert waiting["state"] == "approval-requested" and waiting["approval"]["id"].startswith("int_")
    message = _assistant(approved)
    [done] = _tools(message)
    assert done["state"] == "output-available" and done["output"] == f"bare {approves}", done
    assert _texts(message)[-1].endswith(f"fixture__bare (ok): bare {approves}"), _texts(message)
    assert fixture_runs(directory, "bare", text=approves) == 1
    [denied] = _tools(_assistant(rejected))
    assert denied["state"] == "output-denied", denied
    assert fixture_runs(directory, "bare", text=rejects) == 0
    # Only chunks both versions know, unless the app asks for version 7's (next test).
    assert "tool-approval-response" not in approved["chunks"] + rejected["chunks"]


async def test_an_app_on_ai_sdk_7_may_ask_for_its_approval_response_and_reset_step_chunks(
    world: World,
) -> None:
    _, approved = await world.run(
        "alice",
        [
            {"chat": "approvals-v7", "send": '/tool fixture__bare {"text": "v7 chunks"}'},
            {"chat": "approvals-v7", "approve": True},
        ],
        query="&ai_sdk=7",
    )
    assert "tool-approval-response" in approved["chunks"], approved["chunks"]
    [done] = _tools(_assistant(approved))
    assert done["state"] == "output-available" and done["approval"]["approved"] is True, done
    # A version the server does not speak is refused, naming the parameter.
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        answer = await http.post(
            world.api(query="&ai_sdk=5"),
            json={"id": "x", "messages": []},
            headers=bearer(world.tokens["alice"]),
        )
    assert answer.status_code == 400 and "'ai_sdk'" in answer.json()["detail"], answer.text


@pytest.mark.parametrize("sdk", [6, 7])
async def test_a_question_is_a_part_the_app_answers_with_add_tool_output(world: World, sdk: int) -> None:
    asked, answered = await world.run(
        "alice",
        [
            {"chat": f"questions-{sdk}", "send": "/ask Which one? | red | blue"},
            {"chat": f"questions-{sdk}", "answer": "blue"},
        ],
        sdk=sdk,
    )
    question = next(p for p in _assistant(asked)["parts"] if p["type"] == "data-parley-question")
    assert question["data"]["question"] == "Which one?" and question["data"]["choices"] == ["red", "blue"]
    assert question["data"]["status"] == "pending"
    message = _assistant(answered)
    updated = next(p for p in message["parts"] if p["type"] == "data-parley-question")
    assert updated["data"]["status"] == "answered" and updated["data"]["answer"] == "blue"
    assert _texts(message)[-1].endswith("The user answered: blue"), _texts(message)


async def test_a_discarded_attempt_leaves_only_the_retrys_text_on_ai_sdk_7(world: World) -> None:
    [step] = await world.run(
        "alice", [{"chat": "stall", "send": "stall now"}], agent="claude", query="&ai_sdk=7"
    )
    assert "reset-step" in step["chunks"], step["chunks"]
    assert _texts(_assistant(step)) == ["echo: stall now"], _assistant(step)["parts"]


async def test_a_discarded_attempt_on_ai_sdk_6_ends_its_text_and_the_retry_follows(world: World) -> None:
    # Version 6 has no chunk that drops a step's parts: the broken text stays, ended.
    [step] = await world.run("alice", [{"chat": "stall-6", "send": "stall on six"}], agent="claude", sdk=6)
    assert "reset-step" not in step["chunks"], step["chunks"]
    assert _texts(_assistant(step))[-1] == "echo: stall on six", _assistant(step)["parts"]


async def test_resume_stream_replays_the_unfinished_turn_and_answers_204_when_none(world: World) -> None:
    [idle] = await world.run("alice", [{"chat": "nothing-yet", "resume": True}])
    assert idle["status"] == "ready" and idle["messages"] == []
    # A turn started by one page, followed after a "reload" by another.
    body = {
        "id": "reloaded",
        "trigger": "submit-message",
        "messages": [
            {
                "id": "u1",
                "role": "user",
                "parts": [{"type": "text", "text": f"/sleep {STATE_WINDOW_S}\nslow"}],
            }
        ],
    }
    first = await read_until(
        world.api(),
        lambda f: isinstance(f.data, dict) and f.data.get("type") == "start",
        headers=bearer(world.tokens["alice"]),
        method="POST",
        json_body=body,
    )
    assert first[-1].data["messageId"].startswith("msg_turn_")
    [resumed] = await world.run("alice", [{"chat": "reloaded", "resume": True}])
    message = _assistant(resumed)
    assert message["id"] == first[-1].data["messageId"]
    assert _texts(message) == ["You said: slow (message 1 of this session)"]
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        after = await http.get(f"{world.base}/v1/chat/reloaded/stream", headers=bearer(world.tokens["alice"]))
    assert after.status_code == 204, "the turn has ended: nothing to resume"


async def test_a_chat_id_used_by_two_owners_is_two_sessions(world: World) -> None:
    [alice] = await world.run("alice", [{"chat": "shared-id", "send": "hi from alice"}])
    [bob] = await world.run("bob", [{"chat": "shared-id", "send": "hi from bob"}])
    alice_session = _assistant(alice)["metadata"]["parley"]["sessionId"]
    bob_session = _assistant(bob)["metadata"]["parley"]["sessionId"]
    assert alice_session != bob_session
    assert _texts(_assistant(bob)) == ["You said: hi from bob (message 1 of this session)"]
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        foreign = await http.get(
            f"{world.base}/v1/sessions/{alice_session}/events", headers=bearer(world.tokens["bob"])
        )
    assert foreign.status_code == 404, "another owner's session is not found"


@pytest.mark.parametrize(
    ("chat_id", "message_id", "text", "field"),
    [
        ("\ud800chat", "u1", "hi", "id"),
        ("surrogates", "\udc00m", "hi", "messages[0].id"),
        ("surrogates", "u2", "hi \ud800", "messages[0].parts[0].text"),
    ],
    ids=["chat-id", "message-id", "text"],
)
async def test_a_lone_surrogate_in_an_id_or_text_is_a_400_naming_the_field(
    world: World, chat_id: str, message_id: str, text: str, field: str
) -> None:
    body = {
        "id": chat_id,
        "trigger": "submit-message",
        "messages": [{"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}],
    }
    # json.dumps escapes the surrogate as \ud800: JSON a client can send, text no UTF-8 can hold.
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        answer = await http.post(
            world.api(),
            content=json.dumps(body),
            headers={**bearer(world.tokens["alice"]), "content-type": "application/json"},
        )
    assert answer.status_code == 400, answer.text
    assert f"'{field}'" in answer.json()["detail"] and "surrogate" in answer.json()["detail"], answer.text
    # The server goes on serving the same owner.
    [step] = await world.run("alice", [{"chat": f"after-{field}", "send": "still here"}])
    assert _texts(_assistant(step)) == ["You said: still here (message 1 of this session)"]


def _plans(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"] == "data-parley-plan"]


@pytest.mark.parametrize("sdk", [6, 7])
async def test_the_sdk_shows_a_draft_plan_and_a_data_part_in_a_user_message_approves_it(
    world: World, sdk: int
) -> None:
    directory = world.server.config_path.parent
    act = f'/tool fixture__bare {{"text": "planned on {sdk}"}}'
    todos = json.dumps({"todos": [{"content": "look first"}, {"content": act}]})
    drafted, executing, done = await world.run(
        "alice",
        [
            {"chat": f"plan-{sdk}", "send": f"/tool write_todos {todos}"},
            {"chat": f"plan-{sdk}", "execute_plan": True},
            # Approving the plan grants nothing else: the executing turn's call still asks.
            {"chat": f"plan-{sdk}", "approve": True},
        ],
        agent="planner",
        sdk=sdk,
    )
    message = _assistant(drafted)
    [draft] = _plans(message)
    assert draft["id"] == message["metadata"]["parley"]["sessionId"]
    assert draft["data"]["status"] == "draft" and draft["data"]["revision"] == 1
    assert [t["content"] for t in draft["data"]["todos"]] == ["look first", act]
    assert message["metadata"]["parley"]["mode"] == "planning"
    # The approval is a user message the SDK holds (and its own validator accepts) with the data part.
    approval = executing["messages"][-2]
    assert approval["role"] == "user" and approval["parts"] == [
        {"type": "data-parley-execute-plan", "data": {"revision": 1}}
    ]
    assert executing["valid"] is True, executing["valid"]
    asking = _assistant(executing)
    assert asking["metadata"]["parley"]["mode"] == "executing"
    assert [p["data"]["revision"] for p in asking["parts"] if p["type"] == "data-parley-plan-execution"] == [
        1
    ]
    [waiting] = [t for t in _tools(asking) if t["toolName"] == "fixture__bare"]
    assert waiting["state"] == "approval-requested", waiting  # so it had not run while planning
    finished = _assistant(done)
    [plan] = _plans(finished)  # one part, updated in place as the plan moved on
    assert plan["data"]["status"] == "completed", plan
    assert all(t["status"] == "completed" for t in plan["data"]["todos"])
    assert fixture_runs(directory, "bare", text=f"planned on {sdk}") == 1


@pytest.mark.parametrize("sdk", [6, 7])
async def test_a_stale_approval_is_the_chats_error_and_changes_nothing(world: World, sdk: int) -> None:
    todos = json.dumps({"todos": [{"content": "only this"}]})
    first, revised, stale = await world.run(
        "alice",
        [
            {"chat": f"stale-{sdk}", "send": f"/tool write_todos {todos}"},
            # metadata.parley.plan asks for a planning turn (a message on a draft plans anyway).
            {
                "chat": f"stale-{sdk}",
                "send": f"/tool write_todos {todos}",
                "metadata": {"parley": {"plan": True}},
            },
            {"chat": f"stale-{sdk}", "execute_plan": 1, "expect_error": True},
        ],
        agent="planner",
        sdk=sdk,
    )
    assert [p["data"]["revision"] for p in _plans(_assistant(revised))] == [2]
    [error] = stale["errors"]
    assert "revision 2, not 1" in error and "Nothing was changed" in error, error
    sid = _assistant(first)["metadata"]["parley"]["sessionId"]
    async with http_client(timeout=TEST_DEADLINE_S) as http:
        session = await http.get(f"{world.base}/v1/sessions/{sid}", headers=bearer(world.tokens["alice"]))
    assert session.json()["plan"]["status"] == "draft" and session.json()["turn_count"] == 2, session.text


def _shape(messages: list[dict[str, Any]]) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """What a person sees of messages: their ids and roles, each part's type, text or tool state."""
    shown = []
    for m in messages:
        parts = [
            (
                str(p["type"]),
                str(p.get("text") or p.get("state") or json.dumps(p.get("data"), sort_keys=True)),
            )
            for p in m["parts"]
        ]
        shown.append((str(m["id"]), str(m["role"]), parts))
    return shown


@pytest.mark.parametrize("sdk", [6, 7])
async def test_use_chat_restores_a_history_through_the_messages_endpoint(world: World, sdk: int) -> None:
    chat = f"history-{sdk}"
    todos = '/tool write_todos {"todos": [{"content": "<b>a</b>"}]}'
    steps = await world.run(
        "alice",
        [
            {"chat": chat, "send": f"first\n{todos}"},
            {"chat": chat, "send": '/tool fixture__bare {"text": "history no"}'},
            {"chat": chat, "approve": False, "reason": "not now"},
            # A reload: a new chat on the same id, restored from GET /v1/chat/{id}/messages.
            {"chat": chat, "restore": True},
            {"chat": chat, "send": "after the reload"},
        ],
        sdk=sdk,
    )
    live, restored, after = steps[2], steps[3], steps[4]
    assert restored["valid"] is True and after["valid"] is True, restored["valid"]
    assert _shape(restored["messages"]) == _shape(live["messages"]), (restored["messages"], live["messages"])
    [denied] = _tools(restored["messages"][-1])
    assert denied["state"] == "output-denied" and denied["approval"]["approved"] is False, denied
    # The restored chat goes on: one new user and one new assistant message, no id shown twice.
    ids = [m["id"] for m in after["messages"]]
    assert len(ids) == len(set(ids)) == len(restored["messages"]) + 2, ids
    assert _texts(_assistant(after))[-1].startswith("You said: after the reload (message 3"), after
    # Another owner's same chat id has no history; a chat nobody used is empty too.
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        other = await http.get(f"{world.base}/v1/chat/{chat}/messages", headers=bearer(world.tokens["bob"]))
        assert other.status_code == 200 and other.json() == {"id": chat, "messages": []}, other.text
        anonymous = await http.get(f"{world.base}/v1/chat/{chat}/messages")
        assert anonymous.status_code == 401


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


async def test_file_parts_are_attachments_and_only_data_urls_are_taken(world: World) -> None:
    files = [
        {
            "type": "file",
            "mediaType": "image/png",
            "filename": "<b>dot</b>.png",
            "url": _data_url("image/png", PNG),
        },
        {
            "type": "file",
            "mediaType": "text/plain",
            "filename": "notes.txt",
            "url": "data:text/plain,hello%20there",
        },
    ]
    remote = [{"type": "file", "mediaType": "image/png", "url": "https://example.invalid/x.png"}]
    tampered = [{"type": "file", "mediaType": "image/png", "url": _data_url("image/png", b"not a picture")}]
    sent, far, fake = await world.run(
        "alice",
        [
            {"chat": "files-ok", "send": "look at these", "files": files},
            {"chat": "files-remote", "send": "fetch this", "files": remote, "expect_error": True},
            {"chat": "files-tampered", "send": "a fake picture", "files": tampered, "expect_error": True},
        ],
    )
    session_id = _assistant(sent)["metadata"]["parley"]["sessionId"]
    async with http_client(timeout=CALL_DEADLINE_S) as http:
        headers = bearer(world.tokens["alice"])
        stored = (
            await http.get(f"{world.base}/v1/sessions/{session_id}?messages_from=1", headers=headers)
        ).json()
        [attached] = [m["attachments"] for m in stored["messages"] if m["attachments"]]
        assert [(a["kind"], a["name"], a["mime_type"]) for a in attached] == [
            ("image", "<b>dot</b>.png", "image/png"),
            ("resource", "notes.txt", "text/plain"),
        ], attached
        picture = await http.get(
            f"{world.base}/v1/sessions/{session_id}/attachments/{attached[0]['sha256']}", headers=headers
        )
        assert picture.content == PNG
        # Neither refused message started anything: their chats have no history.
        for chat in ("files-remote", "files-tampered"):
            empty = (await http.get(f"{world.base}/v1/chat/{chat}/messages", headers=headers)).json()
            assert empty["messages"] == [], empty
    assert "never fetches" in far["errors"][0], far["errors"]
    assert "image/png" in fake["errors"][0] or "PNG" in fake["errors"][0], fake["errors"]
