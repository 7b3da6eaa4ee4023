"""Turning one received line into a JSON-RPC message, or into the error answer it deserves.

HTTP answers a body it cannot parse with -32700 and one that is not a JSON-RPC message with
an error too; over stdio such a line used to be dropped, and the client waited for an answer
until its own timeout. Each failure here becomes an error response carrying the request's id
whenever it can be recovered from the text, so the client's pending call ends at once.
"""

from __future__ import annotations

import json
import re

import pydantic_core
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

RequestId = int | str

# A JSON string, or one of the brackets that change the nesting depth.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]')
_ID_VALUE = re.compile(rb'\s*:\s*(-?\d{1,19}(?![\d.eE])|"(?:[^"\\]|\\.){0,1000}")')
# The id as the last member of the top-level object, for the tail of an oversized line.
_TRAILING_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,19}|"(?:[^"\\]|\\.){0,1000}")\s*\}\s*$')


def parse_line(data: bytes) -> JSONRPCMessage | JSONRPCError:
    """The message on `data`, or the error response to send back instead."""
    try:
        raw = pydantic_core.from_json(data)
    except ValueError as exc:
        return error_response(
            PARSE_ERROR,
            f"Parse error: {_first_line(exc)}; send exactly one JSON-RPC message per line",
            recover_id(data),
        )
    try:
        return jsonrpc_message_adapter.validate_python(raw, by_name=False)
    except ValidationError:
        if isinstance(raw, list):
            problem = "a batch (JSON array) is not supported; send one message per line"
        else:
            problem = "not a JSON-RPC 2.0 request, notification or response object"
        ident = raw.get("id") if isinstance(raw, dict) else None
        return error_response(INVALID_REQUEST, f"Invalid request: {problem}", _valid_id(ident))


def oversized_response(size: int, limit: int, head: bytes, tail: bytes) -> JSONRPCError:
    ident = recover_id(head)
    if ident is None:
        ident = _trailing_id(tail)
    return error_response(
        INVALID_REQUEST,
        f"Invalid request: the message is {size} bytes, over the limit of {limit} bytes "
        "(http.max_request_bytes in parley.yaml); send a smaller message or raise the limit",
        ident,
    )


def error_response(code: int, message: str, ident: RequestId | None) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=ident, error=ErrorData(code=code, message=message))


def recover_id(text: bytes) -> RequestId | None:
    """The "id" member of the top-level object in possibly broken or cut-off JSON text.

    Scans strings and brackets only (linear, no recursion), so it copes with text the parser
    refused: too deep, a huge number, a bad escape, or two objects on one line (the first wins).
    """
    depth = 0
    for token in _TOKEN.finditer(text):
        value = token.group()
        if value == b"[" and depth == 0:
            return None  # a batch: no one id to answer
        if value in (b"{", b"["):
            depth += 1
        elif value in (b"}", b"]"):
            depth -= 1
            if depth <= 0:
                return None
        elif depth == 1 and value == b'"id"':
            found = _ID_VALUE.match(text, token.end())
            if found is not None:
                return _decode_id(found.group(1))
    return None


def _trailing_id(tail: bytes) -> RequestId | None:
    found = _TRAILING_ID.search(tail)
    return _decode_id(found.group(1)) if found else None


def _decode_id(token: bytes) -> RequestId | None:
    try:
        return _valid_id(json.loads(token))
    except ValueError:
        return None


def _valid_id(value: object) -> RequestId | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    return value


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
