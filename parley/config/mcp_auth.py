"""`mcp_servers.NAME.auth`: how parley obtains a token for a downstream HTTP server. With
`user_oauth`, each principal authorizes parley at the server's authorization server once, in the
browser, and the server's calls then carry that principal's own token (docs/credentials.md#user-oauth)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from parley.config.base import Strict

Registration = Literal["auto", "metadata_document", "pre_registered", "dynamic"]


class UserOAuthConfig(Strict):
    """OAuth to a downstream MCP server, one principal at a time (the MCP authorization spec)."""

    mode: Literal["user_oauth"] = Field(
        description=(
            "user_oauth: each principal connects their own account; a call without a usable token parks "
            "until its session's owner authorizes parley in the browser."
        )
    )
    client_id: str | None = Field(
        None,
        description=(
            "A client id registered for parley at the authorization server (pre-registration); used first "
            "when given."
        ),
    )
    client_secret_env: str | None = Field(
        None,
        description=(
            "The environment variable holding the pre-registered client's secret (a confidential client); "
            "unset: a public client, which PKCE protects."
        ),
    )
    scopes: list[str] = Field(
        default_factory=list,
        description=(
            "The scopes asked for (default: those the server's protected resource metadata lists); a 403 "
            "insufficient_scope asks again for the wider scope."
        ),
    )
    registration: Registration = Field(
        "auto",
        description=(
            "How parley identifies itself to the authorization server: pre_registered (client_id), "
            "metadata_document (a Client ID Metadata Document parley serves at its public URL), dynamic "
            "(RFC 7591 registration), or auto: client_id when given, else the metadata document when the "
            "server supports it, else dynamic registration."
        ),
    )

    @model_validator(mode="after")
    def _client(self) -> UserOAuthConfig:
        if self.registration == "pre_registered" and self.client_id is None:
            raise ValueError("registration pre_registered needs client_id (the id the server gave parley)")
        if self.client_secret_env is not None and self.client_id is None:
            raise ValueError("client_secret_env is the secret of client_id: give client_id too")
        for scope in self.scopes:
            if not scope or " " in scope:
                raise ValueError(f"scope '{scope}' must be one word (no spaces)")
        return self
