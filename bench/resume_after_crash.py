"""Resuming many sessions left mid-turn by a crash: start-up, time to first and last answer, RSS, CPU.

For each value of the model-call cap (`runtime.max_concurrent_model_calls`; by default 16, the
default, left out of parley.yaml, then 64) the script runs one crash and restart on a fresh
SQLite file in a temporary directory. Both processes run with `runtime.lease_ttl_s: 2`
(`--lease-ttl`), so that the leases of the killed process expire quickly.

- load: it spawns `parley serve --http --port 0` itself (so the pid is known) with one model-call
  slot (`max_concurrent_model_calls: 1`). A blocker session, `/sleep 3600`, takes that slot. Then
  a few concurrent mcp SDK clients (`--clients`) start N sessions (`--sessions`), each with the
  message `/sleep S` + `resume me <i>` (`--sleep`) and `wait_seconds=0`. Every call returns at
  once, and every turn waits for the slot, so the loading process answers none of them;
- crash: the blocker is closed (`close_session`), and the server gets SIGKILL at once. The
  script reads the database (read-only) to count the sessions left unfinished (status
  `running`), their phase, their leases, and the turns already answered;
- resume: a new server, with the cap under test, starts on the same database. The script
  measures the time from spawning it to its "listening on" line, then polls the database
  read-only with sqlite3 (`SELECT COUNT(*) FROM turns WHERE status = 'answered'`, and the leases
  the new process holds) until every unfinished session is answered. First and last answer
  come from the turns' `ended_at` (the server's clock) and from the polls. It samples the
  server's VmRSS at every poll and reads its CPU time (utime+stime, /proc/<pid>/stat) at the end;
- stop and check: SIGTERM and the exit code, then the database (read-only): every session must
  be idle with exactly one turn, answered `You said: resume me <i> (message 1 of this session)`
  after exactly one committed model step, and the blocker closed with its turn cancelled.

Prints readable lines, then one final JSON line with every figure.

    .venv/bin/python bench/resume_after_crash.py [--sessions 1000] [--sleep 0.05] [--caps 16,64]

The script talks only to 127.0.0.1 and to the subprocesses it starts, stops by itself, and is
bounded by --deadline (the whole run), --call-timeout (each tool call) and --stall-timeout (no
new answer for that long ends the wait and reports the sessions that never resumed). It never
leaves a server running.
"""

from __future__ import annotations

import argparse
import json
import signal
import sqlite3
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from _common import (
    HOST,
    STARTUP_TIMEOUT_S,
    add_limit_options,
    base_config,
    call,
    connect_read_only,
    cpu_seconds,
    healthz,
    http_server,
    loadavg_1m,
    log_counts,
    log_excerpt,
    machine,
    memory_kib,
    mib,
    own_cpu_seconds,
    parley_module,
    parse_ints,
    require_linux,
    run_and_report,
    sigterm_line,
    stop_server,
    wait_for_url,
    write_config_files,
)
from anyio.abc import Process
from mcp import Client

AGENT = "demo"
DEFAULT_CAP = 16  # runtime.max_concurrent_model_calls when parley.yaml leaves it out
MAX_SESSIONS = 20_000
MAX_SLEEP_S = 3600.0  # the demo model's limit for /sleep
# The loading process gets one model-call slot, and a blocker session holds it (its model call
# sleeps this long) while the N sessions are started, so that the loading process answers none
# of them. The blocker is closed just before the SIGKILL and is not resumed.
LOAD_CAP = 1
BLOCKER_SLEEP_S = 3600
BLOCKER_MESSAGE = f"/sleep {BLOCKER_SLEEP_S}\nblocker"


def write_config(directory: Path, name: str, cap: int, lease_ttl_s: float) -> Path:
    """A parley.yaml: the database next to it, short leases, and the cap (left out when default)."""
    runtime: dict[str, Any] = {"lease_ttl_s": lease_ttl_s}
    if cap != DEFAULT_CAP:
        runtime["max_concurrent_model_calls"] = cap
    return write_config_files(directory, base_config(runtime=runtime), name=name)


