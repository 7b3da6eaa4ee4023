"""The switches of parley/runtime/telemetry.py and the JSON log line (no SDK is installed here: the
process-wide tracer provider is left alone)."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from parley.runtime.log_format import JsonLogFormatter
from parley.runtime.session_log import about
from parley.runtime.telemetry import setup_tracing, wants_traces
from parley.runtime.tracing import Tracing, current_trace_context, resolution_name


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),  # naming the service asks for nothing
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
    ],
)
def test_traces_are_wanted_only_when_an_exporter_or_an_address_is_named(
    environ: dict[str, str], wanted: bool
) -> None:
    assert wants_traces(environ) is wanted


def test_nothing_configured_sets_up_nothing_and_imports_no_sdk(caplog: pytest.LogCaptureFixture) -> None:
    loaded_before = {name for name in sys.modules if name.startswith("opentelemetry.sdk")}
    with caplog.at_level(logging.DEBUG):
        tracing = setup_tracing({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    assert tracing == Tracing(enabled=False, capture_content=True)
    assert caplog.records == []
    assert {name for name in sys.modules if name.startswith("opentelemetry.sdk")} == loaded_before


def test_an_unknown_exporter_is_reported_and_nothing_is_exported(caplog: pytest.LogCaptureFixture) -> None:
    tracing = setup_tracing({"OTEL_TRACES_EXPORTER": "zipkin"})
    assert not tracing.enabled
    assert "zipkin" in caplog.text


def test_without_a_span_there_is_no_context_to_store() -> None:
    assert current_trace_context() is None


def test_spans_are_no_ops_when_tracing_is_off() -> None:
    tracing = Tracing()
    span = tracing.start_turn(
        session_id="s", agent="a", turn_id="t", agent_version=None, caller_context=None, resumed=False
    )
    assert not span.is_recording()
    Tracing.end_turn(span, "answered")
    with tracing.chat(provider="demo", model="demo", session_id="s", instructions="", messages=None) as chat:
        assert not chat.is_recording()


@pytest.mark.parametrize(
    ("approved", "declined", "expired", "name"),
    [
        (True, False, False, "approved"),
        (False, False, False, "rejected"),
        (None, False, False, "answered"),
        (None, True, False, "declined"),
        (None, False, True, "expired"),
    ],
)
def test_resolutions_are_named(approved: bool | None, declined: bool, expired: bool, name: str) -> None:
    assert resolution_name(approved, declined, expired) == name


class _Session:
    id = "sess_1"
    owner = "alice"


def test_a_json_log_line_has_the_fields_and_the_ids_it_is_about() -> None:
    record = logging.LogRecord(
        "parley.runtime.driver", logging.WARNING, __file__, 1, "turn %s failed", ("t1",), None
    )
    for key, value in {**about(_Session()), "turn_id": "turn_1", "tool_call_id": "call_1"}.items():
        setattr(record, key, value)
    line = json.loads(JsonLogFormatter().format(record))
    assert line["level"] == "WARNING" and line["message"] == "turn t1 failed"
    assert line["logger"] == "parley.runtime.driver" and line["time"].endswith("+00:00")
    assert (line["session_id"], line["owner"], line["turn_id"], line["tool_call_id"]) == (
        "sess_1",
        "alice",
        "turn_1",
        "call_1",
    )
    assert "trace_id" not in line  # no span is current


def test_an_exception_goes_in_error() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = json.loads(JsonLogFormatter().format(record))
    assert "ValueError: boom" in line["error"]
