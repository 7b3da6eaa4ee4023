"""How a tool is declared: an arguments model, a module-level handler, and one row of the table
(tools.py: TOOLS) naming it, its title and annotations, its output, and whether it starts or
resumes a turn. The description clients read is the handler's docstring.

A row becomes an mcp SDK Tool here; the handler gets the service, the Caller (who, progress, and
for turn tools asking the person) and its validated arguments, and the one path of its kind
(turn_calls.py: ToolCalls) does the rest: the guard that turns errors into results, and for turn
tools the retry of an input-required round and the outcome or the questions."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import InvalidSignature
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.shared.inbound import find_invalid_x_mcp_header
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel

from parley.runtime.service import SessionService, TurnOutcome
from parley.server.arguments import TextAsSentMetadata
from parley.server.turn_calls import Caller, ToolCalls
from parley.server.wire import TurnOutcomeView


class ToolArguments(ArgModelBase):
    """The base of every tool's arguments model. Its fields, in order, are the tool's published
    input schema (a subclass has no docstring: it would become the schema's description)."""


class NoArguments(ToolArguments):
    pass


class TurnArguments(ToolArguments):
    """The arguments of a tool that starts or resumes a turn. Each declares `wait_seconds`
    (WaitArg) itself, as its last field, where the published schema has it."""

    if TYPE_CHECKING:
        wait_seconds: float | None


A = TypeVar("A", bound=ToolArguments)
W = TypeVar("W", bound=TurnArguments)

# A tool's handler: what it does with the service for this caller, as a tool result...
Handler = Callable[[SessionService, Caller, A], Awaitable[CallToolResult]]
# ...or, for a tool that starts or resumes a turn, the service call whose outcome it answers with.
TurnHandler = Callable[[SessionService, Caller, W], Awaitable[TurnOutcome]]
# What the SDK calls: Tool.run passes the Context and the validated model (WholeArguments).
Bound = Callable[[Context, Any], Awaitable[CallToolResult]]


@dataclass(frozen=True, slots=True)
class ToolEntry(Generic[A]):
    """A tool whose handler makes its result."""

    name: str
    title: str
    annotations: ToolAnnotations
    handler: Handler[A]
    arguments: type[A]
    output: type[BaseModel]

    @property
    def starts_turn(self) -> bool:
        return False

    def sdk_tool(self, service: SessionService, calls: ToolCalls) -> Tool:
        name, handler = self.name, self.handler

        async def call(ctx: Context, args: A) -> CallToolResult:
            return await calls.plain(name, ctx, lambda caller: handler(service, caller, args))

        return _sdk_tool(self, self.output, call)


@dataclass(frozen=True, slots=True)
class TurnEntry(Generic[W]):
    """A tool that starts or resumes a turn: it answers with the turn's outcome (or, for a client
    that can show forms, the questions it waits on), and it may run as an MCP task."""

    name: str
    title: str
    annotations: ToolAnnotations
    handler: TurnHandler[W]
    arguments: type[W]

    @property
    def starts_turn(self) -> bool:
        return True

    def sdk_tool(self, service: SessionService, calls: ToolCalls) -> Tool:
        name, handler = self.name, self.handler

        async def call(ctx: Context, args: W) -> CallToolResult:
            return await calls.turn(
                name, ctx, args.wait_seconds, lambda caller: handler(service, caller, args)
            )

        return _sdk_tool(self, TurnOutcomeView, call)


# One row of the table.
Entry = ToolEntry[Any] | TurnEntry[Any]


class WholeArguments(TextAsSentMetadata):
    """The arguments as the handler takes them: the validated model whole, as `args` (the SDK
    would spread its fields over the function's parameters)."""

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        return {"args": self.arg_model.model_validate(self.pre_parse_json(arguments_to_validate))}


def sdk_tools(entries: tuple[Entry, ...], service: SessionService, calls: ToolCalls) -> list[Tool]:
    return [entry.sdk_tool(service, calls) for entry in entries]


def _sdk_tool(entry: Entry, output: type[BaseModel], call: Bound) -> Tool:
    """What Tool.from_function would make of a function with the entry's arguments as parameters
    and `Annotated[CallToolResult, output]` as its return type, the schema's title included."""
    arguments: type[ArgModelBase] = entry.arguments
    input_schema, output_schema = _schemas(entry.name, arguments, output)
    return Tool(
        fn=call,
        name=entry.name,
        title=entry.title,
        # Every client's model reads the descriptions on every request: no docstring indentation.
        description=inspect.cleandoc(entry.handler.__doc__ or ""),
        parameters=copy.deepcopy(input_schema),
        fn_metadata=WholeArguments(
            arg_model=entry.arguments, output_model=output, output_schema=copy.deepcopy(output_schema)
        ),
        is_async=True,
        context_kwarg="ctx",
        annotations=entry.annotations,
    )


@cache
def _schemas(
    name: str, arguments: type[ArgModelBase], output: type[BaseModel]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A tool's input and output schemas, made once a process: pydantic takes about 10 ms a tool
    to make them, and every app (each test's, each `parley eval`'s) builds the whole table."""
    parameters = arguments.model_json_schema(by_alias=True)
    parameters["title"] = f"{name}Arguments"
    if (reason := find_invalid_x_mcp_header(parameters)) is not None:
        raise InvalidSignature(f"Tool {name!r} has an invalid x-mcp-header annotation: {reason}")
    # The SDK derives the output schema as it validates the metadata; it is kept, not redone.
    derived = WholeArguments(arg_model=arguments, output_model=output).output_schema
    assert derived is not None
    return parameters, without_field_noise(derived)


def without_field_noise(schema: Any) -> Any:
    """An output schema without what pydantic adds to each field that says nothing a client can
    use: the title it makes of the field's name ("Session Id") and `default: null`; and with the
    null branch of an optional field first (`_nullable`). Every client session lists the tools,
    and the mcp SDK's client spends about 0.1 ms of CPU per KB of the listing; it also validates
    every result against its tool's output schema. The names of the result and of its shared
    types stay, and so does what the schema accepts (titles and defaults are annotations)."""
    if isinstance(schema, list):
        return [without_field_noise(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    kept: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            kept[key] = {name: _field(field) for name, field in value.items()}
        elif key == "$defs" and isinstance(value, dict):
            kept[key] = {name: without_field_noise(shared) for name, shared in value.items()}
        elif key in _VALUES:
            kept[key] = value
        else:
            kept[key] = without_field_noise(value)
    return _nullable(kept)


# Keywords whose value is data (instances), never a schema.
_VALUES = frozenset({"default", "examples", "const", "enum"})
_NULL = {"type": "null"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """pydantic writes an optional field as `anyOf: [<its schema>, {type: null}]`. Put the null
    branch first: the same values match, and a null (the usual value of an optional field)
    matches at once instead of after the other branch failed, a quarter of the time a client
    spends validating a text turn's result. (A `type: [string, null]` list would be cheaper still,
    but the Inspector warns that clients mapping schemas onto a single-type dialect reject it.)"""
    branches = schema.get("anyOf")
    if not isinstance(branches, list) or _NULL not in branches or branches[0] == _NULL:
        return schema
    return {**schema, "anyOf": [_NULL, *(branch for branch in branches if branch != _NULL)]}


def _field(schema: Any) -> Any:
    """A property's schema without its title and a `null` default."""
    if not isinstance(schema, dict):
        return schema
    noise = [key for key, value in schema.items() if key == "title" or (key == "default" and value is None)]
    return without_field_noise({key: value for key, value in schema.items() if key not in noise})
