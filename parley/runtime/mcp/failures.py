"""How a request to an MCP server failed, sorted by whether it may have reached the server: the
caller's retry and the effect policy depend on that (runtime/mcp/sources.py raises these)."""

from __future__ import annotations


class ToolSourceUnavailable(Exception):
    """The server could not be reached or listed; nothing was sent to it."""

    def __init__(self, server: str, reason: str) -> None:
        self.server, self.reason = server, reason
        super().__init__(f"MCP server '{server}' is unavailable: {reason}")


class CallNotSent(ToolSourceUnavailable):
    """Connecting failed before the call was sent: it provably did not run."""


class NoCredential(CallNotSent):
    """The server takes each principal's own headers and the caller's principal has none: nothing
    was sent, and trying again will not help until the operator adds them."""

    def __init__(self, server: str, principal: str | None) -> None:
        who = (
            f"principal '{principal}'"
            if principal is not None
            else "this session, which carries no principal's credentials (a schedule another principal "
            "made for its owner started it)"
        )
        super().__init__(
            server,
            f"it has no credential for {who} (the operator adds headers_by_principal for them to "
            f"mcp_servers.{server} in parley.yaml)",
        )


class NeedsAuthorization(CallNotSent):
    """The server takes each principal's own OAuth token (auth user_oauth) and the caller has no
    usable one: none yet, revoked, not refreshable, or refused with 401 (or a wider scope is
    needed: `scopes`). Nothing was sent; the call parks until the session's owner connects."""

    def __init__(
        self, server: str, principal: str | None, scopes: tuple[str, ...] = (), refused: bool = False
    ) -> None:
        self.principal = principal
        self.scopes = scopes
        # The server answered 401 to the token it was sent (a refresh may mend that).
        self.refused = refused
        who = (
            f"principal '{principal}'"
            if principal is not None
            else "this session, which carries nobody's credentials"
        )
        wider = f" with the wider scope {' '.join(scopes)}" if scopes else ""
        super().__init__(server, f"{who} has not connected an account there{wider} yet")


class CallMaybeSent(Exception):
    """The connection broke or the call timed out after it was sent: it may have run."""


class CallCutByShutdown(Exception):
    """The call's connection closed because parley is stopping: the call may have run. It is left
    unfinished, as a crash leaves it, so the next process judges it (a read runs again)."""

    def __init__(self, server: str) -> None:
        self.server = server
        super().__init__(f"a call to MCP server '{server}' was cut by parley's shutdown")


class CallRefused(Exception):
    """The server answered with a JSON-RPC error (unknown tool, bad params...): it did not run the tool."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code
