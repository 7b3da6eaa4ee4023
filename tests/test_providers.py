"""Real model providers against fakes that speak their wire formats over HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client

from tests.fake_providers import FakeProviders, serving_fake_providers
from tests.support import TEST_DEADLINE_S, InProcessServer, call, call_error, db_rows, write_config

pytestmark = pytest.mark.anyio

SECRET = "sk-test-d0-not-leak-4f2a9c"


@dataclass
class World:
    client: Client
    fake: FakeProviders
    server: InProcessServer
    db: Path


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("providers")
    async with serving_fake_providers() as fake:
        model: dict[str, Any] = {"api_key_env": "FAKE_PROVIDER_KEY", "options": {"max_tokens": 256}}
        agents = {
            "claude": {
                "model": fake.anthropic_model(**model),
                "tools": ["write_todos"],
            },
            "gpt": {
                "model": {"provider": "openai", "name": "gpt-test", "base_url": fake.openai_url, **model},
                "tools": ["write_todos"],
            },
            "compact": COMPACT_AGENT(fake),
            "claude_plain": {
                "model": fake.anthropic_model("claude-plain", options={"stream": False}),
                "tools": ["write_todos"],
            },
            "gpt_plain": {
                "model": {
                    "provider": "openai",
                    "name": "gpt-plain",
                    "base_url": fake.openai_url,
                    "api_key_env": "FAKE_PROVIDER_KEY",
                    "options": {"stream": False},
                },
                "tools": ["write_todos"],
            },
        }
        config = write_config(directory, agents=agents, runtime={"model_retry_backoff_s": 0.05})
        settings = yaml.safe_load(config.read_text())
        settings["models"] = {
            "careful": fake.anthropic_model("claude-careful", **model),
            "quick": {"provider": "openai", "name": "gpt-quick", "base_url": fake.openai_url, **model},
        }
        config.write_text(yaml.safe_dump(settings))
        async with (
            InProcessServer(config, env={"FAKE_PROVIDER_KEY": SECRET}) as server,
            server.client() as client,
        ):
            yield World(client, fake, server, directory / "parley.db")


AGENTS = ["claude", "gpt"]


def COMPACT_AGENT(fake: FakeProviders) -> dict[str, Any]:
    return {
        "model": {
            "provider": "openai",
            "name": "gpt-small",
            "base_url": fake.openai_url,
            "api_key_env": "FAKE_PROVIDER_KEY",
        },
        "tools": ["write_todos"],
        "compaction": {"enabled": True, "context_window": 300, "trigger_ratio": 0.85, "retained_ratio": 0.3},
    }


def _requests(world: World, agent: str) -> list[dict[str, Any]]:
    provider = "anthropic" if agent == "claude" else "openai"
    return [r.body for r in world.fake.requests if r.provider == provider]


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_streamed_text_turn_answers_and_records_usage(world: World, agent: str) -> None:
    outcome = await call(world.client, "start_session", agent=agent, message="hello there")
    assert outcome["status"] == "answered"
    assert outcome["answer"] == "echo: hello there"
    assert outcome["usage"]["input_tokens"] > 0 and outcome["usage"]["output_tokens"] > 0
    assert outcome["usage"]["cached_tokens"] == {"claude": 10, "gpt": 5}[agent]
    snapshot = await call(world.client, "get_session", session_id=outcome["session_id"])
    assert snapshot["usage"]["cached_tokens"] == outcome["usage"]["cached_tokens"]
    body = _requests(world, agent)[-1]
    assert body["model"] == {"claude": "claude-test", "gpt": "gpt-test"}[agent]
    assert body["stream"] is True


@pytest.mark.parametrize("agent", AGENTS)
async def test_two_parallel_tool_calls_and_chunked_arguments(world: World, agent: str) -> None:
    both = await call(world.client, "start_session", agent=agent, message="two tools please")
    assert [c["status"] for c in both["tool_calls"]] == ["succeeded", "succeeded"]
    assert both["answer"].startswith("done: Plan saved")
    chunky = await call(world.client, "start_session", agent=agent, message="chunky arguments")
    [tool_call] = chunky["tool_calls"]
    assert tool_call["arguments"] == {"todos": [{"content": "piece by piece"}]}
    snapshot = await call(world.client, "get_session", session_id=chunky["session_id"])
    assert snapshot["todos"] == [{"content": "piece by piece", "status": "pending"}]


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("failure", ["429", "500", "cut"])
async def test_transient_failures_are_retried_and_the_turn_answers(
    world: World, agent: str, failure: str
) -> None:
    before = len(_requests(world, agent))
    message = f"{failure} {agent} once"
    outcome = await call(world.client, "start_session", agent=agent, message=message)
    assert outcome["status"] == "answered" and outcome["answer"] == f"echo: {message}"
    assert len(_requests(world, agent)) - before == 2, "one failed attempt, one retry"


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_rejected_key_fails_the_turn_at_once_with_the_providers_message(
    world: World, agent: str
) -> None:
    before = len(_requests(world, agent))
    outcome = await call(world.client, "start_session", agent=agent, message="401 please")
    assert outcome["status"] == "failed"
    assert "HTTP 401" in outcome["error"] and "invalid x-api-key" in outcome["error"]
    assert "api_key_env" in outcome["error"]
    assert len(_requests(world, agent)) - before == 1, "not retried"


async def test_thinking_blocks_are_replayed_unchanged_to_the_same_provider(world: World) -> None:
    first = await call(world.client, "start_session", agent="claude", message="think first")
    assert first["answer"] == "thought about it"
    await call(world.client, "send_message", session_id=first["session_id"], message="and now?")
    replayed = _requests(world, "claude")[-1]["messages"][1]
    assert replayed["role"] == "assistant"
    assert replayed["content"][0] == {"type": "thinking", "thinking": "let me think", "signature": "sig-123"}


async def test_streamed_text_reaches_a_waiting_caller_as_progress(world: World) -> None:
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    # JSON-RPC in memory, as over stdio: the SDK's direct in-process path (`auto` on the server
    # object itself, world.client) delivers no progress notifications.
    with anyio.fail_after(TEST_DEADLINE_S):
        async with Client(world.server.transport()) as client:
            result = await client.call_tool(
                "start_session", {"agent": "gpt", "message": "stream to me"}, progress_callback=on_progress
            )
    assert (
        result.structured_content is not None and result.structured_content["answer"] == "echo: stream to me"
    )
    assert any("stream to me" in m for m in messages), messages


async def test_the_api_key_is_sent_but_never_stored_logged_or_returned(world: World) -> None:
    await call(world.client, "start_session", agent="claude", message="key check")
    await call(world.client, "start_session", agent="gpt", message="401 key check")
    headers = [r.headers for r in world.fake.requests]
    assert any(h.get("x-api-key") == SECRET for h in headers)
    assert any(h.get("authorization") == f"Bearer {SECRET}" for h in headers)
    for path in world.db.parent.glob("parley.db*"):  # the file, its -wal and -shm (not the -wake folder)
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), f"the key is in {path.name}"
    assert SECRET not in world.server.log()
    tables = ["sessions", "messages", "events", "tool_calls", "turns"]
    for table in tables:
        rows = db_rows(world.db, f"SELECT * FROM {table}")
        assert SECRET not in repr(rows)


async def test_settings_switch_the_model_from_the_next_turn_and_a_running_turn_keeps_its_own(
    world: World,
) -> None:
    agents = await call(world.client, "list_agents")
    assert agents["models"] == ["careful", "quick"]
    first = await call(
        world.client, "start_session", agent="gpt", message="429 before the switch", wait_seconds=0
    )
    sid = first["session_id"]
    switched = await call(
        world.client,
        "send_message",
        session_id=sid,
        message="after the switch",
        settings={"model": "careful"},
    )
    assert switched["answer"] == "echo: after the switch"
    before = [r.body["model"] for r in world.fake.requests if "before the switch" in json.dumps(r.body)]
    assert before[:2] == ["gpt-test", "gpt-test"], "the running turn, retry included, kept its model"
    after = [r for r in world.fake.requests if "after the switch" in json.dumps(r.body)]
    assert after[0].provider == "anthropic" and after[0].body["model"] == "claude-careful"
    again = await call(world.client, "send_message", session_id=sid, message="still switched")
    assert again["status"] == "answered"
    assert world.fake.requests[-1].body["model"] == "claude-careful", "settings stay until changed"
    snapshot = await call(world.client, "get_session", session_id=sid)
    assert snapshot["settings"] == {"model": "careful"}
    text = await call_error(
        world.client, "send_message", session_id=sid, message="x", settings={"model": "gpt-9"}
    )
    assert "'settings.model'" in text and "careful, quick" in text
    text = await call_error(
        world.client, "send_message", session_id=sid, message="x", settings={"base_url": "http://evil"}
    )
    assert "'settings'" in text and "base_url" in text


def _prompt_texts(body: dict[str, Any]) -> list[str]:
    return [m.get("content") or "" for m in body["messages"] if m["role"] == "user"]


async def test_a_long_conversation_compacts_more_than_once_and_keeps_recent_messages_verbatim(
    world: World,
) -> None:
    words = [f"message {i}: " + "lorem ipsum dolor sit amet " * 14 for i in range(5)]
    sid = (await call(world.client, "start_session", agent="compact"))["session_id"]
    for text in words:
        outcome = await call(world.client, "send_message", session_id=sid, message=text)
        assert outcome["status"] == "answered"
    summaries = db_rows(
        world.db, "SELECT upto_seq FROM summaries WHERE session_id = ? ORDER BY upto_seq", (sid,)
    )
    assert len(summaries) >= 2, "compacted more than once"
    for (upto,) in summaries:
        following = db_rows(
            world.db, "SELECT role FROM messages WHERE session_id = ? AND seq = ?", (sid, upto + 1)
        )
        assert following == [("user",)], "a summary ends before a user message: no call loses its result"
    last = [r.body for r in world.fake.requests if r.body["model"] == "gpt-small"][-1]
    texts = _prompt_texts(last)
    assert texts[0].startswith("[Summary of the earlier conversation]")
    assert texts[-1] == words[-1], "the newest exchange is verbatim"
    assert words[0] not in texts, "the oldest message is only in the summary"
    snapshot = await call(world.client, "get_session", session_id=sid, messages_from=1)
    assert snapshot["total_messages"] == 10, "the transcript itself is whole"
    events = db_rows(
        world.db, "SELECT COUNT(*) FROM events WHERE session_id = ? AND kind = 'compacted'", (sid,)
    )
    assert events[0][0] == len(summaries)


async def test_the_plan_is_in_every_model_call_also_once_the_conversation_is_compacted(world: World) -> None:
    planned = await call(world.client, "start_session", agent="compact", message="two tools please")
    sid = planned["session_id"]
    for i in range(4):
        await call(world.client, "send_message", session_id=sid, message=f"more {i}: " + "lorem ipsum " * 40)
    summaries = db_rows(world.db, "SELECT COUNT(*) FROM summaries WHERE session_id = ?", (sid,))
    assert summaries[0][0] >= 1, "the conversation was compacted"
    last = [r.body for r in world.fake.requests if r.body["model"] == "gpt-small"][-1]
    assert _prompt_texts(last)[0].startswith("[Summary of the earlier conversation]")
    system = last["messages"][0]
    assert system["role"] == "system" and "(revision 2, active):\n- [pending] b" in system["content"]


async def test_a_context_length_rejection_compacts_and_retries_once(world: World) -> None:
    long_start = "first words here, " * 30
    sid = (await call(world.client, "start_session", agent="gpt", message=long_start))["session_id"]
    outcome = await call(world.client, "send_message", session_id=sid, message="too long now")
    assert outcome["status"] == "answered"
    bodies = [r.body for r in world.fake.requests if "too long now" in json.dumps(r.body)]
    assert len(bodies) >= 2, "rejected once, then sent again"
    assert _prompt_texts(bodies[-1])[0].startswith("[Summary of the earlier conversation]")


@pytest.mark.parametrize("agent", ["claude_plain", "gpt_plain"])
async def test_responses_that_are_not_streamed_work_the_same(world: World, agent: str) -> None:
    text = await call(world.client, "start_session", agent=agent, message="no stream")
    assert text["answer"] == "plain: no stream"
    tools = await call(world.client, "start_session", agent=agent, message="two tools, plainly")
    assert [c["status"] for c in tools["tool_calls"]] == ["succeeded", "succeeded"]
    assert tools["answer"].startswith("done: Plan saved")
    assert world.fake.requests[-1].body["stream"] is False


@pytest.mark.parametrize("failure", ["leak 401", "leak 500", "leak stream"])
@pytest.mark.parametrize("agent", AGENTS)
async def test_a_provider_that_repeats_the_key_in_its_error_never_gets_it_stored_logged_or_returned(
    world: World, agent: str, failure: str
) -> None:
    outcome = await call(world.client, "start_session", agent=agent, message=f"{failure} for {agent}")
    assert outcome["status"] == "failed", outcome
    assert "[redacted]" in outcome["error"], outcome["error"]
    texts = [json.dumps(outcome)]
    session = await call(world.client, "get_session", session_id=outcome["session_id"])
    texts.append(json.dumps(session))
    listed = await call(world.client, "list_sessions")
    texts.append(json.dumps(listed))
    again = await world.client.call_tool(
        "send_message", {"session_id": outcome["session_id"], "message": "hi"}
    )
    texts.append(again.model_dump_json())
    for text in texts:
        assert SECRET not in text
    for path in world.db.parent.glob("parley.db*"):  # the file, its -wal and -shm (not the -wake folder)
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), f"the key is in {path.name}"
    assert SECRET not in world.server.log()
    for table in ["sessions", "turns", "events", "messages", "tool_calls"]:
        assert SECRET not in repr(db_rows(world.db, f"SELECT * FROM {table}"))


async def test_a_window_on_anthropic_starts_on_a_user_turn_and_keeps_each_call_with_its_result(
    world: World,
) -> None:
    # The fake refuses what Anthropic's API refuses: a first message that is not the user's, and a
    # tool_use parted from its tool_result.
    window = {"memory": {"mode": "window", "messages": 2}}
    first = await call(world.client, "start_session", agent="claude", message="window one", settings=window)
    sid = first["session_id"]
    tools = await call(world.client, "send_message", session_id=sid, message="two tools in a window")
    assert tools["status"] == "answered", tools
    assert tools["answer"].startswith("done: Plan saved"), tools
    last = await call(world.client, "send_message", session_id=sid, message="window three")
    assert last["status"] == "answered" and last["answer"] == "echo: window three", last
    bodies = [
        r.body for r in world.fake.requests if r.provider == "anthropic" and "window" in json.dumps(r.body)
    ]
    for body in bodies:
        assert body["messages"][0]["role"] == "user", body["messages"]
    # After the calls: the window reaches back to the user message that asked, so each call comes
    # with its result.
    after_tools = next(b for b in bodies if "tool_result" in json.dumps(b["messages"][-1]))
    assert [m["role"] for m in after_tools["messages"]] == ["user", "assistant", "user"]
    assert after_tools["messages"][0]["content"][0]["text"] == "two tools in a window"
    # A window of 2 whose oldest message would be the assistant's is the newest user message alone.
    assert bodies[-1]["messages"] == [{"role": "user", "content": [{"type": "text", "text": "window three"}]}]
