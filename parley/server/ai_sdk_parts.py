"""A turn's events as the parts of the AI SDK's UI message stream (the `ai` package: the chunk
types of its `uiMessageChunkSchema`), one assistant message per turn.

Versions 6 and 7 both check every chunk against their schema, and a type the schema does not know
ends the chat with an error. By default only chunks both know are sent; an app on version 7 may ask
for its two further chunks (`?ai_sdk=7`): `tool-approval-response` and `reset-step`.

| parley event | UI message stream parts |
|---|---|
| first event of a model call | `finish-step` + `start-step` (each model call is a step) |
| `reasoning_delta` | `reasoning-start` / `reasoning-delta` |
| `text_delta` | `text-start` / `text-delta` |
| `model_step` | its text as one text part when none streamed, `text-end`, then `tool-input-available` per call (`dynamic: true`: the tools are the server's) |
| `attempt_discarded` | `text-end`, then (version 7) `reset-step`: the SDK drops the step's parts; the retry streams into a new text part (version 6 keeps the broken text before it) |
| `tool_finished` | `tool-output-available`, `tool-output-denied` (rejected) or `tool-output-error` |
| `interrupt_raised` approval | `tool-approval-request` (approvalId = the interrupt id) |
| `interrupt_resolved` approval | (version 7) `tool-approval-response`; `tool-output-denied` when not approved |
| `interrupt_raised` / `_resolved` question | `data-parley-question` (id = the interrupt id; updated in place) |
| `plan_updated` | `data-parley-plan` (id = the session id, so one plan updates in place: `{revision, status, todos}`) |
| `plan_execution_started` | `data-parley-plan-execution` (id = the approved message's id: `{revision, by}`), before the executing turn's parts |
| `turn_ended` | `error` (a failed turn), `finish` with its reason |

Pure: no I/O; the chat endpoint feeds it events and writes what it returns.
"""

from __future__ import annotations

from typing import Any

from parley.core.records import EventRecord, InterruptRecord, ToolCallRecord
from parley.runtime.session_events import EventPage

Chunk = dict[str, Any]

# The built-in tool whose call a question is.
ASK_USER = "ask_user"
# The part names a parley chat app can render (data parts are `data-<name>`).
QUESTION_PART = "data-parley-question"
PLAN_PART = "data-parley-plan"
PLAN_EXECUTION_PART = "data-parley-plan-execution"
# What an app sends in a user message to approve a draft plan: {"revision": N}.
EXECUTE_PLAN_PART = "data-parley-execute-plan"

# How each turn ending finishes the message.
_FINISH_REASON = {
    "answered": "stop",
    "completed": "stop",
    "failed": "error",
    "cancelled": "other",
    "waiting_for_input": "tool-calls",
}


def message_id(turn_id: str) -> str:
    """The assistant message of a turn (the same on every stream of the turn, so a continuation
    after an approval or a resumed stream updates the message the app already shows)."""
    return f"msg_{turn_id}"


