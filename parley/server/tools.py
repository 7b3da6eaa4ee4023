"""The MCP tools parley publishes, on one MCPServer that serves both protocol generations."""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, cast

from anyio.abc import TaskGroup
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.types import (
    INVALID_PARAMS,
    CallToolResult,
    GetPromptResult,
    Icon,
    InputRequiredResult,
    SetLevelRequestParams,
    ToolAnnotations,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from parley.errors import RequestError, StorageUnavailable
from parley.runtime.decisions import Decision
from parley.runtime.mcp_tasks import McpTaskService
from parley.runtime.progress import ProgressFn
from parley.runtime.service import SessionService, TurnOutcome
from parley.server.arguments import SHOWN_CHARS, argument_errors, text_as_sent
from parley.server.client_logs import ClientLogRelay
from parley.server.elicitation import (
    answers_from,
    ask_human_through,
    can_ask_by_input_required,
    input_required,
    retry_state,
)
from parley.server.mcp_tasks import McpTaskGateway
from parley.server.render import render_agents, render_close, render_session, render_sessions
from parley.server.results import error, ok, outcome_result
from parley.server.wire import (
    AgentList,
    CloseResult,
    SessionList,
    SessionView,
    TurnOutcomeView,
    agent_view,
    session_summary,
    session_view,
)

logger = logging.getLogger(__name__)

SERVER_INSTRUCTIONS = (
    "parley runs AI agents as durable sessions. Call list_agents to see the agents, start_session to "
    "begin a conversation, send_message to continue it and get_session to read it or wait for it. "
    "Every result repeats the session_id; keep it, it is the handle of the conversation."
)

# Every argument is strict: "yes" is not true, "1" and true are not 1, 1.5 is not an int.
# Clients that send the wrong JSON type get an error naming the field instead of a guess.
SessionIdArg = Annotated[
    str,
    Field(
        strict=True,
        description="The session's id (ses_ followed by 32 hex digits), from start_session or list_sessions.",
        json_schema_extra={"x-mcp-header": "Session-Id"},
    ),
]
WaitArg = Annotated[
    float | None,
    Field(
        strict=True,  # an int is a float here, a bool is not
        ge=0,
        allow_inf_nan=False,
        description=(
            "How long to wait, in seconds, for the turn to end before returning status 'running' "
            "(default about 45, capped by the server). The turn keeps running either way."
        ),
    ),
]
ClientMessageIdArg = Annotated[
    str | None,
    Field(
        strict=True,
        description=(
            "Your id for this message (e.g. a UUID). A retry with the same id returns the turn the first "
            "call started instead of sending the message twice."
        ),
    ),
]

SettingsArg = Annotated[
    dict[str, Any] | None,
    Field(
        strict=True,
        description=(
            'Session settings from this message\'s turn on, e.g. {"model": "<name>"}: one of the models '
            "this server offers (see list_agents). A running turn keeps its settings."
        ),
    ),
]

# Message sequence numbers are SQLite integers (signed 64-bit).
MAX_SEQUENCE_NUMBER = 2**63 - 1

# Principal of every stdio caller; HTTP callers get theirs from authentication.
LOCAL_PRINCIPAL = "local"

OwnerOf = Callable[[Context], str]


def _outcome_or_ask(ctx: Context, outcome: TurnOutcome, asked: list[str]) -> CallToolResult:
    """The turn outcome, or, for a 2026-07-28 client that can show forms, an input-required result
    asking for the interrupts it was not asked about yet in this call."""
    fresh = [i for i in outcome.pending if i.id not in asked]
    if outcome.status == "waiting_for_input" and fresh and can_ask_by_input_required(ctx):
        state = {
            "session_id": outcome.session_id,
            "turn_id": outcome.turn_id,
            "asked": [*asked, *(i.id for i in fresh)],
        }
        return cast(CallToolResult, input_required(outcome.pending, state))
    return outcome_result(outcome)


async def _resumed(
    service: SessionService, ctx: Context, owner: str, wait_seconds: float | None
) -> tuple[TurnOutcome | None, list[str]]:
    """On the retry of an input-required round: apply the answers and wait again."""
    state = retry_state(ctx) if can_ask_by_input_required(ctx) else None
    if not state or not state.get("turn_id"):
        return None, []
    pending = await service.pending(owner, str(state["session_id"]))
    outcome = await service.resume_with_answers(
        owner,
        str(state["session_id"]),
        str(state["turn_id"]),
        answers_from(ctx, pending),
        wait_seconds,
        _progress(ctx),
    )
    return outcome, [str(i) for i in state.get("asked", [])]


async def _turn_result(
    service: SessionService,
    ctx: Context,
    owner: str,
    wait_seconds: float | None,
    start: Callable[[], Awaitable[TurnOutcome]],
) -> CallToolResult:
    """The outcome of a call that starts or resumes a turn. The retry of an input-required round
    applies the answers instead of doing `start` again (which would send the message twice)."""
    resumed, asked = await _resumed(service, ctx, owner, wait_seconds)
    if resumed is not None:
        return _outcome_or_ask(ctx, resumed, asked)
    return _outcome_or_ask(ctx, await start(), [])


def _progress(ctx: Context) -> ProgressFn:
    async def report(progress: float, message: str) -> None:
        await ctx.report_progress(progress, None, message)

    return report


class DeleteResult(BaseModel):
    session_id: str
    queued_message_id: str
    status: Literal["deleted", "already deleted"]


class DecisionArg(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    interrupt_id: str = Field(description="The approval's id (int_...).")
    approved: bool = Field(description="true runs the call; false does not.")
    reason: str | None = Field(None, description="Why; the agent reads it.")


async def _guard(tool: str, work: Callable[[], Awaitable[CallToolResult]]) -> CallToolResult:
    """The one place where our errors become tool results.

    (`work` may also return an InputRequiredResult for a 2026-07-28 client: the SDK passes it
    through to the wire; it is typed as a CallToolResult here so the tools keep their output schema.)"""
    try:
        return await work()
    except RequestError as exc:
        logger.info("tool %s refused: %s", tool, type(exc).__name__)
        return error(str(exc))
    except StorageUnavailable as exc:
        # The file's condition, not a bug: no traceback; the store logged the cause once.
        logger.warning("tool %s failed: the database is %s", tool, exc.condition)
        return error(str(exc))
    except Exception:
        ref = uuid.uuid4().hex[:8]
        logger.exception("tool %s failed (ref %s)", tool, ref)
        return error(
            f"parley hit an internal error (ref {ref}); nothing was changed by this call. Try again."
        )


READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
SENDS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
)
DECIDES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
STOPS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)


