"""The tools that read, stop, fork or remove what there is (agents, sessions, queued messages,
pending decisions): their arguments and handlers (rows in tools.py). Each handler makes its own result
from the service's answer; errors become results in turn_calls.py (guarded)."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from parley.runtime.service import ForkRequest, MessagesPage, SessionQuery, SessionService, Waiting
from parley.runtime.session_labels import session_filter
from parley.server.attachment_content import attachment_block
from parley.server.render import (
    render_agents,
    render_close,
    render_pending_list,
    render_session,
    render_sessions,
)
from parley.server.results import ok, outcome_result
from parley.server.session_labels import CreatedAfterArg, CreatedBeforeArg, TagFilterArg, TitleFilterArg
from parley.server.tool_args import MAX_SEQUENCE_NUMBER, SessionIdArg, WaitArg
from parley.server.tool_table import NoArguments, ToolArguments
from parley.server.turn_calls import Caller
from parley.server.wire import (
    AgentList,
    CloseResult,
    DeleteSessionResult,
    PendingList,
    SessionList,
    agent_view,
    draft_item,
    pending_item,
    session_summary,
    session_view,
)


async def list_agents(service: SessionService, caller: Caller, args: NoArguments) -> CallToolResult:
    """List the agents you can start sessions with: name, description, tools and limits."""
    view = AgentList(
        agents=[agent_view(*described) for described in await service.reads.describe_agents(caller.who)],
        models=service.reads.model_names,
    )
    return ok(view, render_agents(view))


class DeleteResult(BaseModel):
    session_id: str
    queued_message_id: str
    status: Literal["deleted", "already deleted"]


class DeleteQueuedMessageArguments(ToolArguments):
    session_id: SessionIdArg
    queued_message_id: Annotated[
        str, Field(strict=True, description="The message's id, from get_session's queued_messages.")
    ]


async def delete_queued_message(
    service: SessionService, caller: Caller, args: DeleteQueuedMessageArguments
) -> CallToolResult:
    """Drop a message that no turn has taken yet. Deleting it again changes nothing."""
    session_id, queued_message_id = args.session_id, args.queued_message_id
    status = await service.messages.delete_queued_message(caller.who, session_id, queued_message_id)
    view = DeleteResult(session_id=session_id, queued_message_id=queued_message_id, status=status)
    return ok(view, f"Message {queued_message_id} of session {session_id}: {status}.")


class DiscardPlanArguments(ToolArguments):
    session_id: SessionIdArg


async def discard_plan(service: SessionService, caller: Caller, args: DiscardPlanArguments) -> CallToolResult:
    """Drop a session's draft plan without acting on it and leave plan mode; the next message is
    an ordinary turn. Refused, and nothing changes, when the session has no draft and is not in
    plan mode, or a turn is running."""
    session = await service.plans.discard_plan(caller.who, args.session_id)
    view = session_summary(session)
    return ok(
        view, f"Session {session.id}: the draft plan was discarded; the next message is an ordinary turn."
    )


class ReplaySessionArguments(ToolArguments):
    session_id: SessionIdArg
    agent: Annotated[
        str | None,
        Field(
            strict=True,
            description="The agent to replay it on (default: the session's own, as configured now).",
        ),
    ] = None


async def replay_session(
    service: SessionService, caller: Caller, args: ReplaySessionArguments
) -> CallToolResult:
    """Replay a session: a new session (yours, tagged eval and replay) sends its messages again,
    turn by turn, on the agent as configured now. Only tools the configuration classifies as read
    run; any other call gets the original's recorded result for the same tool and arguments, or a
    "not replayed" result: a replay never repeats a write. Your own sessions; with parley:admin,
    anyone's. Follow it with get_session."""
    session = await service.replays.replay(caller.who, args.session_id, args.agent)
    view = session_summary(session)
    return ok(
        view,
        f"Session {session.id} replays {args.session_id} on agent {session.agent}; its turns run one by "
        f'one. Follow it with get_session(session_id="{session.id}", wait_seconds=45).',
    )


