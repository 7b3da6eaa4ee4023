"""OpenTelemetry end to end: three real processes (an outer client's trace -> parley A -> parley B,
A's downstream MCP server whose agent is a tool -> the fixture tool server) export over OTLP/HTTP
to a receiver in the test, and their spans make one trace; a turn resumed after SIGKILL by another
process joins its caller's trace; prompts are in spans only when the content switch is on; and a
parley whose OpenTelemetry SDK cannot even be imported serves without a word about it."""

from __future__ import annotations

import contextlib
import json
import secrets
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest
from mcp import MCPError
from mcp.types import RequestParamsMeta

from parley.tls import http_client
from tests.fake_providers import serving_fake_providers
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support import (
    REPO,
    TEST_DEADLINE_S,
    ServerProcess,
    call,
    db_rows,
    eventually,
    fixture_server,
    write_config,
)

pytestmark = pytest.mark.anyio

SECRET_PROMPT = "the-secret-prompt-text"


def _trace(traceparent: str) -> RequestParamsMeta:
    """A request's `_meta` carrying W3C trace context (mypy does not read RequestParamsMeta's
    open `extra_items`, so the one key is cast; parley/runtime/mcp/sources.py does the same)."""
    return cast(RequestParamsMeta, {"traceparent": traceparent})


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as found:
        yield found


@dataclass
class Chain:
    a: ServerProcess
    directory: Path

    @property
    def a_db(self) -> Path:
        return self.directory / "parley.db"

    @property
    def b_db(self) -> Path:
        return self.directory / "b" / "parley.db"


@pytest.fixture(scope="module")
async def chain(tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver) -> AsyncIterator[Chain]:
    directory = tmp_path_factory.mktemp("otel")
    fixture = fixture_server(directory / "fixture.jsonl")
    fixture["env"] = {**fixture["env"], **receiver.env("fixture")}
    b_config = write_config(
        directory / "b", agents={"worker": {"mcp_servers": ["fixture"]}}, mcp_servers={"fixture": fixture}
    )
    inner = {
        "command": sys.executable,
        "args": ["-m", "parley", "serve", "--config", str(b_config)],
        "cwd": str(REPO),
        "env": receiver.env("parley-b"),
    }
    only_start = {
        "server": "sub",
        "include": ["start_session"],
        "tools": {"start_session": {"approval": "never"}},
    }
    a_config = write_config(
        directory, agents={"boss": {"mcp_servers": [only_start]}}, mcp_servers={"sub": inner}
    )
    async with ServerProcess(a_config, name="a", env=receiver.env("parley-a")) as a:
        yield Chain(a, directory)


def _traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def _nested(text: str) -> str:
    """A's message: delegate to B's worker, whose message calls the fixture tool."""
    inner = {"agent": "worker", "message": '/tool fixture__read_thing {"name": "' + text + '"}'}
    return "/tool sub__start_session " + json.dumps(inner)


async def _spans_until(receiver: OtlpReceiver, trace_id: str, *wanted: tuple[str, str]) -> list[ReceivedSpan]:
    """The trace's spans once it holds a span named (service, name prefix) for each of `wanted`."""

    async def complete() -> bool:
        spans = receiver.in_trace(trace_id)
        return all(any(s.service == svc and s.name.startswith(n) for s in spans) for svc, n in wanted)

    await eventually(complete, f"the spans {wanted} in trace {trace_id}")
    return receiver.in_trace(trace_id)


def _usage(db: Path, session_id: str) -> tuple[int, int]:
    [(inputs, outputs)] = db_rows(
        db, "SELECT input_tokens, output_tokens FROM sessions WHERE id = ?", (session_id,)
    )
    return int(inputs), int(outputs)


