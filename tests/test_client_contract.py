"""The client reads what the server writes: its models against the tools' published outputSchema,
its error classes against the server's refusals, its events against the server's progress lines.
No subprocess: the server's MCP object is built in memory, only to list its tools."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from parley import errors as server_errors
from parley.client import errors as client_errors
from parley.client import events
from parley.client.models import TOOL_OUTPUTS
from parley.core.ids import SessionId, TurnId
from parley.core.records import EventRecord, TurnStatus
from parley.runtime.progress import describe_event
from parley.runtime.service.plans import _REFUSALS as PLAN_REFUSALS
from parley.server.tools import listed_tools

pytestmark = pytest.mark.anyio


async def _published_output_schemas() -> dict[str, dict[str, Any]]:
    return {tool.name: tool.output_schema or {} for tool in await listed_tools()}


def _shape(schema: Any, root: dict[str, Any]) -> Any:
    """What a schema says about the data (types, properties, which are required, enums), with
    $refs resolved and titles, descriptions and defaults left out."""
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return _shape(root["$defs"][name], root)
    if "anyOf" in schema:
        return ("anyOf", sorted(repr(_shape(s, root)) for s in schema["anyOf"]))
    shape: dict[str, Any] = {}
    for key in ("type", "const"):
        if key in schema:
            shape[key] = schema[key]
    if "enum" in schema:
        shape["enum"] = sorted(schema["enum"])
    if "properties" in schema:
        shape["properties"] = {k: _shape(v, root) for k, v in schema["properties"].items()}
        shape["required"] = sorted(schema.get("required", []))
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            shape[key] = _shape(schema[key], root)
    return shape


async def test_every_tool_has_a_client_model() -> None:
    assert set(await _published_output_schemas()) == set(TOOL_OUTPUTS)


@pytest.mark.parametrize("tool", sorted(TOOL_OUTPUTS))
async def test_the_client_model_of_each_tool_matches_the_output_schema_it_publishes(tool: str) -> None:
    published = (await _published_output_schemas())[tool]
    ours = TOOL_OUTPUTS[tool].model_json_schema()
    assert _shape(ours, ours) == _shape(published, published)


SERVER_REFUSALS: list[tuple[Exception, type[client_errors.ToolError]]] = [
    (server_errors.InvalidArgument("message", "is required"), client_errors.InvalidArgument),
    (server_errors.UnknownAgent("nope", ["demo"]), client_errors.UnknownAgent),
    (server_errors.SessionNotFound("ses_x"), client_errors.SessionNotFound),
    (server_errors.SessionClosed("ses_x", "closed by a caller"), client_errors.SessionClosed),
    (
        server_errors.SessionLimitReached("ses_x", "it has used all 3 turns."),
        client_errors.SessionLimitReached,
    ),
    (server_errors.InterruptNotFound("ses_x", "int_y"), client_errors.InterruptNotFound),
    (server_errors.DecisionConflict("int_y", "approved"), client_errors.DecisionConflict),
    (server_errors.HumanApprovalOnly("guarded", "ses_x"), client_errors.NotYourDecision),
    (server_errors.ApproversOnly("deployer", "ses_x"), client_errors.NotYourDecision),
    (server_errors.SessionBusy("ses_x"), client_errors.SessionBusy),
    (
        server_errors.RateLimited(
            "alice has sent 30 messages in the last minute, the most this server allows "
            "(limits.messages_per_minute = 30). Try again in 23 s; nothing was sent.",
            23,
        ),
        client_errors.RateLimited,
    ),
    (server_errors.StorageUnavailable("/x/parley.db", "full", "disk full"), client_errors.ServerFailure),
]


@pytest.mark.parametrize(("refusal", "expected"), SERVER_REFUSALS, ids=lambda v: type(v).__name__)
def test_each_server_refusal_comes_back_as_its_client_error(
    refusal: Exception, expected: type[client_errors.ToolError]
) -> None:
    error = client_errors.tool_error("send_message", str(refusal))
    assert type(error) is expected
    assert error.text == str(refusal)
    assert error.tool == "send_message"


def test_a_client_error_keeps_the_facts_its_text_names() -> None:
    limited = client_errors.tool_error("send_message", str(SERVER_REFUSALS[10][0]))
    assert isinstance(limited, client_errors.RateLimited) and limited.retry_after_s == 23
    invalid = client_errors.tool_error(
        "send_message", str(server_errors.InvalidArgument("message", "too long"))
    )
    assert isinstance(invalid, client_errors.InvalidArgument) and invalid.field == "message"
    unknown = client_errors.tool_error("get_session", "something new the server says")
    assert type(unknown) is client_errors.ToolError


@pytest.mark.parametrize("reason", sorted(PLAN_REFUSALS))
def test_each_plan_refusal_comes_back_as_plan_refused_naming_its_reason(reason: str) -> None:
    command = "discard_plan" if reason == "no_draft" else "execute_plan"
    why = PLAN_REFUSALS[reason].format(current=3, revision=2, status="draft")
    refusal = server_errors.PlanRefused("ses_x", reason, f"{command} refused: {why}")
    error = client_errors.tool_error(command, str(refusal))
    assert type(error) is client_errors.PlanRefused, str(refusal)
    assert error.reason == reason
    assert error.current_revision == (3 if reason == "stale" else None)


def _event(kind: str, **data: Any) -> EventRecord:
    return EventRecord(
        session_id=SessionId("ses_x"), seq=1, turn_id=TurnId("turn_x"), kind=kind, data=data, created_at=0.0
    )


PROGRESS_CASES: list[tuple[EventRecord, list[events.Event]]] = [
    (_event("turn_started"), [events.TurnStarted()]),
    (_event("text_delta", text="Hello, wor"), [events.Text("Hello, wor")]),
    (
        _event("model_step", text="Let me look.", tool_calls=2),
        [events.Text("Let me look."), events.ToolsRequested(2)],
    ),
    (_event("model_step", text="", tool_calls=1), [events.ToolsRequested(1)]),
    (_event("model_step", text="All done.", tool_calls=0), [events.Text("All done.")]),
    (_event("tool_started", tool="files__read"), [events.ToolStarted("files__read")]),
    (
        _event("tool_finished", tool="files__read", status="succeeded"),
        [events.ToolFinished("files__read", "succeeded")],
    ),
    (
        _event("tool_progress", tool="slow__job", progress=3, total=10, message="step 3"),
        [events.ToolProgress("slow__job", "step 3 (3/10)")],
    ),
    (
        _event("model_retry", attempt=1, retry_in_s=2),
        [events.Notice("model call attempt 1 failed; retrying in 2s")],
    ),
    (_event("compacted"), [events.Notice("summarized the earlier conversation to fit the model's context")]),
    (_event("nudged"), [events.Notice("reminded the agent to hand in its result")]),
]


@pytest.mark.parametrize(("record", "expected"), PROGRESS_CASES, ids=lambda v: getattr(v, "kind", ""))
def test_each_progress_line_the_server_writes_reads_back_as_its_event(
    record: EventRecord, expected: list[events.Event]
) -> None:
    assert events.from_progress(describe_event(record)) == expected


@pytest.mark.parametrize("status", sorted(events.TURN_END_STATUSES))
def test_a_turn_ended_line_reads_back_for_every_status_a_turn_ends_with(status: str) -> None:
    line = describe_event(_event("turn_ended", status=status))
    assert events.from_progress(line) == [events.TurnEnded(status)]


def test_the_turn_end_statuses_are_the_servers() -> None:
    assert set(typing.get_args(TurnStatus)) - {"running"} == events.TURN_END_STATUSES


def test_the_stored_events_read_as_the_progress_lines_do() -> None:
    # The reading of the HTTP event stream agrees with the progress reading.
    for record, expected in PROGRESS_CASES:
        if record.kind == "tool_progress":
            continue  # the stream carries the message alone, progress adds the amounts
        assert events.from_stream(record.kind, record.data) == expected
