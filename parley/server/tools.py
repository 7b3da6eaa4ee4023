"""The MCP tools parley publishes, on one MCPServer that serves both protocol generations."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from anyio.abc import TaskGroup
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.types import CallToolResult, SetLevelRequestParams
from pydantic import BaseModel, Field

from parley.runtime.decisions import Decision
from parley.runtime.mcp_tasks import McpTaskService
from parley.runtime.service import (
    MessagesPage,
    QuestionAnswer,
    SendRequest,
    SessionQuery,
    SessionService,
    StartRequest,
    Waiting,
)
from parley.runtime.session_labels import session_filter
from parley.server.attachment_content import attachment_block
from parley.server.client_logs import ClientLogRelay
from parley.server.mcp_spans import mcp_session_on_span
from parley.server.mcp_tasks import McpTaskGateway
from parley.server.parley_mcp import ParleyMCPServer
from parley.server.render import (
    render_agents,
    render_close,
    render_pending_list,
    render_session,
    render_sessions,
)
from parley.server.results import ok, outcome_result
from parley.server.session_labels import (
    CreatedAfterArg,
    CreatedBeforeArg,
    TagFilterArg,
    TitleFilterArg,
    register_update_session,
)
from parley.server.tool_args import (
    DECIDES,
    DELETES,
    MAX_SEQUENCE_NUMBER,
    READ_ONLY,
    SENDS,
    STOPS,
    AttachmentsArg,
    ClientMessageIdArg,
    DecisionArg,
    SessionIdArg,
    SettingsArg,
    WaitArg,
)
from parley.server.turn_calls import CallerOf, TurnCalls, guarded, progress_of
from parley.server.wire import (
    AgentList,
    CloseResult,
    DeleteSessionResult,
    PendingList,
    SessionList,
    SessionView,
    TurnOutcomeView,
    agent_view,
    pending_item,
    session_summary,
    session_view,
)

SERVER_INSTRUCTIONS = (
    "parley runs AI agents as durable sessions. Call list_agents to see the agents, start_session to "
    "begin a conversation, send_message to continue it and get_session to read it or wait for it. "
    "Every result repeats the session_id; keep it, it is the handle of the conversation."
)


class DeleteResult(BaseModel):
    session_id: str
    queued_message_id: str
    status: Literal["deleted", "already deleted"]


def build_mcp_server(
    service: SessionService,
    caller_of: CallerOf,
    version: str,
    request_state_keys: list[str] | None = None,
    *,
    tasks: McpTaskService,
    watchers: TaskGroup | None = None,
    logs: ClientLogRelay | None = None,
) -> MCPServer[Any]:
    """The MCP server. `watchers` runs the status notifications of 2025-11-25 tasks; it must
    outlive every connection. `logs` sends callers the log records about their sessions (MCP
    logging); without it the server offers no logging."""
    turns = TurnCalls(service, caller_of)
    security = RequestStateSecurity(keys=request_state_keys) if request_state_keys else None
    gateway = McpTaskGateway(tasks, caller_of, watchers)
    mcp = ParleyMCPServer(
        "parley",
        version=version,
        instructions=SERVER_INSTRUCTIONS,
        request_state_security=security,
        extensions=[gateway],
        middleware=[mcp_session_on_span, *([logs.middleware] if logs else []), gateway.middleware],
    )
    if logs is not None:
        # MCPServer has no setLevel of its own; registering one also advertises `logging`.
        mcp._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, logs.set_level)

    @mcp.tool(title="List agents", annotations=READ_ONLY)
    async def list_agents(ctx: Context) -> Annotated[CallToolResult, AgentList]:
        """List the agents you can start sessions with: name, description, tools and limits."""

        async def work() -> CallToolResult:
            view = AgentList(
                agents=[
                    agent_view(*described)
                    for described in await service.reads.describe_agents(caller_of(ctx))
                ],
                models=service.reads.model_names,
            )
            return ok(view, render_agents(view))

        return await guarded("list_agents", work)

    @mcp.tool(title="Start session", annotations=SENDS)
    async def start_session(
        ctx: Context,
        agent: Annotated[str, Field(strict=True, description="Name of the agent, from list_agents.")],
        message: Annotated[
            str | None, Field(strict=True, description="The first message; omit to only create the session.")
        ] = None,
        kind: Annotated[
            Literal["chat", "task"] | None,
            Field(  # a Literal matches exactly already (pydantic refuses strict=True on one)
                description=(
                    "'chat' (a conversation) or 'task' (ends when the agent hands in a checked result); "
                    "default: the agent's default_kind."
                ),
            ),
        ] = None,
        inputs: Annotated[
            dict[str, Any] | None,
            Field(strict=True, description="Inputs checked against the agent's input_schema (list_agents)."),
        ] = None,
        client_message_id: ClientMessageIdArg = None,
        settings: SettingsArg = None,
        attachments: AttachmentsArg = None,
        wait_seconds: WaitArg = None,
    ) -> Annotated[CallToolResult, TurnOutcomeView]:
        """Start a session with an agent and, given a message or inputs, wait for its first turn.

        Returns a turn outcome: status 'answered' with the answer, 'completed' with a task's result,
        'running' if the turn outlasted wait_seconds (then call get_session with wait_seconds), or
        'failed'/'cancelled'. Keep the session_id to continue with send_message."""

        return await turns.answer(
            "start_session",
            ctx,
            wait_seconds,
            lambda caller: service.messages.start_session(
                caller.who,
                StartRequest(
                    agent=agent,
                    message=message,
                    kind=kind,
                    inputs=inputs,
                    client_message_id=client_message_id,
                    settings=settings,
                    attachments=attachments,
                ),
                caller.waiting(wait_seconds),
            ),
        )

    @mcp.tool(title="Send message", annotations=SENDS)
    async def send_message(
        ctx: Context,
        session_id: SessionIdArg,
        message: Annotated[
            str | None,
            Field(
                strict=True, description="What to say to the agent (leave out only with queued_message_id)."
            ),
        ] = None,
        steer: Annotated[
            bool,
            Field(
                strict=True,
                description=(
                    "true: stop the running turn after its current step and answer this message next, "
                    "instead of queueing it behind the turn."
                ),
            ),
        ] = False,
        queued_message_id: Annotated[
            str | None,
            Field(
                strict=True, description="With steer=true: promote this queued message (from get_session)."
            ),
        ] = None,
        client_message_id: ClientMessageIdArg = None,
        settings: SettingsArg = None,
        attachments: AttachmentsArg = None,
        wait_seconds: WaitArg = None,
    ) -> Annotated[CallToolResult, TurnOutcomeView]:
        """Send a message to a session and wait for the turn that answers it.

        A message sent while a turn runs is queued and answered in its own turn, in order; with
        steer=true it interrupts the running turn at its next step boundary instead."""

        return await turns.answer(
            "send_message",
            ctx,
            wait_seconds,
            lambda caller: service.messages.send_message(
                caller.who,
                SendRequest(
                    session_id=session_id,
                    message=message,
                    client_message_id=client_message_id,
                    steer=steer,
                    queued_message_id=queued_message_id,
                    settings=settings,
                    attachments=attachments,
                ),
                caller.waiting(wait_seconds),
            ),
        )

    @mcp.tool(title="Delete queued message", annotations=STOPS)
    async def delete_queued_message(
        ctx: Context,
        session_id: SessionIdArg,
        queued_message_id: Annotated[
            str, Field(strict=True, description="The message's id, from get_session's queued_messages.")
        ],
    ) -> Annotated[CallToolResult, DeleteResult]:
        """Drop a message that no turn has taken yet. Deleting it again changes nothing."""

        async def work() -> CallToolResult:
            status = await service.messages.delete_queued_message(
                caller_of(ctx), session_id, queued_message_id
            )
            view = DeleteResult(session_id=session_id, queued_message_id=queued_message_id, status=status)
            return ok(view, f"Message {queued_message_id} of session {session_id}: {status}.")

        return await guarded("delete_queued_message", work)

    @mcp.tool(title="Approve", annotations=DECIDES)
    async def approve(
        ctx: Context,
        session_id: SessionIdArg,
        decisions: Annotated[
            list[DecisionArg],
            Field(
                strict=True,
                min_length=1,
                description="One decision per pending approval (ids from the outcome's 'pending').",
            ),
        ],
        wait_seconds: WaitArg = None,
    ) -> Annotated[CallToolResult, TurnOutcomeView]:
        """Approve or reject tool calls a session is waiting on, then wait for the resumed turn.

        Approved calls run; a rejected call is not run and the agent reads your reason. Repeating a
        decision that was already made succeeds and changes nothing."""

        return await turns.answer(
            "approve",
            ctx,
            wait_seconds,
            lambda caller: service.decisions.approve(
                caller.who,
                session_id,
                [Decision(d.interrupt_id, d.approved, d.reason) for d in decisions],
                caller.waiting(wait_seconds),
            ),
        )

    @mcp.tool(title="Answer question", annotations=DECIDES)
    async def answer_question(
        ctx: Context,
        session_id: SessionIdArg,
        interrupt_id: Annotated[
            str, Field(strict=True, description="The question's id, from the outcome's 'pending'.")
        ],
        answer: Annotated[
            str | None, Field(strict=True, description="The answer (one of the choices, if it has choices).")
        ] = None,
        decline: Annotated[bool, Field(strict=True, description="true to decline to answer.")] = False,
        wait_seconds: WaitArg = None,
    ) -> Annotated[CallToolResult, TurnOutcomeView]:
        """Answer (or decline) a question the agent asked, then wait for the resumed turn."""

        return await turns.answer(
            "answer_question",
            ctx,
            wait_seconds,
            lambda caller: service.decisions.answer_question(
                caller.who,
                session_id,
                QuestionAnswer(interrupt_id, answer, decline),
                caller.waiting(wait_seconds),
            ),
        )

    @mcp.tool(title="Get session", annotations=READ_ONLY)
    async def get_session(
        ctx: Context,
        session_id: SessionIdArg,
        wait_seconds: WaitArg = None,
        messages_from: Annotated[
            int | None,
            Field(
                strict=True,
                ge=1,
                le=MAX_SEQUENCE_NUMBER,
                description="First message sequence number to return (default: the latest).",
            ),
        ] = None,
        messages_limit: Annotated[
            int | None,
            Field(
                strict=True,
                ge=1,
                le=200,
                description="How many messages to return (default 50, at most 200).",
            ),
        ] = None,
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
        ] = None,
    ) -> Annotated[CallToolResult, SessionView]:
        """Read a session: status, queued messages, recent messages, the last turn, usage.

        With wait_seconds, first wait (bounded) until a running session rests."""

        async def work() -> CallToolResult:
            reads = service.reads
            blob = await reads.attachment(caller_of(ctx), session_id, attachment) if attachment else None
            snapshot = await reads.get_session(
                caller_of(ctx),
                session_id,
                MessagesPage(start=messages_from, limit=messages_limit),
                Waiting(seconds=wait_seconds, on_progress=progress_of(ctx)),
            )
            last = await reads.turn_outcome(snapshot.last_turn) if snapshot.last_turn else None
            view = session_view(snapshot, last)
            result = ok(view, render_session(view))
            if blob is not None:
                result.content.append(attachment_block(view.session_id, blob))
            return result

        return await guarded("get_session", work)

    @mcp.tool(title="List pending", annotations=READ_ONLY)
    async def list_pending(
        ctx: Context,
        limit: Annotated[
            int, Field(strict=True, ge=1, le=200, description="At most this many (1 to 200).")
        ] = 50,
    ) -> Annotated[CallToolResult, PendingList]:
        """List the approvals and questions waiting for your decision, oldest first: those of your own
        sessions, and those of the agents you approve for (whoever owns the session)."""

        async def work() -> CallToolResult:
            found = await service.reads.list_pending(caller_of(ctx), limit)
            view = PendingList(
                pending=[pending_item(p, service.reads.decider(caller_of(ctx), p)) for p in found]
            )
            return ok(view, render_pending_list(view))

        return await guarded("list_pending", work)

    @mcp.tool(title="List sessions", annotations=READ_ONLY)
    async def list_sessions(
        ctx: Context,
        status: Annotated[
            str | None,
            Field(strict=True, description="Only sessions with this status (idle, running, closed, ...)."),
        ] = None,
        agent: Annotated[str | None, Field(strict=True, description="Only sessions of this agent.")] = None,
        title: TitleFilterArg = None,
        tag: TagFilterArg = None,
        created_after: CreatedAfterArg = None,
        created_before: CreatedBeforeArg = None,
        limit: Annotated[int, Field(strict=True, ge=1, le=100, description="Page size (1 to 100).")] = 20,
        cursor: Annotated[
            str | None, Field(strict=True, description="next_cursor from the previous page.")
        ] = None,
        owner: Annotated[
            str | None,
            Field(
                strict=True,
                description="Callers with the parley:admin scope: only this principal's sessions (default: everyone's).",
            ),
        ] = None,
    ) -> Annotated[CallToolResult, SessionList]:
        """List your sessions, newest first, a page at a time; narrow them by status, agent, title
        text, tag and creation time (pass the same narrowing with each page's cursor)."""

        async def work() -> CallToolResult:
            match = session_filter(title, tag, created_after, created_before)
            sessions, next_cursor = await service.reads.list_sessions(
                caller_of(ctx),
                SessionQuery(
                    limit=limit, status=status, agent=agent, cursor=cursor, owner=owner, match=match
                ),
            )
            view = SessionList(sessions=[session_summary(s) for s in sessions], next_cursor=next_cursor)
            return ok(view, render_sessions(view))

        return await guarded("list_sessions", work)

    @mcp.tool(title="Cancel turn", annotations=STOPS)
    async def cancel_turn(
        ctx: Context,
        session_id: SessionIdArg,
        turn_id: Annotated[
            str | None,
            Field(
                strict=True,
                description="Cancel only if this turn is still the running one (a stale cancel does nothing).",
            ),
        ] = None,
        wait_seconds: WaitArg = None,
    ) -> Annotated[CallToolResult, TurnOutcomeView]:
        """Stop the session's running turn now. A tool call that already started finishes and its
        result is kept; queued messages still run. Cancelling when nothing runs changes nothing."""

        async def work() -> CallToolResult:
            outcome = await service.lifecycle.cancel_turn(
                caller_of(ctx),
                session_id,
                Waiting(seconds=wait_seconds, on_progress=progress_of(ctx)),
                turn_id,
            )
            return outcome_result(outcome)

        return await guarded("cancel_turn", work)

    @mcp.tool(title="Close session", annotations=STOPS)
    async def close_session(
        ctx: Context, session_id: SessionIdArg, wait_seconds: WaitArg = None
    ) -> Annotated[CallToolResult, CloseResult]:
        """End a session: cancel its running turn, drop its queued messages, take no more messages.
        It stays readable with get_session."""

        async def work() -> CallToolResult:
            session = await service.lifecycle.close_session(caller_of(ctx), session_id, wait_seconds)
            view = CloseResult(
                session_id=session.id, status=session.status, closed_reason=session.closed_reason
            )
            return ok(view, render_close(view))

        return await guarded("close_session", work)

    @mcp.tool(title="Delete session", annotations=DELETES)
    async def delete_session(
        ctx: Context, session_id: SessionIdArg, wait_seconds: WaitArg = None
    ) -> Annotated[CallToolResult, DeleteSessionResult]:
        """Delete a session and everything of it (its transcript, turns, events, queue, tasks); the
        audit keeps the fact. A session running a turn is closed first (the turn cancelled) and
        deleted as soon as it rests."""

        async def work() -> CallToolResult:
            status = await service.lifecycle.delete_session(caller_of(ctx), session_id, wait_seconds)
            view = DeleteSessionResult(session_id=session_id, status=status)
            return ok(view, f"Session {session_id}: {status}. It is gone for good; the audit keeps the fact.")

        return await guarded("delete_session", work)

    register_update_session(mcp, service, caller_of)
    return mcp
