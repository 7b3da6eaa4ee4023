"""Everything a turn may call, by the names the model sees: built-ins and the tools of the
agent's MCP servers. Offering (what the model is shown) and running (one stored call) live here,
so the driver stays about steps and commits."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from jsonschema import Draft202012Validator
from mcp.shared.dispatcher import ProgressFnT
from mcp.types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    InputRequiredResult,
    InputResponses,
    Tool,
)

from parley.config import AgentConfig
from parley.core.effect_policy import Mishap, judge
from parley.core.plans import PLANNING_BUILTINS
from parley.core.records import InterruptRecord, SessionRecord, ToolCallRecord
from parley.runtime.builtin_tools import (
    BUILTIN_EFFECTS,
    RESERVED_NAMES,
    ToolContext,
    ToolOutcome,
    run_builtin,
)
from parley.runtime.mcp.connection import Asker, Caller
from parley.runtime.mcp.downstream_tasks import DownstreamTasks
from parley.runtime.mcp.effects import classify
from parley.runtime.mcp.failures import (
    CallCutByShutdown,
    CallMaybeSent,
    CallNotSent,
    CallRefused,
    NeedsAuthorization,
    NoCredential,
    ToolSourceUnavailable,
)
from parley.runtime.mcp.naming import assign_names, exposed_name
from parley.runtime.mcp.remote import TaskHandle
from parley.runtime.mcp.results import convert_result
from parley.runtime.mcp.sources import McpToolSources
from parley.runtime.model import ToolSpec
from parley.runtime.oauth.flows import OAuthFlows
from parley.runtime.offer import Binding, Offer
from parley.runtime.tool_run import ToolRun, by_effect, ended
from parley.runtime.tool_run import failed as _failed

logger = logging.getLogger(__name__)

RESOURCE_TOOLS = ("mcp_list_resources", "mcp_read_resource", "mcp_get_prompt")

ToolProgress = ProgressFnT


# The tool offered in place of a user_oauth server's tools until the owner connects.
CONNECT_TOOL = "connect_account"

# Rounds of questions one call may ask before it is given up.
MAX_INPUT_ROUNDS = 10


def _from_builtin(outcome: ToolOutcome) -> ToolRun:
    return ToolRun(
        status=outcome.status,
        result={"text": outcome.text, "is_error": outcome.is_error},
        todos=outcome.todos,
    )


def _input_asked(
    call: ToolCallRecord, server: str, result: InputRequiredResult, rounds: int
) -> ToolRun | None:
    """The call waits for the answers to what its server asked (forms and pages to open, put to the user),
    or None when the server sent only state to echo. Other requests parley does not serve."""
    if rounds > MAX_INPUT_ROUNDS:
        return by_effect(
            call.effect, f"{server} kept asking for input ({rounds - 1} rounds); the call was given up."
        )
    forms: dict[str, Any] = {}
    other: list[str] = []
    for key, request in (result.input_requests or {}).items():
        params = getattr(request, "params", None)
        if isinstance(request, ElicitRequest) and isinstance(
            params, ElicitRequestFormParams | ElicitRequestURLParams
        ):
            forms[key] = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        else:
            other.append(getattr(request, "method", type(request).__name__))
    if other:
        return by_effect(
            call.effect,
            f"{server} asked for {', '.join(sorted(set(other)))} to finish the call, which parley does not provide.",
        )
    if not forms:
        return None
    remote = {"kind": "input", "request_state": result.request_state, "forms": forms, "rounds": rounds}
    return ToolRun(status="awaiting_answer", result={}, remote=remote)


def _not_sent(exc: NoCredential | NeedsAuthorization) -> ToolRun:
    """A call the caller's credentials kept from its server: parked for the owner to connect, or a
    tool error (headers_by_principal has no entry for them)."""
    if isinstance(exc, NeedsAuthorization):
        return _needs_authorization(exc)
    return _failed(f"This call was not sent: {exc}.")


def _needs_authorization(exc: NeedsAuthorization) -> ToolRun:
    """The call waits for its session's owner to connect (a session of nobody's fails instead)."""
    if exc.principal is None:
        return _failed(f"This call was not sent: {exc}. Answer without it.")
    return ToolRun(status="awaiting_answer", result={}, authorize=exc.scopes, authorize_at=exc.server)


def enabled_tools(settings: Mapping[str, Any]) -> list[str] | None:
    """The tools a session's settings narrow it to (None: every tool of its agent)."""
    enabled = settings.get("enabled_tools")
    return list(enabled) if isinstance(enabled, list) else None


