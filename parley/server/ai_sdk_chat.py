"""The AI SDK chat protocol (the `ai` package's `DefaultChatTransport`, versions 6 and 7): any app
built on `useChat` (or assistant-ui) is a parley client. `?ai_sdk=7` adds the chunks only version 7
knows (ai_sdk_parts.py).

- `POST /v1/chat?agent=NAME` takes the SDK's request body `{id, messages, trigger, messageId}`. The
  chat `id` is the client's: it maps to one parley session per owner (the session started with the
  client_message_id `chat:<id>`; another owner's same id is another session). The last message
  decides what happens: a user message is sent (its `id` is the client_message_id, so a retried
  request answers with the same turn; `metadata.parley.plan: true` makes it a planning turn, and a
  chat's first message plans when its agent has plan mode unless that says false); a user message
  with a data part `{"type": "data-parley-execute-plan", "data": {"revision": N}}` approves the draft
  plan at revision N instead (execute_plan, via "ai_sdk"; its text, if any, is not sent) and the
  stream shows the executing turn; an assistant message carries the app's answers: tool parts in
  `approval-responded` approve or reject their interrupt (`addToolApprovalResponse`), tool parts
  with an output answer the question their call asked (`addToolOutput`; an `output-error` declines).
  The answer is the turn's assistant message as a UI message stream: Server-Sent Events of JSON
  parts (ai_sdk_parts.py), the header the SDK requires, then `data: [DONE]`. The stream ends when the
  turn ends, or when it waits for an approval or an answer (finish reason `tool-calls`).
- `GET /v1/chat/{id}/messages` is the chat's history as UI messages (ai_sdk_history.py), for
  `useChat({messages})` after a reload; a chat id the caller never used has an empty history.
- `GET /v1/chat/{id}/stream` replays the unfinished turn of the chat from its first part and follows
  it live (`useChat({resume: true})`); 204 when no turn is unfinished.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from parley.core.ids import QueuedMessageId, SessionId, TurnId
from parley.core.records import EventRecord, QueuedMessageRecord, SessionRecord
from parley.core.states import TURN_ENDED
from parley.errors import RequestError
from parley.runtime.access import Principal
from parley.runtime.decisions import Decision
from parley.runtime.service import QuestionAnswer, SendRequest, StartRequest, Waiting
from parley.runtime.session_events import EVENT_PAGE, Idle, Reset
from parley.server.ai_sdk_files import file_attachments
from parley.server.ai_sdk_history import TurnHistory, UIMessage, turn_messages
from parley.server.ai_sdk_parts import EXECUTE_PLAN_PART, Chunk, TurnRenderer, plan_chunks
from parley.server.json_text import check_unicode
from parley.server.sse import SseResponse, comment
from parley.server.v1_common import BadRequest, V1Context, caller, guarded, json_body

# The AI SDK releases whose protocol this speaks (their headers and chunk types were read from them).
AI_SDK_VERSION = "7.0.173"
AI_SDK6_VERSION = "6.0.325"
# The SDK refuses a UI message stream without this header.
UI_STREAM_HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}
DONE = b"data: [DONE]\n\n"
MAX_CHAT_ID_CHARS = 256
_PLAIN_KEY = re.compile(r"[A-Za-z0-9._:-]{1,100}")


class ChatConflict(RequestError):
    """The chat id is a conversation with another agent."""

    def __init__(self, chat_id: str, agent: str, asked: str) -> None:
        super().__init__(
            f"Chat '{chat_id[:60]}' is a conversation with agent '{agent}', not '{asked}'; use a new chat "
            f"id for '{asked}', or ?agent={agent}."
        )


def _key(prefix: str, value: str) -> str:
    """A client_message_id for a client-chosen id: as it is when it is one, else its digest."""
    if _PLAIN_KEY.fullmatch(value):
        return f"{prefix}:{value}"
    return f"{prefix}-h:{hashlib.sha256(value.encode()).hexdigest()[:40]}"


def chat_key(chat_id: str) -> str:
    return _key("chat", chat_id)


def message_key(message_id: str) -> str:
    return _key("m", message_id)


def chunk_frame(chunk: Chunk) -> bytes:
    return b"data: " + json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


@dataclass(slots=True)
class _Target:
    """What a chat stream shows: the turn of `turn_id`, or (until it starts) of `message_id`."""

    session_id: SessionId
    after: int
    turn_id: TurnId | None = None
    message_id: QueuedMessageId | None = None
    # The app reads AI SDK 7's own chunks (`?ai_sdk=7`).
    v7: bool = False


def _wants_v7(request: Request) -> bool:
    """`?ai_sdk=7`: the app's SDK is version 7 and takes its chunks that version 6 refuses. The
    request body names no version, so the app says it; without it, chunks both versions take."""
    raw = request.query_params.get("ai_sdk")
    if raw is None or raw == "6":
        return False
    if raw == "7":
        return True
    raise BadRequest(
        f"'ai_sdk' must be 6 or 7 (the major version of the app's `ai` package), got {raw[:20]!r}"
    )


class ChatEndpoints:
    def __init__(self, ctx: V1Context, default_agent: str) -> None:
        self._ctx = ctx
        self._default_agent = default_agent

    def routes(self) -> list[Route]:
        return [
            Route("/v1/chat", guarded(self._post), methods=["POST"]),
            Route("/v1/chat/{chat_id}/stream", guarded(self._resume), methods=["GET"]),
            Route("/v1/chat/{chat_id}/messages", guarded(self._history), methods=["GET"]),
        ]

    async def _post(self, request: Request) -> Response:
        who = caller(request)
        v7 = _wants_v7(request)
        body = await json_body(request)
        check_unicode(body)
        chat_id = _chat_id(body.get("id"))
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
            raise BadRequest("'messages' must be the chat's messages (a non-empty list of UI messages)")
        last: dict[str, Any] = messages[-1]
        agent = request.query_params.get("agent") or self._default_agent
        session = await self._ctx.service.reads.find_started(who, chat_key(chat_id))
        if session is not None and session.agent != agent:
            raise ChatConflict(chat_id, session.agent, agent)
        execute = _execute_part(last) if last.get("role") == "user" else None
        if execute is not None:
            if session is None:
                raise BadRequest(f"chat '{chat_id[:60]}' has no conversation yet, so no plan to execute")
            target = await self._execute(who, session, execute)
        elif last.get("role") == "user":
            target = await self._send(who, chat_id, agent, session, last)
        elif last.get("role") == "assistant":
            if session is None:
                raise BadRequest(f"chat '{chat_id[:60]}' has no conversation yet; send a user message first")
            target = await self._decide(who, session, last)
        else:
            raise BadRequest(
                "the last message must be the user's (to send) or the assistant's (with answers)"
            )
        target.v7 = v7
        return await self._stream(target)

    async def _resume(self, request: Request) -> Response:
        who = caller(request)
        v7 = _wants_v7(request)
        chat_id = _chat_id(request.path_params["chat_id"])
        session = await self._ctx.service.reads.find_started(who, chat_key(chat_id))
        turn_id = session.current_turn_id if session is not None else None
        if session is None or turn_id is None:
            return Response(status_code=204)
        start = await self._ctx.events.turn_start(session.id, turn_id)
        if start is None:
            return Response(status_code=204)
        return await self._stream(_Target(session.id, start, turn_id=turn_id, v7=v7))

    async def _history(self, request: Request) -> Response:
        who = caller(request)
        chat_id = _chat_id(request.path_params["chat_id"])
        session = await self._ctx.service.reads.find_started(who, chat_key(chat_id))
        messages: list[UIMessage] = []
        if session is not None:
            for turn in await self._turns(who, session.id):
                messages += turn_messages(session.id, turn, self._ctx.base_path)
        return JSONResponse({"id": chat_id, "messages": messages})

    async def _turns(self, who: Principal, session_id: SessionId) -> list[TurnHistory]:
        """The chat's ended or waiting turns in order (the running one is the stream's to resume)."""
        reads = self._ctx.service.reads
        current = (await self._ctx.service.access.visible(who, session_id)).current_turn_id
        by_turn: dict[str, list[QueuedMessageRecord]] = {}
        for queued in await reads.sent_messages(who, session_id):
            if queued.turn_id is not None:
                by_turn.setdefault(queued.turn_id, []).append(queued)
        grouped: dict[str, list[EventRecord]] = {}
        early: dict[str, list[EventRecord]] = {}
        waiting: list[EventRecord] = []
        after = 0
        while found := await self._ctx.events.read(session_id, after, EVENT_PAGE):
            after = found[-1].seq
            for event in found:
                if event.turn_id is None:
                    waiting += plan_chunks_of(event)
                    continue
                if event.turn_id not in grouped:
                    grouped[event.turn_id], early[event.turn_id], waiting = [], waiting, []
                grouped[event.turn_id].append(event)
        turns: list[TurnHistory] = []
        for turn_id, events in grouped.items():
            if turn_id == current:
                continue
            ended = next((e for e in events if e.kind == "turn_ended"), None)
            status = str(ended.data.get("status")) if ended else "waiting_for_input"
            page = await self._ctx.events.page(session_id, events)
            error = ended.data.get("error") if ended else None
            turns.append(TurnHistory(turn_id, by_turn.get(turn_id, []), page, status, error, early[turn_id]))
        return turns

    async def _send(
        self, who: Principal, chat_id: str, agent: str, session: SessionRecord | None, message: dict[str, Any]
    ) -> _Target:
        messages, events = self._ctx.service.messages, self._ctx.events
        text = _user_text(message)
        # Checked before anything starts: a refused file starts no session.
        attachments = file_attachments(message)
        self._ctx.service.reads.check_attachments(attachments)
        plan = _plan_flag(message)
        if plan is None:
            # A chat's first message plans as start_session's would: when its agent has plan mode.
            plan = session is None and any(
                a.name == agent and a.plan_mode for a in self._ctx.service.reads.agents(who)
            )
        raw_id = message.get("id")
        client_message_id = message_key(raw_id) if isinstance(raw_id, str) and raw_id else None
        if session is None:
            started = await messages.start_session(
                who,
                # Started empty with plan=False: each message says whether it plans (below).
                StartRequest(agent=agent, kind="chat", client_message_id=chat_key(chat_id), plan=False),
                Waiting(seconds=0),
            )
            session_id = started.session_id
        else:
            session_id = session.id
        before = await events.latest_seq(session_id)
        sent = await messages.send_message(
            who,
            SendRequest(
                session_id=session_id,
                message=text,
                client_message_id=client_message_id,
                plan=plan,
                attachments=attachments,
            ),
            Waiting(seconds=0),
        )
        target = _Target(session_id, before, turn_id=sent.turn_id, message_id=sent.queued_message_id)
        if sent.turn_id is not None:
            # A retried request (the same message id) shows that message's turn from its start.
            start = await events.turn_start(session_id, sent.turn_id)
            if start is not None:
                target.after = min(before, start)
        return target

    async def _execute(self, who: Principal, session: SessionRecord, revision: int) -> _Target:
        """Approve the draft plan at `revision`; the stream shows the executing turn (a refusal,
        such as a stale revision, is the 409 execute_plan answers with, and changes nothing)."""
        before = await self._ctx.events.latest_seq(session.id)
        outcome = await self._ctx.service.plans.execute_plan(
            who, session.id, revision, Waiting(seconds=0), via="ai_sdk"
        )
        return _Target(session.id, before, turn_id=outcome.turn_id, message_id=outcome.queued_message_id)

    async def _decide(self, who: Principal, session: SessionRecord, message: dict[str, Any]) -> _Target:
        """Apply the answers the assistant message carries to the interrupts still pending."""
        service = self._ctx.service
        before = await self._ctx.events.latest_seq(session.id)
        pending = await service.reads.pending(who, session.id)
        approvals = {i.id: i for i in pending if i.kind == "approval"}
        questions = {i.tool_call_id: i for i in pending if i.kind == "question" and i.tool_call_id}
        decisions: list[Decision] = []
        answers: list[tuple[str, str | None, bool]] = []
        turn_id: TurnId | None = None
        for part in message.get("parts") or []:
            if not isinstance(part, dict):
                continue
            state = part.get("state")
            if state == "approval-responded":
                approval = part.get("approval")
                if not isinstance(approval, dict) or approval.get("id") not in approvals:
                    continue
                if not isinstance(approval.get("approved"), bool):
                    raise BadRequest("a tool part's approval.approved must be true or false")
                reason = approval.get("reason")
                interrupt = approvals[approval["id"]]
                decisions.append(
                    Decision(interrupt.id, approval["approved"], reason if isinstance(reason, str) else None)
                )
                turn_id = interrupt.turn_id
            elif state in ("output-available", "output-error") and part.get("toolCallId") in questions:
                question = questions[part["toolCallId"]]
                if state == "output-error":
                    answers.append((question.id, None, True))
                else:
                    output = part.get("output")
                    answers.append(
                        (question.id, output if isinstance(output, str) else json.dumps(output), False)
                    )
                turn_id = question.turn_id
        if decisions:
            await service.decisions.approve(who, session.id, decisions, Waiting(seconds=0))
        for interrupt_id, answer, decline in answers:
            await service.decisions.answer_question(
                who, session.id, QuestionAnswer(interrupt_id, answer, decline), Waiting(seconds=0)
            )
        if turn_id is None:
            # Nothing left to decide (a retried request): show the turn that is still unfinished.
            latest = await service.access.visible(who, session.id)
            turn_id = latest.current_turn_id
        return _Target(session.id, before, turn_id=turn_id)

    async def _stream(self, target: _Target) -> Response:
        streams = self._ctx.streams
        cut_off = chunk_frame(
            {"type": "error", "errorText": "the stream fell behind and was cut off; resume it"}
        )
        return SseResponse(
            self._frames(target),
            slow_client_s=streams.slow_client_s,
            cut_off=cut_off + DONE,
            headers=UI_STREAM_HEADERS,
        )

    async def _frames(self, target: _Target) -> AsyncGenerator[bytes, None]:
        renderer: TurnRenderer | None = None
        early: list[Chunk] = []
        if target.turn_id is not None:
            renderer = TurnRenderer(target.session_id, target.turn_id, target.v7)
            for chunk in renderer.start():
                yield chunk_frame(chunk)
        elif target.message_id is None:
            # Nothing to show (no turn runs): an empty assistant message.
            yield chunk_frame({"type": "start"})
            yield chunk_frame({"type": "finish", "finishReason": "stop"})
            yield DONE
            return
        # A turn that rests (or waits) already: show what is stored, then finish at once.
        quick = target.turn_id is not None and (await self._turn_state(target))[0] != "running"
        heartbeat = 0.0 if quick else self._ctx.streams.heartbeat_s
        follow = self._ctx.events.follow(target.session_id, target.after, heartbeat)
        async with aclosing(follow) as items:
            async for item in items:
                if isinstance(item, Reset):
                    yield chunk_frame({"type": "error", "errorText": "this turn's events are no longer kept"})
                    yield DONE
                    return
                if isinstance(item, Idle):
                    state, error = await self._turn_state(target)
                    if state == "dropped":
                        yield chunk_frame({"type": "error", "errorText": error or "the message was dropped"})
                        yield DONE
                        return
                    if renderer is not None and state != "running":
                        for chunk in renderer.finish(state, error):
                            yield chunk_frame(chunk)
                        yield DONE
                        return
                    yield comment("keep-alive")
                    continue
                for event in item.events:
                    if event.turn_id is None:
                        # A plan approved or discarded: an approval's events come before its turn,
                        # shown once that starts.
                        plan = plan_chunks(target.session_id, event)
                        if renderer is None:
                            early += plan
                        else:
                            for chunk in plan:
                                yield chunk_frame(chunk)
                        continue
                    if renderer is None:
                        if event.kind != "turn_started" or not await self._is_ours(
                            target, event.turn_id, event.data
                        ):
                            continue
                        target.turn_id = event.turn_id
                        renderer = TurnRenderer(target.session_id, event.turn_id or "", target.v7)
                        for chunk in [*renderer.start(event.data.get("mode")), *early]:
                            yield chunk_frame(chunk)
                    if event.turn_id != target.turn_id:
                        continue
                    for chunk in renderer.event(event, item):
                        yield chunk_frame(chunk)
                    ended = event.kind == "turn_ended"
                    parked = (
                        event.kind == "turn_parked"
                        and event.data.get("waiting_for_input")
                        and event is item.events[-1]
                        and await self._ctx.events.latest_seq(target.session_id) == event.seq
                    )
                    if ended or parked:
                        status = str(event.data.get("status")) if ended else "waiting_for_input"
                        for chunk in renderer.finish(status, event.data.get("error")):
                            yield chunk_frame(chunk)
                        yield DONE
                        return

    async def _is_ours(self, target: _Target, turn_id: TurnId | None, data: dict[str, Any]) -> bool:
        if target.message_id is None:
            return False
        if data.get("queued_message_id") == target.message_id:
            return True
        # A steer takes several messages into one turn; the event names only the first.
        outcome = await self._ctx.service.waits.wait_for_message(target.session_id, target.message_id, 0)
        return outcome.turn_id is not None and outcome.turn_id == turn_id

    async def _turn_state(self, target: _Target) -> tuple[str, str | None]:
        """`running`, `waiting_for_input`, how the turn ended, or `dropped` (the message never ran)."""
        waits = self._ctx.service.waits
        if target.turn_id is not None:
            outcome = await waits.wait_for_turn(target.session_id, target.turn_id, 0)
        else:
            assert target.message_id is not None
            outcome = await waits.wait_for_message(target.session_id, target.message_id, 0)
            if outcome.turn_id is None and outcome.status == "cancelled":
                return "dropped", outcome.error
        status = (
            outcome.status
            if outcome.status in TURN_ENDED or outcome.status == "waiting_for_input"
            else "running"
        )
        return status, outcome.error


def _chat_id(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_CHAT_ID_CHARS:
        raise BadRequest(f"the chat 'id' must be a string of 1 to {MAX_CHAT_ID_CHARS} characters")
    return value


def _execute_part(message: dict[str, Any]) -> int | None:
    """The revision a user message's data-parley-execute-plan part approves (None: it has none)."""
    for part in message.get("parts") or []:
        if isinstance(part, dict) and part.get("type") == EXECUTE_PLAN_PART:
            data = part.get("data")
            revision = data.get("revision") if isinstance(data, dict) else None
            if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
                raise BadRequest(
                    f"the {EXECUTE_PLAN_PART} part's 'data.revision' must be the revision of the plan you "
                    f"reviewed (a whole number from 1, the data-parley-plan part's revision), got "
                    f"{json.dumps(revision)[:40]}; nothing was approved"
                )
            return revision
    return None


def _plan_flag(message: dict[str, Any]) -> bool | None:
    """`metadata.parley.plan` of a user message: true plans, false does not (None: not said)."""
    metadata = message.get("metadata")
    parley = metadata.get("parley") if isinstance(metadata, dict) else None
    plan = parley.get("plan") if isinstance(parley, dict) else None
    if plan is not None and not isinstance(plan, bool):
        raise BadRequest(
            f"the message's 'metadata.parley.plan' must be true or false, got {json.dumps(plan)[:40]}"
        )
    return plan


def _user_text(message: dict[str, Any]) -> str:
    parts = message.get("parts")
    texts = [
        p["text"]
        for p in parts or []
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
    ]
    if not texts:
        raise BadRequest("the last user message has no text part; parley sends text")
    return "\n\n".join(texts)


def plan_chunks_of(event: EventRecord) -> list[EventRecord]:
    """The event, if it is a plan event the next turn shows first (an approval's)."""
    return [event] if event.kind in ("plan_updated", "plan_execution_started") else []
