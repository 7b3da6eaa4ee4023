"""Turn latency and server CPU per turn with tracing off, on with a no-op exporter, and on with
OTLP export, measured end to end over MCP stdio (the same loop as turn_latency.py).

For each mode it starts `parley serve` as a subprocess on a fresh SQLite file (default runtime
settings) and drives ONE session of the built-in `demo` agent for N plain-text turns, each call
waiting for the turn's answer:

- `off`: no OTEL_* variable; the OpenTelemetry API only (what every install runs).
- `noop`: the SDK's TracerProvider with a BatchSpanProcessor whose exporter drops every batch,
  installed by a sitecustomize.py on the server's PYTHONPATH (parley records into a provider it
  finds installed): the cost of making and batching spans, without the network.
- `otlp`: OTEL_EXPORTER_OTLP_ENDPOINT at an OTLP/HTTP receiver in this process (loopback) that
  counts and drops what it is sent: the whole export path (protobuf encoding, HTTP).

Needs the `otel` extra (the SDK and the OTLP exporter). Prints readable lines, then one JSON
line with every figure.

    .venv/bin/python bench/tracing_overhead.py [--turns 200] [--rounds 2] [--modes off,noop,otlp]
    PYTHONPATH=/tmp/base .venv/bin/python bench/tracing_overhead.py --modes off   # an older tree
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
from _common import (
    add_limit_options,
    base_config,
    call,
    cpu_seconds,
    machine,
    percentile,
    read_server_pid,
    require_linux,
    stdio_server_parameters,
    write_config_files,
)
from mcp import Client

MODES = ("off", "noop", "otlp")

NOOP_SITECUSTOMIZE = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class _Drop(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


_provider = TracerProvider()
_provider.add_span_processor(BatchSpanProcessor(_Drop()))
trace.set_tracer_provider(_provider)
"""


class Receiver:
    """An OTLP/HTTP endpoint that answers 200 to every export and counts the bytes."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.requests += 1
                receiver.bytes += len(body)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"


def prepare(mode: str, workdir: Path, receiver: Receiver) -> tuple[Path, dict[str, str]]:
    """The mode's parley.yaml (fresh database, default runtime) and the server's environment."""
    workdir.mkdir(parents=True)
    config = write_config_files(workdir, base_config())
    env = {"PYTHONUNBUFFERED": "1"}
    if mode == "noop":
        site = workdir / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(NOOP_SITECUSTOMIZE)
        env["PYTHONPATH"] = str(site)
    elif mode == "otlp":
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    return config, env


async def run_mode(
    mode: str, turns: int, call_timeout_s: float, workdir: Path, receiver: Receiver
) -> dict[str, Any]:
    config, env = prepare(mode, workdir, receiver)
    pid_file, log = workdir / "server.pid", workdir / "server.log"
    params = stdio_server_parameters(workdir, config, pid_file, log, env)
    exported_before = receiver.bytes
    latencies_ms: list[float] = []
    async with Client(params) as client:
        pid = read_server_pid(pid_file)
        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        session_id = None
        for turn in range(1, turns + 1):
            t0 = time.perf_counter()
            if session_id is None:
                outcome = await call(client, call_timeout_s, "start_session", agent="demo", message="turn 1")
                session_id = outcome["session_id"]
            else:
                outcome = await call(
                    client, call_timeout_s, "send_message", session_id=session_id, message=f"turn {turn}"
                )
            latencies_ms.append((time.perf_counter() - t0) * 1000)
            if outcome.get("status") != "answered":
                raise RuntimeError(f"{mode}, turn {turn}: {outcome}")
        wall_s = time.perf_counter() - started
        cpu_s = cpu_seconds(pid) - cpu_before
    return {
        "mode": mode,
        "p50_ms": round(percentile(latencies_ms, 50), 2),
        "p95_ms": round(percentile(latencies_ms, 95), 2),
        "turns_wall_s": round(wall_s, 3),
        "server_cpu_ms_per_turn": round(cpu_s / turns * 1000, 3),
        "exported_bytes": receiver.bytes - exported_before if mode == "otlp" else 0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="turns per session (1..1000)")
    parser.add_argument("--rounds", type=int, default=2, help="times each mode is run, interleaved")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="which modes, comma separated (off alone also runs an older revision put on PYTHONPATH)",
    )
    add_limit_options(parser, 900.0)
    args = parser.parse_args()
    require_linux(parser, "stat")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes takes some of {', '.join(MODES)}")
    receiver = Receiver()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="parley-bench-") as tmp:

        async def bounded() -> None:
            with anyio.fail_after(args.deadline):
                for round_no in range(args.rounds):
                    for mode in modes:
                        workdir = Path(tmp) / f"{mode}-{round_no}"
                        results.append(await run_mode(mode, args.turns, args.call_timeout, workdir, receiver))

        try:
            anyio.run(bounded)
        except Exception as exc:
            logs = sorted(Path(tmp).glob("*/server.log"))
            tail = logs[-1].read_text(errors="replace")[-4000:] if logs else "(no server log)"
            print(f"benchmark failed: {exc!r}\n--- server log (tail) ---\n{tail}", file=sys.stderr)
            return 1
    print(f"parley tracing overhead: {args.turns} demo turns per run, {args.rounds} round(s), MCP stdio")
    for r in results:
        print(
            f"  {r['mode']:<5} p50 {r['p50_ms']:7.2f} ms  p95 {r['p95_ms']:7.2f} ms  "
            f"CPU {r['server_cpu_ms_per_turn']:7.3f} ms/turn  wall {r['turns_wall_s']:.3f} s  "
            f"exported {r['exported_bytes']} bytes"
        )
    print(
        json.dumps({"turns": args.turns, "rounds": args.rounds, "runs": results, **machine()}, sort_keys=True)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
