"""The `parley` command line."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import secrets
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import anyio

from parley import __version__
from parley.cli_common import load_from_args
from parley.cli_credentials import add_credentials_command
from parley.cli_decisions import add_plan_commands, run_decide, run_pending
from parley.cli_eval import add_eval_command
from parley.cli_manage import add_session_commands, add_vacuum_command, run_session_action
from parley.cli_replay import add_replay_command
from parley.cli_webhooks import add_webhooks_command
from parley.config import (
    collect_config_errors,
    config_path_from_env,
    db_override_from_env,
    load_config,
)
from parley.config.codes import ConfigNote
from parley.errors import ConfigError, ConfigErrors, ListenError, StorageError
from parley.runtime.log_format import library_log_levels

if TYPE_CHECKING:
    from parley.app import Seams

    # What add_subparsers returns, subscriptable only for the type checker.
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]

# Static tokens start with this, so secret scanners and people recognise one.
TOKEN_PREFIX = "parley_"

CONNECT_HINT = """\
parley {version} speaks MCP over stdio: it is started by an MCP client, not typed at.
Database: {db}

Claude Code:     claude mcp add parley -- {exe} serve
Claude Desktop:  add to claude_desktop_config.json
  {{"mcpServers": {{"parley": {{"command": "{exe}", "args": ["serve"]}}}}}}

Waiting for MCP messages on stdin (Ctrl-C to stop)...
"""


def _cmd_serve(args: argparse.Namespace) -> int:
    config = load_from_args(args)
    from parley.app import serve_stdio
    from parley.runtime.telemetry import setup_tracing

    tracing = setup_tracing(os.environ)

    if args.http:
        from parley.app_http import serve_http

        host = args.host or config.http.host
        port = config.http.port if args.port is None else args.port

        from parley.server.http import http_url

        async def announce(bound_host: str, bound_port: int) -> None:
            sys.stderr.write(f"parley {__version__}: serving MCP at {http_url(bound_host, bound_port)}\n")
            sys.stderr.flush()

        anyio.run(
            partial(
                serve_http,
                config,
                host,
                port,
                args.insecure_bind,
                announce,
                tracing=tracing,
                seams=args.seams,
            )
        )
        return 0
    hint = None
    if sys.stdin.isatty():
        exe = Path(sys.argv[0]).resolve() if sys.argv[0] else "parley"
        hint = CONNECT_HINT.format(version=__version__, db=config.db_label, exe=exe)
    anyio.run(partial(serve_stdio, config, hint, tracing=tracing, seams=args.seams))
    return 0


def _cmd_sessions(args: argparse.Namespace) -> int:
    config = load_from_args(args)
    from parley.stores import open_store

    async def run() -> int:
        async with open_store(config) as opened:
            store = opened.store
            done = await run_session_action(store, args)
            if done is not None:
                return done
            from parley.core.ids import SessionId

            session = await store.get_session(SessionId(args.session_id))
            if session is None:
                print(f"no session {args.session_id}", file=sys.stderr)
                return 1
            print(
                json.dumps(
                    {
                        "session_id": session.id,
                        "agent": session.agent,
                        "owner": session.owner,
                        "status": session.status,
                        "title": session.title,
                        "tags": session.tags,
                        "turns": session.turn_count,
                        "closed_reason": session.closed_reason,
                    },
                    indent=2,
                )
            )
            for m in await store.list_messages(session.id, None, None):
                print(f"[{m.seq}] {m.role}: {m.content.get('text', '')}")
            return 0

    return anyio.run(run)


def _cmd_check(args: argparse.Namespace) -> int:
    path = config_path_from_env(args.path)
    if path is not None and not path.is_file():
        print(
            f"parley: PARLEY-C006 {path}: (file): does not exist; pass the path of parley.yaml",
            file=sys.stderr,
        )
        return 1
    errors = collect_config_errors(path)
    config = None if errors else load_config(path, None)
    if config is not None and config.mcp_servers:
        from parley.runtime.mcp.check import check_server_tools, contacted

        servers = contacted(config.mcp_servers)
        if args.offline:
            print(f"parley check: --offline: not contacted, tool names unchecked: {servers}", file=sys.stderr)
        else:
            # Starting a server can take a while (npx fetching a package): say what is waited for.
            print(f"parley check: contacting MCP servers for their tool names: {servers}", file=sys.stderr)
            sys.stderr.flush()
            tool_errors, warnings = anyio.run(check_server_tools, config)
            errors += tool_errors
            for warning in warnings:
                print(f"warning: {warning}")
    for error in errors:
        print(f"{error.code} {error.file}: {error.field}: {error.problem}")
    if config is not None:
        # What the agent files ask that parley serves differently: worth knowing, not fatal.
        for notice in config.agent_notices:
            print(f"{'note' if isinstance(notice, ConfigNote) else 'warning'}: {notice}")
    if errors or config is None:
        print(f"{len(errors)} problem(s) found", file=sys.stderr)
        return 1
    names = ", ".join(sorted(config.agents))
    print(
        f"ok: {path or 'embedded defaults'}: {len(config.agents)} agent(s) ({names}); database {config.db_label}"
    )
    return 0


def _cmd_token_new(args: argparse.Namespace) -> int:
    """A fresh static token, printed once, and the entry of auth.tokens that accepts it (its
    hash: the token itself is never written to the configuration)."""
    from pydantic import ValidationError

    from parley.config.auth import StaticToken, token_digest

    scopes = sorted({s for given in args.scopes for s in given.replace(",", " ").split() if s})
    try:
        entry = StaticToken(name=args.name, sha256="0" * 64, scopes=scopes)
    except ValidationError as exc:
        for error in exc.errors():
            where = {"name": "NAME", "scopes": "--scopes"}.get(
                str(error["loc"][0]) if error["loc"] else "", ""
            )
            print(f"parley: {where}: {error['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return 2
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    line = json.dumps({"name": entry.name, "sha256": token_digest(token), "scopes": entry.scopes})
    print(f"Token for {entry.name} (shown only now; parley keeps only its SHA-256):\n\n  {token}\n")
    print("Add this entry under auth.tokens in parley.yaml (with auth.mode: tokens):\n")
    print(f"  - {line}\n")
    print(f"Clients send it as the header:  Authorization: Bearer {token[: len(TOKEN_PREFIX) + 4]}...")
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    """The audit trail, newest first: who sent, decided, cancelled, closed, deleted what."""
    config = load_from_args(args)
    from parley.stores import open_store

    async def run() -> int:
        async with open_store(config) as opened:
            entries = await opened.store.list_audit(args.session, args.principal, None, args.limit)
        if not entries:
            print("no audit entries" + (" match" if args.session or args.principal else ""))
        for e in entries:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e.at))
            detail = " ".join(f"{k}={v}" for k, v in sorted(e.detail.items()))
            print(
                f"{when}Z  {e.principal}  {e.client or '-'}  {e.action}  {e.outcome}  "
                f"{e.session_id or '-'}  {e.target or '-'}  {detail}".rstrip()
            )
        return 0

    return anyio.run(run)


def _cmd_db_migrate(args: argparse.Namespace) -> int:
    """Create or upgrade the database's schema, and nothing else (before replicas start, say)."""
    config = load_from_args(args)
    from parley.storage.schema import LATEST
    from parley.stores import open_store

    async def run() -> int:
        async with open_store(config) as opened:
            before, after = opened.migrated or (None, LATEST)
        if before is None:
            print(f"{opened.label}: schema version {after}")
        elif before == after:
            print(f"{opened.label}: schema version {after}, nothing to migrate")
        else:
            print(f"{opened.label}: migrated from schema version {before} to {after}")
        return 0

    return anyio.run(run)


