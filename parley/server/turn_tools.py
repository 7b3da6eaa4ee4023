"""The tools that start or resume a turn: their arguments and handlers (rows in tools.py). Each
handler is only its service call; the caller's identity, progress and questions come with it
(`caller.who`, `caller.waiting(...)`), the rest is the one path of turn_calls.py."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from parley.runtime.decisions import Decision
from parley.runtime.service import QuestionAnswer, SendRequest, SessionService, StartRequest, TurnOutcome
from parley.server.tool_args import (
    AttachmentsArg,
    ClientMessageIdArg,
    DecisionArg,
    SessionIdArg,
    SettingsArg,
    WaitArg,
)
from parley.server.tool_table import TurnArguments
from parley.server.turn_calls import Caller


class StartSessionArguments(TurnArguments):
    agent: Annotated[str, Field(strict=True, description="Name of the agent, from list_agents.")]
    message: Annotated[
        str | None, Field(strict=True, description="The first message; omit to only create the session.")
    ] = None
    kind: Annotated[
        Literal["chat", "task"] | None,
        Field(  # a Literal matches exactly already (pydantic refuses strict=True on one)
            description=(
                "'chat' (a conversation) or 'task' (ends when the agent hands in a checked result); "
                "default: the agent's default_kind."
            ),
        ),
    ] = None
    inputs: Annotated[
        dict[str, Any] | None,
        Field(strict=True, description="Inputs checked against the agent's input_schema (list_agents)."),
    ] = None
    client_message_id: ClientMessageIdArg = None
    settings: SettingsArg = None
    attachments: AttachmentsArg = None
    plan: Annotated[
        bool | None,
        Field(
            strict=True,
            description=(
                "Agents with plan mode: true makes the first turn a planning turn (read-only; it "
                "writes a plan you approve with execute_plan); default: the agent's plan_mode."
            ),
        ),
    ] = None
    wait_seconds: WaitArg = None


async def start_session(service: SessionService, caller: Caller, args: StartSessionArguments) -> TurnOutcome:
    """Start a session with an agent and, given a message or inputs, wait for its first turn.

    Returns a turn outcome: status 'answered' with the answer, 'completed' with a task's result,
    'running' if the turn outlasted wait_seconds (then call get_session with wait_seconds), or
    'failed'/'cancelled'. Keep the session_id to continue with send_message."""
    return await service.messages.start_session(
        caller.who,
        StartRequest(
            agent=args.agent,
            message=args.message,
            kind=args.kind,
            inputs=args.inputs,
            client_message_id=args.client_message_id,
            settings=args.settings,
            attachments=args.attachments,
            plan=args.plan,
        ),
        caller.waiting(args.wait_seconds),
    )


class SendMessageArguments(TurnArguments):
    session_id: SessionIdArg
    message: Annotated[
        str | None,
        Field(strict=True, description="What to say to the agent (leave out only with queued_message_id)."),
    ] = None
    steer: Annotated[
        bool,
        Field(
            strict=True,
            description=(
                "true: stop the running turn after its current step and answer this message next, "
                "instead of queueing it behind the turn."
            ),
        ),
    ] = False
    queued_message_id: Annotated[
        str | None,
        Field(strict=True, description="With steer=true: promote this queued message (from get_session)."),
    ] = None
    client_message_id: ClientMessageIdArg = None
    settings: SettingsArg = None
    attachments: AttachmentsArg = None
    plan: Annotated[
        bool,
        Field(
            strict=True,
            description=(
                "Agents with plan mode: true makes this a planning turn (read-only; it writes a plan "
                "you approve with execute_plan). While a draft waits, every message plans."
            ),
        ),
    ] = False
    wait_seconds: WaitArg = None


async def send_message(service: SessionService, caller: Caller, args: SendMessageArguments) -> TurnOutcome:
    """Send a message to a session and wait for the turn that answers it.

    A message sent while a turn runs is queued and answered in its own turn, in order; with
    steer=true it interrupts the running turn at its next step boundary instead."""
    return await service.messages.send_message(
        caller.who,
        SendRequest(
            session_id=args.session_id,
            message=args.message,
            client_message_id=args.client_message_id,
            steer=args.steer,
            queued_message_id=args.queued_message_id,
            settings=args.settings,
            attachments=args.attachments,
            plan=args.plan,
        ),
        caller.waiting(args.wait_seconds),
    )


class ExecutePlanArguments(TurnArguments):
    session_id: SessionIdArg
    revision: Annotated[
        int,
        Field(
            strict=True,
            ge=1,
            description="The revision of the plan you reviewed (get_session's plan.revision).",
        ),
    ]
    wait_seconds: WaitArg = None


async def execute_plan(service: SessionService, caller: Caller, args: ExecutePlanArguments) -> TurnOutcome:
    """Approve a session's draft plan at exactly this revision, and wait for the turn that carries
    it out with every tool of the agent.

    Refused, and nothing changes, when the plan has moved on to another revision, when the session
    is not waiting for a message, or when another approval came first. Approving the plan grants
    nothing else: a tool call that needs approval still asks."""
    return await service.plans.execute_plan(
        caller.who, args.session_id, args.revision, caller.waiting(args.wait_seconds)
    )


class ApproveArguments(TurnArguments):
    session_id: SessionIdArg
    decisions: Annotated[
        list[DecisionArg],
        Field(
            strict=True,
            min_length=1,
            description="One decision per pending approval (ids from the outcome's 'pending').",
        ),
    ]
    wait_seconds: WaitArg = None


async def approve(service: SessionService, caller: Caller, args: ApproveArguments) -> TurnOutcome:
    """Approve or reject tool calls a session is waiting on, then wait for the resumed turn.

    Approved calls run; a rejected call is not run and the agent reads your reason. Repeating a
    decision that was already made succeeds and changes nothing."""
    decisions = [Decision(d.interrupt_id, d.approved, d.reason) for d in args.decisions]
    return await service.decisions.approve(
        caller.who, args.session_id, decisions, caller.waiting(args.wait_seconds)
    )


class AnswerQuestionArguments(TurnArguments):
    session_id: SessionIdArg
    interrupt_id: Annotated[
        str, Field(strict=True, description="The question's id, from the outcome's 'pending'.")
    ]
    answer: Annotated[
        str | None, Field(strict=True, description="The answer (one of the choices, if it has choices).")
    ] = None
    decline: Annotated[bool, Field(strict=True, description="true to decline to answer.")] = False
    wait_seconds: WaitArg = None


async def answer_question(
    service: SessionService, caller: Caller, args: AnswerQuestionArguments
) -> TurnOutcome:
    """Answer (or decline) a question the agent asked, then wait for the resumed turn."""
    return await service.decisions.answer_question(
        caller.who,
        args.session_id,
        QuestionAnswer(args.interrupt_id, args.answer, args.decline),
        caller.waiting(args.wait_seconds),
    )
