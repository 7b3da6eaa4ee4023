"""What the benchmarks in this folder share: starting and stopping `parley serve`, reading /proc,
percentiles, /healthz, the database files, and reporting a failed run. Not a benchmark itself.

The scripts are run as `.venv/bin/python bench/<name>.py`. Python puts the folder of the script
it runs first on `sys.path`, so they import this file as the sibling module `_common`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import shlex
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx2
import yaml
from anyio.abc import Process
from mcp import Client, StdioServerParameters

T = TypeVar("T")

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parent.parent
# The fixture MCP server of the tests, run from the repository (`cwd` REPO).
FIXTURE = [sys.executable, "-m", "tests.mcp_servers.fixture_server"]
STARTUP_TIMEOUT_S = 60.0
# SIGTERM drains for up to runtime.shutdown_grace_s (default 10 s); give it a margin.
STOP_TIMEOUT_S = 30.0

# ---------------------------------------------------------------------------------------- figures


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation): the smallest value with >= p% at or below it."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(values_ms: list[float]) -> dict[str, Any]:
    """p50, p95 and max in ms (floats), rounded to 0.01; None for each when there are no values."""
    if not values_ms:
        return {"p50_ms": None, "p95_ms": None, "max_ms": None}
    return {
        "p50_ms": round(percentile(values_ms, 50), 2),
        "p95_ms": round(percentile(values_ms, 95), 2),
        "max_ms": round(max(values_ms), 2),
    }


def mib(kib: int) -> float:
    return round(kib / 1024, 1)


def loadavg_1m() -> float:
    """The 1-minute load average: on a shared machine, other work competes for the same cores."""
    return round(os.getloadavg()[0], 2)


def machine(*extra: str) -> dict[str, Any]:
    """Where the run happened: the Python version and the usable cores (nproc), plus any of
    "sqlite" (its version), "mcp" (the SDK's version) and "pythonpath" (a snapshot of parley on
    PYTHONPATH comes before the editable install; see bench/README.md)."""
    known: dict[str, Callable[[], Any]] = {
        "sqlite": lambda: sqlite3.sqlite_version,
        "mcp": lambda: version("mcp"),
        "pythonpath": lambda: os.environ.get("PYTHONPATH"),
    }
    figures: dict[str, Any] = {"python": platform.python_version(), "nproc": len(os.sched_getaffinity(0))}
    figures.update({name: known[name]() for name in extra})
    return figures


def run_figures(
    started: float, load_before: float, *extra: str, clock: Callable[[], float] = time.perf_counter
) -> dict[str, Any]:
    """What closes a run's JSON line: its wall time since `started` (on `clock`), the load average
    before and now, and `machine(*extra)`."""
    return {
        "total_wall_s": round(clock() - started, 3),
        "loadavg_1m_before": load_before,
        "loadavg_1m_after": loadavg_1m(),
        **machine(*extra),
    }


# ---------------------------------------------------------------------------------------- options


def parse_ints(text: str) -> list[int]:
    """A comma-separated list of integers (for an argparse `type=`); ranges are the caller's."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None


def parse_level_list(text: str, maximum: int, example: str = "1,8,32") -> list[int]:
    """Levels as a comma-separated list of integers, each 1..maximum."""
    levels = parse_ints(text)
    if not levels or not all(1 <= level <= maximum for level in levels):
        raise argparse.ArgumentTypeError(f"levels must be 1..{maximum}, e.g. {example}")
    return levels


def add_limit_options(parser: argparse.ArgumentParser, deadline_s: float, call: str = "tool call") -> None:
    """--deadline (the whole run) and --call-timeout (one `call`), which bound every benchmark."""
    parser.add_argument("--deadline", type=float, default=deadline_s, help="seconds the whole run may take")
    parser.add_argument("--call-timeout", type=float, default=60.0, help=f"seconds one {call} may take")


def require_linux(parser: argparse.ArgumentParser, proc_file: str = "status") -> None:
    """Refuse to run without /proc/<pid>/<proc_file>, which the benchmark reads."""
    if not Path(f"/proc/self/{proc_file}").exists():
        parser.error(f"this benchmark reads /proc/<pid>/{proc_file} and needs Linux")