def _cmd_db_copy(args: argparse.Namespace) -> int:
    """Copy a SQLite database into an empty PostgreSQL one (moving a deployment to replicas)."""
    from parley.config import is_database_url

    if args.target is not None and not is_database_url(args.target):
        print(
            f"parley: --to must be a PostgreSQL URL (postgresql://...), not {args.target!r}", file=sys.stderr
        )
        return 2
    config = load_config(config_path_from_env(args.config), db_override_from_env(args.target))
    if config.db_url is None:
        print(
            "parley: name the PostgreSQL database to copy into: --to postgresql://... "
            "(or storage.url in parley.yaml)",
            file=sys.stderr,
        )
        return 2
    source = Path(args.source)
    from parley.storage.postgres import PostgresStore
    from parley.storage.sqlite import open_sqlite_store
    from parley.stores import open_store

    if not source.is_file():
        raise StorageError(f"there is no SQLite database at {source}; give the file with --from")

    async def run() -> int:
        # Opened through the store first, so a file of an older parley is migrated as serve would.
        async with open_sqlite_store(source):
            pass
        async with open_store(config) as opened:
            assert isinstance(opened.store, PostgresStore)
            counts = await opened.store.copy_from_sqlite(source)
        print(f"copied {source} to {config.db_label}:")
        for name, count in counts.items():
            print(f"  {count:>9}  {name}")
        return 0

    return anyio.run(run)


def _cmd_chat(args: argparse.Namespace) -> int:
    from parley.client.chat import main as chat

    return chat(args)


