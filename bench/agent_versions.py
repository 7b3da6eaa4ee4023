"""What agent versions and live reload cost, in one process (no server, no MCP).

- Per turn: the driver finds the definition a turn runs on at every step (`AgentCatalog.for_turn`)
  and picks the version a new turn starts on (`for_new_turn`). Timed for the live version, for a
  version the process held before a reload, and for one read from a SQLite database (once per
  version per process).
- Per look: the watcher `stat`s parley.yaml and every agent file each `runtime.agent_reload_s`
  (`AgentReloader._look`). Timed with N agent files, and turned into CPU per hour of watching at
  the default interval (2 s) and at the tests' (0.1 s).
- Per reload: one file of N changed; reading and validating every file again on a worker thread
  and swapping the set (`AgentReloader.reload`).

    .venv/bin/python bench/agent_versions.py [--files 10,100,500] [--repeat 2000]

Prints readable lines, then one JSON line with every figure. Writes only in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import yaml
from _common import machine, parse_ints, percentile

from parley.config import AgentConfig, load_config
from parley.core.ids import new_session_id, new_turn_id
from parley.core.records import AgentVersionRecord, QueuedMessageRecord, SessionRecord
from parley.core.transitions import starting
from parley.runtime.agent_catalog import AgentCatalog
from parley.runtime.agent_reload import AgentReloader
from parley.runtime.session_steps import SessionSteps
from parley.storage.sqlite import open_sqlite_store


def agent_file(i: int, body: str) -> str:
    front = {
        "name": f"agent{i}",
        "description": f"Agent number {i}.",
        "tools": "ask_user, write_todos, Read, Bash",
        "model": "inherit",
        "limits": {"max_turns": 100},
    }
    return f"---\n{yaml.safe_dump(front)}---\n{body}\n" + "Follow the house rules.\n" * 20


def timed_us(fn: Any, repeat: int) -> dict[str, float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1000)
    return {"p50_us": round(percentile(samples, 50), 2), "p95_us": round(percentile(samples, 95), 2)}


async def timed_async_us(fn: Any, repeat: int) -> dict[str, float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        await fn()
        samples.append((time.perf_counter_ns() - start) / 1000)
    return {"p50_us": round(percentile(samples, 50), 2), "p95_us": round(percentile(samples, 95), 2)}


async def _store(store: Any, record: AgentVersionRecord) -> None:
    """Store `record` the way the driver does: with the first turn that runs on it."""
    now = time.time()
    sid = new_session_id()
    session = SessionRecord.new(sid, agent=record.agent, owner="bench", kind="chat", now=now)
    first = QueuedMessageRecord.new(sid, "hi", now=now)
    await store.create_session(starting(session, first), first, now)
    lease = (await store.try_acquire_leases([sid], "proc_bench", now, 30.0)).get(sid)
    assert lease is not None
    await SessionSteps(store).start_turn(sid, lease, new_turn_id(), now, record, store_version=True)


async def per_turn(directory: Path, repeat: int) -> dict[str, Any]:
    agent = AgentConfig(name="a", instructions="One.", tools=["ask_user"])
    edited = agent.model_copy(update={"instructions": "Two."})
    async with open_sqlite_store(directory / "versions.db") as store:
        catalog = AgentCatalog({"a": agent}, store)
        first, _ = catalog.for_new_turn("a", 1.0)
        assert first is not None
        figures: dict[str, Any] = {
            "for_new_turn": timed_us(lambda: catalog.for_new_turn("a", 1.0), repeat),
            "for_turn_live": await timed_async_us(lambda: catalog.for_turn("a", first.version), repeat),
        }
        catalog.replace({"a": edited})
        figures["for_turn_held_old_version"] = await timed_async_us(
            lambda: catalog.for_turn("a", first.version), repeat
        )
        # A process that never held the version reads the database's copy, once.
        await _store(store, first)
        reads = []
        for _ in range(min(repeat, 200)):
            fresh = AgentCatalog({"a": edited}, store)
            start = time.perf_counter_ns()
            found = await fresh.for_turn("a", first.version)
            reads.append((time.perf_counter_ns() - start) / 1000)
            assert found is not None and found.instructions == "One."
        figures["for_turn_from_sqlite_once"] = {
            "p50_us": round(percentile(reads, 50), 2),
            "p95_us": round(percentile(reads, 95), 2),
        }
    return figures


async def watch(directory: Path, count: int, repeat: int) -> dict[str, Any]:
    config_path = directory / "parley.yaml"
    config_path.write_text(yaml.safe_dump({"agents_dir": "agents", "storage": {"path": "p.db"}}))
    folder = directory / "agents"
    folder.mkdir()
    for i in range(count):
        (folder / f"agent{i}.md").write_text(agent_file(i, "Version one."))
    config = load_config(config_path, None)
    async with open_sqlite_store(directory / "p.db") as store:
        catalog = AgentCatalog(config.agents, store)
        reloader = AgentReloader(config_path, catalog, config.agent_files, {}, 2.0)
        looks = max(50, repeat // max(1, count // 10))
        cpu_before = time.process_time()
        look = timed_us(reloader._look, looks)
        cpu_per_look_s = (time.process_time() - cpu_before) / looks
        reloads = []
        for n in range(5):
            (folder / "agent0.md").write_text(agent_file(0, f"Version {n + 2}."))
            start = time.perf_counter()
            report = await reloader.reload()
            reloads.append((time.perf_counter() - start) * 1000)
            assert report.changed == ["agent0"], report
    return {
        "files": count,
        "look": look,
        "cpu_s_per_hour_at_2s": round(cpu_per_look_s * 3600 / 2.0, 3),
        "cpu_s_per_hour_at_0.1s": round(cpu_per_look_s * 3600 / 0.1, 2),
        "reload_ms": {"p50_ms": round(percentile(reloads, 50), 1), "max_ms": round(max(reloads), 1)},
    }


async def main(files: list[int], repeat: int) -> dict[str, Any]:
    result: dict[str, Any] = {"machine": machine("sqlite")}
    with tempfile.TemporaryDirectory() as tmp:
        result["per_turn"] = await per_turn(Path(tmp), repeat)
    result["watch"] = []
    for count in files:
        with tempfile.TemporaryDirectory() as tmp:
            result["watch"].append(await watch(Path(tmp), count, repeat))
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--files", type=parse_ints, default=[10, 100, 500], help="agent files, e.g. 10,100,500"
    )
    parser.add_argument("--repeat", type=int, default=2000, help="samples of each per-turn figure")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the reloads' notices are not what is measured
    figures = anyio.run(main, args.files, args.repeat)
    for name, value in figures["per_turn"].items():
        print(f"per turn  {name:28} p50 {value['p50_us']:8.2f} us  p95 {value['p95_us']:8.2f} us")
    for row in figures["watch"]:
        print(
            f"{row['files']:4} files: look p50 {row['look']['p50_us']:9.1f} us "
            f"({row['cpu_s_per_hour_at_2s']:.2f} s CPU/h at 2 s, {row['cpu_s_per_hour_at_0.1s']:.1f} s/h at 0.1 s); "
            f"reload after one edit p50 {row['reload_ms']['p50_ms']:.1f} ms"
        )
    print(json.dumps(figures))
