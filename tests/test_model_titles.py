"""Titles by the model for agents that opt in (`title_from_model: true`), end to end against
`parley serve` and the fake Anthropic and OpenAI servers: one extra model call on the first
message names the session; agents that do not opt in (and the demo model) are titled by the
message's first words with no call; a failing title call falls back to the first words."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from mcp import Client

from parley.runtime.model_titles import TITLE_INSTRUCTIONS
from tests.fake_providers import FakeProviders, serving_fake_providers
from tests.support import InProcessServer, call, eventually, write_config

pytestmark = pytest.mark.anyio


@dataclass
class World:
    client: Client
    fake: FakeProviders


def _model(fake: FakeProviders, provider: str) -> dict[str, Any]:
    url = fake.anthropic_url if provider == "anthropic" else fake.openai_url
    return {
        "provider": provider,
        "name": f"{provider}-test",
        "base_url": url,
        "api_key_env": "FAKE_PROVIDER_KEY",
    }


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    directory = tmp_path_factory.mktemp("model_titles")
    async with serving_fake_providers() as fake:
        agents: dict[str, dict[str, Any]] = {
            "claude": {"model": _model(fake, "anthropic"), "title_from_model": True},
            "gpt": {"model": _model(fake, "openai"), "title_from_model": True},
            "plain": {"model": _model(fake, "openai")},
        }
        config = write_config(directory, agents=agents, runtime={"model_retry_backoff_s": 0.05})
        async with (
            InProcessServer(config, env={"FAKE_PROVIDER_KEY": "sk-fake"}) as server,
            server.client() as client,
        ):
            yield World(client, fake)


def _title_calls(fake: FakeProviders, message: str) -> list[str]:
    """The providers that were asked for a title of `message`."""
    found = []
    for request in fake.requests:
        body = request.body
        system = body.get("system") or next(
            (m.get("content") for m in body.get("messages", []) if m.get("role") == "system"), ""
        )
        if TITLE_INSTRUCTIONS in str(system) and message in str(body.get("messages")):
            found.append(request.provider)
    return found


async def _title(client: Client, sid: str) -> str | None:
    title = (await call(client, "get_session", session_id=sid))["title"]
    return str(title) if title is not None else None


@pytest.mark.parametrize("agent", ["claude", "gpt"])
async def test_an_agent_that_opts_in_is_titled_by_one_extra_model_call(world: World, agent: str) -> None:
    message = f"Plan the {agent} trip to Lyon"
    started = await call(world.client, "start_session", agent=agent, message=message)
    sid = started["session_id"]

    async def titled() -> bool:
        return await _title(world.client, sid) is not None

    await eventually(titled, "the model's title")
    # The fake answers "echo: <the user's text>": the title is the model's answer, on one line.
    assert await _title(world.client, sid) == f"echo: {message}"
    assert _title_calls(world.fake, message) == ["anthropic" if agent == "claude" else "openai"]


async def test_an_agent_that_does_not_opt_in_is_titled_by_the_first_words_without_a_call(
    world: World,
) -> None:
    message = "Plain words for a plain title"
    started = await call(world.client, "start_session", agent="plain", message=message)
    assert await _title(world.client, started["session_id"]) == message
    assert _title_calls(world.fake, message) == []


async def test_a_failing_title_call_falls_back_to_the_first_words(world: World) -> None:
    message = "leak 401 on purpose"  # the fake refuses every call about this text
    started = await call(world.client, "start_session", agent="gpt", message=message)
    sid = started["session_id"]

    async def titled() -> bool:
        return await _title(world.client, sid) is not None

    await eventually(titled, "the fallback title")
    assert await _title(world.client, sid) == message
