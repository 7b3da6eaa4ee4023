"""`http:` in parley.yaml: the streamable HTTP server (address, public URL, base path, accepted hosts and
trusted proxies, caps and timeouts, event streams, CORS, /v1/chat). What it says together with
`auth:` is checked in loading.py."""

from __future__ import annotations

from pydantic import Field, model_validator

from parley.config.base import Strict


class HttpConfig(Strict):
    request_state_keys_env: str | None = Field(
        None,
        description=(
            "Environment variable with comma-separated secret keys that seal the state of input-required "
            "rounds, so several parley processes accept each other's retries (default: a key per process)."
        ),
    )
    host: str = Field(
        "127.0.0.1",
        description="Address to bind; a non-loopback one needs auth (tokens or oauth), or --insecure-bind.",
    )
    public_url: str | None = Field(
        None,
        description=(
            "The URL clients use for MCP (e.g. https://parley.example.com/mcp): the audience OAuth tokens "
            "must name (RFC 8707) and the resource of the protected resource metadata; its host is accepted "
            "in Host headers."
        ),
    )
    base_path: str = Field(
        "",
        description=(
            "The path prefix people and clients reach parley under behind a reverse proxy (e.g. /parley: "
            "then /parley/ui, /parley/v1 and /parley/mcp). The proxy may pass the prefix on or strip it; "
            "parley answers both. Empty: served at the host's root. With http.public_url, its path must be "
            "this prefix followed by /mcp."
        ),
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description=(
            "Host header values accepted besides loopback (e.g. parley.example.com, or with :port); the "
            "protection against DNS rebinding answers any other with 421."
        ),
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description=(
            "Addresses of reverse proxies whose X-Forwarded-For / X-Forwarded-Proto headers are believed; "
            "from anyone else they are ignored (the default: nobody)."
        ),
    )
    port: int = Field(8765, ge=0, le=65535, description="TCP port (0 picks a free one).")
    max_request_bytes: int = Field(
        4 * 1024 * 1024,
        ge=1024,
        le=1024 * 1024 * 1024,
        description=(
            "Largest JSON-RPC message accepted, on both transports: an HTTP request body (larger ones get "
            "413) and one stdio line (larger ones get a -32600 error)."
        ),
    )
    max_sessions: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        description=(
            "Open MCP transport sessions. At the cap a new client takes the place of the session idle the "
            "longest; only when every session is busy is it refused (503, retry later)."
        ),
    )
    session_idle_timeout_s: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description=(
            "Seconds after which an MCP transport session with no request in flight is closed and forgotten."
        ),
    )
    max_connections: int = Field(
        200,
        ge=1,
        le=100_000,
        description=(
            "Open HTTP connections (and requests in flight); over it a request gets 503, retry later. More "
            "than connection_reserve."
        ),
    )
    connection_reserve: int | None = Field(
        None,
        ge=0,
        le=100_000,
        description=(
            "Of max_connections, how many only /healthz may use: other requests get 503 once max_connections "
            "minus this many are open, so a load balancer still sees a busy replica alive. Default: a twentieth "
            "of max_connections (10 of 200); less than max_connections."
        ),
    )
    max_connections_per_principal: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description=(
            "Requests one principal may have in flight at once, event streams included; over it 429 with "
            "Retry-After. Default with auth tokens or oauth: a quarter of what max_connections leaves after "
            "the reserve (47 of 200); with auth: none (one local user), no cap."
        ),
    )
    max_streams_per_principal: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description=(
            "Event streams one principal may hold open at once (/v1 event streams, /v1/chat answers, MCP GET "
            "streams); over it 429 with Retry-After. Default with auth tokens or oauth: 16; with auth: none, "
            "no cap."
        ),
    )
    max_connections_per_address: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description=(
            "Connections open from one client address (a trusted proxy's are not counted: behind one, "
            "unauthenticated requests in flight are counted per X-Forwarded-For address instead); over it a "
            "new connection gets 503 and is closed. Default with auth tokens or oauth: as "
            "max_connections_per_principal; with auth: none, no cap."
        ),
    )
    header_read_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="Seconds a connection has to send a request's headers, then it is closed.",
    )
    body_read_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="Seconds a request has to send its whole body, then it gets 408."
    )
    keep_alive_timeout_s: float = Field(
        # Longer than clients keep an idle connection for reuse (httpx and so the mcp SDK's
        # client: 5 s; Node's fetch: 4 s). At 5 s, like theirs, a client could send its next
        # request as parley closed the connection, and get a reset instead of an answer.
        8.0,
        gt=0,
        le=3600,
        description=(
            "Seconds after which an idle keep-alive connection is closed. Keep it longer than your "
            "clients and proxies keep idle connections (a proxy's upstream keep-alive, e.g. 60 s)."
        ),
    )
    max_header_bytes: int = Field(
        16 * 1024,
        ge=1024,
        le=1024 * 1024,
        description="Largest request line plus headers, in bytes; larger gets 400.",
    )
    stream_heartbeat_s: float = Field(
        15.0,
        ge=0.05,
        le=3600,
        description=(
            "Seconds after which an event stream (/v1/.../events, /v1/chat) with nothing to send sends a "
            "heartbeat comment, so proxies and clients keep the connection."
        ),
    )
    cors_origins: list[str] = Field(
        default_factory=list,
        description=(
            "Origins of web apps that call /v1 from the browser (e.g. https://app.example.com): they get CORS "
            "headers and pass the Origin check. /mcp is never opened to them."
        ),
    )
    chat_agent: str = Field(
        "demo", description="The agent of /v1/chat (the AI SDK chat protocol) when the request names none."
    )
    stream_slow_client_s: float = Field(
        10.0,
        ge=0.05,
        le=3600,
        description=(
            "Seconds after which an event stream whose client takes nothing is cut off with a final "
            "event (it resumes with Last-Event-ID), instead of holding events for it."
        ),
    )

    @model_validator(mode="after")
    def _reserve_below_cap(self) -> HttpConfig:
        if self.connection_reserve is not None and self.connection_reserve >= self.max_connections:
            raise ValueError(
                f"http.connection_reserve ({self.connection_reserve}) must be less than http.max_connections "
                f"({self.max_connections}): the reserve is the part of it only /healthz may use; lower it or raise "
                "http.max_connections"
            )
        return self

    @property
    def public_base(self) -> str | None:
        """parley's address as people reach it (public_url without /mcp), for the links they open;
        None: no public_url, so no link can be made."""
        return self.public_url.rstrip("/").removesuffix("/mcp") if self.public_url else None
