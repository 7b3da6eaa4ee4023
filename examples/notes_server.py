"""A tiny MCP server for the client example: notes kept in a JSON file.

`add_note` says it only adds and may be repeated (idempotent, not destructive), so an agent calls it
freely; `delete_notes` destroys, so parley asks for approval first.

Usage: python examples/notes_server.py NOTES_FILE   (over stdio; parley starts it)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

NOTES = Path(sys.argv[1] if len(sys.argv) > 1 else "notes.json")
server: MCPServer = MCPServer("notes")


def _read() -> list[str]:
    return list(json.loads(NOTES.read_text())) if NOTES.exists() else []


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
def add_note(text: str) -> str:
    """Add a note."""
    NOTES.write_text(json.dumps([*_read(), text]))
    return f"added note {len(_read())}: {text}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def delete_notes() -> str:
    """Delete every note."""
    count = len(_read())
    NOTES.write_text("[]")
    return f"deleted {count} note(s)"


if __name__ == "__main__":
    server.run()
