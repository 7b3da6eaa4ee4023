"""OpenTelemetry at start: the SDK's tracer provider and OTLP exporter, when the standard `OTEL_*`
environment variables ask for traces, and the content-capture switch.

Nothing configured: nothing is imported beyond the OpenTelemetry API (a dependency of the mcp SDK
too), no exporter runs, nothing is logged, and spans cost a no-op call. The SDK and the exporter
are the `otel` extra (`pip install "parley-sessions[otel]"`); asking for traces without them is
reported once at start. The exporter reads its own settings (`OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_HEADERS`, ...); the provider reads the resource (`OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`) and the sampler (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping

from opentelemetry import trace

from parley.runtime.tracing import Tracing, is_installed

logger = logging.getLogger(__name__)

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# What turns traces on: an OTLP address, or an exporter named outright.
_ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
# The exporters parley knows by name (OTEL_TRACES_EXPORTER): OTLP over HTTP/protobuf, and the
# console (spans as JSON on stderr, beside the log: for a look by hand).
_EXPORTERS = ("otlp", "console", "none")


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def wants_traces(environ: Mapping[str, str]) -> bool:
    if _flag(environ.get("OTEL_SDK_DISABLED")):
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(exporter) or any(environ.get(name) for name in _ENDPOINT_ENVS)


def setup_tracing(environ: Mapping[str, str]) -> Tracing:
    """Install the SDK tracer provider if `environ` asks for traces; the Tracing settings of the
    process either way. Call once, before the server starts."""
    capture = _flag(environ.get(CAPTURE_CONTENT_ENV))
    if is_installed():
        # A provider set up before parley started (opentelemetry-instrument, a sitecustomize):
        # parley's spans go to it, and no second provider is made.
        return Tracing(enabled=True, capture_content=capture)
    if not wants_traces(environ):
        return Tracing(enabled=False, capture_content=capture)
    exporter_name = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if exporter_name not in _EXPORTERS:
        logger.warning(
            "OTEL_TRACES_EXPORTER=%s is not one parley knows (%s); no traces are exported",
            exporter_name,
            ", ".join(_EXPORTERS),
        )
        return Tracing(enabled=False, capture_content=capture)
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
            SpanExporter,
        )
    except ImportError:
        logger.warning(
            "OpenTelemetry is configured (OTEL_*) but its SDK is not installed; no traces are "
            "exported. Install it with: pip install 'parley-sessions[otel]'"
        )
        return Tracing(enabled=False, capture_content=capture)
    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter(out=sys.stderr)  # stdout is the stdio transport
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            logger.warning(
                "OTLP export is configured but opentelemetry-exporter-otlp-proto-http is not "
                "installed; no traces are exported. Install it with: pip install 'parley-sessions[otel]'"
            )
            return Tracing(enabled=False, capture_content=capture)
        exporter = OTLPSpanExporter()
    # OTEL_RESOURCE_ATTRIBUTES are read by Resource.create; OTEL_SERVICE_NAME wins over "parley".
    resource = Resource.create({SERVICE_NAME: environ.get("OTEL_SERVICE_NAME") or "parley"})
    provider = TracerProvider(resource=resource)
    processor = SimpleSpanProcessor(exporter) if exporter_name == "console" else BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    logger.info("OpenTelemetry traces go to the %s exporter", exporter_name)
    return Tracing(enabled=True, capture_content=capture)
