"""A model a turn runs on: an agent's `model:`, and `models:`, `model_aliases:` and
`default_model:` of parley.yaml."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from parley.config.base import Strict

KNOWN_PROVIDERS = ("demo", "anthropic", "openai")


class ModelSpec(Strict):
    provider: str = Field(
        "demo", description="demo, anthropic, or openai (also any OpenAI-compatible server)."
    )
    name: str = Field("demo", description="The provider's model name.")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Request fields passed to the provider (max_tokens, temperature...).",
    )
    api_key_env: str | None = Field(
        None,
        description=(
            "Name of the environment variable that holds the API key (the key itself is never stored)."
        ),
    )
    base_url: str | None = Field(None, description="The provider's API address (OpenAI-compatible servers).")


def forced_choice_refusal(spec: ModelSpec) -> str | None:
    """Why the provider would refuse a forced tool choice on this model (None: it accepts one).
    Anthropic accepts only `auto` or `none` while extended thinking is on."""
    thinking = spec.options.get("thinking")
    if spec.provider == "anthropic" and isinstance(thinking, dict) and thinking.get("type") != "disabled":
        return "Anthropic refuses a forced tool choice while extended thinking (options.thinking) is on"
    return None