def caller_of(session: SessionRecord) -> Caller:
    """The session's requests to MCP servers go on its own behalf and, unless it may not carry
    them (a schedule someone else made for its owner started it), with its owner's credentials."""
    return Caller(session_id=session.id, principal=session.owner if session.owner_credentials else None)


def tool_context(agent: AgentConfig, session: SessionRecord) -> ToolContext:
    narrowed = enabled_tools(session.settings)
    builtins = agent.tools if narrowed is None else [t for t in agent.tools if t in narrowed]
    return ToolContext(enabled=builtins, kind=session.kind, result_schema=agent.result_schema)


class Toolbox:
    def __init__(self, sources: McpToolSources | None, flows: OAuthFlows | None = None) -> None:
        self._sources = sources
        # The pending authorizations of user_oauth servers (None: no server has auth).
        self._flows = flows
        self._downstream_tasks = DownstreamTasks(sources, time.time) if sources is not None else None

    # ------------------------------------------------------------------ offering

    async def offer(self, agent: AgentConfig, kind: str, caller: Caller) -> Offer:
        """The tools of one model call (or, without a session, of list_agents), as `caller` sees them."""
        offer = Offer()
        context = ToolContext(enabled=agent.tools, kind=kind, result_schema=agent.result_schema)
        for spec in context.specs():
            offer.tools.append(spec)
            offer.bindings[spec.name] = Binding(
                name=spec.name,
                source="builtin",
                effect=BUILTIN_EFFECTS.get(spec.name, "idempotent_write"),
                plans=spec.name in PLANNING_BUILTINS,
            )
        if self._sources is None or not agent.mcp_servers:
            return offer
        listed: list[tuple[str, Tool]] = []
        for ref in agent.mcp_servers:
            try:
                tools = await self._sources.list_tools(ref.server, caller)
            except ToolSourceUnavailable as exc:
                offer.warnings.append(f"{exc}. Its tools are left out of this step.")
                offer.unavailable[ref.server] = exc.reason
                if (
                    isinstance(exc, NeedsAuthorization)
                    and exc.principal is not None
                    and self._flows is not None
                ):
                    self._offer_connect(ref.server, offer)
                continue
            for tool in tools:
                if ref.include is not None and tool.name not in ref.include:
                    continue
                if tool.name in ref.exclude:
                    continue
                listed.append((ref.server, tool))
        names, collisions = assign_names([(s, t.name) for s, t in listed], reserved=RESERVED_NAMES)
        for c in collisions:
            offer.warnings.append(
                f"tools '{c.tool}' of {c.server} and another tool share the name {c.name}; "
                f"it is offered as {c.renamed_to}"
            )
        refs = {ref.server: ref for ref in agent.mcp_servers}
        for server, tool in listed:
            cfg = self._sources.servers[server]
            classified = classify(
                tool.annotations,
                trust_annotations=cfg.trust_annotations,
                server_policy=cfg.tools.get(tool.name),
                agent_policy=refs[server].tools.get(tool.name),
            )
            name = names[(server, tool.name)]
            offer.tools.append(
                ToolSpec(
                    name=name,
                    description=tool.description or tool.title or tool.name,
                    input_schema=tool.input_schema,
                )
            )
            offer.bindings[name] = Binding(
                name=name,
                source="mcp",
                effect=classified.effect,
                requires_approval=classified.requires_approval,
                server=server,
                tool=tool.name,
                plans=classified.configured_read,
            )
        if agent.mcp_resources:
            self._offer_resource_tools(agent, offer)
        return offer

    def _offer_connect(self, server: str, offer: Offer) -> None:
        """In place of the tools of a user_oauth server the owner has not connected: one tool that
        asks them to (the model cannot call tools it is not shown)."""
        name = exposed_name(server, CONNECT_TOOL)
        offer.tools.append(
            ToolSpec(
                name=name,
                description=(
                    f"Ask the user to connect their account at {server}, whose tools need it. Call this when the "
                    "request needs that server; once they have, its tools are offered."
                ),
                input_schema={"type": "object", "properties": {}},
            )
        )
        offer.bindings[name] = Binding(
            name=name, source="unknown", effect="read", server=server, tool=CONNECT_TOOL
        )

    def _offer_resource_tools(self, agent: AgentConfig, offer: Offer) -> None:
        servers = sorted({ref.server for ref in agent.mcp_servers})
        server_prop = {"type": "string", "enum": servers, "description": "Which MCP server."}
        specs = [
            ToolSpec(
                name="mcp_list_resources",
                description="List the resources, resource templates and prompts an MCP server offers.",
                input_schema={
                    "type": "object",
                    "properties": {"server": server_prop},
                    "required": ["server"],
                },
            ),
            ToolSpec(
                name="mcp_read_resource",
                description="Read one resource of an MCP server by its URI.",
                input_schema={
                    "type": "object",
                    "properties": {"server": server_prop, "uri": {"type": "string"}},
                    "required": ["server", "uri"],
                },
            ),
            ToolSpec(
                name="mcp_get_prompt",
                description="Get a prompt of an MCP server, filled in with string arguments.",
                input_schema={
                    "type": "object",
                    "properties": {
                        "server": server_prop,
                        "name": {"type": "string"},
                        "arguments": {"type": "object", "additionalProperties": {"type": "string"}},
                    },
                    "required": ["server", "name"],
                },
            ),
        ]
        for spec in specs:
            offer.tools.append(spec)
            offer.bindings[spec.name] = Binding(name=spec.name, source="resources", effect="read", plans=True)

    # ------------------------------------------------------------------ running

    async def run(
        self,
        call: ToolCallRecord,
        agent: AgentConfig,
        session: SessionRecord,
        on_progress: ToolProgress | None = None,
        on_input: Asker | None = None,
        input_responses: InputResponses | None = None,
    ) -> ToolRun:
        """Run one call. An MCP tool's questions during the call go to `on_input`; a tool that
        runs as a downstream task comes back waiting (see poll_remote), one whose server asks for
        input first comes back awaiting the answers, which a later run sends as `input_responses`."""
        if call.source == "mcp":
            return await self._run_mcp(call, session, on_progress, on_input, input_responses)
        if call.source == "resources":
            return await self._run_resources(call, agent, session)
        if call.source == "unknown" and call.server is not None:
            caller = caller_of(session)
            cfg = self._sources.servers.get(call.server) if self._sources is not None else None
            if cfg is not None and cfg.auth is not None:
                return await self._run_unlisted(call, agent, session, on_progress, on_input)
            if self._sources is not None and self._sources.lacks_credential(call.server, caller):
                return _failed(
                    f"Tool '{call.name}' was not called: {NoCredential(call.server, caller.principal)}. "
                    "Answer without it."
                )
            reason = self._sources.unavailable_reason(call.server, caller) if self._sources else None
            return _failed(
                f"Tool '{call.name}' is not available: MCP server '{call.server}' could not be reached "
                f"({reason or 'it did not list its tools'}). Answer without it, or try again later."
            )
        return _from_builtin(run_builtin(call.name, call.arguments, tool_context(agent, session)))

    async def authorization(
        self, session: SessionRecord, call: ToolCallRecord, server: str, scopes: tuple[str, ...]
    ) -> InterruptRecord | None:
        """The authorization_required interrupt (and its flow) a call parks on for `server`; None
        when parley has no flows for it."""
        if self._flows is None or not self._flows.applies(server) or session.owner is None:
            return None
        return await self._flows.open(session, call, server, session.owner, scopes)

    async def connected(self, session: SessionRecord, server: object) -> bool:
        """Whether the session's owner has a usable token for the user_oauth server `server`."""
        caller = caller_of(session)
        if self._flows is None or not isinstance(server, str) or not self._flows.applies(server):
            return False
        principal = caller.principal
        return principal is not None and await self._flows.auth.access_token(server, principal) is not None

    def release_session(self, session_id: str) -> None:
        if self._sources is not None:
            self._sources.release_session(session_id)

    async def poll_remote(
        self,
        call: ToolCallRecord,
        session: SessionRecord,
        on_input: Asker | None = None,
        answers: InputResponses | None = None,
    ) -> ToolRun:
        """Look once at the downstream task of a waiting call."""
        if self._downstream_tasks is None or (call.server or "") not in self._downstream_tasks.servers:
            return by_effect(
                call.effect,
                f"Its downstream task was lost: MCP server '{call.server}' is not configured any more.",
            )
        return await self._downstream_tasks.poll(call, caller_of(session), on_input, answers)

    def input_wait_s(self, server: str | None) -> float:
        """How long a server's question during an open call may wait for the user."""
        cfg = self._sources.servers.get(server or "") if self._sources is not None else None
        return cfg.input_wait_s if cfg is not None else 300.0

    async def cancel_remote(self, call: ToolCallRecord, session: SessionRecord) -> None:
        if self._downstream_tasks is not None:
            await self._downstream_tasks.cancel(call, caller_of(session))

    async def _run_mcp(
        self,
        call: ToolCallRecord,
        session: SessionRecord,
        on_progress: ToolProgress | None,
        on_input: Asker | None,
        input_responses: InputResponses | None,
    ) -> ToolRun:
        server, tool = call.server or "", call.tool or call.name
        if self._sources is None or server not in self._sources.servers:
            return _failed(f"This call was not run: MCP server '{server}' is not configured any more.")
        if call.requires_approval and call.decision != "approved":
            # The driver asks for approval first; this guards against running an undecided call.
            return _failed(f"This call was not run: {call.name} needs a person's approval first.")
        caller = caller_of(session)
        listed = self._sources.cached_tool(server, tool, caller)
        invalid = _invalid_arguments(call, listed)
        if invalid is not None:
            return invalid
        if listed is None:
            listed = await self._listed(server, tool, caller)
        asked = call.remote if call.remote and call.remote.get("kind") == "input" else None
        if call.remote and call.remote.get("kind") == "task" and self._downstream_tasks is not None:
            # The answers to a 2026-07-28 task's input requests go to the task, not to a new call.
            return await self._downstream_tasks.send_answers(call, caller, input_responses or {})
        if (
            asked is None
            and self._downstream_tasks is not None
            and self._downstream_tasks.wants_task(server, listed)
        ):
            return await self._downstream_tasks.start(call, caller)
        cfg = self._sources.servers[server]
        request_state = asked.get("request_state") if asked else None
        rounds = int(asked.get("rounds", 0)) if asked else 0
        attempt = 0
        reached = False  # whether any attempt may have reached the server
        while True:
            attempt += 1
            try:
                result = await self._sources.call_tool(
                    server,
                    tool,
                    call.arguments,
                    caller=caller,
                    idempotency_key=call.idempotency_key,
                    on_progress=on_progress,
                    on_input=on_input,
                    input_responses=input_responses,
                    request_state=request_state,
                )
            except (NoCredential, NeedsAuthorization) as exc:
                return _not_sent(exc)
            except (CallNotSent, CallMaybeSent) as exc:
                reached = reached or isinstance(exc, CallMaybeSent)
                if reached and self._sources.closing:
                    # Not the call's fate but the process stopping under it: leave it as a crash
                    # would. (One that provably never went out ends as "did not run" below.)
                    raise CallCutByShutdown(server) from exc
                mishap = Mishap.NOT_SENT if isinstance(exc, CallNotSent) else Mishap.MAYBE_SENT
                if mishap is Mishap.MAYBE_SENT:
                    logger.warning("call %s (%s) attempt %d: %s", call.id, call.effect, attempt, exc)
                verdict = judge(call.effect, mishap, attempt, f"{exc}.")
                if verdict.retry:
                    continue
                return ended(verdict)
            except CallRefused as exc:
                return _failed(str(exc))
            if isinstance(result, TaskHandle):
                assert self._downstream_tasks is not None
                return self._downstream_tasks.adopt(call, result)
            if isinstance(result, InputRequiredResult):
                rounds += 1
                asking = _input_asked(call, server, result, rounds)
                if asking is not None:
                    return asking
                # Only state to echo (no question): the server wants the call again at once.
                input_responses, request_state, attempt = None, result.request_state, attempt - 1
                continue
            stored = convert_result(result, cfg.max_result_chars)
            return ToolRun(status="failed" if stored["is_error"] else "succeeded", result=stored)

    async def _run_unlisted(
        self,
        call: ToolCallRecord,
        agent: AgentConfig,
        session: SessionRecord,
        on_progress: ToolProgress | None,
        on_input: Asker | None,
    ) -> ToolRun:
        """A call of a user_oauth server's tool that was not offered (its owner had not connected
        then): it parks until they do, and then runs as the tool it names, if one does not need
        a person's approval."""
        assert self._sources is not None and call.server is not None
        server, caller = call.server, caller_of(session)
        try:
            tools = await self._sources.list_tools(server, caller)
        except NeedsAuthorization as exc:
            return _needs_authorization(exc)
        except ToolSourceUnavailable as exc:
            return _failed(
                f"Tool '{call.name}' is not available: {exc}. Answer without it, or try again later."
            )
        name = call.tool or call.name.removeprefix(f"{server}__")
        if name == CONNECT_TOOL and call.tool == CONNECT_TOOL:
            return ToolRun(
                status="succeeded",
                result={
                    "text": f"The user's account at {server} is connected; its tools are offered from the next step.",
                    "is_error": False,
                },
            )
        tool = next((t for t in tools if t.name == name), None)
        ref = next((r for r in agent.mcp_servers if r.server == server), None)
        if tool is None or ref is None:
            return _failed(f"{server} has no tool '{name}'. Its tools are offered from the next step.")
        cfg = self._sources.servers[server]
        classified = classify(
            tool.annotations,
            trust_annotations=cfg.trust_annotations,
            server_policy=cfg.tools.get(tool.name),
            agent_policy=ref.tools.get(tool.name),
        )
        if classified.requires_approval:
            return _failed(
                f"The account at {server} is connected now, but {call.name} needs a person's approval: "
                "call it again (it is offered from the next step)."
            )
        bound = replace(call, source="mcp", tool=tool.name, effect=classified.effect)
        return await self._run_mcp(bound, session, on_progress, on_input, None)

    async def _listed(self, server: str, tool: str, caller: Caller) -> Tool | None:
        """The tool as its server lists it (after a restart the listing may not be cached yet)."""
        assert self._sources is not None
        try:
            await self._sources.list_tools(server, caller)
        except ToolSourceUnavailable:
            return None
        return self._sources.cached_tool(server, tool, caller)

    async def _run_resources(
        self, call: ToolCallRecord, agent: AgentConfig, session: SessionRecord
    ) -> ToolRun:
        args = call.arguments
        server = args.get("server")
        allowed = {ref.server for ref in agent.mcp_servers}
        if not isinstance(server, str) or server not in allowed:
            return _failed(f"'server' must be one of: {', '.join(sorted(allowed)) or 'none'}.")
        if self._sources is None:
            return _failed("No MCP servers are configured.")
        try:
            if call.name == "mcp_list_resources":
                text = await self._sources.run_on(server, caller_of(session), _list_everything)
            elif call.name == "mcp_read_resource":
                uri = args.get("uri")
                if not isinstance(uri, str) or not uri:
                    return _failed("'uri' must be a non-empty string (from mcp_list_resources).")
                text = await self._sources.run_on(server, caller_of(session), lambda c: _read(c, uri))
            else:
                name = args.get("name")
                arguments = args.get("arguments") or {}
                if not isinstance(name, str) or not isinstance(arguments, dict):
                    return _failed("'name' must be a prompt name and 'arguments' an object of strings.")
                text = await self._sources.run_on(
                    server, caller_of(session), lambda c: _prompt(c, name, arguments)
                )
        except (NoCredential, NeedsAuthorization) as exc:
            # As for the server's tools: parked until the owner connects, then read again.
            return _not_sent(exc)
        except (ToolSourceUnavailable, CallRefused, CallMaybeSent) as exc:
            return _failed(str(exc))
        cap = self._sources.servers[server].max_result_chars
        if len(text) > cap:
            text = text[:cap] + f"\n[truncated: {len(text)} characters, the first {cap} shown]"
        return ToolRun(status="succeeded", result={"text": text, "is_error": False})


