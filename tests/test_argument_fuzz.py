"""Generated tool calls with malformed arguments, in memory (what stdio carries) and over HTTP:
every call gets an answer (a result or a tool error naming what to fix), none is an internal
error, and the server keeps serving. Seeded; set PARLEY_FUZZ_SEED to replay a failure with the seed it printed."""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.support import TEST_DEADLINE_S, InProcessServer, call, eventually, write_config

pytestmark = pytest.mark.anyio

SEED = int(os.environ.get("PARLEY_FUZZ_SEED", "20261130"))
CALLS_PER_TRANSPORT = 400


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


JUNK: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    7,
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63) - 1,
    10**30,
    -(10**40),
    0.5,
    -0.0,
    1e-300,
    1e308,
    -1e308,
    3.999999999999,
    "",
    " ",
    "\x00",
    "\u200b",
    "\ufeff",
    "\u200d\ufe0f",
    "\u3164",
    "\u202eevil",
    "\U0010ffff",
    "😀" * 50,
    "中文",
    "null",
    "true",
    "false",
    "1",
    "-1",
    "1e999",
    "[]",
    "{}",
    '{"a": 1}',
    '[{"interrupt_id": 1}]',
    "ses_" + "0" * 32,
    "int_" + "f" * 32,
    "turn_" + "1" * 32,
    "qm_" + "2" * 32,
    "../../etc/passwd",
    "'; DROP TABLE sessions; --",
    "%s%n%x",
    "\r\n\t",
    "a" * 10_000,
    "chat",
    "task",
    "demo",
    "idle",
    [],
    [1, "a", None],
    [{}],
    [{"interrupt_id": None, "approved": "yes"}],
    list(range(500)),
    {},
    {"": None},
    {"model": 1},
    {"model": "nope"},
    {"limits": {"max_turns": True}},
    {"limits": {"max_turns": 10**30}},
    {"limits": []},
    {"limits": {"bogus": 1}},
    {"a": {"b": {"c": [None]}}},
    _nested(40),
    {"interrupt_id": "int_" + "0" * 32, "approved": True, "reason": "\x00"},
]


# Values near the right type, by JSON Schema type: edges, look-alikes of another type.
NEAR: dict[str, list[Any]] = {
    "integer": [0, -1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, 10**400, 1.0, 1.5, True, "1", "", None],
    "number": [0, -0.0, -1, 1e308, -1e308, 1e-300, 2**64, 10**400, True, False, "5", "inf", "NaN", None],
    "boolean": ["yes", "true", "false", 1, 0, None, "", [], {}],
    "string": ["", " ", "\x00", "\u200b", "\u3164", "null", "[1]", "{}", "1", 1, True, None, "a" * 10_000],
    "object": [{}, {"": {}}, {"limits": {"max_turns": 0}}, _nested(40), [], "{}", '{"model": 1}', None],
    "array": [[], [None], [{}], [[]], list(range(500)), {}, "[]", None],
}


def _near(rng: random.Random, prop: dict[str, Any]) -> Any:
    types = [prop["type"]] if "type" in prop else [p.get("type") for p in prop.get("anyOf", [])]
    pools = [NEAR[t] for t in types if t in NEAR]
    return rng.choice(rng.choice(pools)) if pools else rng.choice(JUNK)


@dataclass
class Fuzzed:
    client: Client
    server: InProcessServer
    transport: str
    valid: dict[str, Any]


