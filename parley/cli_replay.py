"""`parley replay SESSION... [--agent NAME]`: replay sessions on the database directly, in this
process (it runs the engine as `parley serve` does, without serving MCP), as the `cli` operator;
then show each turn of the original beside the replay's: the answer, the tools and the tokens."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import anyio

from parley.cli_common import load_from_args
from parley.config import AgentConfig, ModelSpec, ServerConfig
from parley.config.agent_files import AgentContext, load_agent_file
from parley.config.codes import E_MISSING
from parley.config.loading import read_server_file
from parley.core.ids import SessionId
from parley.core.records import ToolCallRecord, TurnRecord
from parley.core.replays import REPLAYED
from parley.errors import ConfigError, ConfigErrors, RequestError
from parley.runtime.access import session_starter
from parley.storage.ports import Store

# How often the command looks at the replays it waits for (their turns run in this process).
_POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class TurnPair:
    """One turn of the original and the same turn of the replay, as the command reports them."""

    turn: int
    original_answer: str | None
    replay_answer: str | None
    original_tools: list[str]
    replay_tools: list[str]
    replay_status: str | None
    original_tokens: int
    replay_tokens: int


@dataclass(frozen=True, slots=True)
class ReplayReport:
    original: str
    replay: str
    agent: str
    turns: list[TurnPair]
    ran: int  # calls that ran for real (reads, the session's own built-ins)
    settled: int  # calls given a recorded result
    not_replayed: int  # calls with no record to stand in


def add_replay_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    replay = sub.add_parser(
        "replay",
        help="send sessions' messages again on an agent as it is now; only configured reads run",
    )
    replay.add_argument("session", nargs="+", help="the sessions to replay (ses_...)")
    which = replay.add_mutually_exclusive_group()
    which.add_argument(
        "--agent",
        help="NAME or NAME@VERSION: the agent to replay them on, as configured now or at a stored "
        "version (default: each session's own agent, as configured now)",
    )
    which.add_argument(
        "--agent-file",
        help="an agent file (YAML or Markdown) not deployed yet: replay them on its definition",
    )
    replay.add_argument("--json", action="store_true", help="print the reports as JSON")
    replay.add_argument(
        "--wait-seconds", type=float, default=600.0, help="how long to wait for the replays' turns (600)"
    )
    replay.set_defaults(func=run_replay)
    return replay


def run_replay(args: argparse.Namespace) -> int:
    config = load_from_args(args)
    from parley.app import running_app

    operator = session_starter(getpass.getuser(), config.auth.mode)
    name, _, version = (args.agent or "").partition("@")
    definition = agent_file(config, Path(args.agent_file)) if args.agent_file else None

    async def run() -> int:
        # A run of its own: it starts no schedule's sessions (the servers do).
        async with running_app(config, seams=getattr(args, "seams", None), schedules=False) as app:
            reports = []
            for session_id in args.session:
                try:
                    started = await app.service.replays.replay(
                        operator, session_id, name or None, version or None, definition
                    )
                except RequestError as exc:
                    print(f"parley: {exc}", file=sys.stderr)
                    return 1
                await _until_done(app.store, started.id, args.wait_seconds)
                reports.append(await report(app.store, SessionId(session_id), started.id, started.agent))
        print(json.dumps([asdict(r) for r in reports], indent=2) if args.json else render(reports))
        return 0

    return anyio.run(run)


def agent_file(config: ServerConfig, path: Path) -> AgentConfig:
    """The definition of an agent file, read as parley.yaml's agent files are.

    Raises:
        ConfigErrors: the file does not validate (its problems).
    """
    file_cfg = read_server_file(config.config_path)[0] if config.config_path else None
    context = AgentContext(
        servers=config.mcp_servers,
        aliases=file_cfg.model_aliases if file_cfg is not None else {},
        default_model=(file_cfg.default_model if file_cfg is not None else None) or ModelSpec(),
    )
    loaded = load_agent_file(path, context)
    if loaded.agent is None or loaded.problems:
        raise ConfigErrors(
            loaded.problems or [ConfigError(E_MISSING, str(path), "(file)", "is not an agent file")]
        )
    return loaded.agent


async def _until_done(store: Store, session_id: SessionId, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        session = await store.get_session(session_id)
        if session is not None and session.status not in ("running", "waiting_for_input"):
            return
        if time.monotonic() > deadline:
            raise RequestError(
                f"the replay {session_id} did not finish within {wait_s:g} s; it goes on in the database"
            )
        await anyio.sleep(_POLL_S)


async def report(store: Store, original: SessionId, replay: SessionId, agent: str) -> ReplayReport:
    """The original's turns beside the replay's."""
    before, after = await store.list_turns(original), await store.list_turns(replay)
    calls_before, calls_after = await store.calls_of(original), await store.calls_of(replay)
    pairs = [
        TurnPair(
            turn=i + 1,
            original_answer=old.answer if old else None,
            replay_answer=new.answer if new else None,
            original_tools=_tools(calls_before, old),
            replay_tools=_tools(calls_after, new),
            replay_status=new.status if new else None,
            original_tokens=_tokens(old),
            replay_tokens=_tokens(new),
        )
        for i, (old, new) in enumerate(_zip(before, after))
    ]
    settled = [c for c in calls_after if (c.result or {}).get(REPLAYED)]
    missing = [c for c in settled if str((c.result or {}).get("text", "")).startswith("Not replayed")]
    return ReplayReport(
        original=original,
        replay=replay,
        agent=agent,
        turns=pairs,
        ran=len(calls_after) - len(settled),
        settled=len(settled) - len(missing),
        not_replayed=len(missing),
    )


def _zip(
    before: Sequence[TurnRecord], after: Sequence[TurnRecord]
) -> list[tuple[TurnRecord | None, TurnRecord | None]]:
    width = max(len(before), len(after))
    return [
        (before[i] if i < len(before) else None, after[i] if i < len(after) else None) for i in range(width)
    ]


def _tools(calls: Sequence[ToolCallRecord], turn: TurnRecord | None) -> list[str]:
    return [c.name for c in calls if turn is not None and c.turn_id == turn.id]


def _tokens(turn: TurnRecord | None) -> int:
    return turn.input_tokens + turn.output_tokens if turn is not None else 0


def render(reports: Sequence[ReplayReport]) -> str:
    lines: list[str] = []
    for r in reports:
        lines.append(f"{r.original} replayed as {r.replay} on agent {r.agent}:")
        for pair in r.turns:
            same = "same answer" if pair.original_answer == pair.replay_answer else "answer differs"
            lines.append(
                f"  turn {pair.turn}: {pair.replay_status or 'missing'}, {same}; tools "
                f"{','.join(pair.original_tools) or '-'} -> {','.join(pair.replay_tools) or '-'}; "
                f"tokens {pair.original_tokens} -> {pair.replay_tokens}"
            )
            if pair.original_answer != pair.replay_answer:
                lines.append(f"    was: {_short(pair.original_answer)}")
                lines.append(f"    now: {_short(pair.replay_answer)}")
        lines.append(
            f"  calls: {r.ran} ran (reads and the session's own), {r.settled} from the record, "
            f"{r.not_replayed} not replayed"
        )
    return "\n".join(lines)


def _short(text: str | None, width: int = 100) -> str:
    if text is None:
        return "(none)"
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
