"""Spans of a turn, following the OpenTelemetry GenAI semantic conventions (Development status, as
published with opentelemetry-semantic-conventions 0.66b2): `invoke_agent {agent}` per turn (per
drive of it in a process), `chat {model}` per model call, `execute_tool {tool}` per tool call, and
parley's own spans for compaction and for a person's answer to an interrupt.

Only the OpenTelemetry API is used here: with no SDK installed and configured (runtime/telemetry.py),
the tracer is a no-op and every helper returns at once, building no attributes.

Over MCP the mcp SDK makes a span of each request, a child of the caller's `_meta.traceparent`;
over /v1 (what /ui and the AI SDK use) `request_span` does the same from the `traceparent` header.
The caller's trace context travels with its message (`QueuedMessageRecord.trace_context`): the turn
runs after the call returned, maybe in another process after a crash, and still joins the caller's
trace as a child of the span that queued the message (a parent that has ended is still a parent
in OpenTelemetry; the trace stays one). A turn resumed by another process is a second
`invoke_agent` span under the same parent, marked `parley.turn.resumed`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from parley import __version__

__all__ = [
    "Tracing",
    "current_trace_context",
    "inject_headers",
    "is_installed",
    "request_ended",
    "request_span",
    "resolution_name",
]

# The keys of a W3C trace context in `_meta` and in HTTP headers.
CARRIER_KEYS = ("traceparent", "tracestate", "baggage")
# gen_ai.provider.name by parley's provider names; the demo model is parley's own.
PROVIDER_NAMES = {"anthropic": "anthropic", "openai": "openai", "demo": "parley.demo"}


def current_trace_context() -> dict[str, str] | None:
    """The W3C trace context of the current span (the MCP request being served), to store with a
    message; None when there is none (nothing sent one and no tracing is configured)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    found = {k: v for k, v in carrier.items() if k in CARRIER_KEYS and isinstance(v, str)}
    return found or None


def is_installed() -> bool:
    """Whether an SDK tracer provider is installed (runtime/telemetry.py), so spans are recorded."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def inject_headers(headers: dict[str, str]) -> None:
    """Add the current trace context to an outgoing HTTP request's headers (`traceparent`...)."""
    propagate.inject(headers)