class TurnRenderer:
    """The parts of one turn's assistant message, from its events in order."""

    def __init__(self, session_id: str, turn_id: str, v7: bool = False) -> None:
        self._session_id = session_id
        self._turn_id = turn_id
        # The app reads version 7's chunks (it said so); else only those version 6 knows too.
        self._v7 = v7
        self._text: str | None = None  # the open text part's id
        self._reasoning: str | None = None
        self._streamed_text = False  # text came piece by piece during this model call
        self._step_done = False  # the model step was committed: what comes next is a new step
        self._parts = 0

    def start(self, mode: Any = None) -> list[Chunk]:
        """The message's first parts; `mode` (planning or executing, when the turn has one) goes
        into its metadata."""
        parley: dict[str, Any] = {"sessionId": self._session_id, "turnId": self._turn_id}
        if mode in ("planning", "executing"):
            parley["mode"] = mode
        return [
            {"type": "start", "messageId": message_id(self._turn_id), "messageMetadata": {"parley": parley}},
            {"type": "start-step"},
        ]

    def finish(self, status: str, error: str | None = None) -> list[Chunk]:
        chunks = self._close()
        chunks.append({"type": "finish-step"})
        if status == "failed":
            chunks.append({"type": "error", "errorText": error or "the turn failed"})
        chunks.append({"type": "finish", "finishReason": _FINISH_REASON.get(status, "other")})
        return chunks

    def event(self, event: EventRecord, page: EventPage) -> list[Chunk]:
        kind, data = event.kind, event.data
        if kind in ("text_delta", "reasoning_delta", "model_step"):
            chunks = self._next_step()
            if kind == "model_step":
                return chunks + self._model_step(event, page)
            return chunks + self._delta(kind, str(data.get("text") or ""))
        if kind == "attempt_discarded":
            self._streamed_text = False
            return [*self._close(), {"type": "reset-step"}] if self._v7 else self._close()
        if kind == "tool_finished":
            call = page.calls.get(data.get("call_id", ""))
            return [_tool_output(str(data.get("call_id")), str(data.get("status")), call)]
        if kind in ("plan_updated", "plan_execution_started"):
            return plan_chunks(self._session_id, event)
        if kind in ("interrupt_raised", "interrupt_resolved"):
            interrupt = page.interrupts.get(str(data.get("interrupt_id")))
            if interrupt is None:
                return []
            call = page.calls.get(interrupt.tool_call_id) if interrupt.tool_call_id else None
            return _interrupt(kind, interrupt, call, self._v7)
        return []

    def _next_step(self) -> list[Chunk]:
        if not self._step_done:
            return []
        self._step_done = False
        return [*self._close(), {"type": "finish-step"}, {"type": "start-step"}]

    def _delta(self, kind: str, text: str) -> list[Chunk]:
        if not text:
            return []
        chunks: list[Chunk] = []
        if kind == "text_delta":
            self._streamed_text = True
            if self._reasoning is not None:
                chunks.append({"type": "reasoning-end", "id": self._reasoning})
                self._reasoning = None
            if self._text is None:
                self._text = self._new_id("text")
                chunks.append({"type": "text-start", "id": self._text})
            return [*chunks, {"type": "text-delta", "id": self._text, "delta": text}]
        if self._text is not None:
            chunks.append({"type": "text-end", "id": self._text})
            self._text = None
        if self._reasoning is None:
            self._reasoning = self._new_id("reasoning")
            chunks.append({"type": "reasoning-start", "id": self._reasoning})
        return [*chunks, {"type": "reasoning-delta", "id": self._reasoning, "delta": text}]

    def _model_step(self, event: EventRecord, page: EventPage) -> list[Chunk]:
        chunks: list[Chunk] = []
        text = str(event.data.get("text") or "")
        if not self._streamed_text and text:
            # Nothing streamed (a model that answered at once): the step's event has the whole text.
            chunks += self._delta("text_delta", text)
        chunks += self._close()
        step = [
            c
            for c in page.calls.values()
            if c.turn_id == event.turn_id and c.step_no == event.data.get("step_no")
        ]
        for call in sorted(step, key=lambda c: c.call_index):
            chunks.append(
                {
                    "type": "tool-input-available",
                    "toolCallId": call.id,
                    "toolName": call.name,
                    "input": call.arguments,
                    "dynamic": True,
                }
            )
        self._streamed_text = False
        self._step_done = True
        return chunks

    def _close(self) -> list[Chunk]:
        chunks: list[Chunk] = []
        if self._reasoning is not None:
            chunks.append({"type": "reasoning-end", "id": self._reasoning})
            self._reasoning = None
        if self._text is not None:
            chunks.append({"type": "text-end", "id": self._text})
            self._text = None
        return chunks

    def _new_id(self, kind: str) -> str:
        self._parts += 1
        return f"{kind}_{self._turn_id}_{self._parts}"