async def test_one_trace_across_an_outer_client_two_parleys_and_a_tool_server(
    chain: Chain, receiver: OtlpReceiver
) -> None:
    traceparent, trace_id, outer_span = _traceparent()
    async with chain.a.client() as client:
        result = await client.call_tool(
            "start_session",
            {"agent": "boss", "message": _nested(SECRET_PROMPT), "wait_seconds": TEST_DEADLINE_S},
            meta=_trace(traceparent),
        )
    out = dict(result.structured_content or {})
    assert out.get("status") == "answered", out
    a_session = out["session_id"]
    spans = await _spans_until(
        receiver,
        trace_id,
        ("parley-a", "invoke_agent boss"),
        ("parley-a", "chat demo"),
        ("parley-a", "execute_tool sub__start_session"),
        ("parley-b", "invoke_agent worker"),
        ("parley-b", "execute_tool fixture__read_thing"),
        ("fixture", "tools/call read_thing"),
    )

    async def one_tree() -> bool:
        """Every span's parent is in the trace, or is the outer client's span (a parent, such as
        the request span that waited for the answer, ends and is exported after its children)."""
        found = receiver.in_trace(trace_id)
        ids = {s.span_id for s in found}
        return all(s.parent_id in ids or s.parent_id == outer_span for s in found)

    await eventually(one_tree, "every span's parent in the trace")
    spans = receiver.in_trace(trace_id)
    by_id = {s.span_id: s for s in spans}
    assert {s.service for s in spans} >= {"parley-a", "parley-b", "fixture"}

    def ancestors(span: ReceivedSpan) -> list[str]:
        names = []
        while span.parent_id in by_id:
            span = by_id[span.parent_id]
            names.append(f"{span.service}:{span.name}")
        return names

    (fixture_call,) = [s for s in spans if s.service == "fixture" and s.name == "tools/call read_thing"]
    chain_names = ancestors(fixture_call)
    # The tool server's span hangs under B's tool call, B's turn, B's request, A's tool call, A's turn.
    for expected in (
        "parley-b:execute_tool fixture__read_thing",
        "parley-b:invoke_agent worker",
        "parley-b:tools/call start_session",
        "parley-a:execute_tool sub__start_session",
        "parley-a:invoke_agent boss",
        "parley-a:tools/call start_session",
    ):
        assert expected in chain_names, chain_names
    assert chain_names.index("parley-b:invoke_agent worker") < chain_names.index("parley-a:invoke_agent boss")

    # The conventions' attribute names, and token counts equal to the stored usage.
    # A's turn parks while B's task runs and is driven again when it ends: one span per drive,
    # siblings under the request that queued the message.
    turns = [s for s in spans if s.service == "parley-a" and s.name == "invoke_agent boss"]
    assert "answered" in [t.attributes["parley.turn.outcome"] for t in turns]
    assert len({t.parent_id for t in turns}) == 1
    for turn in turns:
        assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert turn.attributes["gen_ai.agent.name"] == "boss"
        assert turn.attributes["gen_ai.conversation.id"] == a_session
    a_chats = [s for s in spans if s.service == "parley-a" and s.name.startswith("chat ")]
    for chat in a_chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "parley.demo"
        assert chat.attributes["gen_ai.request.model"] == "demo"
        assert chat.parent_id in {t.span_id for t in turns}
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in a_chats) == _usage(chain.a_db, a_session)[0]
    assert (
        sum(c.attributes["gen_ai.usage.output_tokens"] for c in a_chats) == _usage(chain.a_db, a_session)[1]
    )
    b_turn = next(s for s in spans if s.service == "parley-b" and s.name == "invoke_agent worker")
    b_session = b_turn.attributes["gen_ai.conversation.id"]
    b_chats = [s for s in spans if s.service == "parley-b" and s.name.startswith("chat ")]
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in b_chats) == _usage(chain.b_db, b_session)[0]
    (tool,) = [s for s in spans if s.name == "execute_tool fixture__read_thing"]
    assert tool.attributes["gen_ai.tool.name"] == "fixture__read_thing"
    assert tool.attributes["parley.tool.effect"] == "read"
    assert tool.attributes["parley.tool.status"] == "succeeded"
    assert tool.attributes["parley.tool.server"] == "fixture"
    # MCP spans of the SDK on both sides.
    client_side = [s for s in spans if s.name == "MCP send tools/call read_thing"]
    assert client_side and client_side[0].attributes["mcp.method.name"] == "tools/call"
    assert "jsonrpc.request.id" in fixture_call.attributes

    # The content switch is off: no prompt text in any span of any process.
    for span in spans:
        assert "gen_ai.input.messages" not in span.attributes
        assert "gen_ai.tool.call.arguments" not in span.attributes
        assert SECRET_PROMPT not in json.dumps(span.attributes, default=str), span


