"""`webhooks:` (outbound subscriptions, signed with the Standard Webhooks scheme) and `triggers:`
(inbound routes that start sessions) of parley.yaml, and their checks against the agents and the
environment (docs/webhooks.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from parley.config.agent import AgentConfig
from parley.config.base import Strict
from parley.config.codes import E_ENV, E_TRIGGER
from parley.config.env import secret_from_env
from parley.core.scopes import TRIGGER, is_known_scope
from parley.core.webhooks import WebhookEvent
from parley.errors import ConfigError

# The scope a bearer token needs for POST /v1/triggers/{name}, unless the trigger names its own.
TRIGGER_SCOPE = TRIGGER
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")


class WebhookSubscription(Strict):
    url: str = Field(description="Where the events are POSTed: an http or https URL.")
    events: list[WebhookEvent] = Field(
        min_length=1,
        description=(
            "The events sent: session.waiting_for_input, turn.ended, turn.failed, session.completed, "
            "session.failed."
        ),
    )
    secret_env: str = Field(
        description=(
            "The environment variable holding the signing secret: whsec_ followed by base64 (the "
            "Standard Webhooks form), or any other text, used as its bytes."
        )
    )
    allow_private: bool = Field(
        False,
        description=(
            "Allow a receiver at a loopback, private, link-local, CGNAT or unique-local address "
            "(refused by default: a guard against reaching internal services)."
        ),
    )
    max_attempts: int = Field(8, ge=1, le=100, description="Attempts before a delivery is marked dead.")
    retry_base_s: float = Field(
        5.0, gt=0, le=3600, description="The pause after the first failed attempt; it doubles after each."
    )
    retry_max_s: float = Field(3600.0, gt=0, le=86_400, description="The longest pause between attempts.")
    timeout_s: float = Field(
        10.0, gt=0, le=120, description="Seconds one attempt may take, connect to answer."
    )

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "must be an http or https URL with a host, e.g. https://hooks.example.com/parley"
            )
        if parts.username or parts.password:
            raise ValueError("must not carry credentials; the signature authenticates parley to the receiver")
        return url


class TriggerConfig(Strict):
    agent: str = Field(description="The agent whose session each request starts.")
    owner: str = Field(min_length=1, max_length=200, description="The principal the sessions belong to.")
    body_as: Literal["message", "input"] = Field(
        "message",
        description=(
            "message: the request's JSON, as text, is the first message; input: it is a task session's "
            "input, checked against the agent's input_schema."
        ),
    )
    auth: Literal["bearer", "standard_webhooks", "github"] = Field(
        description=(
            "bearer: a token with the scope below; standard_webhooks: webhook-id, webhook-timestamp and "
            "webhook-signature over the body; github: X-Hub-Signature-256 with X-GitHub-Delivery."
        )
    )
    scope: str = Field(TRIGGER_SCOPE, description="With auth: bearer, the scope the token must carry.")
    secret_env: str | None = Field(
        None, description="With a signed auth, the environment variable holding the shared secret."
    )
    max_body_bytes: int = Field(
        262_144,
        ge=1,
        le=10_485_760,
        description="The largest body read (signed triggers read it before checking it).",
    )
    tolerance_s: float = Field(
        300.0, gt=0, le=3600, description="With standard_webhooks, how far webhook-timestamp may be from now."
    )

    @field_validator("scope")
    @classmethod
    def _scope(cls, scope: str) -> str:
        if not scope.startswith(TRIGGER) or not is_known_scope(scope):
            raise ValueError(f"must be {TRIGGER} or {TRIGGER}:<word> (a scope of its own)")
        return scope

    @model_validator(mode="after")
    def _secret(self) -> TriggerConfig:
        if self.auth != "bearer" and not self.secret_env:
            raise ValueError(f"auth: {self.auth} needs secret_env, the variable that holds the shared secret")
        return self


def check_names(names: Mapping[str, object], block: str) -> None:
    for name in names:
        if not _NAME.fullmatch(name):
            raise ValueError(f"{block}: '{name}' must be letters, digits, _ or - (at most 32)")


def trigger_problems(
    triggers: Mapping[str, TriggerConfig], agents: Mapping[str, AgentConfig], file: str
) -> list[ConfigError]:
    """Triggers that name an agent that is not served, or want an input it does not take."""
    problems = []
    for name, trigger in triggers.items():
        agent = agents.get(trigger.agent)
        if agent is None:
            fix = f"agent '{trigger.agent}' is not defined; name one of {', '.join(sorted(agents))}"
            problems.append(ConfigError(E_TRIGGER, file, f"triggers.{name}.agent", fix))
        elif trigger.body_as == "input" and "task" not in agent.kinds:
            fix = f"agent '{trigger.agent}' runs no task sessions; use body_as: message"
            problems.append(ConfigError(E_TRIGGER, file, f"triggers.{name}.body_as", fix))
    return problems


def secret_problems(
    webhooks: Mapping[str, WebhookSubscription], triggers: Mapping[str, TriggerConfig], file: str
) -> list[ConfigError]:
    """Secrets whose variables are unset: fatal to serving, reported by `parley check`."""
    named = [(f"webhooks.{n}.secret_env", w.secret_env) for n, w in webhooks.items()]
    named += [(f"triggers.{n}.secret_env", t.secret_env) for n, t in triggers.items() if t.secret_env]
    return [
        ConfigError(
            E_ENV, file, where, f"environment variable {env} is not set (or empty); set it to the secret"
        )
        for where, env in named
        if not secret_from_env(env)
    ]
