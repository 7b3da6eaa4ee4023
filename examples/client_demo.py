"""parley.client in one script: a conversation, an approval by callback and one by explicit call, a
question, events of a turn, and a typed error. Runs anywhere parley is installed, with no key:

    .venv/bin/python examples/client_demo.py

It writes a parley.yaml into a temporary folder, with an agent on the keyless demo model that
uses the notes MCP server next to this file, and talks to a `parley serve` the client starts.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio
import yaml

import parley.client as pc

HERE = Path(__file__).resolve().parent


def write_config(folder: Path) -> Path:
    agent = {
        "name": "notes",
        "description": "Keeps notes (on the demo model, which follows /tool, /ask and /sleep lines).",
        "model": {"provider": "demo", "name": "demo"},
        "tools": ["ask_user"],
        "mcp_servers": ["notes"],
    }
    notes_server = {
        "command": sys.executable,
        "args": [str(HERE / "notes_server.py"), str(folder / "notes.json")],
    }
    (folder / "agents").mkdir()
    (folder / "agents" / "notes.yaml").write_text(yaml.safe_dump(agent))
    config = folder / "parley.yaml"
    config.write_text(
        yaml.safe_dump(
            {"storage": {"path": "parley.db"}, "agents_dir": "agents", "mcp_servers": {"notes": notes_server}}
        )
    )
    return config


def approve_additions_only(interrupt: pc.Interrupt) -> bool | pc.Reject:
    print(f"  approval asked: {interrupt.tool} {interrupt.arguments} ({interrupt.effect})")
    return True if interrupt.tool == "notes__add_note" else pc.Reject("the notes stay")


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        config = write_config(Path(folder))
        async with pc.connect_stdio(config) as p:
            # A conversation: start() and send() wait for the turn to end (through `running`).
            s = await p.start("notes", "hello")
            print("1.", s.answer)
            reply = await s.send('/tool notes__add_note {"text": "buy milk"}')
            print("2.", reply.answer)

            # An approval decided by a callback (delete_notes is destructive: it needs one).
            reply = await s.send("/tool notes__delete_notes {}", on_approval=approve_additions_only)
            print("3.", reply.answer)

            # The same, decided by an explicit call: the outcome waits, s.pending lists what for.
            waiting = await s.send("/tool notes__delete_notes {}")
            print("4.", waiting.status, [(i.kind, i.tool) for i in s.pending])
            reply = await s.approve(reason="spring cleaning")
            print("  ", reply.answer)

            # A question, answered by a callback (or: s.answer_question(s.pending[0], "yes")).
            reply = await s.send("/ask Ship it? | yes | no", on_question=lambda q: q.choices[0])
            print("5.", reply.answer)

            # Events of a turn while it runs (progress over stdio).
            async def show(event: pc.Event) -> None:
                if isinstance(event, pc.ToolStarted | pc.ToolFinished | pc.Text):
                    print("   event:", event)

            await s.send('/tool notes__add_note {"text": "call mum"}', on_event=show)

            # Refusals are typed errors carrying the server's text.
            try:
                await p.start("nobody", "hi")
            except pc.UnknownAgent as exc:
                print("6.", type(exc).__name__ + ":", exc)


if __name__ == "__main__":
    anyio.run(main)
