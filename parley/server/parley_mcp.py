"""The MCPServer parley publishes its tools on: argument errors name the field and the fix."""

from __future__ import annotations

from typing import Any

from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import (
    INVALID_PARAMS,
    CallToolResult,
    GetPromptResult,
    InputRequiredResult,
)
from pydantic import ValidationError

from parley.sdk_compat import has_prompt, registered_tool
from parley.server.arguments import SHOWN_CHARS, argument_errors
from parley.server.results import error


class ParleyMCPServer(MCPServer[Any]):
    """MCPServer whose argument errors name the field and the fix, and that refuses unknown
    arguments (a misspelt optional argument would otherwise be dropped silently). Its tools come
    from the table (tool_table.py), which also reads text arguments as sent (arguments.py)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        tool = registered_tool(self, name)
        if tool is not None:
            known = set(tool.parameters.get("properties", {}))
            unknown = sorted(set(arguments) - known)
            if unknown:
                return error(
                    f"Unknown argument(s) {', '.join(repr(u[:SHOWN_CHARS]) for u in unknown)} for {name}; "
                    f"its arguments are: {', '.join(sorted(known)) or 'none'}."
                )
            try:
                tool.fn_metadata.validate_arguments(arguments)
            except ValidationError as exc:
                return error(argument_errors(name, exc))
        return await super().call_tool(name, arguments, context)

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        # The SDK answers an unknown prompt with error code 0 and logs a traceback; it is a bad
        # parameter (-32602), as the specification says.
        if not has_prompt(self, name):
            raise MCPError(
                code=INVALID_PARAMS, message=f"Unknown prompt: {name}. parley publishes no prompts."
            )
        return await super().get_prompt(name, arguments, context)
