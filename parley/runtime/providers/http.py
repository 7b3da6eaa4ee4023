"""What the HTTP model providers share: posting a request and reading its answer, error mapping,
server-sent events, schema adaptation."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2

from parley.errors import ModelError
from parley.redaction import redact
from parley.runtime.model import ModelResponse
from parley.runtime.tracing import inject_headers

# Statuses a provider uses for "try again": rate limits, overload, server faults.
TRANSIENT_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
MAX_ERROR_TEXT = 500


def retry_after_s(response: httpx2.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


async def raise_for_status(provider: str, response: httpx2.Response) -> None:
    """Turn a refused request into a ModelError with the provider's own message (never the key)."""
    if response.status_code < 400:
        return
    body = (await response.aread()).decode("utf-8", errors="replace")
    message = body[:MAX_ERROR_TEXT]
    try:
        data = json.loads(body)
        error = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(error, dict):
            message = str(error.get("message") or error)[:MAX_ERROR_TEXT]
    except ValueError:
        pass
    transient = response.status_code in TRANSIENT_STATUSES
    lowered = message.lower()
    context_length = response.status_code in (400, 413) and any(
        marker in lowered
        for marker in ("prompt is too long", "context_length", "maximum context length", "too many tokens")
    )
    hint = ""
    if response.status_code in (401, 403):
        hint = " Check the API key named by the agent's model.api_key_env."
    raise ModelError(
        f"{provider} answered HTTP {response.status_code}: {message}.{hint}",
        transient=transient,
        retry_after_s=retry_after_s(response) if transient else None,
        context_length=context_length,
    )


def without_secrets(exc: ModelError, api_key: str | None) -> ModelError:
    """The same failure with the key and anything shaped like a credential removed from its text.

    Every model client passes each of its errors through here before it leaves the client, so a
    provider that repeats the key in an error never gets it into the log, the database or a
    tool result. The original exception is not chained: its text is what must not travel."""
    return ModelError(
        redact(str(exc), [api_key]),
        transient=exc.transient,
        retry_after_s=exc.retry_after_s,
        context_length=exc.context_length,
    )


def transport_error(provider: str, exc: Exception) -> ModelError:
    """Connection failures, timeouts and broken streams: retried as attempts of the step."""
    return ModelError(
        f"{provider} could not be reached or the stream broke: {type(exc).__name__}: {exc}", transient=True
    )


async def post_for_answer(
    http: httpx2.AsyncClient,
    provider: str,
    url: str,
    headers: dict[str, str],
    whole: Callable[[Any], ModelResponse],
    streamed: Callable[[httpx2.Response], Awaitable[ModelResponse]] | None,
    **send: Any,
) -> ModelResponse:
    """POST a model request (`send`: its json= or content=) and read the answer: `whole` parses a
    JSON body, `streamed` (when the request streams) reads the events. The turn's trace goes on at
    the provider (W3C traceparent); a refusal is raise_for_status's ModelError, and a connection
    or stream that fails is transport_error's."""
    inject_headers(headers)
    try:
        async with http.stream("POST", url, headers=headers, **send) as response:
            await raise_for_status(provider, response)
            if streamed is None:
                return whole(json.loads(await response.aread()))
            return await streamed(response)
    except ModelError:
        raise
    except (httpx2.TransportError, httpx2.StreamError) as exc:
        raise transport_error(provider, exc) from exc


async def sse_events(response: httpx2.Response) -> AsyncIterator[tuple[str | None, str]]:
    """(event name, data) pairs of a server-sent events stream."""
    event: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield event, "\n".join(data)
            event, data = None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    if data:
        yield event, "\n".join(data)


def object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Providers want a tool's input schema to be a plain object: fold a top-level
    oneOf/anyOf/allOf into one object of all the properties. The original schema stays the
    one arguments are validated against."""
    if schema.get("type") == "object" and not any(k in schema for k in ("oneOf", "anyOf", "allOf")):
        return schema
    properties: dict[str, Any] = dict(schema.get("properties", {}))
    for key in ("oneOf", "anyOf", "allOf"):
        for branch in schema.get(key, []) or []:
            if isinstance(branch, dict):
                properties.update(branch.get("properties", {}))
    adapted: dict[str, Any] = {"type": "object", "properties": properties}
    if schema.get("type") == "object" and "required" in schema:
        adapted["required"] = schema["required"]
    return adapted