def _store_options(p: argparse.ArgumentParser) -> None:
    """--config and --db: the commands that open the configured store."""
    p.add_argument("--config", help="server config file (parley.yaml); also PARLEY_CONFIG")
    p.add_argument(
        "--db",
        help="SQLite database file, or postgresql://user@host/dbname (password from PGPASSWORD); "
        "also PARLEY_DB",
    )


def _add_serve(sub: Subcommands) -> None:
    serve = sub.add_parser("serve", help="serve MCP over stdio (default) or streamable HTTP")
    _store_options(serve)
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp instead of stdio")
    serve.add_argument("--host", help="HTTP address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="HTTP port (default 8765; 0 picks a free port)")
    serve.add_argument(
        "--insecure-bind",
        action="store_true",
        help="allow a non-loopback --host without authentication (unsafe: anyone reaching the port drives sessions)",
    )
    serve.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="the least severe stderr lines shown (default INFO)",
    )
    serve.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="stderr lines as text (default) or one JSON object per line (time, level, message, ids)",
    )
    serve.set_defaults(func=_cmd_serve)


def _add_chat_and_check(sub: Subcommands) -> None:
    chat = sub.add_parser(
        "chat", help="talk to an agent in the terminal (a local store, or a server at --url)"
    )
    _store_options(chat)
    chat.add_argument("agent", nargs="?", help="the agent (default: the only one there is)")
    chat.add_argument("--session", help="resume this session instead of starting one")
    chat.add_argument(
        "--url", help="a parley serve --http endpoint (http://host:port/mcp) instead of a local store"
    )
    chat.add_argument(
        "--token", help="bearer token for --url (better: --token-env, kept out of the process list)"
    )
    chat.add_argument(
        "--token-env", default="PARLEY_TOKEN", help="variable holding the token (default PARLEY_TOKEN)"
    )
    chat.set_defaults(func=_cmd_chat)

    check = sub.add_parser("check", help="validate parley.yaml and every agent file; exit 1 on problems")
    check.add_argument(
        "path", nargs="?", help="parley.yaml (default: PARLEY_CONFIG, else the embedded defaults)"
    )
    check.add_argument(
        "--offline",
        action="store_true",
        help="check the files only: start or contact no MCP server (their tool names go unchecked)",
    )
    check.set_defaults(func=_cmd_check)


def _add_decisions(sub: Subcommands) -> None:
    """pending, approve and answer: what sessions wait on, and an operator's decision."""
    pending = sub.add_parser("pending", help="list approvals and questions waiting for a decision")
    _store_options(pending)
    pending.add_argument("--session", help="only this session")
    pending.add_argument("--limit", type=int, default=100, help="show at most this many (default 100)")
    pending.set_defaults(func=run_pending)

    approve = sub.add_parser("approve", help="approve (or --reject) a tool call a session waits on")
    _store_options(approve)
    approve.add_argument("session_id", help="the session waiting on the decision")
    approve.add_argument("interrupt_id", help="the approval or question (parley pending lists them)")
    approve.add_argument("--reject", action="store_true", help="reject instead of approving")
    approve.add_argument("--reason", help="why; the agent reads it")
    approve.set_defaults(func=run_decide)

    answer = sub.add_parser("answer", help="answer (or --decline) a question a session waits on")
    _store_options(answer)
    answer.add_argument("session_id", help="the session waiting on the decision")
    answer.add_argument("interrupt_id", help="the approval or question (parley pending lists them)")
    answer.add_argument("answer", nargs="?", help="the answer text")
    answer.add_argument("--decline", action="store_true", help="decline to answer")
    answer.set_defaults(func=run_decide)


def _add_sessions(sub: Subcommands) -> None:
    sessions = sub.add_parser("sessions", help="find, read, name and delete sessions in the database")
    _store_options(sessions)
    sessions.add_argument("--owner", default="local", help="whose sessions to list (default: local)")
    ssub = sessions.add_subparsers(dest="action", required=True)
    lst = ssub.add_parser("list", help="list sessions, newest first")
    lst.add_argument("--limit", type=int, default=50, help="show at most this many (default 50)")
    show = ssub.add_parser("show", help="show one session and its transcript")
    show.add_argument("session_id", help="the session (parley sessions list shows them)")
    add_session_commands(ssub)
    sessions.set_defaults(func=_cmd_sessions)


