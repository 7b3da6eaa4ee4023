"""Turn latency with an outbound webhook whose receiver takes 10 s to answer, against none.

One parley in this process (parley.testing, the composition root of `parley serve`, SQLite in a
temporary folder) and one MCP client in memory; a chat session, `--turns` turns timed from
`send_message` to its answer. Run 1 configures no webhook. Run 2 subscribes `turn.ended` to a
receiver on loopback (Starlette on uvicorn, `allow_private`) that sleeps `--delay-s` before it
answers 200, so every turn's delivery is in flight (at most 16 at once) while later turns run.

    .venv/bin/python bench/webhook_slow_receiver.py [--turns 40] [--delay-s 10]

Prints readable lines, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import uvicorn
from _common import latency_summary, machine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from parley.testing import call, parley_app

SECRET_ENV = "PARLEY_BENCH_WEBHOOK_SECRET"


class SlowReceiver:
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.started = 0
        self.answered = 0
        self.port = 0

    async def hook(self, request: Request) -> Response:
        self.started += 1
        await request.body()
        await anyio.sleep(self.delay_s)
        self.answered += 1
        return Response(status_code=200)


@contextmanager
def _no_signals() -> Iterator[None]:
    yield


@asynccontextmanager
async def serving(receiver: SlowReceiver) -> AsyncIterator[None]:
    app = Starlette(routes=[Route("/hook", receiver.hook, methods=["POST"])])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    server.capture_signals = _no_signals  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        while not server.started:  # noqa: ASYNC110 - uvicorn exposes only a flag
            await anyio.sleep(0.02)
        receiver.port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield
        finally:
            server.should_exit = True


async def timed_turns(config: dict[str, Any], turns: int) -> list[float]:
    async with parley_app(config) as parley, parley.mcp() as client:
        sid = (await call(client, "start_session", agent="demo", message="warm up"))["session_id"]
        took = []
        for n in range(turns):
            began = time.perf_counter()
            await call(client, "send_message", session_id=sid, message=f"turn {n}")
            took.append((time.perf_counter() - began) * 1000)
        return took


async def run(turns: int, delay_s: float) -> dict[str, Any]:
    os.environ[SECRET_ENV] = "bench-secret"
    none = await timed_turns({}, turns)
    receiver = SlowReceiver(delay_s)
    async with serving(receiver):
        hooks = {
            "slow": {
                "url": f"http://127.0.0.1:{receiver.port}/hook",
                "events": ["turn.ended"],
                "secret_env": SECRET_ENV,
                "allow_private": True,
                "timeout_s": delay_s + 5,
            }
        }
        slow = await timed_turns({"webhooks": hooks}, turns)
        in_flight = receiver.started - receiver.answered
    return {
        "turns": turns,
        "delay_s": delay_s,
        "no_webhook": latency_summary(none),
        "slow_receiver": latency_summary(slow),
        "receiver_requests_started": receiver.started,
        "receiver_in_flight_at_end": in_flight,
        "machine": machine("sqlite"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--delay-s", type=float, default=10.0)
    args = parser.parse_args()
    figures = anyio.run(run, args.turns, args.delay_s)
    for name in ("no_webhook", "slow_receiver"):
        summary = figures[name]
        print(
            f"{name:>14}: p50 {summary['p50_ms']} ms, p95 {summary['p95_ms']} ms, max {summary['max_ms']} ms"
        )
    print(
        f"receiver: {figures['receiver_requests_started']} requests started, {figures['receiver_in_flight_at_end']} still in flight"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
