"""An idle keep-alive connection lives for http.keep_alive_timeout_s, and by default longer than
the clients' own idle limit, so a client never sends its next request on a connection parley is
closing (it got a reset, httpx's ReadError, instead of an answer). In process, over real TCP."""

from __future__ import annotations

import anyio
import httpx2
import pytest
from anyio.abc import SocketStream

from parley.config import HttpConfig
from parley.testing import parley_app
from tests.support import read_response, read_until_closed

pytestmark = pytest.mark.anyio

KEEP_ALIVE_S = 1.5
HEADER_READ_S = 0.5


def test_parley_keeps_an_idle_connection_longer_than_the_sdk_client_reuses_one() -> None:
    client_expiry = httpx2.Limits().keepalive_expiry
    assert client_expiry is not None
    assert HttpConfig().keep_alive_timeout_s > client_expiry


async def _health(stream: SocketStream, port: int) -> int:
    """One GET /healthz on `stream`, kept alive: its status, its whole answer read."""
    await stream.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port)
    return (await read_response(stream))[0]


async def test_an_idle_connection_serves_its_next_request_until_keep_alive_then_closes() -> None:
    config = {"http": {"keep_alive_timeout_s": KEEP_ALIVE_S, "header_read_timeout_s": HEADER_READ_S}}
    async with parley_app(config) as parley:
        port = int((await parley.http()).base_url.rsplit(":", 1)[1])
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            assert await _health(stream, port) == 200
            # Idle past the deadline for a request's head, within keep-alive: the connection is
            # still the client's (the head's deadline once closed it here).
            await anyio.sleep(2 * HEADER_READ_S)
            assert await _health(stream, port) == 200
            started = anyio.current_time()
            assert await read_until_closed(stream) == b""
            idle = anyio.current_time() - started
    # Closed once idle for keep-alive (never before), and closed at all (read_until_closed's deadline).
    assert idle > KEEP_ALIVE_S - 0.2, idle