def message_text(index: int, sleep_s: float) -> str:
    return f"/sleep {sleep_s:g}\nresume me {index}"


def expected_answer(index: int) -> str:
    return f"You said: resume me {index} (message 1 of this session)"


def query(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """One read-only query (mode=ro: the benchmark never writes the database)."""
    connection = connect_read_only(db)
    try:
        return list(connection.execute(sql, params).fetchall())
    finally:
        connection.close()


def poll_once(connection: sqlite3.Connection, owner: str) -> tuple[int, int, int, float]:
    """In one read snapshot: answered turns, sessions leased by `owner`, how many of those leases
    have expired (not renewed in time) and by how many seconds the most overdue one has."""
    now = time.time()  # the server stamps leases with time.time() on the same machine
    connection.execute("BEGIN")
    try:
        answered = connection.execute("SELECT COUNT(*) FROM turns WHERE status = 'answered'").fetchone()[0]
        leased, expired, overdue = connection.execute(
            "SELECT COUNT(*), COALESCE(SUM(lease_expires_at < ?), 0), COALESCE(MAX(? - lease_expires_at), 0) "
            # A lease token is "<process id>#<epoch>".
            "FROM sessions WHERE substr(lease_owner, 1, ?) = ?",
            (now, now, len(owner) + 1, owner + "#"),
        ).fetchone()
    finally:
        connection.execute("COMMIT")
    return int(answered), int(leased), int(expired), max(0.0, float(overdue))


async def load(
    url: str, sessions: int, clients: int, sleep_s: float, call_timeout_s: float
) -> tuple[dict[str, int], list[float]]:
    """Start `sessions` sessions with `clients` concurrent clients.

    Returns session id -> index, and the time each call returned (perf_counter).
    """
    ids: dict[str, int] = {}
    counter = iter(range(sessions))
    done_at: list[float] = []  # when each start_session returned, in order

    async def loader() -> None:
        async with Client(url) as client:
            for index in counter:  # a shared iterator: each index is taken by one client only
                outcome = await call(
                    client,
                    call_timeout_s,
                    "start_session",
                    agent=AGENT,
                    message=message_text(index, sleep_s),
                    wait_seconds=0,
                )
                if outcome.get("status") not in ("running", "answered") or not outcome.get("session_id"):
                    raise RuntimeError(f"start_session {index}: unexpected outcome {outcome!r}")
                ids[str(outcome["session_id"])] = index
                done_at.append(time.perf_counter())

    async with anyio.create_task_group() as tg:
        for _ in range(clients):
            tg.start_soon(loader)
    if len(ids) != sessions:
        raise RuntimeError(f"{len(ids)} distinct sessions started, expected {sessions}")
    return ids, done_at


async def wait_in_model_call(db: Path, session_id: str) -> None:
    """Until the session's turn is in its model call (phase 'model'), then a short margin."""
    with anyio.fail_after(STARTUP_TIMEOUT_S):
        while True:
            rows = await anyio.to_thread.run_sync(
                query, db, "SELECT phase FROM sessions WHERE id = ?", (session_id,)
            )
            if rows == [("model",)]:
                break
            await anyio.sleep(0.02)
    await anyio.sleep(0.2)  # the only model-call slot is free, so the call has taken it by now


def state_after_kill(db: Path, kill_wall: float) -> dict[str, Any]:
    statuses = Counter(dict(query(db, "SELECT status, COUNT(*) FROM sessions GROUP BY status")))
    phases = Counter(
        {
            str(phase): count
            for phase, count in query(
                db, "SELECT phase, COUNT(*) FROM sessions WHERE status = 'running' GROUP BY phase"
            )
        }
    )
    no_turn = query(db, "SELECT COUNT(*) FROM sessions WHERE status = 'running' AND current_turn_id IS NULL")
    leases = query(
        db,
        "SELECT COUNT(*), MAX(lease_expires_at) FROM sessions WHERE status = 'running' AND lease_owner IS NOT NULL",
    )
    answered = query(db, "SELECT COUNT(*) FROM turns WHERE status = 'answered'")[0][0]
    stepped = query(
        db,
        "SELECT COUNT(*) FROM sessions WHERE status = 'running' AND EXISTS "
        "(SELECT 1 FROM steps WHERE steps.session_id = sessions.id AND steps.kind = 'model')",
    )
    # Leases that had expired while the killed process was still alive (it was renewing them).
    expired = query(
        db,
        "SELECT COUNT(*) FROM sessions WHERE lease_owner IS NOT NULL AND lease_expires_at < ?",
        (kill_wall,),
    )
    return {
        "sessions_by_status": dict(statuses),
        "unfinished": statuses.get("running", 0),
        "unfinished_by_phase": dict(phases),
        "unfinished_without_turn": no_turn[0][0],
        "unfinished_leased": leases[0][0],
        "last_lease_expires_at": leases[0][1],
        "answered_before_kill": answered,
        "unfinished_with_model_step": stepped[0][0],
        "leases_expired_before_kill": expired[0][0],
    }


async def wait_for_resume(
    process: Process,
    owner: str,
    db: Path,
    target: int,
    baseline: int,
    poll_s: float,
    stall_s: float,
    t_spawn: float,
) -> dict[str, Any]:
    """Poll the database until `target` more turns are answered; sample the server's RSS each time."""
    connection = connect_read_only(db, check_same_thread=False)
    samples_mib: list[float] = []
    leased_max = expired_max = 0
    overdue_max = 0.0
    first_seen_s: float | None = None
    last_progress = time.perf_counter()
    resumed = 0
    polls = 0
    try:
        while True:
            count, leased, expired, overdue = await anyio.to_thread.run_sync(poll_once, connection, owner)
            leased_max, expired_max = max(leased_max, leased), max(expired_max, expired)
            overdue_max = max(overdue_max, overdue)
            now = time.perf_counter()
            polls += 1
            if process.returncode is not None:
                raise RuntimeError(f"the resuming server exited with code {process.returncode}")
            samples_mib.append(mib(memory_kib(process.pid)["rss_kib"]))
            if count - baseline > resumed:
                resumed = count - baseline
                last_progress = now
                if first_seen_s is None:
                    first_seen_s = now - t_spawn
            if resumed >= target:
                return {
                    "resumed": resumed,
                    "stalled": False,
                    "first_seen_s": first_seen_s,
                    "all_seen_s": now - t_spawn,
                    "rss_samples_mib": samples_mib,
                    "polls": polls,
                    "leased_max": leased_max,
                    "held_but_expired_max": expired_max,
                    "most_overdue_lease_s": overdue_max,
                }
            if now - last_progress > stall_s:
                return {
                    "resumed": resumed,
                    "stalled": True,
                    "first_seen_s": first_seen_s,
                    "all_seen_s": None,
                    "rss_samples_mib": samples_mib,
                    "polls": polls,
                    "leased_max": leased_max,
                    "held_but_expired_max": expired_max,
                    "most_overdue_lease_s": overdue_max,
                }
            await anyio.sleep(poll_s)
    finally:
        connection.close()


def check_after(db: Path, ids: dict[str, int], blocker_id: str, kill_wall: float) -> dict[str, Any]:
    """Every session idle, one answered turn with its own answer, one model step; resumed turns' times.

    The blocker must stay closed, its turn cancelled; it is left out of everything else.
    """
    sessions = {
        sid: (status, phase) for sid, status, phase in query(db, "SELECT id, status, phase FROM sessions")
    }
    blocker = sessions.pop(blocker_id, None)
    turns = query(db, "SELECT session_id, status, answer, ended_at FROM turns")
    blocker_turns = [status for sid, status, *_ in turns if sid == blocker_id]
    turns = [row for row in turns if row[0] != blocker_id]
    steps = Counter(sid for (sid,) in query(db, "SELECT session_id FROM steps WHERE kind = 'model'"))
    step_owners = Counter(  # each step names its lease token "<process id>#<epoch>"
        token.rpartition("#")[0]
        for (token,) in query(db, "SELECT process_id FROM steps WHERE kind = 'model'")
    )
    problems: list[str] = []
    if blocker is None or blocker[0] != "closed" or blocker_turns != ["cancelled"]:
        problems.append(f"the blocker is {blocker!r} with turns {blocker_turns!r}, not closed and cancelled")
    turns_per_session = Counter(sid for sid, *_ in turns)
    not_idle = {sid: s for sid, s in sessions.items() if s[0] != "idle"}
    if not_idle:
        sample = list(not_idle.items())[:5]
        problems.append(f"{len(not_idle)} session(s) not idle, e.g. {sample}")
    if set(sessions) != set(ids):
        problems.append(f"{len(set(sessions) ^ set(ids))} session id(s) differ from those started")
    extra = [sid for sid, n in turns_per_session.items() if n != 1]
    if extra:
        problems.append(f"{len(extra)} session(s) with other than one turn, e.g. {extra[:3]}")
    wrong = [
        (sid, status, answer)
        for sid, status, answer, _ in turns
        if status != "answered" or answer != expected_answer(ids.get(sid, -1))
    ]
    if wrong:
        problems.append(f"{len(wrong)} turn(s) not answered as expected, e.g. {wrong[:3]}")
    bad_steps = [sid for sid in ids if steps.get(sid, 0) != 1]
    if bad_steps:
        problems.append(f"{len(bad_steps)} session(s) without exactly one model step, e.g. {bad_steps[:3]}")
    resumed_ends = sorted(
        ended for _, status, _, ended in turns if status == "answered" and ended > kill_wall
    )
    return {
        "problems": problems,
        "resumed_ended_at": resumed_ends,
        "model_steps_by_process": dict(step_owners),
    }


async def run_cap(
    cap: int, args: argparse.Namespace, workdir: Path, results: list[dict[str, Any]]
) -> dict[str, Any]:
    """One load, crash and resume with this cap, in its own directory and database."""
    directory = workdir / f"cap-{cap}"
    directory.mkdir()
    # The loading process has one model-call slot, held by the blocker; the resuming process runs
    # with the cap under test. Both use the same database file.
    load_config = write_config(directory, "parley-load.yaml", LOAD_CAP, args.lease_ttl)
    config = write_config(directory, "parley.yaml", cap, args.lease_ttl)
    db = directory / "parley.db"
    log_load, log_resume = directory / "server-load.log", directory / "server-resume.log"
    r: dict[str, Any] = {"cap": cap, "cap_is_default": cap == DEFAULT_CAP, "dir": str(directory)}
    results.append(r)  # a failing run still shows what it measured so far
    r["loadavg_1m_before"] = loadavg_1m()

    # --- load behind the blocker, close the blocker, then SIGKILL at once
    async with http_server(directory, load_config, log_load) as first:
        url = await wait_for_url(first, log_load, poll_s=0.01)
        r["load_process_id"] = (await healthz(url)).get("process_id")
        async with Client(url) as client:
            blocker = await call(
                client,
                args.call_timeout,
                "start_session",
                agent=AGENT,
                message=BLOCKER_MESSAGE,
                wait_seconds=0,
            )
            blocker_id = str(blocker["session_id"])
            await wait_in_model_call(db, blocker_id)
            t0, load_cpu_before = time.perf_counter(), cpu_seconds(first.pid)
            ids, done_at = await load(url, args.sessions, args.clients, args.sleep, args.call_timeout)
            r["load_s"] = round(time.perf_counter() - t0, 3)
            r["load_server_cpu_share"] = round((cpu_seconds(first.pid) - load_cpu_before) / r["load_s"], 2)
            tenth = max(1, args.sessions // 10)
            r["load_first_tenth_per_s"] = round(tenth / (done_at[tenth - 1] - t0), 1)
            r["load_last_tenth_per_s"] = (
                round(tenth / (done_at[-1] - done_at[-tenth - 1]), 1) if args.sessions > tenth else None
            )
            t1 = time.perf_counter()
            closed = await call(
                client, args.call_timeout, "close_session", session_id=blocker_id, wait_seconds=10
            )
            if closed.get("status") != "closed":
                raise RuntimeError(f"the blocker did not close: {closed!r}")
            first.send_signal(signal.SIGKILL)
            kill_wall = time.time()
            r["close_blocker_to_kill_s"] = round(time.perf_counter() - t1, 3)
        r["load_exit_code"] = await first.wait()
    r["sessions_per_s_started"] = round(args.sessions / r["load_s"], 1)
    after_kill = await anyio.to_thread.run_sync(state_after_kill, db, kill_wall)
    r["after_kill"] = after_kill
    unfinished = after_kill["unfinished"]
    baseline = after_kill["answered_before_kill"]
    by_status = after_kill["sessions_by_status"]
    if (
        by_status.get("idle", 0) != baseline
        or unfinished + baseline != args.sessions
        or by_status.get("closed") != 1
    ):
        raise RuntimeError(f"unexpected state after the kill: {after_kill}")

    # --- resume: a new process on the same database
    t_spawn_wall, t_spawn = time.time(), time.perf_counter()
    own_cpu_before = own_cpu_seconds()
    async with http_server(directory, config, log_resume) as second:
        url = await wait_for_url(second, log_resume, poll_s=0.01)
        r["startup_s"] = round(time.perf_counter() - t_spawn, 3)
        r["startup_cpu_s"] = round(cpu_seconds(second.pid), 3)
        r["rss_at_listening_mib"] = mib(memory_kib(second.pid)["rss_kib"])
        last_lease = after_kill["last_lease_expires_at"]
        r["kill_to_spawn_s"] = round(t_spawn_wall - kill_wall, 3)
        r["last_old_lease_expires_after_spawn_s"] = (
            None if last_lease is None else round(last_lease - t_spawn_wall, 3)
        )
        r["resume_process_id"] = str((await healthz(url))["process_id"])  # the lease owner it writes
        waited = await wait_for_resume(
            second, r["resume_process_id"], db, unfinished, baseline, args.poll, args.stall_timeout, t_spawn
        )
        r["resume_cpu_s"] = round(cpu_seconds(second.pid), 3)  # since the process started
        memory = memory_kib(second.pid)
        r["own_cpu_s"] = round(own_cpu_seconds() - own_cpu_before, 3)
        r["healthz_at_end"] = await healthz(url)
        samples = waited.pop("rss_samples_mib")
        r["rss_max_sampled_mib"] = max(samples)
        r["rss_at_end_mib"] = mib(memory["rss_kib"])
        r["rss_peak_hwm_mib"] = mib(memory["hwm_kib"])
        r["poll"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in waited.items()}
        r.update(await stop_server(second))

    # --- check the database the second server left
    checked = await anyio.to_thread.run_sync(check_after, db, ids, blocker_id, kill_wall)
    ends = checked.pop("resumed_ended_at")
    r["check"] = checked
    r["resumed_by_ended_at"] = len(ends)
    if ends:
        r["first_answer_s"] = round(ends[0] - t_spawn_wall, 3)
        r["last_answer_s"] = round(ends[-1] - t_spawn_wall, 3)
        r["sessions_per_s"] = round(len(ends) / (ends[-1] - t_spawn_wall), 1)
        span = ends[-1] - ends[0]
        r["sessions_per_s_first_to_last"] = round((len(ends) - 1) / span, 1) if span > 0 else None
        # per resumed session, the start-up (process start to listening) left out
        resume_only_s = r["resume_cpu_s"] - r["startup_cpu_s"]
        r["resume_cpu_per_session_ms"] = round(resume_only_s / len(ends) * 1000, 1)
        r["resume_cpu_share"] = round(r["resume_cpu_s"] / (ends[-1] - t_spawn_wall), 2)
    r["log_load"] = log_counts(log_load)
    r["log_resume"] = log_counts(log_resume)
    r["loadavg_1m_after"] = loadavg_1m()
    return r


async def run(args: argparse.Namespace, workdir: Path, results: list[dict[str, Any]]) -> dict[str, Any]:
    started = time.perf_counter()
    module = await anyio.to_thread.run_sync(parley_module, workdir)
    for cap in args.caps:
        await run_cap(cap, args, workdir, results)
    return {
        "agent": AGENT,
        "url_host": HOST,
        "sessions": args.sessions,
        "sleep_s": args.sleep,
        "clients": args.clients,
        "load_cap": LOAD_CAP,
        "blocker_sleep_s": BLOCKER_SLEEP_S,
        "lease_ttl_s": args.lease_ttl,
        "poll_s": args.poll,
        "runs": results,
        "parley_module": module,
        "total_wall_s": round(time.perf_counter() - started, 3),
        **machine("sqlite"),
    }


def report(r: dict[str, Any]) -> None:
    print(
        f"parley resume after SIGKILL: {r['sessions']} '{r['agent']}' sessions, model call /sleep {r['sleep_s']:g} s,"
        f" lease_ttl_s {r['lease_ttl_s']:g}, {r['clients']} loading clients, loading process cap {r['load_cap']}"
        f" (held by a blocker),"
        f" HTTP on {r['url_host']}"
    )
    for run in r["runs"]:
        k = run["after_kill"]
        default = " (default, not set)" if run["cap_is_default"] else ""
        print(f"  cap max_concurrent_model_calls = {run['cap']}{default}")
        print(
            f"    load: {r['sessions']} start_session in {run['load_s']:.3f} s"
            f" ({run['sessions_per_s_started']:.1f}/s, server CPU {run['load_server_cpu_share']:.2f} of one core),"
            f" blocker closed, SIGKILL"
            f" {run['close_blocker_to_kill_s']:.3f} s later -> exit code {run['load_exit_code']}"
        )
        print(
            f"      start_session rate: first tenth {run['load_first_tenth_per_s']}/s,"
            f" last tenth {run['load_last_tenth_per_s']}/s"
        )
        print(
            f"    at the kill: {k['answered_before_kill']} answered, {k['unfinished']} unfinished"
            f" (phase {k['unfinished_by_phase']}, {k['unfinished_without_turn']} without a turn yet,"
            f" {k['unfinished_with_model_step']} with the model step committed, {k['unfinished_leased']} leased,"
            f" {k['leases_expired_before_kill']} leases already expired while the process lived)"
        )
        print(
            f"    restart {run['kill_to_spawn_s']:.3f} s after the kill; the old leases expire"
            f" {run['last_old_lease_expires_after_spawn_s']} s after the spawn"
        )
        print(
            f"    start until listening {run['startup_s']:.3f} s   RSS then {run['rss_at_listening_mib']:.1f} MiB"
        )
        if "first_answer_s" in run:
            print(
                f"    first resumed answer {run['first_answer_s']:.3f} s, last {run['last_answer_s']:.3f} s"
                f" after the spawn (turns.ended_at); polls saw the first at {run['poll']['first_seen_s']} s,"
                f" all at {run['poll']['all_seen_s']} s"
            )
            print(
                f"    resumed {run['resumed_by_ended_at']} of {k['unfinished']}:"
                f" {run['sessions_per_s']:.1f} sessions/s from the spawn,"
                f" {run['sessions_per_s_first_to_last']} sessions/s first to last answer"
            )
            print(
                f"    server CPU {run['resume_cpu_s']:.3f} s from the spawn ({run['resume_cpu_share']:.2f} of one core),"
                f" of which start-up {run['startup_cpu_s']:.3f} s; after start-up"
                f" {run['resume_cpu_per_session_ms']:.1f} ms per resumed session;"
                f" benchmark CPU {run['own_cpu_s']:.3f} s"
            )
        print(
            f"    leases during the resume (polls): at most {run['poll']['leased_max']} sessions leased,"
            f" at most {run['poll']['held_but_expired_max']} of them past their expiry (not renewed in time),"
            f" the most overdue by {run['poll']['most_overdue_lease_s']:.3f} s"
        )
        if run["poll"]["stalled"]:
            print(f"    STALLED: only {run['poll']['resumed']} of {k['unfinished']} resumed")
        print(
            f"    server RSS max sampled {run['rss_max_sampled_mib']:.1f} MiB, at the end {run['rss_at_end_mib']:.1f}"
            f" MiB, peak (VmHWM) {run['rss_peak_hwm_mib']:.1f} MiB   healthz at the end {run['healthz_at_end']}"
        )
        print(f"    {sigterm_line(run)}")
        checks = run["check"]["problems"] or ["every session idle, one turn, its own answer, one model step"]
        for line in checks:
            print(f"    check: {line}")
        print(f"    server logs: load {run['log_load']}, resume {run['log_resume']}")
        print(f"    1-minute load average before {run['loadavg_1m_before']}, after {run['loadavg_1m_after']}")
    print(f"  total wall time {r['total_wall_s']:.3f} s   machine nproc {r['nproc']}, Python {r['python']}")
    print(f"  the servers imported {r['parley_module']}")
    print(json.dumps(r, sort_keys=True))


def server_log_excerpt(log: Path) -> str:
    """The server's first logged error (often the cause) and the end of its log."""
    return log_excerpt(log, log.name) if log.exists() else f"(no server log {log.name})"


def parse_caps(text: str) -> list[int]:
    caps = parse_ints(text)
    if not caps or not all(1 <= cap <= 10_000 for cap in caps) or len(set(caps)) != len(caps):
        raise argparse.ArgumentTypeError("caps must be distinct integers 1..10000, e.g. 16,64")
    return caps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000, help="sessions left mid-turn (1000)")
    parser.add_argument("--sleep", type=float, default=0.05, help="seconds each model call sleeps (0.05)")
    parser.add_argument(
        "--caps", type=parse_caps, default=[16, 64], help="runtime.max_concurrent_model_calls values (16,64)"
    )
    parser.add_argument(
        "--lease-ttl", type=float, default=2.0, help="runtime.lease_ttl_s of both processes (2; default 15)"
    )
    parser.add_argument(
        "--clients", type=int, default=8, help="concurrent clients that start the sessions (8)"
    )
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between database polls (0.1)")
    add_limit_options(parser, 1200.0)
    parser.add_argument(
        "--stall-timeout", type=float, default=60.0, help="seconds without a new answer before giving up"
    )
    args = parser.parse_args()
    if not 1 <= args.sessions <= MAX_SESSIONS:
        parser.error(f"--sessions must be 1..{MAX_SESSIONS}")
    if not 0 <= args.sleep <= MAX_SLEEP_S:
        parser.error(f"--sleep must be 0..{MAX_SLEEP_S:g} (the demo model's /sleep range)")
    if not 0.5 <= args.lease_ttl <= 3600:
        parser.error("--lease-ttl must be 0.5..3600 seconds")
    if not 1 <= args.clients <= 64:
        parser.error("--clients must be 1..64")
    if args.stall_timeout <= 0 or args.deadline <= 0 or args.call_timeout <= 0:
        parser.error("--stall-timeout, --deadline and --call-timeout must be positive")
    if args.stall_timeout <= args.sleep + args.lease_ttl:
        parser.error("--stall-timeout must exceed --sleep + --lease-ttl (the first answer needs both)")
    if not 0.01 <= args.poll <= 5:
        parser.error("--poll must be 0.01..5 seconds")
    require_linux(parser)

    results: list[dict[str, Any]] = []

    def logs(workdir: Path) -> str:
        if not results:
            return "(no run started)"
        directory = Path(results[-1]["dir"])
        partial = json.dumps(results[-1], sort_keys=True, default=str)
        excerpts = [server_log_excerpt(directory / name) for name in ("server-load.log", "server-resume.log")]
        return f"--- figures so far ---\n{partial}\n" + "\n".join(excerpts)

    def failed(result: dict[str, Any]) -> bool:
        caps = [run["cap"] for run in result["runs"] if run["check"]["problems"] or run["poll"]["stalled"]]
        if caps:
            print(
                f"benchmark failed: checks failed or the resume stalled with cap(s) {caps}", file=sys.stderr
            )
        return bool(caps)

    return run_and_report(lambda workdir: run(args, workdir, results), args.deadline, logs, report, failed)


if __name__ == "__main__":
    sys.exit(main())
