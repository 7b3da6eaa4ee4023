"""`ui:` in parley.yaml: the page for people at /ui. With `auth: oauth` and `client_id`, the
page signs people in at the configured authorization server itself (authorization code with
PKCE, as a public client) instead of asking them to paste an access token."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from parley.config.base import Strict

# RFC 6749 §A.1 (VSCHAR) and §A.4 (scope-token): printable ASCII, no spaces in a client id.
_CLIENT_ID = re.compile(r"[\x21-\x7e]{1,255}")
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,128}")


class UiConfig(Strict):
    client_id: str | None = Field(
        None,
        description=(
            "auth mode oauth: the page's client id at the authorization server, registered as a public "
            "client (no secret; token endpoint auth method none) with the redirect URI "
            "<where people open parley>/ui/callback. Unset: the page asks for an access token instead."
        ),
    )
    scope: str = Field(
        "parley:use",
        description="The scopes the page asks for when it signs a person in, space-separated.",
    )

    @field_validator("client_id")
    @classmethod
    def _client_id(cls, value: str | None) -> str | None:
        if value is not None and not _CLIENT_ID.fullmatch(value):
            raise ValueError(
                "must be 1-255 printable ASCII characters without spaces, as the authorization server issued it"
            )
        return value

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str) -> str:
        tokens = value.split(" ")
        if not value or not all(_SCOPE_TOKEN.fullmatch(t) for t in tokens):
            raise ValueError("must be scope names separated by single spaces, e.g. 'parley:use'")
        return value