@pytest.fixture(scope="module", params=["stdio", "http"])
async def fuzzed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Fuzzed]:
    transport = str(request.param)
    # Short waits: a call that happens to be valid must not hold the run for long.
    config = write_config(
        tmp_path_factory.mktemp(f"fuzz-{transport}"), runtime={"default_wait_s": 0.5, "max_wait_s": 1.0}
    )
    async with AsyncExitStack() as stack:
        server = await stack.enter_async_context(InProcessServer(config, http=transport == "http"))
        # stdio's JSON-RPC messages, in memory: every malformed argument goes through the framing.
        connected = Client(server.transport()) if transport == "stdio" else server.client()
        client = await stack.enter_async_context(connected)
        sid = (await call(client, "start_session", agent="demo", message="hello"))["session_id"]
        asking = await call(client, "start_session", agent="demo", message="/ask Colour? | red | blue")
        asking_sid = asking["session_id"]

        async def asked() -> bool:
            # The short waits above may return before the question is raised on a loaded machine.
            nonlocal asking
            asking = await call(client, "get_session", session_id=asking_sid)
            return bool(asking.get("pending"))

        await eventually(asked, "the question to be raised")
        valid = {
            "agent": "demo",
            "message": "hello",
            "kind": "chat",
            "session_id": sid,
            "interrupt_id": asking["pending"][0]["id"],
            "answer": "red",
            "decisions": [{"interrupt_id": asking["pending"][0]["id"], "approved": True}],
            "wait_seconds": 0.2,
            "messages_from": 1,
            "messages_limit": 5,
            "limit": 5,
            "steer": False,
            "decline": False,
            # A link carries no bytes, so it fits every message; no session here has an attachment to read.
            "attachments": [{"type": "resource_link", "uri": "https://example.com/a.txt", "name": "a.txt"}],
            "attachment": None,
        }
        yield Fuzzed(client, server, transport, valid)


def _arguments(rng: random.Random, schema: dict[str, Any], valid: dict[str, Any]) -> dict[str, Any]:
    """Valid arguments with one to three things wrong (mostly one, so the others let the bad one
    get past the early checks)."""
    properties = list(schema.get("properties", {}))
    required = set(schema.get("required", []))
    arguments = {
        name: valid.get(name, rng.choice(JUNK))
        for name in properties
        if name in required or rng.random() < 0.5
    }
    for _ in range(rng.choice([1, 1, 1, 1, 1, 2, 3])):
        mutation = rng.random()
        if mutation < 0.25 and properties:
            arguments[rng.choice(properties)] = rng.choice(JUNK)
        elif mutation < 0.7 and properties:
            name = rng.choice(properties)
            arguments[name] = _near(rng, schema["properties"][name])
        elif mutation < 0.8 and arguments:
            del arguments[rng.choice(list(arguments))]
        elif mutation < 0.9:
            arguments[rng.choice(["mesage", "sessionId", "", "x" * 300, "__proto__", "wait"])] = rng.choice(
                JUNK
            )
        elif "decisions" in properties:
            arguments["decisions"] = [{"interrupt_id": rng.choice(JUNK), "approved": rng.choice(JUNK)}]
        else:
            arguments = {}
    return arguments


async def test_generated_malformed_calls_all_get_an_answer_and_none_is_an_internal_error(
    fuzzed: Fuzzed,
) -> None:
    seed = SEED + (1 if fuzzed.transport == "http" else 0)
    rng = random.Random(seed)
    tools = {tool.name: tool.input_schema for tool in (await fuzzed.client.list_tools()).tools}
    outcomes = {"result": 0, "tool error": 0}
    for number in range(CALLS_PER_TRANSPORT):
        name = rng.choice(sorted(tools))
        arguments = _arguments(rng, tools[name], fuzzed.valid)
        what = f"seed {seed} (PARLEY_FUZZ_SEED={SEED}), call {number}: {name} {arguments!r:.300}"
        with anyio.fail_after(TEST_DEADLINE_S):
            try:
                result = await fuzzed.client.call_tool(name, arguments)
            except Exception as exc:
                raise AssertionError(f"{what} got no tool result: {exc!r}") from exc
        text = " ".join(getattr(block, "text", "") for block in result.content)
        assert "internal error" not in text, f"{what} -> {text}"
        if result.is_error:
            assert text.strip(), f"{what} -> an error without a message"
        outcomes["tool error" if result.is_error else "result"] += 1
    # Both kinds, or the generator has drifted into calls that never get past the first check.
    # About 6% of the calls are results whatever the seed (4-8% measured), so the floor is
    # well below that: a new optional argument shifts the random draws of every later call.
    assert min(outcomes.values()) >= CALLS_PER_TRANSPORT // 40, outcomes
    outcome = await call(fuzzed.client, "start_session", agent="demo", message="still serving")
    assert outcome["status"] == "answered"
    assert "failed (ref" not in fuzzed.server.log(), fuzzed.server.log()[-5000:]
