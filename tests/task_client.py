"""A small task-capable MCP client for the tests, checking every task message against the published schemas.

The mcp SDK (2.3) ships the MCP task *types* only, with no client-side runtime, so this module
adds one for the two protocol generations parley serves:

* **2025-11-25 core tasks** (legacy, `Client(mode="legacy")`): the client adds `params.task` to
  `tools/call`, then uses `tasks/get`, `tasks/result` (blocking; the server may send
  `elicitation/create` on it), `tasks/cancel` and `tasks/list`; the server may push
  `notifications/tasks/status`.
* **2026-07-28 tasks extension** `io.modelcontextprotocol/tasks` (modern, `Client(mode="auto")`):
  the client declares the extension in every request's `_meta` client capabilities; the server
  may answer `tools/call` with `{"resultType": "task", ...}`; the client polls `tasks/get`, answers
  `inputRequests` with `tasks/update`, and may `tasks/cancel`.

Every result and server message these helpers receive is validated against the vendored
schemas in `tests/schemas/` (see `SOURCE.md` there) with `check()`. A JSON-RPC error from the
server is raised as the SDK's `MCPError` (`.code` / `.error.code`).

Typical use (see `tests/test_task_client.py`):

    async with task_client(target, mode="legacy") as (client, recorder):
        task = await call_tool_as_task(client, "slow", {"n": 1}, ttl_ms=60_000)
        done = await poll_until(lambda: get_task(client, task["taskId"]), is_terminal)

`target` is what `mcp.Client` accepts as a server: an HTTP URL, a `StdioServerParameters`, or a
transport such as `tests.support.ServerProcess.transport()` (`server_target(server)` picks one).
The `recorder` sees every raw JSON-RPC message on the wire (a transparent tap on the transport),
which is how server-sent `elicitation/create` requests and `notifications/tasks/status`
notifications are recorded and validated (the SDK drops notification methods its version tables
do not know before any handler sees them).
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
import mcp.types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from jsonschema import validators
from jsonschema.exceptions import ValidationError as SchemaError
from jsonschema.exceptions import relevance
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value
from mcp.shared.message import SessionMessage
from pydantic import (
    ConfigDict,
    PrivateAttr,
    RootModel,
    TypeAdapter,
    ValidatorFunctionWrapHandler,
    model_validator,
)

from parley.sdk_compat import send_raw_request
from tests.support import TEST_DEADLINE_S, message_pump

if TYPE_CHECKING:
    from mcp.shared.dispatcher import CallOptions

    from parley.sdk_compat import Transport, TransportStreams
    from tests.support import InProcessServer, ServerProcess

__all__ = [
    "IMMEDIATE_RESPONSE_META",
    "LEGACY",
    "MISSING_REQUIRED_CLIENT_CAPABILITY",
    "MODERN",
    "RELATED_TASK_META",
    "TASKS_EXTENSION",
    "TERMINAL",
    "Elicitation",
    "TaskHandle",
    "TaskRecorder",
    "TasksExtension",
    "call_tool_as_task",
    "call_tool_modern",
    "cancel_task",
    "cancel_task_modern",
    "check",
    "create_task",
    "definitions",
    "get_task",
    "get_task_modern",
    "is_terminal",
    "list_tasks",
    "poll_until",
    "server_target",
    "tap",
    "task_client",
    "task_result",
    "update_task",
]

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK_META = "io.modelcontextprotocol/related-task"
IMMEDIATE_RESPONSE_META = "io.modelcontextprotocol/model-immediate-response"
CLIENT_CAPABILITIES_META = types.CLIENT_CAPABILITIES_META_KEY
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
TERMINAL = frozenset({"completed", "failed", "cancelled"})

# ---------------------------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------------------------

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
# Per generation, the files searched in order for a definition name. The 2026 extension schema
# is self-contained for the task messages; the 2026 core schema adds e.g. CallToolResult (for a
# completed task's inlined result).
SCHEMA_FILES: dict[str, tuple[str, ...]] = {
    LEGACY: ("mcp-2025-11-25.schema.json",),
    MODERN: ("ext-tasks-2026-07-28.schema.json", "mcp-2026-07-28.schema.json"),
}


class _Validator(Protocol):
    def iter_errors(self, instance: Any) -> Any: ...


@functools.cache
def _document(file_name: str) -> dict[str, Any]:
    """A vendored schema file, parsed and checked once against the metaschema of its draft."""
    document: dict[str, Any] = json.loads((SCHEMA_DIR / file_name).read_text(encoding="utf-8"))
    validators.validator_for(document).check_schema(document)
    return document


def _definitions_key(document: Mapping[str, Any]) -> str:
    return "$defs" if "$defs" in document else "definitions"


def definitions(generation: str) -> set[str]:
    """Every definition name `check` accepts for `generation` ("2025-11-25" or "2026-07-28")."""
    names: set[str] = set()
    for file_name in _files(generation):
        document = _document(file_name)
        names |= set(document[_definitions_key(document)])
    return names


def _files(generation: str) -> tuple[str, ...]:
    try:
        return SCHEMA_FILES[generation]
    except KeyError:
        raise ValueError(f"unknown generation {generation!r}; use one of {sorted(SCHEMA_FILES)}") from None


@functools.cache
def _validator(generation: str, name: str) -> _Validator:
    for file_name in _files(generation):
        document = _document(file_name)
        key = _definitions_key(document)
        if name not in document[key]:
            continue
        # The definition as a reference from a copy of the document's root, so every
        # `#/$defs/...` inside resolves against the same document.
        schema = {k: v for k, v in document.items() if k in ("$schema", "$id", key)}
        schema["$ref"] = f"#/{key}/{name}"
        cls = validators.validator_for(document)  # the draft the file declares in `$schema`
        validator: _Validator = cls(schema)
        return validator
    raise AssertionError(
        f"no definition {name!r} in the {generation} schemas ({', '.join(_files(generation))})"
    )


def _describe(error: SchemaError) -> str:
    where = "/" + "/".join(str(p) for p in error.absolute_path)
    message = error.message if len(error.message) <= 200 else error.message[:200] + "..."
    if error.validator in ("anyOf", "oneOf"):
        message = f"matches none of the {error.validator} alternatives"
    text = f"at {where}: {message}"
    if error.context:  # anyOf/oneOf: say why the closest alternative failed
        branches: dict[Any, list[SchemaError]] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)

        # The closest branch: one whose discriminating `const`s matched, then the fewest errors.
        def distance(errors: list[SchemaError]) -> tuple[int, int]:
            return (sum(e.validator == "const" for e in errors), len(errors))

        closest = min(branches.values(), key=distance)
        reasons = "; ".join(
            f"at /{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in closest[:4]
        )
        text += f" (closest alternative: {reasons})"
    return text


def check(generation: str, name: str, message: Any) -> Any:
    """Validate `message` against `#/$defs/<name>` of the `generation` schemas; return it unchanged.

    Raises AssertionError naming the definition, each failing location, and the message.
    """
    errors = sorted(_validator(generation, name).iter_errors(message), key=relevance)
    if errors:
        lines = "\n".join(f"  - {_describe(e)}" for e in errors[:8])
        shown = json.dumps(message, ensure_ascii=False, default=str)
        if len(shown) > 3000:
            shown = shown[:3000] + "..."
        raise AssertionError(f"not a valid {generation} {name}:\n{lines}\nmessage: {shown}")
    return message


def _check_call_tool_result(generation: str, result: Mapping[str, Any]) -> None:
    if generation == MODERN:
        # Absent resultType reads as "complete" (2026-07-28 basic rules); task results inline the
        # CallToolResult and the extension's own examples omit the field.
        check(MODERN, "CallToolResult", {"resultType": "complete", **result})
    else:
        check(LEGACY, "CallToolResult", result)


def is_terminal(task: Mapping[str, Any]) -> bool:
    """True once a task (either generation) is completed, failed or cancelled."""
    return task.get("status") in TERMINAL


# ---------------------------------------------------------------------------------------------
# The recorder and the transport tap
# ---------------------------------------------------------------------------------------------


@dataclass
class Elicitation:
    """One `elicitation/create` request the server sent on the wire (legacy back channel)."""

    request_id: Any
    params: dict[str, Any]

    @property
    def related_task(self) -> str | None:
        meta = self.params.get("_meta") or {}
        related = meta.get(RELATED_TASK_META) if isinstance(meta, dict) else None
        return related.get("taskId") if isinstance(related, dict) else None


def _dump(message: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = message.model_dump(by_alias=True, mode="json", exclude_unset=True)
    return dumped


@dataclass
class TaskRecorder:
    """Records what crosses the wire and answers elicitations.

    - `received` / `sent`: every JSON-RPC message (as dicts); `sent_headers` the per-message HTTP
      headers the SDK attached to each sent message (computed on stdio too, where they are not sent).
    - `elicitations`: every `elicitation/create` the server sent, validated as `ElicitRequest`
      on arrival; with `expect_related_task=True` each must also carry the related-task `_meta`.
    - `statuses`: the params (a full Task) of every `notifications/tasks/status`, validated as
      `TaskStatusNotification` on arrival.
    - `asked`: `(request id or input key, params)` for every elicitation the client answered,
      on either generation (modern ones come from a task's `inputRequests`).
    - `answers`: queued `ElicitResult` dicts handed out in order; then `default_answer`.

    Validation failures do not break the connection: they are kept in `problems`, and
    `assert_clean()` (called when `task_client` exits normally) raises them.
    """

    expect_related_task: bool = False
    answers: list[dict[str, Any]] = field(default_factory=list)
    default_answer: dict[str, Any] = field(default_factory=lambda: {"action": "decline"})
    received: list[dict[str, Any]] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)
    sent_headers: list[dict[str, str]] = field(default_factory=list)
    elicitations: list[Elicitation] = field(default_factory=list)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    asked: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _changed: anyio.Event | None = field(default=None, repr=False)

    # -- observation (called by the tap) --

    def observe_received(self, item: SessionMessage) -> None:
        raw = _dump(item.message)
        self.received.append(raw)
        method = raw.get("method")
        try:
            if method == "elicitation/create" and "id" in raw:
                check(LEGACY, "ElicitRequest", raw)
                elicitation = Elicitation(raw["id"], raw.get("params") or {})
                if self.expect_related_task:
                    meta = elicitation.params.get("_meta") or {}
                    assert RELATED_TASK_META in meta, f"elicitation without {RELATED_TASK_META}: {raw}"
                    check(LEGACY, "RelatedTaskMetadata", meta[RELATED_TASK_META])
                self.elicitations.append(elicitation)
            elif method == "notifications/tasks/status":
                check(LEGACY, "TaskStatusNotification", raw)
                self.statuses.append(raw["params"])
        except AssertionError as problem:
            self.problems.append(str(problem))
        self._notify()

    def observe_sent(self, item: SessionMessage) -> None:
        self.sent.append(_dump(item.message))
        headers = getattr(item.metadata, "headers", None) or {}
        self.sent_headers.append(dict(headers))
        self._notify()

    # -- queries --

    def elicitations_for(self, task_id: str) -> list[Elicitation]:
        """The wire elicitations whose related-task `_meta` names `task_id`."""
        return [e for e in self.elicitations if e.related_task == task_id]

    def statuses_for(self, task_id: str) -> list[dict[str, Any]]:
        return [s for s in self.statuses if s.get("taskId") == task_id]

    def headers_of(self, method: str) -> list[dict[str, str]]:
        """The HTTP headers the SDK attached to each sent request of `method`, in order."""
        return [h for m, h in zip(self.sent, self.sent_headers, strict=True) if m.get("method") == method]

    def requests_of(self, method: str) -> list[dict[str, Any]]:
        """Each sent request of `method` (the JSON-RPC message, with `params._meta` as sent)."""
        return [m for m in self.sent if m.get("method") == method]

    def assert_clean(self) -> None:
        if self.problems:
            raise AssertionError("invalid messages from the server:\n" + "\n".join(self.problems))

    async def wait_for(self, predicate: Callable[[TaskRecorder], bool], what: str) -> None:
        """Wait until `predicate(self)` holds after some recorded message, or fail at the test deadline."""
        try:
            with anyio.fail_after(TEST_DEADLINE_S):
                while not predicate(self):
                    if self._changed is None:
                        self._changed = anyio.Event()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"timed out after {TEST_DEADLINE_S}s waiting for {what}") from None

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    # -- the elicitation callback (pass as `Client(elicitation_callback=...)`) --

    async def on_elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        self.asked.append(
            (context.request_id, params.model_dump(by_alias=True, mode="json", exclude_none=True))
        )
        answer = self.answers.pop(0) if self.answers else self.default_answer
        if "code" in answer:
            return types.ErrorData(**answer)
        return types.ElicitResult(**answer)


def tap(inner: Transport, recorder: TaskRecorder) -> Transport:
    """Wrap a transport so `recorder` sees every message in both directions, unchanged."""

    @asynccontextmanager
    async def tapped() -> AsyncIterator[TransportStreams]:
        async with inner as (read, write):

            async def pump_in(to_client: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
                async for item in read:
                    if isinstance(item, SessionMessage):
                        recorder.observe_received(item)
                    await to_client.send(item)

            async def pump_out(from_client: MemoryObjectReceiveStream[SessionMessage]) -> None:
                try:
                    async for item in from_client:
                        recorder.observe_sent(item)
                        await write.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass
                finally:
                    with anyio.CancelScope(shield=True):
                        await write.aclose()

            async with message_pump(pump_in, pump_out) as streams:
                yield streams

    transport: Transport = tapped()
    return transport


def server_target(server: ServerProcess | InProcessServer) -> Any:
    """What `task_client` takes for a server of tests/support.py: its URL, or its stdio pipes."""
    return server.url if server.http else server.transport()


@asynccontextmanager
async def task_client(
    target: Any,
    *,
    mode: str = "auto",
    recorder: TaskRecorder | None = None,
    declare_tasks: bool = True,
    **client_kwargs: Any,
) -> AsyncIterator[tuple[Client, TaskRecorder]]:
    """Open an `mcp.Client` on `target` with the recorder's tap and elicitation callback.

    `target`: an HTTP URL, a `StdioServerParameters`, or a transport (`server_target(server)`).
    `declare_tasks`: pass `TasksExtension()` so 2026-07-28 requests declare
    `io.modelcontextprotocol/tasks` (the SDK never advertises it on a legacy connection).
    Extra keyword arguments go to `mcp.Client`. The recorder's `problems` fail the exit.
    """
    recorder = recorder if recorder is not None else TaskRecorder()
    inner: Transport
    if isinstance(target, str):
        inner = streamable_http_client(target)
    elif isinstance(target, StdioServerParameters):
        inner = stdio_client(target)
    else:
        inner = target
    client_kwargs.setdefault("elicitation_callback", recorder.on_elicit)
    if declare_tasks:
        client_kwargs.setdefault("extensions", [TasksExtension()])
    async with Client(tap(inner, recorder), mode=mode, **client_kwargs) as client:
        yield client, recorder
    recorder.assert_clean()


# ---------------------------------------------------------------------------------------------
# Sending
# ---------------------------------------------------------------------------------------------


class _Raw(RootModel[dict[str, Any]]):
    """Any result object, kept as the dict it arrived as."""


def _session(client: Client | ClientSession) -> ClientSession:
    return client if isinstance(client, ClientSession) else client.session


def _require(client: Client | ClientSession, version: str) -> ClientSession:
    session = _session(client)
    assert session.protocol_version == version, (
        f"this helper needs a connection on {version}, not {session.protocol_version}"
    )
    return session


async def _request(
    session: ClientSession, request: types.Request[Any, Any], timeout_s: float | None = None
) -> dict[str, Any]:
    """Send a typed request through the SDK's normal path; return the result dict unvalidated.

    The session stamps the version header (and on 2026-07-28 the `_meta` envelope and
    `Mcp-Method`), adds `Mcp-Name` for a request class with `name_param`, and raises `MCPError`
    for a JSON-RPC error. `tasks/*` are in none of the SDK's result tables, so the result passes
    through as sent.
    """
    result = await session.send_request(
        request, _Raw, request_read_timeout_seconds=timeout_s or TEST_DEADLINE_S
    )
    return result.root


async def _send_raw(
    session: ClientSession,
    method: str,
    params: dict[str, Any],
    *,
    edit: Callable[[dict[str, Any], dict[str, str]], None] | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Send `method` below the typed layer, for what `send_request` cannot express.

    Private SDK API, through parley.sdk_compat.send_raw_request: the request carries exactly
    what `send_request` would add, and the result dict comes back without any validation.
    `edit(params, headers)` may change the stamped request before it goes out.
    """
    opts: CallOptions = {"timeout": timeout_s or TEST_DEADLINE_S}
    return await send_raw_request(session, method, params, opts, edit=edit)


# ---------------------------------------------------------------------------------------------
# 2025-11-25 core tasks
# ---------------------------------------------------------------------------------------------


async def create_task(
    client: Client | ClientSession, name: str, arguments: dict[str, Any], ttl_ms: int | None = None
) -> dict[str, Any]:
    """`tools/call` with `params.task` on 2025-11-25; return the whole validated `CreateTaskResult`."""
    session = _require(client, LEGACY)
    task_param: dict[str, Any] = {} if ttl_ms is None else {"ttl": ttl_ms}
    # Raw: the SDK's typed call would validate the reply as a CallToolResult and reject it.
    result = await _send_raw(
        session, "tools/call", {"name": name, "arguments": arguments, "task": task_param}
    )
    check(LEGACY, "CreateTaskResult", result)
    return result


async def call_tool_as_task(
    client: Client | ClientSession, name: str, arguments: dict[str, Any], ttl_ms: int | None = None
) -> dict[str, Any]:
    """`tools/call` as a task on 2025-11-25; return the created `task` (validated)."""
    task: dict[str, Any] = (await create_task(client, name, arguments, ttl_ms))["task"]
    return task


async def get_task(client: Client | ClientSession, task_id: str) -> dict[str, Any]:
    """`tasks/get` on 2025-11-25 → the validated `GetTaskResult` (a flat Task)."""
    session = _require(client, LEGACY)
    result = await _request(session, types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)))
    check(LEGACY, "GetTaskResult", result)
    assert result["taskId"] == task_id, f"tasks/get for {task_id} answered for {result['taskId']}"
    return result