def _add_token_and_audit(sub: Subcommands) -> None:
    """token new (static tokens for auth.mode tokens) and audit (the trail, newest first)."""
    token = sub.add_parser("token", help="static bearer tokens for auth.mode tokens")
    tsub = token.add_subparsers(dest="action", required=True)
    new = tsub.add_parser(
        "new", help="print a fresh token once, and the auth.tokens entry (its hash) for parley.yaml"
    )
    new.add_argument("name", help="the principal the token stands for (e.g. alice, ci-bot)")
    new.add_argument(
        "--scopes",
        nargs="+",
        default=["parley:use"],
        help="parley:use (default), parley:admin, parley:metrics, parley:trigger[:WORD] (several: space or comma separated)",
    )
    new.set_defaults(func=_cmd_token_new)

    trail = sub.add_parser("audit", help="who sent, decided, cancelled, closed, deleted what (newest first)")
    _store_options(trail)
    trail.add_argument("--session", help="only this session (also after it was deleted)")
    trail.add_argument("--principal", help="only this principal (a token's name, or <issuer>#<subject>)")
    trail.add_argument("--limit", type=int, default=100, help="show at most this many (default 100)")
    trail.set_defaults(func=_cmd_audit)


def _add_db(sub: Subcommands) -> None:
    db = sub.add_parser(
        "db", help="database upkeep: migrate the schema, copy SQLite into PostgreSQL, vacuum a SQLite file"
    )
    dsub = db.add_subparsers(dest="action", required=True)
    migrate = dsub.add_parser("migrate", help="create or upgrade the database schema, without serving")
    _store_options(migrate)
    migrate.set_defaults(func=_cmd_db_migrate)
    copy = dsub.add_parser(
        "copy",
        help="copy everything of a SQLite database into an empty PostgreSQL database, and print counts",
    )
    copy.add_argument(
        "--config", help="server config file (parley.yaml: storage.schema, ...); also PARLEY_CONFIG"
    )
    copy.add_argument("--from", dest="source", required=True, help="the SQLite database file to copy")
    copy.add_argument(
        "--to", dest="target", help="postgresql://user@host/dbname (default: storage.url of parley.yaml)"
    )
    copy.set_defaults(func=_cmd_db_copy)
    add_vacuum_command(dsub, _store_options)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parley", description="Durable AI agent sessions over MCP.")
    parser.add_argument("--version", action="version", version=f"parley {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    # In this order in `parley --help`.
    _add_serve(sub)
    _add_chat_and_check(sub)
    _add_decisions(sub)
    _add_sessions(sub)
    _add_token_and_audit(sub)
    _add_db(sub)
    _store_options(add_replay_command(sub))
    for plan_parser in add_plan_commands(sub):
        _store_options(plan_parser)
    _store_options(add_eval_command(sub))
    for webhooks_parser in add_webhooks_command(sub):
        _store_options(webhooks_parser)
    for credentials_parser in add_credentials_command(sub):
        _store_options(credentials_parser)
    return parser


def main(argv: list[str] | None = None, *, seams: Seams | None = None) -> int:
    """The command line; `seams`: what `serve` swaps in its composition root (parley.testing's
    entry point arms fault points with it; `parley` itself passes none)."""
    args = build_parser().parse_args(argv)
    args.seams = seams
    level = getattr(args, "log_level", "WARNING")
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # The level belongs to the handler too: MCP clients may ask for parley's debug records
    # (parley/server/client_logs.py), which must not flood the server's own log.
    for handler in logging.getLogger().handlers:
        handler.setLevel(level)
        if getattr(args, "log_format", "text") == "json":
            from parley.runtime.log_format import JsonLogFormatter

            handler.setFormatter(JsonLogFormatter())
    library_log_levels(logging.getLevelName(level))
    try:
        return int(args.func(args))
    except (ConfigError, ConfigErrors) as exc:
        errors = exc.errors if isinstance(exc, ConfigErrors) else [exc]
        for error in errors:
            print(f"parley: configuration error: {error}", file=sys.stderr)
        return 2
    except StorageError as exc:
        print(f"parley: storage error: {exc}", file=sys.stderr)
        return 3
    except ListenError as exc:
        print(f"parley: {exc}", file=sys.stderr)
        return 4
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`parley sessions list | head`): stop quietly, as shell tools do,
        # and keep Python from reporting the same broken pipe again when it flushes at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def exit_now(code: int) -> NoReturn:
    """End the process with `code` once parley's work is done, without tearing the interpreter
    down module by module: that teardown costs about 0.3 s of CPU, and an MCP client that closed
    stdin kills a server still alive 2 s later. Everything a normal exit does for others still
    happens first: other threads are waited for, exit handlers run (an OpenTelemetry exporter
    sends its last spans, logging flushes), and stdout and stderr are flushed."""
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # A closed or broken stream: nothing more can reach it.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def run() -> NoReturn:
    """The `parley` command: `main` with the process's arguments, then a quick exit."""
    exit_now(main())


if __name__ == "__main__":
    run()
