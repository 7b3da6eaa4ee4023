"""The boundary: what a command's arguments must be before anything is stored (the message, the
settings a caller may change, inputs, attachments, ids, the wait). Who may reach a session is
checked by SessionAccess (parley/runtime/session_access.py)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator

from parley.config import MEMORY_MODES, OVERRIDABLE_LIMITS, AgentConfig, RuntimeConfig
from parley.config.attachments import AttachmentsConfig
from parley.core.ids import is_session_id
from parley.core.records import AttachmentBlob
from parley.errors import InvalidArgument, UnknownAgent
from parley.runtime.access import Principal, may_use
from parley.runtime.attachments import check_attachments
from parley.runtime.mcp.connection import Caller
from parley.runtime.text import NO_VISIBLE_TEXT, has_visible_text
from parley.runtime.toolbox import Toolbox

MAX_SETTINGS_CHARS = 4096
# What a caller may set for a session (start_session / send_message `settings`).
SETTINGS = ("model", "limits", "enabled_tools", "memory")

_CLIENT_MESSAGE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def usable_agents(agents: Mapping[str, AgentConfig], caller: Principal) -> list[AgentConfig]:
    """The agents `caller` may use (an agent's `users:` may leave some out), by name."""
    return sorted((a for a in agents.values() if may_use(caller, a)), key=lambda a: a.name)


class Checks:
    """The argument checks a command makes before it stores anything."""

    def __init__(
        self,
        agents: Mapping[str, AgentConfig],
        runtime: RuntimeConfig,
        toolbox: Toolbox,
        model_names: Sequence[str],
        attachments: AttachmentsConfig,
    ) -> None:
        self._agents = agents
        self._runtime = runtime
        self._toolbox = toolbox
        self._model_names = list(model_names)
        self._attachments = attachments

    def agent(self, caller: Principal, name: str) -> AgentConfig:
        """The agent `caller` asks for; one it may not use is unknown to it."""
        agent = self._agents.get(name)
        if agent is None or not may_use(caller, agent):
            raise UnknownAgent(name, [a.name for a in usable_agents(self._agents, caller)])
        return agent

    def message(self, message: str) -> str:
        if not has_visible_text(message):
            raise InvalidArgument("message", f"{NO_VISIBLE_TEXT}; write what you want the agent to do")
        limit = self._runtime.max_message_chars
        if len(message) > limit:
            raise InvalidArgument(
                "message", f"is {len(message)} characters long; the limit is {limit}. Shorten it or split it."
            )
        return message

    def first_message(self, text: str | None, refs: list[dict[str, Any]]) -> None:
        """A session's first message as stored (the message with its inputs) and its attachments."""
        if text is not None and len(text) > self._runtime.max_message_chars:
            raise InvalidArgument(
                "inputs", "with the message they exceed the message size limit; shorten them"
            )
        if refs and text is None:
            raise InvalidArgument("attachments", "go with a message: add one that says what they are for")

    @property
    def attachment_limits(self) -> AttachmentsConfig:
        return self._attachments

    def attachments(
        self, attachments: list[Any] | None
    ) -> tuple[list[dict[str, Any]], tuple[AttachmentBlob, ...]]:
        """The references a message stores and the bytes it brings (attachments.check_attachments)."""
        return check_attachments(attachments, self._attachments)

    def settings(self, settings: dict[str, Any] | None, agent: AgentConfig | None) -> dict[str, Any] | None:
        """Settings a caller may change: which of the configured models to use (never a URL or a
        key), and lower limits for this session (the agent's limits are the ceilings)."""
        if settings is None:
            return None
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise InvalidArgument(
                "settings",
                f"unknown setting(s) {', '.join(unknown)}; the settings are: {', '.join(SETTINGS)}",
            )
        settings = dict(settings)
        if settings.get("limits") is not None:
            settings["limits"] = _checked_limits(settings["limits"], agent)
        if settings.get("memory") is not None:
            _check_memory(settings["memory"], agent)
        if len(json.dumps(settings)) > MAX_SETTINGS_CHARS:
            raise InvalidArgument("settings", f"must be at most {MAX_SETTINGS_CHARS} characters as JSON")
        model = settings.get("model")
        if model is not None and model not in self._model_names:
            names = ", ".join(self._model_names) or "none are configured (parley.yaml models:)"
            raise InvalidArgument(
                "settings.model", f"'{model}' is not a model of this server; choose one of: {names}"
            )
        return settings

    async def enabled_tools(
        self, settings: dict[str, Any] | None, agent: AgentConfig | None, kind: str, principal: str
    ) -> None:
        """settings.enabled_tools may name only tools the agent has (settings narrow, never widen);
        a tool of a server that cannot be listed now is taken on trust (it stays narrowed to the
        agent's tools when offered)."""
        enabled = (settings or {}).get("enabled_tools")
        if enabled is None or agent is None:
            return
        if not isinstance(enabled, list) or not all(isinstance(n, str) for n in enabled):
            raise InvalidArgument(
                "settings.enabled_tools",
                'must be a list of tool names from list_agents, e.g. ["ask_user"] (null: all of the agent\'s)',
            )
        offer = await self._toolbox.offer(agent, kind, Caller(principal=principal))
        unknown = [
            name
            for name in enabled
            if name not in offer.bindings and not any(name.startswith(f"{s}__") for s in offer.unavailable)
        ]
        if unknown:
            raise InvalidArgument(
                "settings.enabled_tools",
                f"{', '.join(unknown)}: not a tool of agent '{agent.name}', and settings can only narrow its "
                f"tools; choose among: {', '.join(offer.bindings) or 'none (it has no tools)'}",
            )

    def wait_s(self, wait_seconds: float | None) -> float:
        """How long a caller waits: what it asked (None: the default), at most the ceiling."""
        if wait_seconds is None:
            return min(self._runtime.default_wait_s, self._runtime.max_wait_s)
        if wait_seconds < 0:
            raise InvalidArgument("wait_seconds", "must be 0 or more")
        return min(wait_seconds, self._runtime.max_wait_s)

    @staticmethod
    def client_message_id(value: str | None) -> str | None:
        if value is not None and not _CLIENT_MESSAGE_ID.fullmatch(value):
            raise InvalidArgument(
                "client_message_id",
                "must be 1 to 128 characters of letters, digits and . _ : - (for example a UUID)",
            )
        return value

    @staticmethod
    def kind(agent: AgentConfig, kind: str | None) -> str:
        """The kind of session to start: the one asked for (None: the agent's default), if the agent runs it."""
        session_kind = kind or agent.resolved_default_kind
        if session_kind not in agent.kinds:
            raise InvalidArgument(
                "kind", f"agent '{agent.name}' runs {' or '.join(agent.kinds)} sessions, not '{session_kind}'"
            )
        return session_kind

    @staticmethod
    def plan(agent: AgentConfig, plan: bool | None) -> bool:
        """Whether the message starts a planning turn: as asked (None: the agent's plan_mode), if
        the agent has plan mode."""
        if plan is None:
            return agent.plan_mode
        if plan and not agent.plan_mode:
            raise InvalidArgument(
                "plan",
                f"agent '{agent.name}' has no plan mode (plan_mode: true in its file turns it on); "
                "leave plan out or false",
            )
        return plan

    @staticmethod
    def inputs(agent: AgentConfig, inputs: dict[str, Any] | None) -> None:
        if agent.input_schema is None:
            if inputs is not None:
                raise InvalidArgument("inputs", f"agent '{agent.name}' takes no inputs; leave inputs out")
            return
        errors = sorted(
            Draft202012Validator(agent.input_schema).iter_errors(inputs or {}), key=lambda e: list(e.path)
        )
        if errors:
            problems = "; ".join(
                f"{'/'.join(str(p) for p in e.path) or '(inputs)'}: {e.message}" for e in errors[:10]
            )
            raise InvalidArgument("inputs", f"do not match agent '{agent.name}''s input schema: {problems}")


def render_first_message(message: str | None, inputs: dict[str, Any] | None) -> str | None:
    """Validated inputs become part of the session's first message."""
    if inputs is None:
        return message
    block = "Inputs:\n" + json.dumps(inputs, indent=2, ensure_ascii=False)
    return block if message is None else f"{block}\n\n{message}"


# The time in a page's cursor as the stores write it (a float's repr): ASCII digits, a point, an
# exponent. float() alone would also take "inf", "nan", "1_0" and spaces around.
_CURSOR_TIME = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?")


def cursor_time(text: str) -> float | None:
    """The creation time a list cursor names, or None when it is not one this server writes."""
    if not _CURSOR_TIME.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def check_session_cursor(cursor: str | None) -> None:
    """A list_sessions cursor must be one this server returned: `<created>|<session id>`."""
    if cursor is not None:
        created, sep, last_id = cursor.partition("|")
        if not sep or cursor_time(created) is None or not is_session_id(last_id):
            raise InvalidArgument(
                "cursor", "is not a cursor this server returned; omit it to start from the top"
            )


# The settings limits that count something (turns, calls, tokens): whole numbers only. A float
# beyond 2**53 is no longer exact, so it is no whole number either.
_COUNTED_LIMITS = frozenset({"max_model_calls_per_turn", "max_turns", "max_session_tokens"})
_EXACT_FLOAT = 2.0**53


def _checked_limits(limits: Any, agent: AgentConfig | None) -> dict[str, int | float]:
    """settings.limits with each value checked: a known limit, a positive finite number (a whole
    one for what counts), never above the agent's own; a whole number written 3.0 becomes 3."""
    if not isinstance(limits, dict):
        raise InvalidArgument("settings.limits", 'must be an object such as {"max_turns": 10}')
    checked: dict[str, int | float] = {}
    for name, value in limits.items():
        field_name = f"settings.limits.{name}"
        if name not in OVERRIDABLE_LIMITS:
            raise InvalidArgument(
                field_name, f"is not a limit you can set; these are: {', '.join(OVERRIDABLE_LIMITS)}"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
            raise InvalidArgument(field_name, "must be a positive number")
        if name in _COUNTED_LIMITS and isinstance(value, float):
            if not value.is_integer() or value > _EXACT_FLOAT:
                raise InvalidArgument(field_name, f"must be a whole number such as 10, got {value:g}")
            value = int(value)
        ceiling = getattr(agent.limits, name) if agent is not None else None
        if ceiling is not None and value > ceiling:
            raise InvalidArgument(field_name, f"may be at most {ceiling:g}, the agent's own limit")
        checked[name] = value
    return checked


def _check_memory(memory: Any, agent: AgentConfig | None) -> None:
    """settings.memory: a mode that remembers no more than the agent's (none < window < compaction
    < full), and a window no larger than the agent's own window."""
    field_name = "settings.memory"
    if not isinstance(memory, dict) or set(memory) - {"mode", "messages"}:
        raise InvalidArgument(field_name, 'must be an object such as {"mode": "window", "messages": 10}')
    own = agent.resolved_memory if agent is not None else None
    mode = memory.get("mode", own.mode if own else None)
    if mode not in MEMORY_MODES:
        raise InvalidArgument(f"{field_name}.mode", f"must be one of: {', '.join(MEMORY_MODES)}")
    if own is not None and MEMORY_MODES.index(mode) > MEMORY_MODES.index(own.mode):
        raise InvalidArgument(
            f"{field_name}.mode",
            f"'{mode}' would remember more than agent '{agent.name if agent else ''}' does ({own.mode}); "
            f"choose among: {', '.join(MEMORY_MODES[: MEMORY_MODES.index(own.mode) + 1])}",
        )
    messages = memory.get("messages")
    if messages is None:
        return
    if mode != "window":
        raise InvalidArgument(f"{field_name}.messages", 'goes with "mode": "window"')
    if isinstance(messages, bool) or not isinstance(messages, int) or messages < 1:
        raise InvalidArgument(f"{field_name}.messages", "must be a whole number of messages, 1 or more")
    if own is not None and own.mode == "window" and messages > own.messages:
        raise InvalidArgument(
            f"{field_name}.messages", f"may be at most {own.messages}, the agent's own window"
        )