# ------------------------------------------------------------------------------------------ /proc


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds, from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) is in parentheses and may hold spaces; split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of the full line
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU time of this benchmark process (all its threads): the clients' side of the work."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def parent_pid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (KiB) and Threads of a process, from /proc/<pid>/status."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "Threads"):
            found[key] = int(value.split()[0])  # "  123456 kB" or "  7"
    return {"rss_kib": found["VmRSS"], "hwm_kib": found["VmHWM"], "threads": found["Threads"]}


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (resident now) and VmHWM (peak resident) of a process, in KiB, from /proc/<pid>/status."""
    status = proc_status(pid)
    return {"rss_kib": status["rss_kib"], "hwm_kib": status["hwm_kib"]}


# ------------------------------------------------------------------------------ files and database


def db_bytes(directory: Path) -> dict[str, int]:
    """Sizes of parley.db and its -wal file (0 when absent)."""
    sizes = {}
    for suffix, key in (("", "db_bytes"), ("-wal", "wal_bytes")):
        path = directory / f"parley.db{suffix}"
        sizes[key] = path.stat().st_size if path.exists() else 0
    return sizes


def connect_read_only(db: Path, timeout: float = 10, check_same_thread: bool = True) -> sqlite3.Connection:
    """A read-only connection (mode=ro: a benchmark never writes parley's database). Use it as
    `with ... as conn:` for a transaction, and close it."""
    return sqlite3.connect(
        f"file:{db}?mode=ro", uri=True, timeout=timeout, check_same_thread=check_same_thread
    )


def json_lines(path: Path) -> list[dict[str, Any]]:
    """One JSON object a line (e.g. the calls a fixture server logged); [] when the file is absent."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def base_config(**sections: Any) -> dict[str, Any]:
    """A parley.yaml with a fresh database next to it and the default runtime settings, plus
    `sections` (which may replace `runtime`)."""
    return {"storage": {"path": "parley.db"}, "runtime": {}, **sections}


def write_config_files(
    directory: Path,
    config: Mapping[str, Any],
    agents: Sequence[Mapping[str, Any]] = (),
    name: str = "parley.yaml",
) -> Path:
    """Write `config` to `directory/name` and each agent to `configs/agents/<its name>.yaml`."""
    path = directory / name
    path.write_text(yaml.safe_dump(dict(config)))
    if agents:
        folder = directory / "configs" / "agents"
        folder.mkdir(parents=True)
        for agent in agents:
            (folder / f"{agent['name']}.yaml").write_text(yaml.safe_dump(dict(agent)))
    return path


def fixture_over_stdio(calls_log: Path) -> dict[str, Any]:
    """An `mcp_servers:` entry that runs the tests' fixture server over stdio, logging its calls."""
    return {
        "command": FIXTURE[0],
        "args": FIXTURE[1:],
        "cwd": str(REPO),
        "env": {"FIXTURE_LOG": str(calls_log)},
    }


# ----------------------------------------------------------------------------- the server, HTTP


async def start_http_server(
    directory: Path,
    config: Path,
    log: Path,
    extra_env: Mapping[str, str] | None = None,
    drop_env: Iterable[str] = (),
) -> Process:
    """Spawn `parley serve --http` on 127.0.0.1, port 0, ourselves, so its pid is known; stdout
    and stderr go to a log file. `extra_env` is added to this process's environment and
    `drop_env` removed from it."""
    command = [sys.executable, "-m", "parley", "serve", "--config", str(config)]
    command += ["--http", "--host", HOST, "--port", "0", "--log-level", "INFO"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    env.pop("PARLEY_DB", None)  # the database is the one in parley.yaml
    env.pop("PARLEY_CONFIG", None)
    for name in drop_env:
        env.pop(name, None)
    with log.open("ab") as sink:
        return await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, cwd=directory, env=env
        )


@asynccontextmanager
async def http_server(directory: Path, config: Path, log: Path, **options: Any) -> AsyncIterator[Process]:
    """`start_http_server` (with its options), for the length of the block. A server still
    running when the block ends (a failure, the deadline) is killed: a benchmark never leaves one
    behind."""
    process = await start_http_server(directory, config, log, **options)
    try:
        yield process
    finally:
        if process.returncode is None:
            with anyio.CancelScope(shield=True):
                process.kill()
                await process.wait()


async def wait_for_url(process: Process, log: Path, poll_s: float = 0.02) -> str:
    """The URL from the server's "listening on http://HOST:PORT/mcp" log line (its stderr)."""
    with anyio.fail_after(STARTUP_TIMEOUT_S):
        while True:
            for line in (await anyio.Path(log).read_text(errors="replace")).splitlines():
                if "listening on http://" in line:
                    url = line.split("listening on ", 1)[1].strip()
                    if urlsplit(url).hostname != HOST:
                        raise RuntimeError(f"the server listens on {url}, not on {HOST}")
                    return url
            if process.returncode is not None:
                raise RuntimeError(f"the server exited during start-up with code {process.returncode}")
            await anyio.sleep(poll_s)


async def healthz(url: str) -> dict[str, Any]:
    """GET /healthz next to /mcp (loopback only, checked in wait_for_url)."""
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.get(url.removesuffix("/mcp") + "/healthz")
        response.raise_for_status()
        return dict(response.json())


async def stop_process(process: Process, timeout_s: float = STOP_TIMEOUT_S) -> tuple[int, float, bool]:
    """SIGTERM (unless it has exited), then wait; SIGKILL only if it does not exit within
    `timeout_s`. Returns (exit code, seconds from the signal to the exit, killed)."""
    started = time.perf_counter()
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with anyio.move_on_after(timeout_s):
            await process.wait()
    killed = process.returncode is None
    if killed:
        process.kill()
        await process.wait()
    assert process.returncode is not None
    return process.returncode, time.perf_counter() - started, killed


async def stop_server(process: Process) -> dict[str, Any]:
    """`stop_process` as figures: exit_code, stop_s, killed_after_sigterm."""
    exit_code, stop_s, killed = await stop_process(process)
    return {"exit_code": exit_code, "stop_s": round(stop_s, 3), "killed_after_sigterm": killed}


def sigterm_line(figures: Mapping[str, Any]) -> str:
    """How the server stopped, from `stop_server`'s figures."""
    killed = " (killed: no exit after SIGTERM)" if figures["killed_after_sigterm"] else ""
    return f"SIGTERM -> exit code {figures['exit_code']} after {figures['stop_s']:.3f} s{killed}"


# ---------------------------------------------------------------------------- the server, stdio


def stdio_server_parameters(
    directory: Path, config: Path, pid_file: Path, log: Path, env: Mapping[str, str] | None = None
) -> StdioServerParameters:
    """Spawn through `sh` so the server's pid is known: sh writes its own pid, then execs the
    server in place (same pid). The server's stderr goes to a log file, not to our output.
    `env` (default: only PYTHONUNBUFFERED=1) is what the server gets beyond the few safe
    variables (PATH, HOME...) the SDK adds."""
    serve = [sys.executable, "-m", "parley", "serve", "--config", str(config)]
    script = f"echo $$ > {shlex.quote(str(pid_file))}; exec {shlex.join(serve)} 2>> {shlex.quote(str(log))}"
    return StdioServerParameters(
        command="/bin/sh",
        args=["-c", script],
        env=_with_pythonpath(env if env is not None else {"PYTHONUNBUFFERED": "1"}),
        cwd=str(directory),
    )


def _with_pythonpath(env: Mapping[str, str]) -> dict[str, str]:
    """A PYTHONPATH of ours reaches the server too, so a snapshot of another revision put on it
    (`PYTHONPATH=/tmp/snap bench/<name>.py`) is what runs, not the installed checkout."""
    path = os.environ.get("PYTHONPATH")
    return {**env, "PYTHONPATH": path} if path else dict(env)


def read_server_pid(pid_file: Path) -> int:
    pid = int(pid_file.read_text().strip())
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if b"parley" not in cmdline or b"serve" not in cmdline:
        raise RuntimeError(f"pid {pid} from {pid_file} is not the parley server: {cmdline!r}")
    if parent_pid(pid) != os.getpid():
        raise RuntimeError(f"pid {pid} is not a child of this process")
    return pid


def parley_module(workdir: Path) -> str:
    """Which parley package a server started in `workdir` with this environment imports."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-c", "import parley; print(parley.__file__)"]
    out = subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return out.stdout.strip()


# ------------------------------------------------------------------------------------------- MCP


def checked(tool: str, result: Any) -> dict[str, Any]:
    """The structured content of a tool result; an error result raises."""
    text = result.content[0].text if result.content else ""
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"{tool} failed: {text}")
    return dict(result.structured_content)


async def call(client: Client, timeout_s: float, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments, read_timeout_seconds=timeout_s)
    return checked(tool, result)


# -------------------------------------------------------------------------------------- failures


def log_excerpt(path: Path, label: str) -> str:
    """The first logged error (often the cause) and the end of a log, under `--- <label> ...`."""
    if not path.exists():
        return f"(no {label})"
    text = path.read_text(errors="replace")
    first = text.find(" ERROR ")
    head = "" if first < 0 else f"--- {label} (first error) ---\n{text[first : first + 3000]}\n"
    return f"{head}--- {label} (tail) ---\n{text[-3000:]}"


def server_log_excerpt(workdir: Path) -> str:
    """`log_excerpt` of the server log `workdir/server.log`."""
    return log_excerpt(workdir / "server.log", "server log")


def log_counts(log: Path) -> dict[str, int]:
    """Lines of a server log that say something went wrong."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return {
        "error_lines": sum(" ERROR " in line for line in text.splitlines()),
        "warning_lines": sum(" WARNING " in line for line in text.splitlines()),
        "lost_lease_lines": text.count("lost the lease"),
        "traceback_lines": text.count("Traceback"),
    }