@contextmanager
def request_span(method: str, route: str, headers: Mapping[str, str]) -> Iterator[Span]:
    """The SERVER span of one HTTP request beside /mcp (`POST /v1/sessions`), current while it is
    served: a child of the caller's `traceparent` header when it sent one, else a new trace's root.
    A message it queues stores this context, so the turn, a wait for a person and the turn's
    resumption all join one trace, as over MCP. Without an SDK the caller's context still passes
    through (the API's no-op span carries it) to be stored for a process that records."""
    carrier = {key: headers[key] for key in CARRIER_KEYS if key in headers}
    parent = propagate.extract(carrier) if carrier else None
    tracer = trace.get_tracer("parley", __version__)
    attributes = {"http.request.method": method, "http.route": route}
    with tracer.start_as_current_span(
        f"{method} {route}", context=parent, kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        yield span


def request_ended(span: Span, status_code: int) -> None:
    if span.is_recording():
        span.set_attribute("http.response.status_code", status_code)
        if status_code >= 500:
            span.set_status(Status(StatusCode.ERROR))


def resolution_name(approved: bool | None, declined: bool, expired: bool) -> str:
    if expired:
        return "expired"
    if approved is not None:
        return "approved" if approved else "rejected"
    return "declined" if declined else "answered"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _input_messages(messages: Any) -> list[dict[str, Any]]:
    """The conventions' shape of chat messages (role, parts); media and provider blobs left out."""
    shaped: list[dict[str, Any]] = []
    for m in messages or ():
        parts: list[dict[str, Any]] = []
        if m.role == "tool":
            parts.append({"type": "tool_call_response", "id": m.tool_call_id, "response": m.text})
        elif m.text:
            parts.append({"type": "text", "content": m.text})
        parts += [
            {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
            for c in getattr(m, "tool_calls", ())
        ]
        shaped.append({"role": m.role, "parts": parts})
    return shaped


@dataclass(frozen=True, slots=True)
class Tracing:
    """How spans are made in this process. `enabled`: an SDK tracer provider is installed (else
    nothing is recorded and no context is read from the store for it); `capture_content`: the
    operator opted in to prompts, completions and tool arguments in spans
    (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT); off by default."""

    enabled: bool = False
    capture_content: bool = False

    @property
    def tracer(self) -> trace.Tracer:
        return trace.get_tracer("parley", __version__)

    # ------------------------------------------------------------------ turns

    def start_turn(
        self,
        *,
        session_id: str,
        agent: str,
        turn_id: str,
        agent_version: str | None,
        caller_context: Mapping[str, str] | None,
        resumed: bool,
    ) -> Span:
        """The `invoke_agent` span of one drive of a turn; the caller's stored context is its parent."""
        if not self.enabled:
            return trace.INVALID_SPAN
        parent = propagate.extract(dict(caller_context)) if caller_context else None
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": "parley",
            "gen_ai.agent.name": agent,
            "gen_ai.conversation.id": session_id,
            "parley.turn.id": turn_id,
            "parley.turn.resumed": resumed,
        }
        if agent_version is not None:
            attributes["gen_ai.agent.version"] = agent_version
        return self.tracer.start_span(
            f"invoke_agent {agent}", context=parent, kind=SpanKind.INTERNAL, attributes=attributes
        )

    @staticmethod
    def end_turn(span: Span, outcome: str, error: str | None = None) -> None:
        """`outcome`: the turn's end (answered, failed, cancelled...) or parked / released (this
        drive stopped, the turn goes on later)."""
        if not span.is_recording():
            return
        span.set_attribute("parley.turn.outcome", outcome)
        if outcome == "failed":
            span.set_attribute("error.type", "turn_failed")
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    # ------------------------------------------------------------------ model calls

    @contextmanager
    def chat(
        self, *, provider: str, model: str, session_id: str, instructions: str, messages: Any
    ) -> Iterator[Span]:
        if not self.enabled:
            yield trace.INVALID_SPAN
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER_NAMES.get(provider, provider),
            "gen_ai.request.model": model,
            "gen_ai.conversation.id": session_id,
        }
        if self.capture_content:
            attributes["gen_ai.system_instructions"] = _json([{"type": "text", "content": instructions}])
            attributes["gen_ai.input.messages"] = _json(_input_messages(messages))
        with self.tracer.start_as_current_span(
            f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            yield span

    def chat_answered(
        self,
        span: Span,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int,
        finish_reason: str,
        text: str,
        tool_calls: Any,
    ) -> None:
        if not span.is_recording():
            return
        span.set_attributes(
            {
                "gen_ai.response.model": model,
                "gen_ai.usage.input_tokens": input_tokens,
                "gen_ai.usage.output_tokens": output_tokens,
                "gen_ai.usage.cache_read.input_tokens": cached_tokens,
                "gen_ai.response.finish_reasons": (finish_reason,),
            }
        )
        if self.capture_content:
            parts: list[dict[str, Any]] = [{"type": "text", "content": text}] if text else []
            parts += [{"type": "tool_call", "name": c.name, "arguments": c.arguments} for c in tool_calls]
            output = [{"role": "assistant", "parts": parts, "finish_reason": finish_reason}]
            span.set_attribute("gen_ai.output.messages", _json(output))

    @staticmethod
    def retry(span: Span, attempt: int, error_type: str, pause_s: float) -> None:
        if span.is_recording():
            span.add_event(
                "parley.model.retry",
                {"parley.attempt": attempt, "error.type": error_type, "parley.retry_in_s": pause_s},
            )

    @staticmethod
    def failed(span: Span, error_type: str, message: str) -> None:
        if span.is_recording():
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR, message))

    # ------------------------------------------------------------------ tool calls

    @contextmanager
    def execute_tool(
        self,
        *,
        name: str,
        call_id: str,
        session_id: str,
        effect: str,
        server: str | None,
        idempotency_key: str | None,
        approved: bool,
        arguments: Any,
    ) -> Iterator[Span]:
        if not self.enabled:
            yield trace.INVALID_SPAN
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function" if server is None else "extension",
            "gen_ai.conversation.id": session_id,
            "parley.tool.effect": effect,
        }
        if server is not None:
            attributes["parley.tool.server"] = server
        if idempotency_key is not None:
            attributes["parley.tool.idempotency_key"] = idempotency_key
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = _json(arguments)
        with self.tracer.start_as_current_span(
            f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attributes
        ) as span:
            if approved:
                span.add_event("parley.approval.granted", {"gen_ai.tool.call.id": call_id})
            yield span

    def tool_ended(self, span: Span, status: str, result: Any) -> None:
        if not span.is_recording():
            return
        span.set_attribute("parley.tool.status", status)
        if status in ("failed", "outcome_unknown"):
            span.set_attribute("error.type", f"tool_{status}")
            span.set_status(Status(StatusCode.ERROR))
        if self.capture_content and result is not None:
            span.set_attribute("gen_ai.tool.call.result", _json(result))

    # ------------------------------------------------------------------ compaction and people

    @contextmanager
    def compaction(self, *, session_id: str, model: str) -> Iterator[Span]:
        if not self.enabled:
            yield trace.INVALID_SPAN
            return
        attributes = {"gen_ai.conversation.id": session_id, "gen_ai.request.model": model}
        with self.tracer.start_as_current_span("parley.compaction", attributes=attributes) as span:
            yield span

    @staticmethod
    def interrupt_raised(kind: str, interrupt_id: str, call_id: str) -> None:
        """An event on the turn's span: the turn parks until a person answers."""
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(
                f"parley.{kind}.requested",
                {"parley.interrupt.id": interrupt_id, "gen_ai.tool.call.id": call_id},
            )

    def interrupt_waited(
        self,
        *,
        kind: str,
        interrupt_id: str,
        session_id: str,
        raised_at_s: float,
        resolved_at_s: float,
        resolution: str,
        turn_context: Mapping[str, str] | None,
    ) -> None:
        """A span for the time an interrupt waited on a person, made when it is resolved: a child of
        the turn's caller context, linked to the request that resolved it (the current span)."""
        if not self.enabled:
            return
        decider = trace.get_current_span().get_span_context()
        links = [trace.Link(decider)] if decider.is_valid else []
        parent = propagate.extract(dict(turn_context)) if turn_context else None
        span = self.tracer.start_span(
            f"parley.await_{kind}",
            context=parent,
            links=links,
            start_time=int(raised_at_s * 1e9),
            attributes={
                "gen_ai.conversation.id": session_id,
                "parley.interrupt.id": interrupt_id,
                "parley.interrupt.kind": kind,
                "parley.interrupt.resolution": resolution,
            },
        )
        span.end(end_time=int(resolved_at_s * 1e9))
