"""Answering as the person at this client (`Options(as_person=True)`).

Such a client declares form elicitation, so parley puts each approval and question to it as a
form: an input-required round of a blocking call (MRTR), or the input requests of a task. The
forms are keyed `approval:<id>` / `question:<id>` (parley/server/elicitation.py), so the client
looks the interrupts up (list_pending) and gives the callbacks the same typed `Interrupt` as on the
tools path; their verdicts go back as the form answers parley reads. What they leave undecided is
answered `cancel`: the interrupt stays pending and the call returns `waiting_for_input`.

Agents with `approver: human` take these answers (a person's), and refuse approve and
answer_question from the same client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.types import ElicitResult

from parley.client.handlers import Decline, Handlers, Reject, resolved
from parley.client.models import Interrupt

CANCEL = ElicitResult(action="cancel")


def interrupt_id(key: str) -> str:
    """The interrupt a form is about, from its key (`approval:<id>` or `question:<id>`)."""
    return key.partition(":")[2]


async def form_answer(interrupt: Interrupt | None, handlers: Handlers) -> ElicitResult:
    """What the callbacks decide about one interrupt, as the answer to its form."""
    if interrupt is None:
        return CANCEL  # decided meanwhile by someone else: nothing to add
    if interrupt.kind == "approval" and handlers.on_approval is not None:
        verdict = await resolved(handlers.on_approval(interrupt))
        if isinstance(verdict, bool):
            return ElicitResult(action="accept", content={"decision": "approve" if verdict else "deny"})
        if isinstance(verdict, Reject):
            content: dict[str, Any] = {"decision": "deny"}
            if verdict.reason:
                content["reason"] = verdict.reason
            return ElicitResult(action="accept", content=content)
    if interrupt.kind == "question" and handlers.on_question is not None:
        answer = await resolved(handlers.on_question(interrupt))
        if isinstance(answer, Decline):
            return ElicitResult(action="decline")
        if isinstance(answer, str):
            return ElicitResult(action="accept", content={"answer": answer})
    return CANCEL


async def form_answers(
    keys: list[str], pending: Mapping[str, Interrupt], asked: set[str], handlers: Handlers
) -> dict[str, ElicitResult]:
    """The answers to the forms `keys`, each interrupt offered to the callbacks once (`asked`)."""
    answers: dict[str, ElicitResult] = {}
    for key in keys:
        found = interrupt_id(key)
        if found in asked:
            answers[key] = CANCEL
            continue
        asked.add(found)
        answers[key] = await form_answer(pending.get(found), handlers)
    return answers


def decided(answers: Mapping[str, ElicitResult]) -> bool:
    return any(a.action != "cancel" for a in answers.values())