class Anomalies:
    """What was not as it should be: counted by phase, the first `keep` kept in full (with
    `context`, the symptom and, under `detail_key`, the detail); more than `limit` in all end the
    run."""

    def __init__(self, limit: int, keep: int = 50, detail_key: str = "detail") -> None:
        self.limit = limit
        self.keep = keep
        self.detail_key = detail_key
        self.count: Counter[str] = Counter()
        self.kept: list[dict[str, Any]] = []

    def add(self, phase: str, symptom: str, detail: Any = None, **context: Any) -> None:
        self.count[phase] += 1
        if len(self.kept) < self.keep:
            record = {"phase": phase, **context, "symptom": symptom}
            if detail is not None:
                record[self.detail_key] = detail
            self.kept.append(record)
        if sum(self.count.values()) > self.limit:
            raise RuntimeError(
                f"more than {self.limit} anomalies (--max-anomalies); the first: {self.kept[0]!r}"
            )


def describe(exc: BaseException) -> str:
    """The leaf errors of an exception group (a failed task), else the error itself."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions)
    return repr(exc)


async def _cancel_on_sigterm(scope: anyio.CancelScope, stopped: anyio.Event) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
        async for _ in signals:
            stopped.set()
            scope.cancel()
            return


def run_in_tempdir(
    run: Callable[[Path], Awaitable[T]], deadline_s: float, logs: Callable[[Path], str]
) -> T | None:
    """`run(workdir)` in a fresh temporary directory, bounded by `deadline_s` seconds. On failure
    it prints "benchmark failed: <why>" and `logs(workdir)` to stderr and returns None."""
    with tempfile.TemporaryDirectory(prefix="parley-bench-") as tmp:
        workdir = Path(tmp)

        async def bounded() -> T:
            with anyio.fail_after(deadline_s):
                async with anyio.create_task_group() as tasks:
                    # SIGTERM (a person stopping the run) cancels it like its deadline does, so
                    # the servers it started are stopped on the way out, not left running.
                    stopped = anyio.Event()
                    tasks.start_soon(_cancel_on_sigterm, tasks.cancel_scope, stopped)
                    result = await run(workdir)
                    tasks.cancel_scope.cancel()
                if stopped.is_set():
                    raise RuntimeError("stopped by SIGTERM")
                return result

        try:
            return anyio.run(bounded)
        except Exception as exc:
            reason = (
                f"the --deadline of {deadline_s} s passed" if isinstance(exc, TimeoutError) else describe(exc)
            )
            # Where it failed: a bare ReadError says nothing of which connection broke.
            where = "".join(traceback.format_exception(exc))[-4000:]
            print(f"benchmark failed: {reason}\n{where}\n{logs(workdir)}", file=sys.stderr)
            return None


def has_anomalies(result: Mapping[str, Any]) -> bool:
    """For `run_and_report`'s `failed`: the run recorded an anomaly."""
    return bool(result["anomaly_counts"])


def run_and_report(
    run: Callable[[Path], Awaitable[T]],
    deadline_s: float,
    logs: Callable[[Path], str],
    report: Callable[[T], None],
    failed: Callable[[T], bool] = lambda result: False,
) -> int:
    """`run_in_tempdir`, then `report` the result. The exit code: 1 when the run failed or
    `failed(result)` says so (it may print why), else 0."""
    result = run_in_tempdir(run, deadline_s, logs)
    if result is None:
        return 1
    report(result)
    return 1 if failed(result) else 0
