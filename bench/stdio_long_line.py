"""Reading one long stdio line: the old split (`buffer += chunk`, then split the whole buffer)
against parley's LineSplitter, and the end-to-end answer time of `parley serve`.

- In process: both readers are fed the same line (a padded `ping`) in 64 KiB chunks, the size
  parley reads from the pipe, and timed (best of 3 for the splitter; one run for the old split,
  which is quadratic and slow).
- End to end: `parley serve` over stdio with `http.max_request_bytes` above the largest size;
  after the handshake, the wall time from writing the line to reading its answer.

    .venv/bin/python bench/stdio_long_line.py [--sizes-mib 8,16,64] [--skip-old-above-mib 64]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import base_config, machine, write_config_files

from parley.server.line_reader import LineSplitter

CHUNK = 65536


def padded_ping(ident: int, size: int) -> bytes:
    head = b'{"jsonrpc": "2.0", "id": %d, "method": "ping", "params": {"_meta": {"pad": "' % ident
    tail = b'"}}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def old_split(data: bytes) -> int:
    """What parley/server/stdio.py did before: the whole buffer is copied and split per chunk."""
    buffer, count = b"", 0
    for start in range(0, len(data), CHUNK):
        buffer += data[start : start + CHUNK]
        *lines, buffer = buffer.split(b"\n")
        count += len(lines)
    return count


def new_split(data: bytes) -> int:
    splitter = LineSplitter(len(data) + 1)
    return sum(len(splitter.feed(data[start : start + CHUNK])) for start in range(0, len(data), CHUNK))


def timed(fn: Any, data: bytes, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        assert fn(data) == 1
        best = min(best, time.perf_counter() - t0)
    return round(best, 3)


def end_to_end(size: int, max_bytes: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        config = write_config_files(Path(tmp), base_config(http={"max_request_bytes": max_bytes}))
        command = [sys.executable, "-m", "parley", "serve", "--config", str(config), "--log-level", "WARNING"]
        with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tmp) as server:
            assert server.stdin is not None and server.stdout is not None
            init = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "b", "version": "0"},
                },
            }
            server.stdin.write(json.dumps(init).encode() + b"\n")
            server.stdin.flush()
            server.stdout.readline()
            line = padded_ping(1, size) + b"\n"
            t0 = time.perf_counter()
            server.stdin.write(line)
            server.stdin.flush()
            answer = json.loads(server.stdout.readline())
            elapsed = time.perf_counter() - t0
            assert answer == {"jsonrpc": "2.0", "id": 1, "result": {}}, answer
            server.stdin.close()
            server.wait(timeout=30)
    return round(elapsed, 3)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes-mib", default="8,16,64")
    parser.add_argument("--skip-old-above-mib", type=int, default=64)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes_mib.split(",")]
    rows = []
    for size_mib in sizes:
        data = padded_ping(1, size_mib * 1024 * 1024) + b"\n"
        row: dict[str, Any] = {"mib": size_mib, "line_splitter_s": timed(new_split, data, 3)}
        if size_mib <= args.skip_old_above_mib:
            row["old_split_s"] = timed(old_split, data, 1)
        row["parley_serve_answer_s"] = end_to_end(len(data) - 1, (max(sizes) + 1) * 1024 * 1024)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"rows": rows, "machine": machine("mcp")}))


if __name__ == "__main__":
    main()
