"""Effect class and approval requirement of an MCP tool (docs/design.md#the-effect-policy):
agent policy, then server policy, then the tool's annotations (when trusted), then the default
`unclassified`."""

from __future__ import annotations

from dataclasses import dataclass

from mcp.types import ToolAnnotations

from parley.config import ToolPolicy

NEEDS_APPROVAL_BY_EFFECT = {
    "read": False,
    "idempotent_write": False,
    "non_idempotent_write": True,
    "unclassified": True,
}


@dataclass(frozen=True, slots=True)
class Classification:
    effect: str
    requires_approval: bool
    destructive: bool
    # Whether parley's own configuration (a policy, not the server's annotations) says `read`:
    # only such tools run in a planning turn.
    configured_read: bool = False


def classify(
    annotations: ToolAnnotations | None,
    *,
    trust_annotations: bool,
    server_policy: ToolPolicy | None,
    agent_policy: ToolPolicy | None,
) -> Classification:
    hints = annotations if trust_annotations else None
    policies = [p for p in (agent_policy, server_policy) if p is not None]
    effect: str | None = next((p.effect for p in policies if p.effect is not None), None)
    configured_read = effect == "read"
    if effect is None and hints is not None:
        effect = _effect_from_hints(hints)
    effect = effect or "unclassified"

    # By the MCP spec a tool that is not read-only is destructive unless it says destructiveHint: false;
    # without trusted hints we cannot know, so we assume the worst.
    if effect == "read":
        destructive = False
    elif hints is None or hints.destructive_hint is None:
        destructive = True
    else:
        destructive = bool(hints.destructive_hint)

    approval = next((p.approval for p in policies if p.approval is not None), "auto")
    if approval == "always":
        requires = True
    elif approval == "never":
        requires = False
    else:
        requires = NEEDS_APPROVAL_BY_EFFECT[effect] or (effect == "idempotent_write" and destructive)
    return Classification(
        effect=effect, requires_approval=requires, destructive=destructive, configured_read=configured_read
    )


def _effect_from_hints(hints: ToolAnnotations) -> str | None:
    if hints.read_only_hint:
        return "read"
    if hints.idempotent_hint:
        return "idempotent_write"
    if hints.read_only_hint is False and hints.idempotent_hint is False:
        return "non_idempotent_write"
    return None
