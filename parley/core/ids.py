"""Identifiers: prefixed random hex, so a pasted id says what it names and cannot be guessed."""

from __future__ import annotations

import re
import uuid
from typing import NewType

SessionId = NewType("SessionId", str)
TurnId = NewType("TurnId", str)
ToolCallId = NewType("ToolCallId", str)
QueuedMessageId = NewType("QueuedMessageId", str)

_SESSION_ID = re.compile(r"ses_[0-9a-f]{32}")
_QUEUED_ID = re.compile(r"qm_[0-9a-f]{32}")
_INTERRUPT_ID = re.compile(r"int_[0-9a-f]{32}")
_TASK_ID = re.compile(r"task_[0-9a-f]{32}")


def _new(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def new_session_id() -> SessionId:
    return SessionId(_new("ses"))


def new_turn_id() -> TurnId:
    return TurnId(_new("turn"))


def new_tool_call_id() -> ToolCallId:
    return ToolCallId(_new("call"))


def new_queued_message_id() -> QueuedMessageId:
    return QueuedMessageId(_new("qm"))


def new_flow_id() -> str:
    """A pending authorization at a downstream server (its connect link names it)."""
    return _new("flow")


def new_interrupt_id() -> str:
    return _new("int")


def is_interrupt_id(value: str) -> bool:
    return _INTERRUPT_ID.fullmatch(value) is not None


def new_task_id() -> str:
    return _new("task")


def new_delivery_id() -> str:
    """A webhook delivery's id, also its `webhook-id`: the same on every attempt."""
    return _new("whd")


def is_task_id(value: str) -> bool:
    return _TASK_ID.fullmatch(value) is not None


def new_process_id() -> str:
    return _new("proc")


def is_session_id(value: str) -> bool:
    return _SESSION_ID.fullmatch(value) is not None


def is_queued_message_id(value: str) -> bool:
    return _QUEUED_ID.fullmatch(value) is not None