class ParleyMCPServer(MCPServer[Any]):
    """MCPServer whose argument errors name the field and the fix, that refuses unknown arguments
    (a misspelt optional argument would otherwise be dropped silently), and that passes text
    arguments through as sent (see arguments.py)."""

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        structured_output: bool | None = None,
    ) -> None:
        # Every client's model reads the descriptions on every request: no docstring indentation.
        if description is None and fn.__doc__:
            description = inspect.cleandoc(fn.__doc__)
        super().add_tool(fn, name, title, description, annotations, icons, meta, structured_output)
        tool = self._tool_manager.get_tool(name or fn.__name__)
        if tool is not None:
            tool.fn_metadata = text_as_sent(tool.fn_metadata)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            known = set(tool.parameters.get("properties", {}))
            unknown = sorted(set(arguments) - known)
            if unknown:
                return error(
                    f"Unknown argument(s) {', '.join(repr(u[:SHOWN_CHARS]) for u in unknown)} for {name}; "
                    f"its arguments are: {', '.join(sorted(known)) or 'none'}."
                )
            try:
                tool.fn_metadata.validate_arguments(arguments)
            except ValidationError as exc:
                return error(argument_errors(name, exc))
        return await super().call_tool(name, arguments, context)

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        # The SDK answers an unknown prompt with error code 0 and logs a traceback; it is a bad
        # parameter (-32602), as the specification says.
        if self._prompt_manager.get_prompt(name) is None:
            raise MCPError(
                code=INVALID_PARAMS, message=f"Unknown prompt: {name}. parley publishes no prompts."
            )
        return await super().get_prompt(name, arguments, context)