class GetSessionArguments(ToolArguments):
    session_id: SessionIdArg
    wait_seconds: WaitArg = None
    messages_from: Annotated[
        int | None,
        Field(
            strict=True,
            ge=1,
            le=MAX_SEQUENCE_NUMBER,
            description="First message sequence number to return (default: the latest).",
        ),
    ] = None
    messages_limit: Annotated[
        int | None,
        Field(
            strict=True,
            ge=1,
            le=200,
            description="How many messages to return (default 50, at most 200).",
        ),
    ] = None
    attachment: Annotated[
        str | None,
        Field(
            strict=True,
            pattern="^[0-9a-fA-F]{64}$",
            description=(
                "The sha256 of an attachment a message of this session carried (from its attachments): "
                "its bytes come back as one more content block (an image, audio or an embedded resource)."
            ),
        ),
    ] = None


async def get_session(service: SessionService, caller: Caller, args: GetSessionArguments) -> CallToolResult:
    """Read a session: status, queued messages, recent messages, the last turn, usage.

    With wait_seconds, first wait (bounded) until a running session rests."""
    who, session_id = caller.who, args.session_id
    blob = await service.reads.attachment(who, session_id, args.attachment) if args.attachment else None
    snapshot = await service.reads.get_session(
        who,
        session_id,
        MessagesPage(start=args.messages_from, limit=args.messages_limit),
        Waiting(seconds=args.wait_seconds, on_progress=caller.progress),
    )
    last = await service.reads.turn_outcome(snapshot.last_turn) if snapshot.last_turn else None
    view = session_view(snapshot, last)
    result = ok(view, render_session(view))
    if blob is not None:
        result.content.append(attachment_block(view.session_id, blob))
    return result


class ListPendingArguments(ToolArguments):
    limit: Annotated[int, Field(strict=True, ge=1, le=200, description="At most this many (1 to 200).")] = 50


async def list_pending(service: SessionService, caller: Caller, args: ListPendingArguments) -> CallToolResult:
    """List the approvals, questions and draft plans waiting for your decision, oldest first: those
    of your own sessions, and those of the agents you approve for (whoever owns the session)."""
    reads = service.reads
    found = await reads.list_pending(caller.who, args.limit)
    drafts = await reads.list_drafts(caller.who, args.limit)
    view = PendingList(
        pending=[pending_item(p, reads.decider(caller.who, p)) for p in found],
        drafts=[draft_item(d, reads.decider(caller.who, d)) for d in drafts],
    )
    return ok(view, render_pending_list(view))


class ListSessionsArguments(ToolArguments):
    status: Annotated[
        str | None,
        Field(strict=True, description="Only sessions with this status (idle, running, closed, ...)."),
    ] = None
    agent: Annotated[str | None, Field(strict=True, description="Only sessions of this agent.")] = None
    title: TitleFilterArg = None
    tag: TagFilterArg = None
    created_after: CreatedAfterArg = None
    created_before: CreatedBeforeArg = None
    limit: Annotated[int, Field(strict=True, ge=1, le=100, description="Page size (1 to 100).")] = 20
    cursor: Annotated[str | None, Field(strict=True, description="next_cursor from the previous page.")] = (
        None
    )
    owner: Annotated[
        str | None,
        Field(
            strict=True,
            description="Callers with the parley:admin scope: only this principal's sessions (default: everyone's).",
        ),
    ] = None


async def list_sessions(
    service: SessionService, caller: Caller, args: ListSessionsArguments
) -> CallToolResult:
    """List your sessions, newest first, a page at a time; narrow them by status, agent, title
    text, tag and creation time (pass the same narrowing with each page's cursor)."""
    match = session_filter(args.title, args.tag, args.created_after, args.created_before)
    sessions, next_cursor = await service.reads.list_sessions(
        caller.who,
        SessionQuery(
            limit=args.limit,
            status=args.status,
            agent=args.agent,
            cursor=args.cursor,
            owner=args.owner,
            match=match,
        ),
    )
    view = SessionList(sessions=[session_summary(s) for s in sessions], next_cursor=next_cursor)
    return ok(view, render_sessions(view))