def _invalid_arguments(call: ToolCallRecord, listed: Tool | None) -> ToolRun | None:
    """The call's refusal when its arguments do not fit the tool's listed schema (None: they fit,
    or the tool is not listed, so the server judges them)."""
    problems = _schema_problems(listed.input_schema, call.arguments) if listed is not None else ""
    if not problems:
        return None
    return _failed(
        f"Invalid arguments for {call.name}: {problems}. The call was not sent; fix the arguments and call again."
    )


def _schema_problems(schema: dict[str, Any], arguments: dict[str, Any]) -> str:
    try:
        errors = sorted(Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.path))
    except Exception:
        return ""  # a server's broken schema is its own business; let the server judge the call
    return "; ".join(f"{'/'.join(str(p) for p in e.path) or '(arguments)'}: {e.message}" for e in errors[:10])


async def _list_everything(client: Any) -> str:
    lines = []
    resources = await client.list_resources()
    lines.append("Resources:" if resources.resources else "Resources: none")
    lines += [
        f"- {r.uri} ({r.name}){': ' + r.description if r.description else ''}" for r in resources.resources
    ]
    templates = await client.list_resource_templates()
    if templates.resource_templates:
        lines.append("Resource templates:")
        lines += [f"- {t.uri_template} ({t.name})" for t in templates.resource_templates]
    prompts = await client.list_prompts()
    lines.append("Prompts:" if prompts.prompts else "Prompts: none")
    for p in prompts.prompts:
        arguments = ", ".join(a.name + ("" if a.required else "?") for a in p.arguments or [])
        lines.append(f"- {p.name}({arguments}){': ' + p.description if p.description else ''}")
    return "\n".join(lines)


async def _read(client: Any, uri: str) -> str:
    result = await client.read_resource(uri)
    parts = []
    for item in result.contents:
        text = getattr(item, "text", None)
        if text is not None:
            parts.append(text)
        else:
            blob = getattr(item, "blob", "")
            parts.append(f"[{item.mime_type or 'binary'} content, {len(blob) * 3 // 4} bytes]")
    return "\n".join(parts)


async def _prompt(client: Any, name: str, arguments: dict[str, Any]) -> str:
    result = await client.get_prompt(name, {k: str(v) for k, v in arguments.items()})
    lines = [result.description] if result.description else []
    for message in result.messages:
        content = message.content
        text = getattr(content, "text", None)
        lines.append(
            f"{message.role}: {text if text is not None else json.dumps(content.model_dump(mode='json'))}"
        )
    return "\n".join(lines)
