"""The MCP tools parley publishes, on one MCPServer that serves both protocol generations: the
table below declares each once (its handler, arguments and output live in turn_tools.py,
session_tools.py, session_labels.py and schedule_tools.py; tool_table.py makes SDK tools of the
rows). See
docs/design.md#tools."""

from __future__ import annotations

from typing import Any, cast

from anyio.abc import TaskGroup
from mcp.server.mcpserver import MCPServer, RequestStateSecurity
from mcp.types import SetLevelRequestParams, Tool

from parley.runtime.access import LOCAL_PRINCIPAL
from parley.runtime.mcp_tasks import McpTaskService
from parley.runtime.service import SessionService
from parley.sdk_compat import lowlevel_server
from parley.server import schedule_tools as sch
from parley.server import session_tools as s
from parley.server import turn_tools as t
from parley.server.client_logs import ClientLogRelay
from parley.server.mcp_spans import mcp_session_on_span
from parley.server.mcp_tasks import McpTaskGateway
from parley.server.parley_mcp import ParleyMCPServer
from parley.server.session_labels import LABELS, UpdateSessionArguments, update_session
from parley.server.tool_args import CREATES, DECIDES, DELETES, READ_ONLY, SENDS, STOPS
from parley.server.tool_listing import ToolListingCache
from parley.server.tool_table import Entry, NoArguments, ToolEntry, TurnEntry, sdk_tools
from parley.server.turn_calls import CallerOf, ToolCalls
from parley.server.wire import (
    AgentList,
    CloseResult,
    DeleteSessionResult,
    PendingList,
    SessionList,
    SessionSummary,
    SessionView,
    TurnOutcomeView,
)

SERVER_INSTRUCTIONS = (
    "parley runs AI agents as durable sessions. Call list_agents to see the agents, start_session to "
    "begin a conversation, send_message to continue it and get_session to read it or wait for it. "
    "Every result repeats the session_id; keep it, it is the handle of the conversation."
)

# Every tool, in the order tools/list gives them. TurnEntry: it starts or resumes a turn, answers
# with the turn's outcome, and may run as an MCP task.
# fmt: off
TOOLS: tuple[Entry, ...] = (
    ToolEntry("list_agents", "List agents", READ_ONLY, s.list_agents, NoArguments, AgentList),
    TurnEntry("start_session", "Start session", SENDS, t.start_session, t.StartSessionArguments),
    TurnEntry("send_message", "Send message", SENDS, t.send_message, t.SendMessageArguments),
    ToolEntry("delete_queued_message", "Delete queued message", STOPS, s.delete_queued_message,
              s.DeleteQueuedMessageArguments, s.DeleteResult),
    TurnEntry("approve", "Approve", DECIDES, t.approve, t.ApproveArguments),
    TurnEntry("answer_question", "Answer question", DECIDES, t.answer_question, t.AnswerQuestionArguments),
    TurnEntry("execute_plan", "Execute plan", DECIDES, t.execute_plan, t.ExecutePlanArguments),
    ToolEntry("discard_plan", "Discard plan", STOPS, s.discard_plan, s.DiscardPlanArguments, SessionSummary),
    ToolEntry("get_session", "Get session", READ_ONLY, s.get_session, s.GetSessionArguments, SessionView),
    ToolEntry("list_pending", "List pending", READ_ONLY, s.list_pending, s.ListPendingArguments, PendingList),
    ToolEntry("list_sessions", "List sessions", READ_ONLY, s.list_sessions, s.ListSessionsArguments,
              SessionList),
    ToolEntry("cancel_turn", "Cancel turn", STOPS, s.cancel_turn, s.CancelTurnArguments, TurnOutcomeView),
    ToolEntry("close_session", "Close session", STOPS, s.close_session, s.EndSessionArguments, CloseResult),
    ToolEntry("delete_session", "Delete session", DELETES, s.delete_session, s.EndSessionArguments,
              DeleteSessionResult),
    ToolEntry("update_session", "Update session", LABELS, update_session, UpdateSessionArguments,
              SessionSummary),
    ToolEntry("fork_session", "Fork session", CREATES, s.fork_session, s.ForkSessionArguments,
              SessionSummary),
    ToolEntry("replay_session", "Replay session", SENDS, s.replay_session, s.ReplaySessionArguments,
              SessionSummary),
    ToolEntry("create_schedule", "Create schedule", CREATES, sch.create_schedule, sch.CreateScheduleArguments,
              sch.ScheduleChange),
    ToolEntry("list_schedules", "List schedules", READ_ONLY, sch.list_schedules, NoArguments, sch.ScheduleList),
    ToolEntry("pause_schedule", "Pause schedule", sch.SCHEDULE_CHANGES, sch.pause_schedule,
              sch.ScheduleNameArguments, sch.ScheduleChange),
    ToolEntry("resume_schedule", "Resume schedule", sch.SCHEDULE_CHANGES, sch.resume_schedule,
              sch.ScheduleNameArguments, sch.ScheduleChange),
    ToolEntry("delete_schedule", "Delete schedule", DELETES, sch.delete_schedule, sch.ScheduleNameArguments,
              sch.ScheduleChange),
)
# fmt: on
# The tools that may run as MCP tasks (mcp_tasks.py).
TASK_TOOLS = frozenset(entry.name for entry in TOOLS if entry.starts_turn)


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
    security = RequestStateSecurity(keys=request_state_keys) if request_state_keys else None
    gateway = McpTaskGateway(tasks, caller_of, watchers, TASK_TOOLS)
    mcp = ParleyMCPServer(
        "parley",
        version=version,
        instructions=SERVER_INSTRUCTIONS,
        tools=sdk_tools(TOOLS, service, ToolCalls(service, caller_of)),
        request_state_security=security,
        extensions=[gateway],
        middleware=[
            mcp_session_on_span,
            *([logs.middleware] if logs else []),
            ToolListingCache().middleware,  # outside the gateway, which adds task support to a listing
            gateway.middleware,
        ],
    )
    if logs is not None:
        # MCPServer has no setLevel of its own; registering one also advertises `logging`.
        lowlevel_server(mcp).add_request_handler("logging/setLevel", SetLevelRequestParams, logs.set_level)
    return mcp


async def listed_tools() -> list[Tool]:
    """The tools as tools/list gives them, for what reads the published schemas without a running
    parley: the docs' tools reference, the tests of the published schemas, bench/schema_cost.py.
    Listing touches neither the session service nor the task service, so neither is built."""
    server = build_mcp_server(cast(Any, None), lambda ctx: LOCAL_PRINCIPAL, "0", tasks=cast(Any, None))
    return list(await server.list_tools())