class CancelTurnArguments(ToolArguments):
    session_id: SessionIdArg
    turn_id: Annotated[
        str | None,
        Field(
            strict=True,
            description="Cancel only if this turn is still the running one (a stale cancel does nothing).",
        ),
    ] = None
    wait_seconds: WaitArg = None


async def cancel_turn(service: SessionService, caller: Caller, args: CancelTurnArguments) -> CallToolResult:
    """Stop the session's running turn now. A tool call that already started finishes and its
    result is kept; queued messages still run. Cancelling when nothing runs changes nothing."""
    outcome = await service.lifecycle.cancel_turn(
        caller.who,
        args.session_id,
        Waiting(seconds=args.wait_seconds, on_progress=caller.progress),
        args.turn_id,
    )
    return outcome_result(outcome)


class EndSessionArguments(ToolArguments):
    session_id: SessionIdArg
    wait_seconds: WaitArg = None


async def close_session(service: SessionService, caller: Caller, args: EndSessionArguments) -> CallToolResult:
    """End a session: cancel its running turn, drop its queued messages, take no more messages.
    It stays readable with get_session."""
    session = await service.lifecycle.close_session(caller.who, args.session_id, args.wait_seconds)
    view = CloseResult(session_id=session.id, status=session.status, closed_reason=session.closed_reason)
    return ok(view, render_close(view))


async def delete_session(
    service: SessionService, caller: Caller, args: EndSessionArguments
) -> CallToolResult:
    """Delete a session and everything of it (its transcript, turns, events, queue, tasks); the
    audit keeps the fact. A session running a turn is closed first (the turn cancelled) and
    deleted as soon as it rests."""
    status = await service.lifecycle.delete_session(caller.who, args.session_id, args.wait_seconds)
    view = DeleteSessionResult(session_id=args.session_id, status=status)
    return ok(view, f"Session {args.session_id}: {status}. It is gone for good; the audit keeps the fact.")


class ForkSessionArguments(ToolArguments):
    session_id: SessionIdArg
    at_turn: Annotated[
        int,
        Field(
            strict=True,
            ge=0,
            le=MAX_SEQUENCE_NUMBER,
            description="The turn (its seq, from 1) whose end the fork starts from; 0: before the first turn.",
        ),
    ]
    agent_version: Annotated[
        str | None,
        Field(
            strict=True,
            max_length=200,
            description="Run every turn of the fork on this version of the agent (its live one, or one a "
            "turn ran on: get_session's turns name them). Leave it out for the agent as configured now.",
        ),
    ] = None
    title: Annotated[
        str | None,
        Field(strict=True, max_length=400, description="The fork's title (default: the original's)."),
    ] = None


async def fork_session(service: SessionService, caller: Caller, args: ForkSessionArguments) -> CallToolResult:
    """Make a new session of yours from a session you can read, as it was at the end of one of
    its turns: its transcript, attachments and plan up to then. The fork starts idle; send_message
    continues it. The original is never changed. Pin the fork's turns to an agent version to try
    that version on the same conversation."""
    session = await service.forks.fork_session(
        caller.who,
        ForkRequest(
            session_id=args.session_id,
            at_turn=args.at_turn,
            agent_version=args.agent_version,
            title=args.title,
        ),
    )
    view = session_summary(session)
    pinned = f", every turn on agent version {session.agent_version_pin}" if session.agent_version_pin else ""
    return ok(
        view,
        f"Session {session.id} is a fork of {args.session_id} at turn {args.at_turn}{pinned}; it is idle with "
        f"{session.turn_count} turn(s). Continue it with send_message(session_id={session.id!r}, ...).",
    )
