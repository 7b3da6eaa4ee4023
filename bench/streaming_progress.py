"""Streamed model text reaching a waiting MCP caller: progress notifications, characters, latency.

Runs a fake OpenAI-compatible provider (Chat Completions, streamed as server-sent events) with
uvicorn inside this process on 127.0.0.1, and starts `parley serve` as a subprocess (over stdio,
then over streamable HTTP) on a fresh SQLite file in a temporary directory, with default runtime
settings and one agent whose model is `provider: openai` with `base_url` pointing at the fake and
`api_key_env` naming a dummy variable passed only in the subprocess's environment.

Each turn is one `send_message` with a progress callback, waiting for the answer. The fake answers
with K text deltas (`--deltas`, default 200), one every `--paces` milliseconds (0 = as fast as it
can write), after an optional pause before the first delta (`--first-delays`). It measures:

- how many progress notifications the caller received, how many of them carried streamed text,
  how many characters of the response arrived through them, notifications per second, and the
  end-to-end turn time;
- the added latency from the fake sending its first delta to the caller receiving its first
  progress notification that carries text. The fake runs in this process, so both timestamps come
  from one clock (time.monotonic()). p50/p95 over `--turns` turns (default 30) per scenario.

It also reads the server's `text_delta` events from the database (read-only) to compare what the
server recorded with what the caller received. Prints readable lines, then one final JSON line.

    .venv/bin/python bench/streaming_progress.py [--turns 30] [--deltas 200] [--paces 5,0]
        [--first-delays 0,400] [--transports stdio,http] [--deadline 900]

The script talks only to 127.0.0.1 and to the subprocesses it starts, stops by itself, and is
bounded by --deadline (the whole run) and --call-timeout (each tool call). It needs Linux because
it reads /proc. PYTHONPATH, when set, is passed on to the server (to run a snapshot of the code);
the script prints where the server's `import parley` resolves.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from _common import (
    HOST,
    add_limit_options,
    base_config,
    call,
    checked,
    connect_read_only,
    cpu_seconds,
    http_server,
    loadavg_1m,
    log_excerpt,
    percentile,
    read_server_pid,
    require_linux,
    run_and_report,
    run_figures,
    stdio_server_parameters,
    stop_process,
    wait_for_url,
    write_config_files,
)
from mcp import Client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

AGENT = "streamer"
MODEL_NAME = "fake-stream"
# The agent names this variable; only the server subprocess gets it. Not a real key.
KEY_ENV = "PARLEY_BENCH_FAKE_KEY"
KEY_VALUE = "bench-dummy-key"
MAX_DELTAS = 10_000
MAX_TURNS = 500
TRANSPORTS = ("stdio", "http")
WAIT_SECONDS = 55  # the largest wait_seconds parley honours by default
# parley must reach the fake directly, never through a proxy from the environment.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def summary(values: list[float], digits: int = 2) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), digits),
        "p95": round(percentile(values, 95), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def response_pieces(deltas: int) -> list[str]:
    """The deltas of one response: unique 6-character tokens, so any piece of text can be placed."""
    return [f"t{i:04d} " for i in range(deltas)]


# ---------------------------------------------------------------------- the fake provider


@dataclass
class Stream:
    """What the fake did for one request (times from time.monotonic(), this process's clock)."""

    message: str
    received_at: float
    first_delta_at: float | None = None
    last_delta_at: float | None = None
    done_at: float | None = None


@dataclass
class FakeOpenAI:
    """OpenAI Chat Completions, streamed: K text deltas at a set pace, then a usage chunk, [DONE]."""

    pieces: list[str]
    pace_s: float = 0.0
    first_delay_s: float = 0.0
    streams: dict[str, Stream] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.completions, methods=["POST"])])

    def _check(self, request: Request, body: dict[str, Any]) -> str | None:
        if request.headers.get("authorization") != f"Bearer {KEY_VALUE}":
            return "the request did not carry the dummy key from api_key_env"
        if body.get("model") != MODEL_NAME:
            return f"model {body.get('model')!r}, expected {MODEL_NAME!r}"
        if body.get("stream") is not True:
            return "the request did not ask for a stream"
        messages = body.get("messages") or []
        if not messages or messages[-1].get("role") != "user":
            return "the last message is not the user's"
        return None

    async def completions(self, request: Request) -> Response:
        received_at = time.monotonic()
        body = await request.json()
        problem = self._check(request, body)
        if problem is not None:
            self.problems.append(problem)
            # A bad request fails the turn at once (no retry), so the run stops on it.
            error = {"error": {"type": "invalid_request_error", "message": f"benchmark fake: {problem}"}}
            return JSONResponse(error, status_code=400)
        record = Stream(str(body["messages"][-1]["content"]), received_at)
        self.streams[record.message] = record
        pieces, pace_s, first_delay_s = self.pieces, self.pace_s, self.first_delay_s

        async def stream() -> AsyncIterator[bytes]:
            if first_delay_s > 0:
                await anyio.sleep(first_delay_s)
            for i, piece in enumerate(pieces):
                if i and pace_s > 0:
                    await anyio.sleep(pace_s)
                now = time.monotonic()
                if record.first_delta_at is None:
                    record.first_delta_at = now
                record.last_delta_at = now
                yield _sse({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
            yield _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            usage = {"prompt_tokens": 40, "completion_tokens": len(pieces), "total_tokens": 40 + len(pieces)}
            yield _sse({"choices": [], "usage": usage})
            record.done_at = time.monotonic()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


@contextmanager
def _no_signals() -> Iterator[None]:
    # The benchmark process keeps its own signal handling.
    yield


@asynccontextmanager
async def serving_fake(fake: FakeOpenAI) -> AsyncIterator[FakeOpenAI]:
    """Serve the fake with uvicorn on 127.0.0.1 (a free port) inside this process's event loop."""
    server = uvicorn.Server(
        uvicorn.Config(fake.app(), host=HOST, port=0, log_level="warning", lifespan="off")
    )
    server.capture_signals = _no_signals  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(30):
            while not server.started:  # noqa: ASYNC110 - uvicorn exposes only a flag
                await anyio.sleep(0.02)
        fake.port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield fake
        finally:
            server.should_exit = True


# ---------------------------------------------------------------------- the parley server


def write_config(directory: Path, base_url: str) -> Path:
    """parley.yaml (fresh database, default runtime settings) and one agent on the fake provider."""
    agent = {
        "name": AGENT,
        "description": "Benchmark agent: an OpenAI-compatible fake that streams text.",
        "instructions": "You are a benchmark agent.",
        "model": {"provider": "openai", "name": MODEL_NAME, "base_url": base_url, "api_key_env": KEY_ENV},
    }
    return write_config_files(directory, base_config(), [agent])


def pythonpath() -> dict[str, str]:
    """PYTHONPATH, passed on to the server when set (to run it from a snapshot of the code)."""
    value = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": value} if value else {}


async def parley_location(directory: Path) -> str:
    """Where `import parley` resolves for a server started in `directory` with PYTHONPATH."""
    command = [sys.executable, "-c", "import parley; print(parley.__file__)"]
    env = {"PATH": os.environ.get("PATH", ""), **pythonpath()}
    done = await anyio.run_process(command, cwd=directory, env=env)
    return done.stdout.decode().strip()


def text_delta_events(db: Path, session_id: str) -> list[list[int]]:
    """Per turn of the session (in order), the sizes in characters of its `text_delta` events,
    read through a separate read-only connection (WAL: the server is not held up)."""
    with connect_read_only(db) as conn:
        rows = conn.execute(
            "SELECT turn_id, data FROM events WHERE session_id = ? AND kind = 'text_delta' ORDER BY seq",
            (session_id,),
        ).fetchall()
    conn.close()
    by_turn: dict[str, list[int]] = {}
    for turn_id, data in rows:
        by_turn.setdefault(turn_id, []).append(len(json.loads(data).get("text") or ""))
    return list(by_turn.values())


# ---------------------------------------------------------------------- one turn, one scenario


def analyse_turn(
    received: list[tuple[float, str]], full: str, stream: Stream, called_at: float, answered_at: float
) -> dict[str, Any]:
    """Place every progress message against the response text.

    The tokens of the response are unique, so a message that is found in the text at or after
    the characters already received is streamed text (a `text_delta`); anything it skipped over
    was lost. A message that repeats text already received is the `model_step` summary (the
    first characters of the answer); anything else is a status line ("turn started"...).
    """
    position = lost = text_chars = 0
    text_times: list[float] = []
    first_text_chars = 0
    repeats = 0
    status: list[str] = []
    for at, message in received:
        found = full.find(message, position) if message else -1
        if found >= 0:
            if not text_times:
                first_text_chars = len(message)
            lost += found - position
            position = found + len(message)
            text_chars += len(message)
            text_times.append(at)
        elif message and full.startswith(message):
            repeats += 1
        else:
            status.append(message)
    lost += len(full) - position
    assert stream.first_delta_at is not None and stream.last_delta_at is not None
    assert stream.done_at is not None
    return {
        "notifications": len(received),
        "text_notifications": len(text_times),
        "text_chars": text_chars,
        "lost_chars": lost,
        "complete": lost == 0 and text_chars == len(full),
        "repeats": repeats,
        "status": status,
        "first_text_chars": first_text_chars,
        "turn_s": answered_at - called_at,
        "request_after_s": stream.received_at - called_at,
        "stream_s": stream.done_at - stream.first_delta_at,
        "answer_after_done_s": answered_at - stream.done_at,
        # None when no text arrived through progress at all.
        "first_text_latency_s": text_times[0] - stream.first_delta_at if text_times else None,
        "last_text_lag_s": text_times[-1] - stream.last_delta_at if text_times else None,
    }


async def run_turn(
    client: Client, fake: FakeOpenAI, session_id: str, prompt: str, call_timeout_s: float
) -> dict[str, Any]:
    received: list[tuple[float, str]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        received.append((time.monotonic(), message or ""))

    called_at = time.monotonic()
    result = await client.call_tool(
        "send_message",
        {"session_id": session_id, "message": prompt, "wait_seconds": WAIT_SECONDS},
        read_timeout_seconds=call_timeout_s,
        progress_callback=on_progress,
    )
    answered_at = time.monotonic()
    outcome = checked("send_message", result)
    full = "".join(fake.pieces)
    if outcome.get("session_id") != session_id or outcome.get("status") != "answered":
        raise RuntimeError(
            f"{prompt!r}: status {outcome.get('status')!r}, error {outcome.get('error')!r},"
            f" fake's problems {fake.problems!r}"
        )
    if outcome.get("answer") != full:
        raise RuntimeError(f"{prompt!r}: the answer is not the streamed text: {outcome.get('answer')!r:.200}")
    stream = fake.streams.pop(prompt, None)
    if stream is None:
        raise RuntimeError(f"{prompt!r}: the fake received no request for this message")
    return analyse_turn(received, full, stream, called_at, answered_at)


async def run_scenario(
    client: Client,
    fake: FakeOpenAI,
    transport: str,
    pid: int,
    db: Path,
    pace_ms: float,
    first_delay_ms: float,
    turns: int,
    warmup: int,
    call_timeout_s: float,
) -> dict[str, Any]:
    """One session: `warmup` turns that are not counted, then `turns` measured turns."""
    fake.pace_s, fake.first_delay_s = pace_ms / 1000, first_delay_ms / 1000
    outcome = await call(client, call_timeout_s, "start_session", agent=AGENT)
    if outcome.get("status") != "idle" or not outcome.get("session_id"):
        raise RuntimeError(f"start_session without a message: unexpected outcome {outcome!r}")
    session_id = str(outcome["session_id"])
    label = f"{transport}, pace {pace_ms:g} ms, first delay {first_delay_ms:g} ms"
    for k in range(1, warmup + 1):
        await run_turn(client, fake, session_id, f"{label}: warm-up {k}", call_timeout_s)
    measured: list[dict[str, Any]] = []
    cpu_before = cpu_seconds(pid)
    for k in range(1, turns + 1):
        measured.append(await run_turn(client, fake, session_id, f"{label}: turn {k}", call_timeout_s))
    server_cpu_s = cpu_seconds(pid) - cpu_before
    events = text_delta_events(db, session_id)[warmup:]
    if len(events) != turns:
        raise RuntimeError(f"{label}: text_delta events for {len(events)} turns, expected {turns}")
    return summarise(label, transport, pace_ms, first_delay_ms, measured, events, server_cpu_s, fake.pieces)


def summarise(
    label: str,
    transport: str,
    pace_ms: float,
    first_delay_ms: float,
    turns: list[dict[str, Any]],
    events: list[list[int]],
    server_cpu_s: float,
    pieces: list[str],
) -> dict[str, Any]:
    n = len(turns)
    deltas, chars = len(pieces), len("".join(pieces))
    turn_time_s = sum(t["turn_s"] for t in turns)
    notifications = sum(t["notifications"] for t in turns)
    text_notifications = sum(t["text_notifications"] for t in turns)
    event_counts = [len(e) for e in events]
    event_sizes = [size for e in events for size in e]
    first = [t["first_text_latency_s"] * 1000 for t in turns if t["first_text_latency_s"] is not None]
    last = [t["last_text_lag_s"] * 1000 for t in turns if t["last_text_lag_s"] is not None]
    status_lines = sorted({line for t in turns for line in t["status"]})
    return {
        "label": label,
        "transport": transport,
        "pace_ms": pace_ms,
        "first_delay_ms": first_delay_ms,
        "turns": n,
        "deltas_per_response": deltas,
        "chars_per_response": chars,
        "notifications_per_turn": summary([t["notifications"] for t in turns], 1),
        "text_notifications_per_turn": summary([t["text_notifications"] for t in turns], 1),
        "text_delta_events_per_turn": summary([float(c) for c in event_counts], 1),
        "text_delta_events_total": sum(event_counts),
        "text_notifications_total": text_notifications,
        "text_delta_event_chars": summary([float(s) for s in event_sizes], 0),
        "text_delta_events_over_300_chars": sum(1 for s in event_sizes if s > 300),
        "text_chars_per_turn": summary([t["text_chars"] for t in turns], 0),
        "text_chars_share": round(sum(t["text_chars"] for t in turns) / (chars * n), 4),
        "lost_chars_total": sum(t["lost_chars"] for t in turns),
        "complete_turns": sum(1 for t in turns if t["complete"]),
        "turns_without_text_progress": n - len(first),
        "repeat_messages_per_turn": summary([t["repeats"] for t in turns], 1),
        "status_lines": status_lines,
        "notifications_per_s": round(notifications / turn_time_s, 2),
        "text_notifications_per_s": round(text_notifications / turn_time_s, 2),
        "turn_ms": summary([t["turn_s"] * 1000 for t in turns]),
        "request_after_ms": summary([t["request_after_s"] * 1000 for t in turns]),
        "stream_ms": summary([t["stream_s"] * 1000 for t in turns]),
        "answer_after_done_ms": summary([t["answer_after_done_s"] * 1000 for t in turns]),
        "first_text_latency_ms": summary(first) if first else None,
        "first_text_chars": summary([t["first_text_chars"] for t in turns], 0),
        "last_text_lag_ms": summary(last) if last else None,
        "server_cpu_ms_per_turn": round(server_cpu_s / n * 1000, 1),
    }


# ---------------------------------------------------------------------- the run


async def run_transport(
    transport: str, fake: FakeOpenAI, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    directory = workdir / transport
    directory.mkdir()
    config = write_config(directory, fake.base_url)
    log, db = directory / "server.log", directory / "parley.db"
    scenarios = [(pace, delay) for delay in args.first_delays for pace in args.paces]
    location = await parley_location(directory)
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    if transport == "stdio":
        pid_file = directory / "server.pid"
        # The SDK adds only a few safe variables (PATH, HOME...) to the server's environment.
        env = {"PYTHONUNBUFFERED": "1", KEY_ENV: KEY_VALUE, **pythonpath()}
        async with Client(stdio_server_parameters(directory, config, pid_file, log, env)) as client:
            startup_s = time.monotonic() - started
            pid = read_server_pid(pid_file)
            for pace, delay in scenarios:
                results.append(await scenario(client, fake, transport, pid, db, pace, delay, args))
        exit_code: int | None = None
        killed = False
    else:
        async with http_server(
            directory, config, log, extra_env={KEY_ENV: KEY_VALUE}, drop_env=PROXY_VARIABLES
        ) as process:
            url = await wait_for_url(process, log)
            async with Client(url) as client:
                startup_s = time.monotonic() - started
                for pace, delay in scenarios:
                    results.append(
                        await scenario(client, fake, transport, process.pid, db, pace, delay, args)
                    )
            exit_code, _, killed = await stop_process(process)
    return {
        "transport": transport,
        "parley_imported_from": location,
        "startup_s": round(startup_s, 3),
        "scenarios": results,
        "exit_code": exit_code,
        "killed_after_sigterm": killed,
    }


async def scenario(
    client: Client,
    fake: FakeOpenAI,
    transport: str,
    pid: int,
    db: Path,
    pace: float,
    delay: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    result = await run_scenario(
        client, fake, transport, pid, db, pace, delay, args.turns, args.warmup, args.call_timeout
    )
    print_scenario(result)
    return result


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    load_before = loadavg_1m()
    started = time.monotonic()
    fake = FakeOpenAI(response_pieces(args.deltas))
    transports = []
    async with serving_fake(fake):
        print(f"fake OpenAI-compatible provider at {fake.base_url} (in this process)", flush=True)
        for transport in args.transports:
            transports.append(await run_transport(transport, fake, args, workdir))
    return {
        "agent": AGENT,
        "deltas": args.deltas,
        "turns": args.turns,
        "warmup_turns": args.warmup,
        "paces_ms": args.paces,
        "first_delays_ms": args.first_delays,
        "transports": transports,
        "fake_problems": fake.problems,
        **run_figures(started, load_before, "sqlite", "mcp", "pythonpath", clock=time.monotonic),
    }


# ---------------------------------------------------------------------- output


def _range(s: dict[str, float], unit: str = "") -> str:
    return f"p50 {s['p50']:g}{unit}  p95 {s['p95']:g}{unit}  min {s['min']:g}{unit}  max {s['max']:g}{unit}"


def print_scenario(r: dict[str, Any]) -> None:
    print(
        f"  [{r['label']}] {r['turns']} turns, {r['deltas_per_response']} deltas = {r['chars_per_response']} chars each"
    )
    print(
        f"      progress notifications per turn   {_range(r['notifications_per_turn'])}"
        f"   ({r['notifications_per_s']:.2f}/s of turn time)"
    )
    print(
        f"      ... carrying streamed text        {_range(r['text_notifications_per_turn'])}"
        f"   ({r['text_notifications_per_s']:.2f}/s of turn time)"
    )
    print(
        f"      text_delta events (server)        {_range(r['text_delta_events_per_turn'])}"
        f"   sizes {_range(r['text_delta_event_chars'])}   over 300 chars: {r['text_delta_events_over_300_chars']}"
    )
    print(
        f"      chars through progress per turn   {_range(r['text_chars_per_turn'])}"
        f"   = {r['text_chars_share']:.1%} of the text; complete turns {r['complete_turns']}/{r['turns']}"
    )
    first = r["first_text_latency_ms"]
    first_text = "no text through progress" if first is None else _range(first, " ms")
    print(f"      first delta -> first text progress  {first_text}")
    print(f"      chars in the first text progress  {_range(r['first_text_chars'])}")
    last = r["last_text_lag_ms"]
    print(f"      last delta -> last text progress  {'-' if last is None else _range(last, ' ms')}")
    print(f"      turn time (call -> answer)        {_range(r['turn_ms'], ' ms')}")
    print(
        f"      call -> request at the fake       {_range(r['request_after_ms'], ' ms')}\n"
        f"      stream at the fake (first delta -> [DONE])  {_range(r['stream_ms'], ' ms')}\n"
        f"      [DONE] at the fake -> answer at the caller  {_range(r['answer_after_done_ms'], ' ms')}"
    )
    print(
        f"      other progress lines {r['status_lines']}   repeats of the text per turn"
        f" {_range(r['repeat_messages_per_turn'])}   server CPU {r['server_cpu_ms_per_turn']} ms/turn",
        flush=True,
    )


def report(r: dict[str, Any]) -> None:
    print(
        f"parley streaming progress: {r['deltas']} deltas per response, {r['turns']} turns per scenario"
        f" (+{r['warmup_turns']} warm-up)"
    )
    for t in r["transports"]:
        stop = "" if t["exit_code"] is None else f", SIGTERM -> exit code {t['exit_code']}"
        killed = " (killed: no exit after SIGTERM)" if t["killed_after_sigterm"] else ""
        print(f"  {t['transport']}: start-up + handshake {t['startup_s']:.3f} s{stop}{killed}")
        print(f"    parley imported from {t['parley_imported_from']}")
        for s in t["scenarios"]:
            first = s["first_text_latency_ms"]
            first_text = "-" if first is None else f"{first['p50']:.1f} / {first['p95']:.1f} ms"
            print(
                f"    pace {s['pace_ms']:>4g} ms, first delay {s['first_delay_ms']:>4g} ms:"
                f"  first text p50/p95 {first_text}"
                f"   text notif/turn {s['text_notifications_per_turn']['p50']:g}"
                f"   chars {s['text_chars_share']:.1%}"
                f"   turn p50 {s['turn_ms']['p50']:.1f} ms"
            )
    print(f"  total wall time {r['total_wall_s']:.3f} s   machine nproc {r['nproc']}, Python {r['python']}")
    print(f"  1-minute load average before {r['loadavg_1m_before']}, after {r['loadavg_1m_after']}")
    print(json.dumps(r, sort_keys=True))


def server_logs_excerpt(workdir: Path) -> str:
    """Each server's first logged error (often the cause) and the end of its log."""
    parts = [
        log_excerpt(log, f"{log.parent.name} server log") for log in sorted(workdir.glob("*/server.log"))
    ]
    return "\n".join(parts) or "(no server log)"


def parse_numbers(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or not all(0 <= v <= 10_000 for v in values):
        raise argparse.ArgumentTypeError("values must be 0..10000 milliseconds, e.g. 5,0")
    return values


def parse_transports(text: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    if not values or not all(v in TRANSPORTS for v in values):
        raise argparse.ArgumentTypeError(f"transports are {', '.join(TRANSPORTS)}, e.g. stdio,http")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30, help=f"measured turns per scenario (1..{MAX_TURNS})")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted turns at the start of each scenario")
    parser.add_argument("--deltas", type=int, default=200, help=f"text deltas per response (1..{MAX_DELTAS})")
    parser.add_argument(
        "--paces", type=parse_numbers, default=[5.0, 0.0], help="ms between deltas, 0 = no pause (5,0)"
    )
    parser.add_argument(
        "--first-delays",
        type=parse_numbers,
        default=[0.0, 400.0],
        help="ms the fake waits before its first delta (0,400)",
    )
    parser.add_argument(
        "--transports", type=parse_transports, default=list(TRANSPORTS), help="stdio,http (both)"
    )
    add_limit_options(parser, 900.0)
    args = parser.parse_args()
    if not 1 <= args.turns <= MAX_TURNS:
        parser.error(f"--turns must be 1..{MAX_TURNS}")
    if not 0 <= args.warmup <= 10:
        parser.error("--warmup must be 0..10")
    if not 1 <= args.deltas <= MAX_DELTAS:
        parser.error(f"--deltas must be 1..{MAX_DELTAS}")
    require_linux(parser, "stat")

    return run_and_report(lambda workdir: run(args, workdir), args.deadline, server_logs_excerpt, report)


if __name__ == "__main__":
    sys.exit(main())