# ---------------------------------------------------------------------- a crash, and content capture


async def test_a_turn_resumed_after_sigkill_joins_the_callers_trace_and_content_is_captured_when_asked(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    fixture = fixture_server(tmp_path / "fixture.jsonl")
    config = write_config(
        tmp_path,
        agents={"worker": {"mcp_servers": ["fixture"]}},
        mcp_servers={"fixture": fixture},
        runtime={"lease_ttl_s": 0.3},
    )
    env = {**receiver.env("crashy"), "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    traceparent, trace_id, _ = _traceparent()
    mark = uuid.uuid4().hex
    message = '/tool fixture__read_thing {"name": "' + SECRET_PROMPT + '"}'
    doomed = ServerProcess(config, name="doomed", env=env, fault="model_committed")
    async with doomed as server, server.client() as client:
        with contextlib.suppress(MCPError):
            arguments = {"agent": "worker", "message": message, "wait_seconds": 0, "client_message_id": mark}
            await client.call_tool("start_session", arguments, meta=_trace(traceparent))
        assert await server.wait_exit() == -9, server.log()
    [(session_id,)] = db_rows(
        tmp_path / "parley.db", "SELECT id FROM sessions WHERE start_client_message_id = ?", (mark,)
    )
    # Over streamable HTTP (2025-11-25, which has MCP sessions): the SDK's server spans get the
    # MCP session id from parley.
    restarted = ServerProcess(config, name="restarted", env=env, http=True)
    async with restarted as again, again.client("legacy") as client:
        out = await call(client, "get_session", session_id=session_id, wait_seconds=TEST_DEADLINE_S)
        assert out["last_turn"]["status"] == "answered", out
        spans = await _spans_until(
            receiver, trace_id, ("crashy", "invoke_agent worker"), ("crashy", "execute_tool")
        )

        async def served_over_http() -> bool:
            return any(s.service == "crashy" for s in receiver.named("tools/call get_session"))

        # While the server runs: leaving the block kills it, and a span still in its export batch
        # would never arrive.
        await eventually(served_over_http, "the span of the get_session call")
    resumed = [s for s in spans if s.name == "invoke_agent worker" and s.attributes["parley.turn.resumed"]]
    assert resumed and resumed[0].attributes["parley.turn.outcome"] == "answered", spans
    assert resumed[0].attributes["gen_ai.conversation.id"] == session_id
    # Content capture on: the prompt and the tool's arguments are in the spans.
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert any(SECRET_PROMPT in str(c.attributes.get("gen_ai.input.messages")) for c in chats), chats
    (tool,) = [s for s in spans if s.name == "execute_tool fixture__read_thing"]
    assert SECRET_PROMPT in str(tool.attributes["gen_ai.tool.call.arguments"])
    (served,) = [s for s in receiver.named("tools/call get_session") if s.service == "crashy"]
    assert served.attributes["mcp.session.id"], served
    assert served.attributes["mcp.method.name"] == "tools/call"


# ---------------------------------------------------------------------- no SDK at all

BLOCK_SDK = '''
import sys

class _NoOpenTelemetrySdk:
    """Importing the OpenTelemetry SDK fails, as if the otel extra were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry.sdk" or name.startswith(("opentelemetry.sdk.", "opentelemetry.exporter")):
            raise ImportError(f"blocked by the test: {name}")
        return None

sys.meta_path.insert(0, _NoOpenTelemetrySdk())
'''


@pytest.mark.parametrize("configured", [False, True], ids=["no-otel-env", "otel-env"])
async def test_without_the_sdk_parley_serves_and_says_nothing_unless_traces_were_asked_for(
    tmp_path: Path, configured: bool
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_SDK)
    config = write_config(tmp_path, agents={"demo": {}})
    env = {"PYTHONPATH": f"{site}:{REPO}"}
    if configured:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"
    async with ServerProcess(config, env=env, log_level="INFO") as server, server.client() as client:
        out = await call(client, "start_session", agent="demo", message="hello", wait_seconds=TEST_DEADLINE_S)
        assert out["status"] == "answered", out
        log = server.log()
    assert "blocked by the test" not in log  # nothing imported the SDK by accident...
    warnings = [line for line in log.splitlines() if " WARNING " in line or "Traceback" in line]
    if configured:
        assert any("parley-sessions[otel]" in line for line in warnings), log
    else:
        assert warnings == [], log
        assert "opentelemetry" not in log.lower(), log


# ---------------------------------------------------------------------- JSON logs


async def test_json_logs_carry_ids_and_a_wait_for_approval_is_a_span_linked_to_the_decision(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    fixture = fixture_server(tmp_path / "fixture.jsonl")
    config = write_config(
        tmp_path, agents={"worker": {"mcp_servers": ["fixture"]}}, mcp_servers={"fixture": fixture}
    )
    traceparent, trace_id, _ = _traceparent()
    deciding, decider_trace, _ = _traceparent()
    json_logs = ServerProcess(config, name="json", env=receiver.env("json"), args=("--log-format", "json"))
    async with json_logs as server, server.client() as client:
        arguments = {
            "agent": "worker",
            "message": '/tool fixture__bare {"text": "x"}',
            "wait_seconds": TEST_DEADLINE_S,
        }
        result = await client.call_tool("start_session", arguments, meta=_trace(traceparent))
        out = dict(result.structured_content or {})
        assert out.get("status") == "waiting_for_input", out
        [pending] = out["pending"]
        decisions = [{"interrupt_id": pending["id"], "approved": True}]
        result = await client.call_tool(
            "approve",
            {"session_id": out["session_id"], "decisions": decisions, "wait_seconds": TEST_DEADLINE_S},
            meta=_trace(deciding),
        )
        assert dict(result.structured_content or {}).get("status") == "answered", result
        spans = await _spans_until(
            receiver, trace_id, ("json", "parley.await_approval"), ("json", "execute_tool fixture__bare")
        )

        async def parked_turn_exported() -> bool:
            turns = [s for s in receiver.in_trace(trace_id) if s.name == "invoke_agent worker"]
            return any(name == "parley.approval.requested" for t in turns for name, _ in t.events)

        # The drive that parked the turn ends its span as it lets the session go.
        await eventually(parked_turn_exported, "the span of the turn that asked for the approval")
        log = server.log()
    (wait,) = [s for s in spans if s.name == "parley.await_approval"]
    assert wait.attributes["parley.interrupt.resolution"] == "approved"
    assert [t for t, _ in wait.links] == [decider_trace]  # linked to the approving request
    (tool,) = [s for s in spans if s.name == "execute_tool fixture__bare"]
    assert "parley.approval.granted" in [name for name, _ in tool.events]

    lines = [json.loads(line) for line in log.splitlines() if line.strip()]  # every line is one object
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    ended = [
        line
        for line in lines
        if line.get("session_id") == out["session_id"] and "answered" in line["message"]
    ]
    assert ended, lines
    assert ended[0]["turn_id"].startswith("turn_")
    assert ended[0]["trace_id"] == trace_id and len(ended[0]["span_id"]) == 16


# ---------------------------------------------------------------------- a real provider's wire


async def test_a_provider_call_carries_the_trace_and_its_span_the_providers_usage(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    key = "sk-" + secrets.token_hex(16)
    async with serving_fake_providers() as fake:
        model = {
            "provider": "openai",
            "name": "gpt-test",
            "base_url": fake.openai_url,
            "api_key_env": "FAKE_KEY",
        }
        config = write_config(tmp_path, agents={"gpt": {"model": model}})
        traceparent, trace_id, _ = _traceparent()
        env = {**receiver.env("provider"), "FAKE_KEY": key}
        async with ServerProcess(config, name="provider", env=env) as server, server.client() as client:
            arguments = {"agent": "gpt", "message": "hello", "wait_seconds": TEST_DEADLINE_S}
            result = await client.call_tool("start_session", arguments, meta=_trace(traceparent))
            out = dict(result.structured_content or {})
            assert out.get("status") == "answered", out
            spans = await _spans_until(receiver, trace_id, ("provider", "chat gpt-test"))
    # The provider was asked inside the trace, from the chat span.
    (chat,) = [s for s in spans if s.name == "chat gpt-test"]
    (sent,) = [r for r in fake.requests if r.provider == "openai"]
    assert sent.headers["traceparent"].split("-")[1:3] == [trace_id, chat.span_id]
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    inputs, outputs = _usage(tmp_path / "parley.db", out["session_id"])
    assert (chat.attributes["gen_ai.usage.input_tokens"], chat.attributes["gen_ai.usage.output_tokens"]) == (
        inputs,
        outputs,
    )
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 5
    # The key is in no span.
    assert not any(key in json.dumps(s.attributes, default=str) for s in receiver.in_trace(trace_id))


# ---------------------------------------------------------------------- /v1 (what /ui and the AI SDK use)


async def test_an_approval_round_over_v1_is_one_trace_from_the_callers_traceparent(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    fixture = fixture_server(tmp_path / "fixture.jsonl")
    config = write_config(
        tmp_path, agents={"worker": {"mcp_servers": ["fixture"]}}, mcp_servers={"fixture": fixture}
    )
    traceparent, trace_id, outer_span = _traceparent()
    deciding, decider_trace, _ = _traceparent()
    async with (
        ServerProcess(config, name="v1", http=True, env=receiver.env("v1")) as server,
        http_client(base_url=server.base_url, timeout=TEST_DEADLINE_S) as http,
    ):
        body = {"agent": "worker", "message": '/tool fixture__bare {"text": "v1"}', "wait_seconds": 10}
        started = await http.post("/v1/sessions", json=body, headers={"traceparent": traceparent})
        assert started.status_code == 201, started.text
        out = started.json()
        assert out["status"] == "waiting_for_input", out
        decisions = {
            "decisions": [{"interrupt_id": out["pending"][0]["id"], "approved": True}],
            "wait_seconds": 10,
        }
        approved = await http.post(
            f"/v1/sessions/{out['session_id']}/approve", json=decisions, headers={"traceparent": deciding}
        )
        assert approved.json()["status"] == "answered", approved.text
        spans = await _spans_until(
            receiver,
            trace_id,
            ("v1", "POST /v1/sessions"),
            ("v1", "parley.await_approval"),
            ("v1", "execute_tool fixture__bare"),
        )

        async def both_drives() -> bool:
            turns = [s for s in receiver.in_trace(trace_id) if s.name == "invoke_agent worker"]
            return len(turns) == 2

        # The drive that asked (parked) and the drive that resumed after the approval.
        await eventually(both_drives, "both drives of the turn in the caller's trace")

        # The approving request is a span of its own trace: the caller's who decided. Its batch
        # may go out after the caller's trace (waited for here, while the server runs).
        async def approval_exported() -> bool:
            names = [s.name for s in receiver.in_trace(decider_trace)]
            return "POST /v1/sessions/{session_id}/approve" in names

        await eventually(approval_exported, "the approving request's span in its own trace")
    spans = receiver.in_trace(trace_id)
    (request,) = [s for s in spans if s.name == "POST /v1/sessions"]
    assert request.parent_id == outer_span, "the request span is a child of the caller's span"
    assert request.attributes["http.response.status_code"] == 201
    first, resumed = sorted(
        (s for s in spans if s.name == "invoke_agent worker"),
        key=lambda s: "parley.approval.requested" not in [n for n, _ in s.events],
    )
    assert first.parent_id == request.span_id and resumed.parent_id == request.span_id
    (wait,) = [s for s in spans if s.name == "parley.await_approval"]
    assert wait.parent_id == request.span_id
    assert [t for t, _ in wait.links] == [decider_trace], "linked to the approving request"
    (tool,) = [s for s in spans if s.name == "execute_tool fixture__bare"]
    assert tool.parent_id == resumed.span_id
