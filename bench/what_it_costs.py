"""What each of parley's guarantees costs per turn: parley with one of them taken away at a time,
beside the floor and the real thing, measured as side_by_side.py measures.

The variants (each on a fresh process and, where it has one, a fresh database):

- `floor`: bench/floor_server.py, the bare mcp-SDK server (see side_by_side.py);
- `parley`: parley as it ships (SQLite, `synchronous = normal`, streamed model calls);
- `parley-full-sync`: `storage.synchronous: full` (every commit synced: survives power loss);
- `parley-unstreamed`: the agent's model called with `stream: false` (one JSON body, as the floor
  calls it): no text reaches a caller before the answer is whole;
- `parley-on-tmpfs`: the same SQLite database (`synchronous = normal`) on tmpfs (/dev/shm), so
  no commit ever waits for a disk: what is left is the engine and SQLite's own work (the session,
  turn and step rules, the event log, leases, waiters, the MCP surface). Beside `parley`, it shows
  what the disk costs. (It replaced a run on an in-memory store that parley no longer has.)

Each variant: over stdio, one session of `--turns` text turns and `--tool-turns` one-tool turns
(p50 and server CPU per turn, process tree); over streamable HTTP, `--level` sessions at once,
`--http-turns` turns each (turns/s, server CPU per turn, RSS). The differences between rows are
what a guarantee costs; the figures and the command are in bench/README.md.

    .venv/bin/python bench/what_it_costs.py                  # ~2 min here
    .venv/bin/python bench/what_it_costs.py --variants floor,parley,parley-on-tmpfs
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from _common import add_limit_options, loadavg_1m, run_and_report, run_figures
from side_by_side import (
    MAX_TURNS,
    WINDOW,
    Target,
    fake_model,
    measure_http,
    measure_stdio,
    run_logs,
    write_parley_config,
)

VARIANTS = ("floor", "parley", "parley-full-sync", "parley-unstreamed", "parley-on-tmpfs")
# Where `parley-on-tmpfs` keeps its databases (a folder of its own, removed after the run).
TMPFS = Path("/dev/shm")


@dataclass
class Variant(Target):
    """A Target whose parley.yaml (and agents) are changed after they are written."""

    label: str = ""
    storage: dict[str, Any] = field(default_factory=dict)
    model_options: dict[str, Any] = field(default_factory=dict)

    def command(self, http: bool) -> list[str]:
        if self.name == "floor":
            return super().command(http)
        config = write_parley_config(self.workdir, self.model_url)
        data = yaml.safe_load(config.read_text())
        data["storage"] = {**data.get("storage", {}), **self.storage}
        config.write_text(yaml.safe_dump(data))
        for agent_file in (self.workdir / "configs" / "agents").glob("*.yaml"):
            agent = yaml.safe_load(agent_file.read_text())
            agent["model"]["options"] = {**agent["model"].get("options", {}), **self.model_options}
            agent_file.write_text(yaml.safe_dump(agent))
        return super().command(http)


def variant(
    label: str, workdir: Path, model_url: str, model_pid: int, transport: str, tmpfs: Path
) -> Variant:
    name = "floor" if label == "floor" else "parley"
    base = Variant(name, workdir / f"{label}-{transport}", model_url, model_pid, label=label)
    if label == "parley-full-sync":
        base.storage = {"synchronous": "full"}
    elif label == "parley-unstreamed":
        base.model_options = {"stream": False}
    elif label == "parley-on-tmpfs":
        base.storage = {"path": str(tmpfs / transport / "parley.db"), "synchronous": "normal"}
    return base


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    load_before = loadavg_1m()
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="parley-bench-", dir=TMPFS) as tmpfs:
        async with fake_model(workdir, 0.0) as (model_url, model_pid):
            for label in args.variants:
                print(f"  ... {label}", file=sys.stderr, flush=True)
                on = (model_url, model_pid)
                stdio = await measure_stdio(variant(label, workdir, *on, "stdio", Path(tmpfs)), args)
                http = await measure_http(variant(label, workdir, *on, "http", Path(tmpfs)), args)
                results[label] = {"stdio": stdio, "http": http}
    return {
        "options": {
            "turns": args.turns,
            "tool_turns": args.tool_turns,
            "level": args.level,
            "http_turns": args.http_turns,
        },
        "variants": results,
        **run_figures(started, load_before, "sqlite", "mcp"),
    }


ROWS: list[tuple[str, str, str, str]] = [
    # (heading, transport, key path, unit)
    ("text turn p50", "stdio", "text.p50_ms", "ms"),
    ("server CPU / text turn", "stdio", "cpu_ms_per_text_turn", "ms"),
    ("one-tool turn p50", "stdio", "tool.p50_ms", "ms"),
    ("server CPU / tool turn", "stdio", "cpu_ms_per_tool_turn", "ms"),
    ("turns/s, HTTP", "http", "levels.0.turns_per_s", "/s"),
    ("server CPU / HTTP turn", "http", "levels.0.cpu_ms_per_turn", "ms"),
    ("server RSS, HTTP", "http", "levels.0.rss_mib", "MiB"),
]


def pick(result: dict[str, Any], path: str) -> float | None:
    value: Any = result
    for part in path.split("."):
        if isinstance(value, list):
            value = value[int(part)] if int(part) < len(value) else None
        elif isinstance(value, dict):
            value = value.get(part)
        if value is None:
            return None
    return float(value)


def report(r: dict[str, Any]) -> None:
    o = r["options"]
    labels = list(r["variants"])
    print(
        f"what it costs: stdio {o['turns']} text + {o['tool_turns']} tool turns; "
        f"HTTP {o['level']} sessions x {o['http_turns']} turns"
    )
    print(f"  {'figure':28s}" + "".join(f"{label:>19s}" for label in labels))
    for heading, transport, path, unit in ROWS:
        cells = []
        for label in labels:
            value = pick(r["variants"][label][transport], path)
            cells.append(f"{'-' if value is None else round(value, 2):>19}")
        print(f"  {heading + ' (' + unit + ')':28s}" + "".join(cells))
    print(f"  load average {r['loadavg_1m_before']} -> {r['loadavg_1m_after']}, total {r['total_wall_s']} s")
    print(json.dumps(r, sort_keys=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--variants",
        type=lambda text: [v for v in text.split(",") if v],
        default=list(VARIANTS),
        help=f"some of {','.join(VARIANTS)} (default all)",
    )
    parser.add_argument("--turns", type=int, default=300, help="text turns over stdio (300)")
    parser.add_argument("--tool-turns", type=int, default=50, help="one-tool turns over stdio (50)")
    parser.add_argument("--level", type=int, default=32, help="HTTP sessions at once (32)")
    parser.add_argument("--http-turns", type=int, default=20, help="turns per HTTP session (20)")
    add_limit_options(parser, 1800.0)
    args = parser.parse_args()
    if set(args.variants) - set(VARIANTS) or not args.variants:
        parser.error(f"--variants takes some of {','.join(VARIANTS)}")
    if not WINDOW <= args.turns <= MAX_TURNS - 2 or not 1 <= args.tool_turns <= MAX_TURNS - 1:
        parser.error(f"--turns must be {WINDOW}..{MAX_TURNS - 2}, --tool-turns 1..{MAX_TURNS - 1}")
    if not 1 <= args.level <= 256 or not 1 <= args.http_turns <= MAX_TURNS:
        parser.error(f"--level must be 1..256, --http-turns 1..{MAX_TURNS}")
    args.concurrency = [args.level]  # what measure_http reads

    return run_and_report(lambda workdir: run(args, workdir), args.deadline, run_logs, report)


if __name__ == "__main__":
    sys.exit(main())