async def task_result(
    client: Client | ClientSession, task_id: str, timeout_s: float | None = None
) -> dict[str, Any]:
    """`tasks/result` on 2025-11-25 (blocks until terminal) → the validated `GetTaskPayloadResult`.

    For a tools/call task that is a `CallToolResult` whose `_meta` carries
    `io.modelcontextprotocol/related-task = {"taskId": task_id}`; both are asserted.
    """
    session = _require(client, LEGACY)
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    result = await _request(session, request, timeout_s)
    check(LEGACY, "GetTaskPayloadResult", result)
    _check_call_tool_result(LEGACY, result)
    related = (result.get("_meta") or {}).get(RELATED_TASK_META)
    assert related == {"taskId": task_id}, f"tasks/result _meta[{RELATED_TASK_META!r}] is {related!r}"
    return result


async def cancel_task(client: Client | ClientSession, task_id: str) -> dict[str, Any]:
    """`tasks/cancel` on 2025-11-25 → the validated `CancelTaskResult` (the Task, now cancelled)."""
    session = _require(client, LEGACY)
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    result = await _request(session, request)
    check(LEGACY, "CancelTaskResult", result)
    return result


async def list_tasks(client: Client | ClientSession, cursor: str | None = None) -> dict[str, Any]:
    """`tasks/list` on 2025-11-25 → the validated `ListTasksResult` (`tasks`, `nextCursor`?)."""
    session = _require(client, LEGACY)
    params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
    result = await _request(session, types.ListTasksRequest(params=params))
    check(LEGACY, "ListTasksResult", result)
    return result


