"""stdio as a careless or hostile client meets it: a long line is read whole, a line over the
cap and a line that is not a message each get a JSON-RPC error (with the request's id when it
can be found), and the next request on the same pipe is answered."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support import TEST_DEADLINE_S, ServerProcess, write_config

pytestmark = pytest.mark.anyio

MAX_REQUEST_BYTES = 12 * 1024 * 1024
LONG_LINE_BYTES = 8 * 1024 * 1024  # under the cap, far above the SDK's default 4 MiB HTTP body
PARSE_ERROR, INVALID_REQUEST = -32700, -32600


class RawPipe:
    """JSON-RPC lines written to and read from the server's own pipes, no SDK in between."""

    def __init__(self, server: ServerProcess) -> None:
        self._server = server
        self._buffer = b""

    async def send(self, line: bytes) -> None:
        stdin = self._server.process.stdin
        assert stdin is not None
        with anyio.fail_after(TEST_DEADLINE_S):
            await stdin.send(line + b"\n")

    async def receive(self) -> dict[str, Any]:
        stdout = self._server.process.stdout
        assert stdout is not None
        with anyio.fail_after(TEST_DEADLINE_S):
            while b"\n" not in self._buffer:
                self._buffer += await stdout.receive()
        line, self._buffer = self._buffer.split(b"\n", 1)
        return dict(json.loads(line))

    async def ping(self, ident: int) -> None:
        await self.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": "ping"}).encode())
        assert await self.receive() == {"jsonrpc": "2.0", "id": ident, "result": {}}


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-stdio-test", "version": "0"},
    },
}


@pytest.fixture(scope="module")
async def pipe(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RawPipe]:
    config = write_config(tmp_path_factory.mktemp("stdio"), http={"max_request_bytes": MAX_REQUEST_BYTES})
    async with ServerProcess(config, name="stdio-lines") as server:
        raw = RawPipe(server)
        await raw.send(json.dumps(INITIALIZE).encode())
        assert "result" in await raw.receive()
        await raw.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        yield raw
        assert "Traceback" not in server.log(), server.log()


def _padded_ping(ident: int, size: int) -> bytes:
    head = b'{"jsonrpc": "2.0", "id": %d, "method": "ping", "params": {"_meta": {"pad": "' % ident
    tail = b'"}}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


async def test_a_long_line_under_the_cap_is_answered(pipe: RawPipe) -> None:
    await pipe.send(_padded_ping(7, LONG_LINE_BYTES))
    assert await pipe.receive() == {"jsonrpc": "2.0", "id": 7, "result": {}}
    await pipe.ping(8)


async def test_a_line_over_the_cap_gets_an_error_with_its_id_and_the_next_request_is_answered(
    pipe: RawPipe,
) -> None:
    await pipe.send(_padded_ping(9, MAX_REQUEST_BYTES + 1024))
    answer = await pipe.receive()
    assert answer["id"] == 9, answer
    assert answer["error"]["code"] == INVALID_REQUEST
    assert "max_request_bytes" in answer["error"]["message"], answer
    await pipe.ping(10)


async def test_an_oversized_line_with_its_id_at_the_end_still_gets_that_id(pipe: RawPipe) -> None:
    pad = b"y" * (MAX_REQUEST_BYTES + 1024)
    await pipe.send(
        b'{"jsonrpc": "2.0", "method": "ping", "params": {"_meta": {"pad": "' + pad + b'"}}, "id": "end"}'
    )
    answer = await pipe.receive()
    assert answer["id"] == "end" and answer["error"]["code"] == INVALID_REQUEST, answer
    await pipe.ping(11)


DEEP = b"[" * 300 + b"]" * 300
UNPARSABLE = {
    "deep-nesting": (
        b'{"jsonrpc": "2.0", "id": 21, "method": "ping", "params": {"_meta": {"x": %s}}}' % DEEP,
        21,
    ),
    "5000-digit-integer": (
        b'{"jsonrpc": "2.0", "id": 22, "method": "ping", "params": {"_meta": {"x": %s}}}' % (b"9" * 5000),
        22,
    ),
    "lone-surrogate": (
        b'{"jsonrpc": "2.0", "id": 23, "method": "ping", "params": {"_meta": {"x": "\\ud800"}}}',
        23,
    ),
    "two-messages-on-one-line": (
        b'{"jsonrpc": "2.0", "id": 24, "method": "ping"}{"jsonrpc": "2.0", "id": 25, "method": "ping"}',
        24,
    ),
    "not-json": (b"hello, server", None),
}


@pytest.mark.parametrize("line,ident", UNPARSABLE.values(), ids=list(UNPARSABLE))
async def test_a_line_that_cannot_be_parsed_gets_a_parse_error_and_the_server_keeps_serving(
    pipe: RawPipe, line: bytes, ident: int | None
) -> None:
    await pipe.send(line)
    answer = await pipe.receive()
    assert answer["id"] == ident, answer
    assert answer["error"]["code"] == PARSE_ERROR, answer
    await pipe.ping(30)


@pytest.mark.parametrize(
    "line",
    [b'[{"jsonrpc": "2.0", "id": 26, "method": "ping"}]', b'{"jsonrpc": "2.0", "id": 27}'],
    ids=["batch", "neither-request-nor-response"],
)
async def test_json_that_is_not_one_message_gets_invalid_request(pipe: RawPipe, line: bytes) -> None:
    await pipe.send(line)
    answer = await pipe.receive()
    assert answer["error"]["code"] == INVALID_REQUEST, answer
    assert answer["id"] == (27 if b"27" in line else None), answer
    await pipe.ping(31)


async def test_blank_lines_are_skipped_without_an_answer(pipe: RawPipe) -> None:
    await pipe.send(b"   ")
    await pipe.ping(32)


async def test_a_line_that_cannot_be_parsed_before_initialized_is_answered_after_the_handshake(
    tmp_path: Path,
) -> None:
    # A client reads the answer to its initialize first: an answer that overtook it was dropped
    # as one to a request it never made, and the parse error seemed lost.
    deep = b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"x": %s}}' % (b"[" * 5000 + b"]" * 5000)
    async with ServerProcess(write_config(tmp_path), name="early-line") as server:
        raw = RawPipe(server)
        await raw.send(json.dumps(INITIALIZE).encode() + b"\n" + deep)
        first, second = await raw.receive(), await raw.receive()
        log = server.log()
    assert first["id"] == 0 and "result" in first, first
    assert second["id"] == 5 and second["error"]["code"] == PARSE_ERROR, second
    assert "answered a line that is not a message with error -32700" in log
