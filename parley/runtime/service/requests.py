"""What a caller asks of the session service, in small typed requests: one for what a command
carries (`StartRequest`, `SendRequest`, `QuestionAnswer`, `MessagesPage`, `SessionQuery`) and one
for how the caller waits on the turn it starts or resumes (`Waiting`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parley.core.records import SessionFilter
from parley.runtime.progress import ProgressFn
from parley.runtime.session_access import AskHuman


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """How a caller waits for a turn: at most `seconds` (None: the server's default; the server's
    ceiling caps it), told of its progress by `on_progress`, and asked about its interrupts by
    `ask_human` when the client can ask the person behind it."""

    seconds: float | None = None
    on_progress: ProgressFn | None = None
    ask_human: AskHuman | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRequest:
    """start_session: a session of `agent`, with a first message (or inputs) to answer."""

    agent: str
    message: str | None = None
    kind: str | None = None
    inputs: dict[str, Any] | None = None
    client_message_id: str | None = None
    settings: dict[str, Any] | None = None
    attachments: list[Any] | None = None
    # A planning turn for the first message (None: the agent's plan_mode decides).
    plan: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SendRequest:
    """send_message: a message to a session (queued, or a steer), or a queued one promoted."""

    session_id: str
    message: str | None = None
    client_message_id: str | None = None
    steer: bool = False
    queued_message_id: str | None = None
    settings: dict[str, Any] | None = None
    attachments: list[Any] | None = None
    # A planning turn (a message while a draft waits plans anyway).
    plan: bool = False


@dataclass(frozen=True, slots=True)
class QuestionAnswer:
    """answer_question: the answer to one question (or declining it)."""

    interrupt_id: str
    answer: str | None = None
    decline: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class MessagesPage:
    """Which of a session's messages get_session shows (None: the latest, a default page)."""

    start: int | None = None
    limit: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionQuery:
    """list_sessions: a page of sessions, narrowed by status, agent, owner (parley:admin) and
    `match` (session_labels.session_filter)."""

    limit: int
    status: str | None = None
    agent: str | None = None
    cursor: str | None = None
    owner: str | None = None
    match: SessionFilter | None = None
