"""An operator's decisions, on the database directly, recorded in the audit as the `cli` principal
with the OS account: `parley pending` (what waits), `parley approve` and `parley answer` (a tool
call or a question), `parley plan approve SESSION REVISION` and `parley plan discard SESSION` (a
draft plan). A running server picks the resumed or executing turn up within its poll interval,
or at its next start. This is how an agent that takes decisions only from a person (`approver:
human`) is decided when no client can ask one."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time

import anyio

from parley.cli_common import load_from_args
from parley.config import effective_limits
from parley.core.ids import SessionId, is_session_id
from parley.runtime import audit
from parley.runtime.access import cli_principal
from parley.runtime.audit import Audit
from parley.runtime.session_steps import SessionSteps
from parley.stores import open_store


def run_pending(args: argparse.Namespace) -> int:
    config = load_from_args(args)
    from parley.core.ids import SessionId
    from parley.stores import open_store

    async def run() -> int:
        async with open_store(config) as opened:
            store = opened.store
            if args.session:
                interrupts = await store.list_interrupts(SessionId(args.session), pending_only=True)
            else:
                interrupts = await store.list_all_pending(args.limit)
            drafts = [] if args.session else await store.list_drafts_for(None, None, args.limit)
            if not interrupts and not drafts:
                print("nothing is waiting for a decision")
            for d in drafts:
                print(
                    f"{d.id}  plan revision {d.plan_revision} ({len(d.todos)} todos): parley plan approve {d.id} {d.plan_revision}"
                )
            for i in interrupts:
                p = i.payload
                what = (
                    f"approve {p.get('tool')} ({p.get('effect')}) {json.dumps(p.get('arguments'))}"
                    if i.kind == "approval"
                    else f"question: {p.get('question')}"
                    + (f" [{' | '.join(p['choices'])}]" if p.get("choices") else "")
                )
                print(f"{i.session_id}  {i.id}  {what}")
            return 0

    return anyio.run(run)


def run_decide(args: argparse.Namespace) -> int:
    """`parley approve` and `parley answer`: an operator's decision, picked up by a running server
    within its poll interval, or at the next start."""
    config = load_from_args(args)
    from parley.core.ids import SessionId
    from parley.errors import RequestError
    from parley.runtime import audit
    from parley.runtime.access import cli_principal
    from parley.runtime.audit import Audit
    from parley.runtime.decisions import Decision, Decisions
    from parley.stores import open_store

    operator = cli_principal(getpass.getuser())
    if args.command == "approve":
        action = audit.REJECT if args.reject else audit.APPROVE
    else:
        action = audit.DECLINE if args.decline else audit.ANSWER

    async def run() -> int:
        async with open_store(config) as opened:
            store = opened.store
            trail = Audit(store, time.time)
            session = await store.get_session(SessionId(args.session_id))
            if session is None:
                print(f"parley: no session {args.session_id}", file=sys.stderr)
                return 1
            decisions = Decisions(store, config.agents, time.time)
            try:
                if args.command == "approve":
                    decision = Decision(args.interrupt_id, not args.reject, args.reason)
                    _, notes = await decisions.approve(session, [decision], "cli", None)
                else:
                    text = None if args.decline else args.answer
                    _, notes = await decisions.answer(
                        session, args.interrupt_id, text, args.decline, "cli", None
                    )
            except RequestError as exc:
                await trail.refused(operator, action, session.id, args.interrupt_id, str(exc))
                print(f"parley: {exc}", file=sys.stderr)
                return 1
            await trail.record(operator, action, session_id=session.id, target=args.interrupt_id, via="cli")
            print("\n".join(notes) or "recorded; the session resumes")
            return 0

    return anyio.run(run)


def add_plan_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> list[argparse.ArgumentParser]:
    plan = sub.add_parser("plan", help="approve or discard a session's draft plan")
    actions = plan.add_subparsers(dest="action", required=True)
    approve = actions.add_parser("approve", help="approve one revision of the draft and let the agent act")
    approve.add_argument("session_id", help="the session whose plan waits (parley pending lists the drafts)")
    approve.add_argument("revision", type=int, help="the revision you reviewed")
    discard = actions.add_parser("discard", help="drop the draft and leave plan mode")
    discard.add_argument("session_id", help="the session whose draft to drop")
    for parser in (approve, discard):
        parser.set_defaults(func=run_plan)
    return [approve, discard]


def run_plan(args: argparse.Namespace) -> int:
    config = load_from_args(args)
    operator = cli_principal(getpass.getuser())
    action = audit.EXECUTE_PLAN if args.action == "approve" else audit.DISCARD_PLAN
    command = "execute_plan" if args.action == "approve" else "discard_plan"

    async def run() -> int:
        async with open_store(config) as opened:
            store = opened.store
            trail = Audit(store, time.time)
            session = (
                await store.get_session(SessionId(args.session_id))
                if is_session_id(args.session_id)
                else None
            )
            if session is None:
                print(f"parley: no session {args.session_id}", file=sys.stderr)
                return 1
            # The session service loads the whole engine (the MCP SDK with it): only once it is used.
            from parley.runtime.service.plans import executing_message, refusal

            steps, now = SessionSteps(store), time.time()
            revision = getattr(args, "revision", session.plan_revision)
            outcome: str
            if args.action == "approve":
                agent = config.agents.get(session.agent)
                limits = effective_limits(agent.limits, session.settings) if agent else None
                max_turns = limits.max_turns if limits is not None else session.turn_count
                message = executing_message(session.id, revision, now)
                entry = trail.entry(
                    operator, action, session_id=session.id, target=message.id, revision=revision, via="cli"
                )
                outcome = await steps.approve_plan(
                    session.id, session.owner, revision, message, max_turns, "cli", now, entry
                )
            else:
                entry = trail.entry(operator, action, session_id=session.id, via="cli")
                outcome = await steps.discard_plan(session.id, session.owner, now, entry)
            done = outcome in ("approved", "discarded")
            if not done:
                latest = await store.get_session(session.id) or session
                why = refusal(latest, outcome, revision, command)
                await trail.refused(operator, action, session.id, str(revision), str(why), reason=outcome)
                print(f"parley: {why}", file=sys.stderr)
                return 1
            if args.action == "approve":
                print(f"approved revision {revision}; a running server starts the executing turn")
            else:
                print("the draft was discarded; the next message is an ordinary turn")
            return 0

    return anyio.run(run)