def _tool_output(call_id: str, status: str, call: ToolCallRecord | None) -> Chunk:
    result = (call.result if call is not None else None) or {}
    text = str(result.get("text") or "")
    if status == "succeeded" and not result.get("is_error"):
        return {"type": "tool-output-available", "toolCallId": call_id, "output": text, "dynamic": True}
    if status == "rejected":
        return {"type": "tool-output-denied", "toolCallId": call_id}
    error = text or f"the call ended {status}"
    return {"type": "tool-output-error", "toolCallId": call_id, "errorText": error, "dynamic": True}


def plan_chunks(session_id: str, event: EventRecord) -> list[Chunk]:
    """The data part of a plan event (none for any other event)."""
    data = event.data
    if event.kind == "plan_updated":
        plan = {
            "revision": data.get("revision"),
            "status": data.get("status"),
            "todos": data.get("todos") or [],
        }
        return [{"type": PLAN_PART, "id": session_id, "data": plan}]
    if event.kind == "plan_execution_started":
        execution = {"revision": data.get("revision"), "by": data.get("by")}
        return [{"type": PLAN_EXECUTION_PART, "id": str(data.get("queued_message_id")), "data": execution}]
    return []


def question_data(interrupt: InterruptRecord) -> dict[str, Any]:
    payload = interrupt.payload
    resolution = interrupt.resolution or {}
    return {
        "interruptId": interrupt.id,
        "sessionId": interrupt.session_id,
        "toolCallId": interrupt.tool_call_id,
        "question": payload.get("question"),
        "choices": list(payload.get("choices") or []),
        "allowsFreeText": bool(payload.get("allows_free_text", False)),
        "status": interrupt.status,
        "answer": resolution.get("answer"),
    }


def _interrupt(kind: str, interrupt: InterruptRecord, call: ToolCallRecord | None, v7: bool) -> list[Chunk]:
    if interrupt.kind == "question":
        chunks: list[Chunk] = [{"type": QUESTION_PART, "id": interrupt.id, "data": question_data(interrupt)}]
        if kind == "interrupt_resolved" and call is not None and call.name == ASK_USER:
            # ask_user's answer is its call's output (a server's question is not: its call goes on).
            chunks += _answer_output(interrupt)
        return chunks
    if interrupt.tool_call_id is None:
        return []
    if kind == "interrupt_raised":
        return [
            {
                "type": "tool-approval-request",
                "approvalId": interrupt.id,
                "toolCallId": interrupt.tool_call_id,
            }
        ]
    if interrupt.status not in ("approved", "rejected", "expired"):
        return []  # withdrawn with its turn (cancelled): the call's own output says so
    chunks = []
    if v7:
        resolution = interrupt.resolution or {}
        chunk: Chunk = {
            "type": "tool-approval-response",
            "approvalId": interrupt.id,
            "approved": interrupt.status == "approved",
        }
        if resolution.get("reason"):
            chunk["reason"] = str(resolution["reason"])
        chunks.append(chunk)
    if interrupt.status == "approved":
        return chunks  # the call's output follows when it has run
    # A call not approved never runs: the SDK shows it denied.
    return [*chunks, {"type": "tool-output-denied", "toolCallId": interrupt.tool_call_id}]


def _answer_output(interrupt: InterruptRecord) -> list[Chunk]:
    call_id = interrupt.tool_call_id
    resolution = interrupt.resolution or {}
    if interrupt.status == "answered":
        answer = str(resolution.get("answer") or "")
        return [{"type": "tool-output-available", "toolCallId": call_id, "output": answer, "dynamic": True}]
    if interrupt.status in ("declined", "expired"):
        error = (
            "the person declined to answer" if interrupt.status == "declined" else "no answer came in time"
        )
        return [{"type": "tool-output-error", "toolCallId": call_id, "errorText": error, "dynamic": True}]
    return []
