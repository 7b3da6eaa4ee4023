"""Agents people already write, through the whole app in the test's process: a Claude Code subagent
file runs as a parley agent, settings.enabled_tools
narrows a session's tools and never widens them, and each memory mode sends the model exactly the
messages it promises (the demo model's message count, and a fake provider's recorded requests)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.fake_providers import FakeProviders, serving_fake_providers
from tests.support import InProcessServer, call, call_error, write_config

pytestmark = pytest.mark.anyio

# A subagent written the way Claude Code's documentation shows one: its name, when to use it,
# Claude Code's own tools, the parent's model, and its instructions as the body.
REVIEWER_MD = """---
name: code-reviewer
description: Reviews code for correctness and clarity. Use it after changing code.
tools: Read, Grep, Glob, Bash
model: inherit
---
You are a careful code reviewer. Read the change, then list the problems you find, the most
serious first, each with the line it is on and a suggested fix.
"""
# parley-only fields in the same front matter: a window of three messages, one built-in tool.
WINDOWED_MD = """---
name: windowed
description: Remembers only the latest three messages.
tools: [ask_user]
memory: {mode: window, messages: 3}
---
Answer briefly.
"""


@dataclass
class World:
    client: Client
    fake: FakeProviders
    config: Path


def write_agent_files(directory: Path, fake: FakeProviders) -> Path:
    """parley.yaml with agent files of both kinds (parley's YAML, Claude Code's markdown) in
    `directory`, one agent recorded by `fake`'s OpenAI; returns the config's path."""
    recorded = {
        "model": {"provider": "openai", "name": "gpt-recorded", "base_url": fake.openai_url},
        "tools": ["write_todos"],
        # Not enabled: a session that chooses the compaction mode uses these.
        "compaction": {"context_window": 300, "trigger_ratio": 0.85, "retained_ratio": 0.3},
    }
    config = write_config(
        directory,
        agents={"stateless": {"memory": {"mode": "none"}}, "recorded": recorded},
        agents_dir=["configs/agents", ".claude/agents"],
    )
    claude = directory / ".claude" / "agents"
    claude.mkdir(parents=True)
    (claude / "code-reviewer.md").write_text(REVIEWER_MD)
    (claude / "windowed.md").write_text(WINDOWED_MD)
    return config


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("agent_files")
    async with serving_fake_providers() as fake:
        config = write_agent_files(directory, fake)
        async with InProcessServer(config) as server, server.client() as client:
            yield World(client, fake, config)


# ---------------------------------------------------------------------------- Claude Code files


async def test_the_subagent_is_listed_and_runs_on_the_default_model(world: World) -> None:
    agents = {a["name"]: a for a in (await call(world.client, "list_agents"))["agents"]}
    reviewer = agents["code-reviewer"]
    assert reviewer["description"] == "Reviews code for correctness and clarity. Use it after changing code."
    assert (reviewer["tools"], reviewer["model"]) == ([], "demo:demo")
    assert agents["windowed"]["memory"] == {"mode": "window", "messages": 3}
    outcome = await call(world.client, "start_session", agent="code-reviewer", message="please review")
    assert (outcome["status"], outcome["answer"]) == (
        "answered",
        "You said: please review (message 1 of this session)",
    )


# ---------------------------------------------------------------------------- enabled_tools


async def test_enabled_tools_narrows_a_session_and_cannot_widen_it(world: World) -> None:
    narrowed = {"enabled_tools": ["ask_user"]}
    outcome = await call(
        world.client,
        "start_session",
        agent="demo",
        message='/tool write_todos {"todos": [{"content": "not allowed"}]}',
        settings=narrowed,
    )
    [tool_call] = outcome["tool_calls"]
    assert (tool_call["tool"], tool_call["status"], tool_call["is_error"]) == ("write_todos", "failed", True)
    assert "Unknown tool 'write_todos'" in tool_call["result"]
    sid = outcome["session_id"]
    snapshot = await call(world.client, "get_session", session_id=sid)
    assert (snapshot["tools"], snapshot["todos"]) == (["ask_user"], [])
    error = await call_error(
        world.client,
        "send_message",
        session_id=sid,
        message="more",
        settings={"enabled_tools": ["ask_user", "Bash"]},
    )
    assert "settings.enabled_tools" in error and "Bash: not a tool of agent 'demo'" in error
    widened = await call_error(
        world.client,
        "start_session",
        agent="code-reviewer",
        message="x",
        settings={"enabled_tools": ["Read"]},
    )
    assert "Read: not a tool of agent 'code-reviewer'" in widened
    # null lifts the narrowing: the agent's own tools again, never more.
    await call(world.client, "send_message", session_id=sid, message="back", settings={"enabled_tools": None})
    snapshot = await call(world.client, "get_session", session_id=sid)
    assert snapshot["tools"] == ["write_todos", "ask_user", "durable_wait"]


# ---------------------------------------------------------------------------- memory modes


async def answers(client: Client, agent: str, texts: list[str], **settings: Any) -> list[str]:
    sid = (await call(client, "start_session", agent=agent, settings=settings or None))["session_id"]
    return [(await call(client, "send_message", session_id=sid, message=t))["answer"] for t in texts]


async def test_each_memory_mode_shows_the_demo_model_the_messages_it_promises(world: World) -> None:
    texts = ["one", "two", "three"]
    full = await answers(world.client, "demo", texts)
    assert full[-1] == "You said: three (message 3 of this session)"
    stateless = await answers(world.client, "stateless", texts)
    assert stateless == [f"You said: {t} (message 1 of this session)" for t in texts]
    # The latest three messages: two, its answer, three.
    windowed = await answers(world.client, "windowed", texts)
    assert windowed[-1] == "You said: three (message 2 of this session)"
    chosen = await answers(world.client, "demo", texts, memory={"mode": "none"})
    assert chosen[-1] == "You said: three (message 1 of this session)"
    error = await call_error(
        world.client, "start_session", agent="stateless", settings={"memory": {"mode": "full"}}
    )
    assert "would remember more than agent 'stateless' does (none)" in error


def sent(fake: FakeProviders, marker: str) -> list[tuple[str, str]]:
    """The messages of the last request whose newest message is `marker`, as (role, text)."""
    [*_, body] = [r.body for r in fake.requests if r.body["messages"][-1].get("content") == marker]
    return [(m["role"], m.get("content") or "") for m in body["messages"] if m["role"] != "system"]


async def test_each_memory_mode_sends_a_provider_exactly_the_messages_it_promises(world: World) -> None:
    fake = world.fake
    await answers(world.client, "recorded", ["f1", "f2", "f3"])
    assert sent(fake, "f3") == [
        ("user", "f1"),
        ("assistant", "echo: f1"),
        ("user", "f2"),
        ("assistant", "echo: f2"),
        ("user", "f3"),
    ]
    await answers(world.client, "recorded", ["w1", "w2", "w3"], memory={"mode": "window", "messages": 3})
    assert sent(fake, "w3") == [("user", "w2"), ("assistant", "echo: w2"), ("user", "w3")]
    # A window never starts on the assistant's message: two would be echo: v2, v3.
    await answers(world.client, "recorded", ["v1", "v2", "v3"], memory={"mode": "window", "messages": 2})
    assert sent(fake, "v3") == [("user", "v3")]
    await answers(world.client, "recorded", ["n1", "n2"], memory={"mode": "none"})
    assert sent(fake, "n2") == [("user", "n2")]
    words = [f"c{i} " + "lorem ipsum dolor sit amet " * 14 for i in range(3)]
    await answers(world.client, "recorded", words, memory={"mode": "compaction"})
    compacted = sent(fake, words[-1])
    assert compacted[0][1].startswith("[Summary of the earlier conversation]")
    assert compacted[-1] == ("user", words[-1]) and ("user", words[0]) not in compacted
