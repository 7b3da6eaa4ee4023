"""Readable text for every tool result. Some clients show their model only this text, so it
always repeats the session id and says which tool to call next."""

from __future__ import annotations

import json

from parley.core.states import ENDED_SESSION
from parley.server.wire import (
    AgentList,
    CloseResult,
    PendingList,
    PendingView,
    PlanView,
    SessionList,
    SessionView,
    TurnOutcomeView,
)


def _next_steps_after_rest(session_id: str) -> str:
    return (
        f'Next: send_message(session_id="{session_id}", message=...) to continue, '
        f'or get_session(session_id="{session_id}") to read the whole session.'
    )


def render_draft(session_id: str, plan: PlanView) -> list[str]:
    """A draft plan and how to approve it, discard it or ask for changes."""
    return [
        f"The plan (revision {plan.revision}) is a draft, waiting for review:",
        *[f"  [{t.get('status', 'pending')}] {t.get('content', '')}" for t in plan.todos],
        f'Next: execute_plan(session_id="{session_id}", revision={plan.revision}) to approve it and let the '
        f'agent act, send_message with feedback to revise it, or discard_plan(session_id="{session_id}").',
    ]


def render_outcome(o: TurnOutcomeView) -> str:
    sid = o.session_id
    head = f"Session {sid}" + (f", turn {o.turn_id}" if o.turn_id else "")
    lines: list[str] = []
    if o.status == "answered":
        lines += [f"{head}: answered.", "", o.answer or "(empty answer)", "", _next_steps_after_rest(sid)]
    elif o.status == "completed":
        lines += [
            f"{head}: the task completed with a result:",
            "",
            json.dumps(o.result, indent=2, ensure_ascii=False),
            "",
            "The session is complete and takes no more messages.",
        ]
    elif o.status == "running":
        what = "is still running" if o.turn_id else "is queued behind the running turn"
        lines += [
            f"{head}: the message {what}; the work goes on on the server.",
            f'Next: get_session(session_id="{sid}", wait_seconds=45) to keep waiting, '
            f'or cancel_turn(session_id="{sid}") to stop it.',
        ]
    elif o.status == "failed":
        lines += [f"{head}: failed.", "", f"Error: {o.error or 'unknown error'}"]
        if o.answer:
            lines += ["", "Partial answer:", o.answer]
        if o.session_status in ("closed", "failed"):
            lines += ["", f"The session is {o.session_status}; start a new one with start_session."]
        else:
            lines += ["", _next_steps_after_rest(sid)]
    elif o.status == "cancelled":
        lines += [f"{head}: cancelled."]
        if o.error:
            lines += ["", o.error]
        if o.session_status is not None and o.session_status not in ENDED_SESSION:
            lines += ["", _next_steps_after_rest(sid)]
    elif o.status == "waiting_for_input":
        lines += [f"{head}: waiting for input. The turn resumes once these are resolved:"]
        lines += render_pending(sid, o.pending)
    elif o.status == "idle":
        lines += [
            f"Session {sid} is ready and no turn is running.",
            f'Next: send_message(session_id="{sid}", message=...) to talk to the agent.',
        ]
    else:
        lines += [f"{head}: {o.status}."]
    if o.notes:
        lines += ["", *o.notes]
    if o.plan is not None and o.plan.status == "draft" and o.status in ("answered", "failed", "cancelled"):
        lines += ["", *render_draft(sid, o.plan)]
    if o.tool_calls:
        lines += ["", "Tool calls:"]
        lines += [f"- {c.tool} [{c.status}]: {c.result or ''}".rstrip() for c in o.tool_calls]
    if o.session_status == "closed" and o.status not in ("failed",):
        lines += ["", "The session is now closed."]
    return "\n".join(lines)


def render_pending(sid: str, pending: list[PendingView]) -> list[str]:
    lines = []
    for p in pending:
        until = f" (deadline {p.deadline})" if p.deadline else ""
        if p.kind == "authorization_required":
            lines += [
                f"- authorization_required {p.id}{until}: {p.question}",
                f"  the session's owner opens {p.connect_url} in a browser, signed in to parley, to connect",
            ]
        elif p.connect_url is not None:
            lines += [
                f"- question {p.id}{until}: {p.question}",
                f"  the session's owner opens {p.connect_url} in a browser, signed in to parley, to see the "
                f'page; or answer_question(session_id="{sid}", interrupt_id="{p.id}", decline=true)',
            ]
        elif p.kind == "approval":
            lines += [
                f"- approval {p.id}{until}: {p.tool} ({p.effect}) with {json.dumps(p.arguments, ensure_ascii=False)}",
                f'  approve(session_id="{sid}", decisions=[{{"interrupt_id": "{p.id}", "approved": true}}])'
                " (or approved: false with a reason)",
            ]
        else:
            choices = f" Choices: {', '.join(p.choices)}." if p.choices else ""
            lines += [
                f"- question {p.id}{until}: {p.question}{choices}",
                f'  answer_question(session_id="{sid}", interrupt_id="{p.id}", answer="...") (or decline=true)',
            ]
    return lines


def render_agents(agents: AgentList) -> str:
    lines = [f"{len(agents.agents)} agent(s):"]
    for a in agents.agents:
        tools = ", ".join(a.tools) or "no tools"
        lines.append(f"- {a.name} ({a.model}; {tools}): {a.description}")
    lines += ["", 'Next: start_session(agent="<name>", message=...) to start a conversation.']
    return "\n".join(lines)