# ---------------------------------------------------------------------------------------------
# 2026-07-28 tasks extension
# ---------------------------------------------------------------------------------------------


class TaskIdParams(types.RequestParams):
    task_id: str


class UpdateTaskParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class GetTaskRequest(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"  # => Mcp-Name: <taskId> on HTTP


class UpdateTaskRequest(types.Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams
    name_param = "taskId"


class CancelTaskRequest(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class TaskHandle(types.Result):
    """The extension's `CreateTaskResult` as the SDK parses it (a `ResultClaim` model).

    `wire` keeps the result dict exactly as received, for schema validation.
    """

    model_config = ConfigDict(extra="allow")

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    _wire: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_wire(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        handle = handler(data)
        if isinstance(handle, TaskHandle) and isinstance(data, dict):
            handle._wire = copy.deepcopy(data)
        return handle

    @property
    def wire(self) -> dict[str, Any]:
        return self._wire


_INPUT_REQUEST: TypeAdapter[types.InputRequest] = TypeAdapter(types.InputRequest)


async def _answer_input_requests(
    session: ClientSession, input_requests: Mapping[str, Any], seen: set[str]
) -> dict[str, types.InputResponse]:
    """Run each not-yet-seen input request through the client's callbacks; return the answers by key."""
    answers: dict[str, types.InputResponse] = {}
    for key, raw in input_requests.items():
        if key in seen:  # the same key repeats on every poll until answered
            continue
        seen.add(key)
        request = _INPUT_REQUEST.validate_python(raw, by_name=False)
        meta = request.params.meta if request.params else None
        context = ClientRequestContext(session=session, request_id=key, meta=meta)
        answer = await session.dispatch_input_request(context, request)
        if isinstance(answer, types.ErrorData):
            raise MCPError.from_error_data(answer)
        answers[key] = answer
    return answers


def _wire(answers: Mapping[str, types.InputResponse]) -> dict[str, Any]:
    return {k: v.model_dump(by_alias=True, mode="json", exclude_none=True) for k, v in answers.items()}


async def _resolve_task(handle: TaskHandle, context: ClaimContext) -> types.CallToolResult:
    """Finish a task handle for `Client.call_tool`: poll, answer input requests, return the result."""
    session = context.session
    seen: set[str] = set()
    interval_s = min(max((handle.wire.get("pollIntervalMs") or 50) / 1000, 0.02), 0.5)

    async def get() -> dict[str, Any]:
        task = await get_task_modern(session, handle.task_id)
        if task["status"] == "input_required":
            answers = await _answer_input_requests(session, task["inputRequests"], seen)
            if answers:
                await update_task(session, handle.task_id, _wire(answers))
        return task

    task = await poll_until(get, is_terminal, interval_s=interval_s)
    if task["status"] == "completed":
        return types.CallToolResult.model_validate(task["result"], by_name=False)
    if task["status"] == "failed":
        error = task["error"]
        raise MCPError(error["code"], error["message"], error.get("data"))
    raise MCPError(types.INTERNAL_ERROR, f"task {handle.task_id} was cancelled", task)


class TasksExtension(ClientExtension):
    """Declares `io.modelcontextprotocol/tasks` on 2026-07-28 requests and claims `resultType: "task"`.

    With it, `client.call_tool` resolves a task transparently (polling `tasks/get`, answering
    `inputRequests` through the client's callbacks with `tasks/update`);
    `client.session.call_tool(..., allow_claimed=True)` / `call_tool_modern` return the handle.
    """

    identifier = TASKS_EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=_resolve_task)]


async def call_tool_modern(
    client: Client | ClientSession,
    name: str,
    arguments: dict[str, Any],
    *,
    max_input_rounds: int = 10,
) -> dict[str, Any]:
    """`tools/call` on 2026-07-28: the plain `CallToolResult` or the task handle, as a dict.

    Input-required (MRTR) rounds before the server decides are answered through the client's
    callbacks and retried, as `Client.call_tool` does. A task handle is validated as the
    extension's `CreateTaskResult`; it is only possible if the client declared the extension.
    """
    session = _require(client, MODERN)
    responses: types.InputResponses | None = None
    state: str | None = None
    for _ in range(max_input_rounds + 1):
        result = await session.call_tool(
            name,
            arguments,
            read_timeout_seconds=TEST_DEADLINE_S,
            input_responses=responses,
            request_state=state,
            allow_input_required=True,
            allow_claimed=True,
        )
        if isinstance(result, types.InputRequiredResult):
            responses = await _answer_input_requests(session, result.input_requests or {}, set())
            state = result.request_state
            continue
        if isinstance(result, TaskHandle):  # parsed only if the client declared the extension
            check(MODERN, "CreateTaskResult", result.wire)
            return result.wire
        if isinstance(result, types.CallToolResult):
            plain: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            _check_call_tool_result(MODERN, plain)
            return plain
        raise AssertionError(f"unexpected tools/call result {result!r}")
    raise AssertionError(f"tools/call {name} still wanted input after {max_input_rounds} rounds")


def _without_tasks_extension(params: dict[str, Any], headers: dict[str, str]) -> None:
    meta = params.setdefault("_meta", {})
    capabilities = copy.deepcopy(meta.get(CLIENT_CAPABILITIES_META) or {})
    extensions = capabilities.get("extensions") or {}
    extensions.pop(TASKS_EXTENSION, None)
    if extensions:
        capabilities["extensions"] = extensions
    else:
        capabilities.pop("extensions", None)
    meta[CLIENT_CAPABILITIES_META] = capabilities
    headers[MCP_NAME_HEADER] = encode_header_value(params["taskId"])


async def _modern_request(
    session: ClientSession, request: types.Request[Any, Any], declare_extension: bool
) -> dict[str, Any]:
    if declare_extension:
        return await _request(session, request)
    params = request.params.model_dump(by_alias=True, mode="json", exclude_none=True)
    return await _send_raw(session, request.method, params, edit=_without_tasks_extension)


async def get_task_modern(
    client: Client | ClientSession, task_id: str, *, declare_extension: bool = True
) -> dict[str, Any]:
    """`tasks/get` on 2026-07-28 → the validated `GetTaskResult` (`resultType: "complete"` + the task).

    Status-specific fields are checked by the schema: `inputRequests` when input_required,
    `result` (also checked as a 2026 `CallToolResult`) when completed, `error` when failed.
    `declare_extension=False` sends this one request with the extension removed from the
    `_meta` client capabilities (for the `-32021` case), whatever the client declares.
    """
    session = _require(client, MODERN)
    request = GetTaskRequest(params=TaskIdParams(task_id=task_id))
    result = await _modern_request(session, request, declare_extension)
    check(MODERN, "GetTaskResult", result)
    assert result["resultType"] == "complete", f"tasks/get resultType is {result['resultType']!r}"
    assert result["taskId"] == task_id, f"tasks/get for {task_id} answered for {result['taskId']}"
    if result["status"] == "completed":
        _check_call_tool_result(MODERN, result["result"])
    return result


async def update_task(
    client: Client | ClientSession,
    task_id: str,
    input_responses: Mapping[str, Any],
    *,
    declare_extension: bool = True,
) -> dict[str, Any]:
    """`tasks/update {taskId, inputResponses}` on 2026-07-28 → the validated `UpdateTaskResult` (an ack)."""
    session = _require(client, MODERN)
    request = UpdateTaskRequest(
        params=UpdateTaskParams(task_id=task_id, input_responses=dict(input_responses))
    )
    result = await _modern_request(session, request, declare_extension)
    check(MODERN, "UpdateTaskResult", result)
    return result


async def cancel_task_modern(
    client: Client | ClientSession, task_id: str, *, declare_extension: bool = True
) -> dict[str, Any]:
    """`tasks/cancel` on 2026-07-28 → the validated `CancelTaskResult` (an ack)."""
    session = _require(client, MODERN)
    result = await _modern_request(
        session, CancelTaskRequest(params=TaskIdParams(task_id=task_id)), declare_extension
    )
    check(MODERN, "CancelTaskResult", result)
    return result


# ---------------------------------------------------------------------------------------------
# Polling
# ---------------------------------------------------------------------------------------------


async def poll_until(
    get: Callable[[], Awaitable[dict[str, Any]]],
    predicate: Callable[[dict[str, Any]], bool],
    deadline: float | None = None,
    *,
    interval_s: float = 0.05,
) -> dict[str, Any]:
    """Call `get()` every `interval_s` until `predicate(task)` holds; return that task.

    Fails with an AssertionError showing the last task seen after `deadline` seconds
    (default `tests.support.TEST_DEADLINE_S`). Errors from `get` propagate.
    """
    limit = TEST_DEADLINE_S if deadline is None else deadline
    last: dict[str, Any] | None = None
    try:
        with anyio.fail_after(limit):
            while True:
                last = await get()
                if predicate(last):
                    return last
                await anyio.sleep(interval_s)
    except TimeoutError:
        shown = json.dumps(last, ensure_ascii=False, default=str)
        raise AssertionError(f"timed out after {limit}s polling; last task seen: {shown}") from None
