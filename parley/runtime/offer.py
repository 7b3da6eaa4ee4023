"""What one model call is offered: the tools it may call, and what each name stands for (a
built-in, an MCP server's tool, the resource tools), narrowed by a session's settings or to a
planning turn's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from parley.core.machine import SET_RESULT_NAME
from parley.runtime.model import ToolSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class Binding:
    """What a name the model may call stands for."""

    name: str
    source: str  # builtin | mcp | resources
    effect: str
    requires_approval: bool = False
    server: str | None = None
    tool: str | None = None
    # May run in a planning turn: write_todos, ask_user, resource reads, and MCP tools that
    # parley's configuration classifies as read (never on a server's own annotations).
    plans: bool = False


@dataclass(slots=True)
class Offer:
    tools: list[ToolSpec] = field(default_factory=list)
    bindings: dict[str, Binding] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)

    def narrowed(self, enabled: Sequence[str] | None) -> Offer:
        """Only the tools a session's settings.enabled_tools names (None: all of them), never more:
        a name the offer lacks stays out. A task session keeps set_result, the way it ends."""
        if enabled is None:
            return self
        keep = {*enabled, SET_RESULT_NAME}
        return Offer(
            tools=[t for t in self.tools if t.name in keep],
            bindings={name: b for name, b in self.bindings.items() if name in keep},
            warnings=self.warnings,
            unavailable={
                s: why for s, why in self.unavailable.items() if any(n.startswith(f"{s}__") for n in keep)
            },
        )

    def for_planning(self) -> Offer:
        """Only what a planning turn may call."""
        return Offer(
            tools=[t for t in self.tools if (b := self.bindings.get(t.name)) is not None and b.plans],
            bindings={name: b for name, b in self.bindings.items() if b.plans},
            warnings=self.warnings,
            unavailable=self.unavailable,
        )

    def binding(self, name: str) -> Binding:
        found = self.bindings.get(name)
        if found is not None:
            return found
        # A name of a server that could not be listed: remember the server to explain later.
        server = next((s for s in self.unavailable if name.startswith(f"{s}__")), None)
        return Binding(name=name, source="unknown", effect="unclassified", server=server)