def build_mcp_server(
    service: SessionService,
    owner_of: OwnerOf,
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
    security = RequestStateSecurity(keys=request_state_keys) if request_state_keys else None
    gateway = McpTaskGateway(tasks, owner_of, watchers)
    mcp = ParleyMCPServer(
        "parley",
        version=version,
        instructions=SERVER_INSTRUCTIONS,
        request_state_security=security,
        extensions=[gateway],
        middleware=[*([logs.middleware] if logs else []), gateway.middleware],
    )
    if logs is not None:
        # MCPServer has no setLevel of its own; registering one also advertises `logging`.
        mcp._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, logs.set_level)

    @mcp.tool(title="List agents", annotations=READ_ONLY)
    async def list_agents() -> Annotated[CallToolResult, AgentList]:
        """List the agents you can start sessions with: name, description, tools and limits."""

        async def work() -> CallToolResult:
            view = AgentList(
                agents=[agent_view(a, offer) for a, offer in await service.describe_agents()],
                models=service.model_names,
            )
            return ok(view, render_agents(view))

        return await _guard("list_agents", work)

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
        wait_seconds: WaitArg = None,
    ) -> Annotated[CallToolResult, TurnOutcomeView]:
        """Start a session with an agent and, given a message or inputs, wait for its first turn.

        Returns a turn outcome: status 'answered' with the answer, 'completed' with a task's result,
        'running' if the turn outlasted wait_seconds (then call get_session with wait_seconds), or
        'failed'/'cancelled'. Keep the session_id to continue with send_message."""

        async def work() -> CallToolResult:
            return await _turn_result(
                service,
                ctx,
                owner_of(ctx),
                wait_seconds,
                lambda: service.start_session(
                    owner_of(ctx),
                    agent,
                    message,
                    wait_seconds,
                    kind=kind,
                    inputs=inputs,
                    client_message_id=client_message_id,
                    on_progress=_progress(ctx),
                    ask_human=ask_human_through(ctx),
                    settings=settings,
                ),
            )

        return await _guard("start_session", work)

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
        wait_seconds: WaitArg = None,
    ) -> Annotated[CallToolResult, TurnOutcomeView]:
        """Send a message to a session and wait for the turn that answers it.

        A message sent while a turn runs is queued and answered in its own turn, in order; with
        steer=true it interrupts the running turn at its next step boundary instead."""

        async def work() -> CallToolResult:
            return await _turn_result(
                service,
                ctx,
                owner_of(ctx),
                wait_seconds,
                lambda: service.send_message(
                    owner_of(ctx),
                    session_id,
                    message,
                    wait_seconds,
                    client_message_id=client_message_id,
                    on_progress=_progress(ctx),
                    ask_human=ask_human_through(ctx),
                    steer=steer,
                    queued_message_id=queued_message_id,
                    settings=settings,
                ),
            )

        return await _guard("send_message", work)

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
            status = await service.delete_queued_message(owner_of(ctx), session_id, queued_message_id)
            view = DeleteResult(session_id=session_id, queued_message_id=queued_message_id, status=status)
            return ok(view, f"Message {queued_message_id} of session {session_id}: {status}.")

        return await _guard("delete_queued_message", work)

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

        async def work() -> CallToolResult:
            return await _turn_result(
                service,
                ctx,
                owner_of(ctx),
                wait_seconds,
                lambda: service.approve(
                    owner_of(ctx),
                    session_id,
                    [Decision(d.interrupt_id, d.approved, d.reason) for d in decisions],
                    wait_seconds,
                    on_progress=_progress(ctx),
                    ask_human=ask_human_through(ctx),
                ),
            )

        return await _guard("approve", work)

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

        async def work() -> CallToolResult:
            return await _turn_result(
                service,
                ctx,
                owner_of(ctx),
                wait_seconds,
                lambda: service.answer_question(
                    owner_of(ctx),
                    session_id,
                    interrupt_id,
                    answer,
                    decline,
                    wait_seconds,
                    on_progress=_progress(ctx),
                    ask_human=ask_human_through(ctx),
                ),
            )

        return await _guard("answer_question", work)

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
    ) -> Annotated[CallToolResult, SessionView]:
        """Read a session: status, queued messages, recent messages, the last turn, usage.

        With wait_seconds, first wait (bounded) until a running session rests."""

        async def work() -> CallToolResult:
            snapshot = await service.get_session(
                owner_of(ctx), session_id, wait_seconds, messages_from, messages_limit, _progress(ctx)
            )
            last = await service.turn_outcome(snapshot.last_turn) if snapshot.last_turn else None
            view = session_view(snapshot, last)
            return ok(view, render_session(view))

        return await _guard("get_session", work)

    @mcp.tool(title="List sessions", annotations=READ_ONLY)
    async def list_sessions(
        ctx: Context,
        status: Annotated[
            str | None,
            Field(strict=True, description="Only sessions with this status (idle, running, closed, ...)."),
        ] = None,
        agent: Annotated[str | None, Field(strict=True, description="Only sessions of this agent.")] = None,
        limit: Annotated[int, Field(strict=True, ge=1, le=100, description="Page size (1 to 100).")] = 20,
        cursor: Annotated[
            str | None, Field(strict=True, description="next_cursor from the previous page.")
        ] = None,
    ) -> Annotated[CallToolResult, SessionList]:
        """List your sessions, newest first, a page at a time."""

        async def work() -> CallToolResult:
            sessions, next_cursor = await service.list_sessions(owner_of(ctx), status, agent, cursor, limit)
            view = SessionList(sessions=[session_summary(s) for s in sessions], next_cursor=next_cursor)
            return ok(view, render_sessions(view))

        return await _guard("list_sessions", work)

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
            outcome = await service.cancel_turn(
                owner_of(ctx), session_id, wait_seconds, _progress(ctx), turn_id
            )
            return outcome_result(outcome)

        return await _guard("cancel_turn", work)

    @mcp.tool(title="Close session", annotations=STOPS)
    async def close_session(
        ctx: Context, session_id: SessionIdArg, wait_seconds: WaitArg = None
    ) -> Annotated[CallToolResult, CloseResult]:
        """End a session: cancel its running turn, drop its queued messages, take no more messages.
        It stays readable with get_session."""

        async def work() -> CallToolResult:
            session = await service.close_session(owner_of(ctx), session_id, wait_seconds)
            view = CloseResult(
                session_id=session.id, status=session.status, closed_reason=session.closed_reason
            )
            return ok(view, render_close(view))

        return await _guard("close_session", work)

    return mcp