def render_session(v: SessionView) -> str:
    lines = [
        f"Session {v.session_id} (agent {v.agent}, {v.kind}): {v.status}"
        + (f", phase {v.phase}" if v.phase else "")
        + f"; {v.turn_count} turn(s), {v.total_messages} message(s).",
    ]
    if v.title or v.tags:
        lines.append(
            f"Title: {json.dumps(v.title, ensure_ascii=False)}; tags: {', '.join(v.tags) or 'none'}."
        )
    if v.closed_reason:
        lines.append(f"Closed: {v.closed_reason}.")
    if v.forked_from is not None:
        lines.append(f"Forked from session {v.forked_from.session_id} at turn {v.forked_from.turn}.")
    if v.forks:
        lines.append(
            "Forks: "
            + ", ".join(
                f"{f.session_id} (at turn {f.forked_from.turn if f.forked_from else 0})" for f in v.forks
            )
            + "."
        )
    if v.agent_version_pin:
        lines.append(f"Every turn runs on agent version {v.agent_version_pin} (pinned).")
    lines.append(f"Tools: {', '.join(v.tools) or 'none'}.")
    if v.result is not None:
        lines.append("Result: " + json.dumps(v.result, ensure_ascii=False))
    if v.last_error:
        lines.append(f"Last error: {v.last_error}")
    if v.queued_messages:
        lines.append(f"Queued messages: {len(v.queued_messages)}.")
    if v.pending:
        lines.append("Waiting for input:")
        lines += render_pending(v.session_id, v.pending)
    if v.decisions:
        lines.append("Decisions (newest first):")
        lines += [
            f"  {d.at} {d.principal}{f' via {d.client}' if d.client else ''}: {d.action} {d.interrupt_id or ''}"
            + (" (refused)" if d.outcome == "refused" else "")
            for d in v.decisions[:10]
        ]
    if v.plan is not None and v.plan.status == "draft":
        lines += render_draft(v.session_id, v.plan)
    elif v.todos:
        status = f" (revision {v.plan.revision}, {v.plan.status})" if v.plan is not None else ""
        lines.append(f"Plan{status}:")
        lines += [f"  [{t.get('status', 'pending')}] {t.get('content', '')}" for t in v.todos]
    if v.messages:
        first = v.messages[0].seq
        lines += ["", f"Messages {first} to {v.messages[-1].seq} of {v.total_messages}:"]
        for m in v.messages:
            if m.role == "tool":
                lines.append(f"[{m.seq}] tool result{' (error)' if m.is_error else ''}: {m.text}")
            elif m.tool_calls:
                names = ", ".join(str(c.get("name")) for c in m.tool_calls)
                lines.append(f"[{m.seq}] {m.role}: {m.text} (calls {names})")
            else:
                lines.append(f"[{m.seq}] {m.role}: {m.text}")
            for a in m.attachments:
                size = f", {a.size} bytes" if a.size is not None else ""
                digest = f", sha256 {a.sha256}" if a.sha256 else ""
                lines.append(
                    f"    attached {a.kind} '{a.name}' ({a.mime_type or 'unknown type'}{size}{digest})"
                )
        if first > 1:
            lines.append(f'Earlier messages: get_session(session_id="{v.session_id}", messages_from=1).')
    lines.append("")
    if v.status == "running":
        lines.append(
            f'Next: get_session(session_id="{v.session_id}", wait_seconds=45) waits for the turn to end.'
        )
    elif v.status in ENDED_SESSION:
        lines.append(f"The session is {v.status}; start a new one with start_session.")
    else:
        lines.append(_next_steps_after_rest(v.session_id))
    return "\n".join(lines)


def render_sessions(page: SessionList) -> str:
    if not page.sessions:
        return "No sessions. Start one with start_session(agent=..., message=...)."
    lines = [f"{len(page.sessions)} session(s), newest first:"]
    for s in page.sessions:
        lines.append(
            f"- {s.session_id} agent={s.agent} status={s.status} turns={s.turn_count} updated={s.updated_at}"
            + (f" title={json.dumps(s.title, ensure_ascii=False)}" if s.title else "")
            + (f" tags={','.join(s.tags)}" if s.tags else "")
        )
    if page.next_cursor:
        lines.append(f'More: list_sessions(cursor="{page.next_cursor}") with the same filters.')
    return "\n".join(lines)


def render_close(c: CloseResult) -> str:
    if c.status == "closed":
        return f"Session {c.session_id} is closed ({c.closed_reason}). It stays readable with get_session."
    return (
        f"Session {c.session_id} is closing: its running turn is being cancelled. "
        f'Check with get_session(session_id="{c.session_id}").'
    )


def render_pending_list(v: PendingList) -> str:
    if not v.pending and not v.drafts:
        return "Nothing is waiting for a decision of yours."
    lines = [f"{len(v.pending)} interrupt(s) wait for a decision:"] if v.pending else []
    for item in v.pending:
        lines.append(f"Session {item.session_id} (agent {item.agent}, of {item.owner}):")
        lines += render_pending(item.session_id, [item.interrupt])
    if v.drafts:
        lines.append(f"{len(v.drafts)} draft plan(s) wait for review:")
    for draft in v.drafts:
        lines.append(f"Session {draft.session_id} (agent {draft.agent}, of {draft.owner}):")
        lines += render_draft(draft.session_id, draft.plan)
    return "\n".join(lines)
