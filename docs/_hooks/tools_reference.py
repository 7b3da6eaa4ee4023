"""The tools reference (reference/tools.md), written from what the server publishes: tools/list of
parley's MCP server built in this process (as tests/test_tool_table.py lists it), so the page shows
the names, titles, descriptions, annotations and schemas clients receive."""

from __future__ import annotations

from typing import Any

import anyio
from markdown_text import anchor, cell, code, prose, table, value

from parley.server.tools import TASK_TOOLS, listed_tools

INTRO = """\
# Tools reference

This page is written from the tools parley's MCP server publishes (`tools/list`) each time the
site is built, so it shows what clients receive from the code it was built with. Every tool
answers with structured content that follows its result schema, and with the same as JSON text.
"""

SHARED = """\
## Shared types {#shared-types}

The objects the arguments and results above are made of (the `$defs` of their schemas)."""

# The annotations a tool may carry (MCP's ToolAnnotations), in words when true and when false.
HINTS = {
    "readOnlyHint": ("read-only", "writes"),
    "destructiveHint": ("destructive", "not destructive"),
    "idempotentHint": ("idempotent", "not idempotent"),
    "openWorldHint": ("open world", "closed world"),
}
_TYPES = ("string", "integer", "number", "boolean", "null", "object")


async def published_tools() -> list[dict[str, Any]]:
    """tools/list as the server answers it, fields left out where they are unset."""
    return [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in await listed_tools()]


def plain_schema_type(schema: dict[str, Any]) -> str | None:
    """A JSON Schema's type as text (`string`, `"chat" | "task"`, `array[string]`, `string | null`),
    or None when it refers to a shared type."""
    if "$ref" in schema:
        return None
    if "anyOf" in schema:
        parts = [plain_schema_type(part) for part in _null_last(schema["anyOf"])]
        return None if None in parts else " | ".join(str(part) for part in parts)
    if "enum" in schema:
        return " | ".join(value(item) for item in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, dict):
            return "array"
        inner = plain_schema_type(items)
        return None if inner is None else f"array[{inner}]"
    return kind if isinstance(kind, str) and kind in _TYPES else "any"


def _null_last(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A union's parts as read aloud: null last ("PlanView | null"), however the schema orders them."""
    return sorted(parts, key=lambda part: part.get("type") == "null")


def schema_type(schema: dict[str, Any], refs: dict[str, str]) -> str:
    """A JSON Schema's type as Markdown: a code span, with a link to each shared type."""
    plain = plain_schema_type(schema)
    if plain is not None:
        return code(plain)
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f"[{name}](#{refs[name]})"
    if "anyOf" in schema:
        return " \\| ".join(schema_type(part, refs) for part in _null_last(schema["anyOf"]))
    return f"`array[`{schema_type(schema['items'], refs)}`]`"


def _bounds(schema: dict[str, Any]) -> str:
    """The schema's numeric and size constraints in words (also those of its anyOf parts)."""
    signs = (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"))
    said = [f"{sign} {value(schema[key])}" for key, sign in signs if key in schema]
    sizes = ("minLength", "maxLength", "minItems", "maxItems")
    said += [f"{key}: {value(schema[key])}" for key in sizes if key in schema]
    said += [inner for part in schema.get("anyOf", []) if (inner := _bounds(part))]
    return ", ".join(said)


def property_rows(schema: dict[str, Any], refs: dict[str, str]) -> list[list[str]]:
    """One row per property of an object schema: name, type, required, default, description."""
    required = set(schema.get("required", []))
    rows = []
    for name, prop in schema.get("properties", {}).items():
        kind = schema_type(prop, refs)
        said = _bounds(prop)
        if said:
            kind += "<br>" + said
        default = code(value(prop["default"])) if "default" in prop else ""
        rows.append(
            [
                code(name),
                kind,
                "yes" if name in required else "no",
                default,
                cell(prop.get("description", "")),
            ]
        )
    return rows


def properties_text(schema: dict[str, Any], refs: dict[str, str], empty: str) -> str:
    rows = property_rows(schema, refs)
    if not rows:
        return empty
    return table(["Name", "Type", "Required", "Default", "Description"], rows)


def _annotations(tool: dict[str, Any]) -> str:
    """The tool's annotations as published: `readOnlyHint: true`, ..."""
    hints = tool.get("annotations") or {}
    said = [code(f"{key}: {value(hints[key])}") for key in HINTS if key in hints]
    return ", ".join(said) if said else "none"


def _in_words(tool: dict[str, Any]) -> str:
    """The tool's annotations in words: read-only, idempotent, closed world."""
    hints = tool.get("annotations") or {}
    said = [HINTS[key][0 if hints[key] else 1] for key in HINTS if hints.get(key) is not None]
    return ", ".join(said)


def tool_text(tool: dict[str, Any], refs: dict[str, str]) -> str:
    name = tool["name"]
    lines = [
        f"## {code(name)} {{#{anchor(name)}}}",
        "",
        f"**{prose(tool.get('title', name))}**",
        "",
        prose(tool.get("description", "")),
        "",
        f"Annotations: {_annotations(tool)} ({_in_words(tool)}).",
        "",
        "Runs as an MCP task: " + ("yes (a client may call it as a task)." if name in TASK_TOOLS else "no."),
        "",
        "**Arguments**",
        "",
        properties_text(tool.get("inputSchema", {}), refs, "None."),
    ]
    output = tool.get("outputSchema")
    if output is not None:
        title = output.get("title")
        named = f" ({code(title)})" if title else ""
        lines += ["", f"**Result**{named}", "", properties_text(output, refs, "An object.")]
    return "\n".join(lines)


def shared_types(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The `$defs` of every tool's schemas by name; one name must mean one schema."""
    found: dict[str, dict[str, Any]] = {}
    for tool in tools:
        for schema in (tool.get("inputSchema", {}), tool.get("outputSchema", {})):
            for name, definition in schema.get("$defs", {}).items():
                if name in found and found[name] != definition:
                    raise ValueError(f"two tools publish different schemas named {name} ({tool['name']})")
                found[name] = definition
    return dict(sorted(found.items()))


def tools_reference(tools: list[dict[str, Any]] | None = None) -> str:
    """The page's Markdown, from `tools` (default: what the server publishes)."""
    tools = tools if tools is not None else anyio.run(published_tools)
    types = shared_types(tools)
    refs = {name: anchor("type", name) for name in types}
    summary = table(
        ["Tool", "Title", "Annotations"],
        [
            [f"[{code(t['name'])}](#{anchor(t['name'])})", prose(t.get("title", "")), _in_words(t)]
            for t in tools
        ],
    )
    parts = [INTRO, summary, *(tool_text(tool, refs) for tool in tools)]
    if types:
        parts.append(SHARED)
        for name, definition in types.items():
            doc = definition.get("description")
            head = f"### {code(name)} {{#{refs[name]}}}" + (f"\n\n{prose(doc)}" if doc else "")
            parts.append(head + "\n\n" + properties_text(definition, refs, "An object."))
    return "\n\n".join(parts) + "\n"
