"""A real OAuth 2.1 authorization server for the tests, built with authlib and served over
loopback HTTP on a thread of the test's process: what a browser signs in against and what a
public client (the page at /ui, or parley as a client of downstream servers) talks to.

It enforces what the MCP authorization specification asks of a server and of its clients:
- authorization code only, for registered clients: public ones (`token_endpoint_auth_method:
  none`), or confidential ones with a secret (`client_secret_basic` or `client_secret_post`);
- PKCE with S256: a request without `code_challenge`, or with `plain`, is refused;
- the `resource` parameter (RFC 8707): required at the authorization and token endpoints, one of
  the resources it knows; it becomes the access token's audience;
- the exact redirect URI: one a client registered, character for character, also at the token
  endpoint;
- `iss` in every authorization response (RFC 9207), and the metadata says so (RFC 8414);
- rotating refresh tokens: each refresh returns a new one and revokes the one spent (a spent one
  is refused);
- JWT access tokens (RFC 9068 shape) signed with a `SigningKey` of tests/auth_support.py, whose
  JWKS it serves, so parley's `auth: oauth` accepts them as configured by `oauth_config()`;
- revocation (RFC 7009) of refresh tokens.

`/authorize` shows a consent page with the subject to sign in as and an Allow button (a
person's click); its POST redirects back. CORS headers let a page on a listed origin call the
token and revocation endpoints with `fetch`. A test may make it misbehave (`misbehave`) to see
that a client refuses a response with a wrong `iss` or `state`; `requests` records the paths
and parameters it was sent.
"""

from __future__ import annotations

import hmac
import html
import json
import secrets
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

from authlib.oauth2 import OAuth2Error
from authlib.oauth2.rfc6749 import (
    AuthorizationServer,
    ClientMixin,
    InvalidGrantError,
    InvalidRequestError,
    OAuth2Request,
    grants,
)
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from authlib.oauth2.rfc9207 import IssuerParameter

from tests.auth_support import SigningKey
from tests.support import TEST_DEADLINE_S

Misbehaviour = Literal["wrong_iss", "wrong_state", "no_iss"] | None
ACCESS_TOKEN_S = 300
AUTH_METHODS = ["none", "client_secret_basic", "client_secret_post"]
CODE_S = 60
# parley's own scopes, and a downstream tracker's (parley as a client of it, tests/test_user_oauth.py).
SCOPES = ["parley:use", "parley:admin", "parley:metrics", "tracker:read", "tracker:write"]


class InvalidTargetError(OAuth2Error):  # type: ignore[misc]
    """RFC 8707 §2: the resource is missing, unknown or not the one the grant was for."""

    error = "invalid_target"


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    redirect_uris: list[str]
    scope: str = "parley:use"
    secret: str | None = None  # None: a public client

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> None:
        return None  # a request must name its redirect URI

    def get_allowed_scope(self, scope: str | None) -> str:
        allowed = set(self.scope.split())
        return " ".join(s for s in (scope or "").split() if s in allowed)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris  # exact, no prefix or pattern

    def check_client_secret(self, client_secret: str) -> bool:
        return self.secret is not None and hmac.compare_digest(client_secret.encode(), self.secret.encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        if self.secret is None:
            return method == "none"
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


@dataclass
class Code:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    subject: str
    resource: str
    code_challenge: str
    code_challenge_method: str
    expires_at: float

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass
class RefreshToken:
    token: str
    client_id: str
    subject: str
    scope: str
    resource: str
    revoked: bool = False

    def check_client(self, client: Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return 3600

    def is_expired(self) -> bool:
        return False

    def is_revoked(self) -> bool:
        return self.revoked


@dataclass
class Response:
    """What authlib's `handle_response` gives back, for the HTTP handler to send."""

    status: int
    body: Any
    headers: list[tuple[str, str]]

    @property
    def location(self) -> str | None:
        return next((v for k, v in self.headers if k.lower() == "location"), None)

    @location.setter
    def location(self, value: str) -> None:
        self.headers = [(k, v) for k, v in self.headers if k.lower() != "location"] + [("Location", value)]


class Request(OAuth2Request):  # type: ignore[misc]
    """An HTTP request as authlib reads it: query and form parameters, one value each."""

    def __init__(self, method: str, uri: str, headers: dict[str, str], form: dict[str, list[str]]):
        super().__init__(method, uri, headers=headers)
        query = parse_qs(urlsplit(uri).query)
        self._args = {k: v[0] for k, v in query.items()}
        self._form = {k: v[0] for k, v in form.items()}
        merged: dict[str, list[str]] = {**query, **form}
        self.payload = _Payload(merged)

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class _Payload:
    def __init__(self, values: dict[str, list[str]]) -> None:
        self.datalist = values
        self.data = {k: v[0] for k, v in values.items()}

    def __getattr__(self, name: str) -> Any:
        if name in ("client_id", "response_type", "grant_type", "redirect_uri", "scope", "state"):
            return self.data.get(name)
        raise AttributeError(name)


class S256Only(CodeChallenge):  # type: ignore[misc]
    """PKCE as OAuth 2.1 asks: a challenge on every authorization request, and S256 only."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]
    DEFAULT_CODE_CHALLENGE_METHOD = "S256"

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("PKCE is required: send code_challenge (S256).")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("code_challenge_method must be S256 (plain is not accepted).")
        super().validate_code_challenge(grant, redirect_uri)


def _one_resource(request: Request) -> str:
    values = request.payload.datalist.get("resource", [])
    if len(values) != 1 or not values[0]:
        raise InvalidTargetError("Send exactly one resource parameter (RFC 8707).")
    return values[0]


class CodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS
    server: OAuthServer

    def validate_authorization_request(self) -> str:
        redirect_uri: str = super().validate_authorization_request()
        try:
            resource = _one_resource(self.request)
            if resource not in self.server.state.resources:
                raise InvalidTargetError(f"Unknown resource {resource}.")
        except OAuth2Error as error:
            error.redirect_uri = redirect_uri
            raise
        return redirect_uri

    def save_authorization_code(self, code: str, request: Request) -> None:
        data = request.payload.data
        self.server.state.codes[code] = Code(
            code=code,
            client_id=request.client.client_id,
            redirect_uri=data["redirect_uri"],
            scope=request.scope or "",
            subject=request.user,
            resource=data["resource"],
            code_challenge=data["code_challenge"],
            code_challenge_method=data["code_challenge_method"],
            expires_at=time.time() + CODE_S,
        )

    def query_authorization_code(self, code: str, client: Client) -> Code | None:
        found = self.server.state.codes.get(code)
        if found is None or found.client_id != client.client_id or found.expires_at < time.time():
            return None
        return found

    def validate_token_request(self) -> None:
        super().validate_token_request()
        if _one_resource(self.request) != self.request.authorization_code.resource:
            raise InvalidTargetError("The resource is not the one the code was issued for.")

    def delete_authorization_code(self, authorization_code: Code) -> None:
        self.server.state.codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code: Code) -> str:
        return authorization_code.subject

    def generate_token(self, user: Any = None, scope: Any = None, **_: Any) -> dict[str, Any]:
        return self.server.issue(self.request.client, user, scope, self.request.authorization_code.resource)


class RefreshGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS
    INCLUDE_NEW_REFRESH_TOKEN = True  # rotation: every refresh returns a new refresh token
    server: OAuthServer

    def authenticate_refresh_token(self, refresh_token: str) -> RefreshToken | None:
        found = self.server.state.refresh_tokens.get(refresh_token)
        return found if found is not None and not found.revoked else None

    def validate_token_request(self) -> None:
        super().validate_token_request()
        given = self.request.payload.datalist.get("resource")
        if given is not None and given != [self.request.refresh_token.resource]:
            raise InvalidTargetError("The resource is not the one the grant was for.")

    def authenticate_user(self, refresh_token: RefreshToken) -> str:
        return refresh_token.subject

    def revoke_old_credential(self, refresh_token: RefreshToken) -> None:
        refresh_token.revoked = True

    def generate_token(self, user: Any = None, scope: Any = None, **_: Any) -> dict[str, Any]:
        return self.server.issue(self.request.client, user, scope, self.request.refresh_token.resource)


class Revocation(RevocationEndpoint):  # type: ignore[misc]
    CLIENT_AUTH_METHODS = AUTH_METHODS
    server: OAuthServer

    def query_token(self, token_string: str, token_type_hint: str | None) -> RefreshToken | None:
        return self.server.state.refresh_tokens.get(token_string)

    def revoke_token(self, token: RefreshToken, request: Request) -> None:
        token.revoked = True


class Issuer(IssuerParameter):  # type: ignore[misc]
    def __init__(self, state: OAuthState) -> None:
        self._state = state

    def get_issuer(self) -> str:
        return self._state.url


@dataclass
class Sent:
    method: str
    path: str
    params: dict[str, str]


@dataclass
class OAuthState:
    """The server's data, and the knobs a test turns."""

    key: SigningKey
    clients: dict[str, Client] = field(default_factory=dict)
    resources: set[str] = field(default_factory=set)
    cors_origins: set[str] = field(default_factory=set)
    codes: dict[str, Code] = field(default_factory=dict)
    refresh_tokens: dict[str, RefreshToken] = field(default_factory=dict)
    issued: list[dict[str, Any]] = field(default_factory=list)  # every token response, in order
    requests: list[Sent] = field(default_factory=list)
    misbehave: Misbehaviour = None
    access_token_s: int = ACCESS_TOKEN_S
    url: str = ""
    # Clients may also register themselves (RFC 7591 at /register) or be named by the URL of
    # their Client ID Metadata Document, which the server fetches; the metadata says so.
    open_registration: bool = False
    fetched_documents: list[str] = field(default_factory=list)

    @property
    def issuer(self) -> str:
        return self.url

    def metadata(self) -> dict[str, Any]:
        document = AuthorizationServerMetadata(
            {
                "issuer": self.url,
                "authorization_endpoint": self.url + "/authorize",
                "token_endpoint": self.url + "/token",
                "revocation_endpoint": self.url + "/revoke",
                "jwks_uri": self.url + "/jwks.json",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": AUTH_METHODS,
                "revocation_endpoint_auth_methods_supported": AUTH_METHODS,
                "scopes_supported": SCOPES,
                "authorization_response_iss_parameter_supported": True,
            }
        )
        if self.open_registration:
            document["registration_endpoint"] = self.url + "/register"
            document["client_id_metadata_document_supported"] = True
        document.validate()
        return dict(document)

    def client(self, client_id: str) -> Client | None:
        """A registered client, or one named by its metadata document's URL (fetched once)."""
        known = self.clients.get(client_id)
        if (
            known is not None
            or not self.open_registration
            or not client_id.startswith(("http://", "https://"))
        ):
            return known
        self.fetched_documents.append(client_id)
        try:
            with urllib.request.urlopen(client_id, timeout=TEST_DEADLINE_S) as response:
                document = json.loads(response.read())
        except (OSError, ValueError):
            return None
        if not isinstance(document, dict) or document.get("client_id") != client_id:
            return None
        return self.register(client_id, list(document.get("redirect_uris") or []), " ".join(SCOPES))

    def register(
        self, client_id: str, redirect_uris: list[str], scope: str = "parley:use", secret: str | None = None
    ) -> Client:
        """A client; with `secret`, a confidential one that must authenticate at the token endpoint."""
        client = Client(client_id, list(redirect_uris), scope, secret)
        self.clients[client_id] = client
        return client

    def oauth_config(self) -> dict[str, Any]:
        """parley's `auth:` section for this server (tokens it issues are JWTs)."""
        return {"mode": "oauth", "oauth": {"issuer": self.url, "jwks_url": self.url + "/jwks.json"}}


class OAuthServer(AuthorizationServer):  # type: ignore[misc]
    def __init__(self, state: OAuthState) -> None:
        super().__init__(scopes_supported=SCOPES)
        self.state = state
        self.register_grant(CodeGrant, [S256Only(required=True)])
        self.register_grant(RefreshGrant)
        self.register_endpoint(Revocation)
        self.register_extension(Issuer(state))

    def query_client(self, client_id: str) -> Client | None:
        return self.state.client(client_id)

    def save_token(self, token: dict[str, Any], request: Request) -> None:
        self.state.issued.append(dict(token))

    def create_oauth2_request(self, request: Request) -> Request:
        return request

    def handle_response(self, status: int, body: Any, headers: list[tuple[str, str]]) -> Response:
        return Response(status, body, list(headers))

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        pass

    def issue(self, client: Client, subject: str, scope: str | None, resource: str) -> dict[str, Any]:
        """A JWT access token for `resource` and a new refresh token."""
        now = int(time.time())
        claims = {
            "iss": self.state.url,
            "aud": resource,
            "sub": subject,
            "client_id": client.client_id,
            "scope": scope or "",
            "iat": now,
            "nbf": now,
            "exp": now + self.state.access_token_s,
            "jti": secrets.token_hex(8),
        }
        refresh = RefreshToken(secrets.token_urlsafe(32), client.client_id, subject, scope or "", resource)
        self.state.refresh_tokens[refresh.token] = refresh
        return {
            "token_type": "Bearer",
            "access_token": self.state.key.sign(claims, typ="at+jwt"),
            "expires_in": self.state.access_token_s,
            "refresh_token": refresh.token,
            "scope": scope or "",
        }


def _with_params(uri: str, **params: str) -> str:
    parts = urlsplit(uri)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in params] + list(params.items())
    return urlunsplit(parts._replace(query=urlencode(query)))


def _misbehaved(state: OAuthState, response: Response) -> Response:
    """The redirect back, as a broken or hostile server would send it."""
    location = response.location
    if location is None or state.misbehave is None:
        return response
    if state.misbehave == "wrong_iss":
        response.location = _with_params(location, iss="https://evil.example.test")
    elif state.misbehave == "wrong_state":
        response.location = _with_params(location, state="forged-state")
    else:
        parts = urlsplit(location)
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "iss"]
        response.location = urlunsplit(parts._replace(query=urlencode(query)))
    return response


CONSENT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Test authorization server</title></head>
<body><h1>Sign in to the test authorization server</h1>
<p>{client} asks for {scope} on {resource}.</p>
<form method="post" action="{action}">
<label for="subject">User</label> <input id="subject" name="subject" value="alice">
<button type="submit">Allow</button></form></body></html>"""


@contextmanager
def oauth_server(key: SigningKey | None = None) -> Iterator[OAuthState]:
    """The authorization server on a free loopback port while the context is open."""
    state = OAuthState(key=key or SigningKey.ec())
    server = OAuthServer(state)

    class Handler(BaseHTTPRequestHandler):
        def _request(self, form: dict[str, list[str]]) -> Request:
            headers = {k: v for k, v in self.headers.items()}
            return Request(self.command, state.url + self.path, headers, form)

        def _read_form(self) -> dict[str, list[str]]:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode() if length else ""
            return parse_qs(body, keep_blank_values=True)

        def _record(self, form: dict[str, list[str]]) -> None:
            query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
            state.requests.append(
                Sent(self.command, urlsplit(self.path).path, {**query, **{k: v[0] for k, v in form.items()}})
            )

        def _cors(self) -> list[tuple[str, str]]:
            origin = self.headers.get("Origin")
            if origin and origin in state.cors_origins:
                return [("Access-Control-Allow-Origin", origin), ("Vary", "Origin")]
            return []

        def _send(self, status: int, body: bytes, content_type: str, headers: list[tuple[str, str]]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            for name, value in headers + self._cors():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def _answer(self, response: Response) -> None:
            body = response.body
            data = json.dumps(body).encode() if isinstance(body, dict) else (body or "").encode()
            headers = [(k, v) for k, v in response.headers if k.lower() != "content-type"]
            self._send(response.status, data, "application/json", headers)

        def _json(self, status: int, value: Any) -> None:
            self._send(status, json.dumps(value).encode(), "application/json", [])

        def do_OPTIONS(self) -> None:
            allow = [
                ("Access-Control-Allow-Methods", "POST"),
                ("Access-Control-Allow-Headers", "Content-Type"),
            ]
            self._send(204, b"", "text/plain", allow)

        def do_GET(self) -> None:
            self._record({})
            path = urlsplit(self.path).path
            if path == "/.well-known/oauth-authorization-server":
                self._json(200, state.metadata())
            elif path == "/jwks.json":
                self._json(200, {"keys": [state.key.public_jwk]})
            elif path == "/authorize":
                self._consent()
            else:
                self._json(404, {"error": "not_found"})

        def _consent(self) -> None:
            request = self._request({})
            try:
                server.get_consent_grant(request)
            except OAuth2Error as error:
                self._error(request, error)
                return
            args = request.args
            page = CONSENT_PAGE.format(
                client=html.escape(args.get("client_id", "")),
                scope=html.escape(args.get("scope", "")),
                resource=html.escape(args.get("resource", "")),
                action=html.escape(self.path),
            )
            self._send(200, page.encode(), "text/html; charset=utf-8", [])

        def _error(self, request: Request, error: OAuth2Error) -> None:
            """An authorization error: back to a valid redirect URI, else shown here (never
            sent to a redirect URI the client did not register)."""
            error.state = request.args.get("state")
            response = server.handle_error_response(request, error)
            if response.location:
                response.location = _with_params(response.location, iss=state.url)
                self._send(302, b"", "text/plain", response.headers)
            else:
                self._answer(response)

        def do_POST(self) -> None:
            if urlsplit(self.path).path == "/register" and state.open_registration:
                self._register()  # a JSON body, not a form
                return
            form = self._read_form()
            self._record(form)
            path = urlsplit(self.path).path
            if path == "/authorize":
                request = self._request({})
                subject = (form.get("subject") or ["alice"])[0]
                try:
                    grant = server.get_consent_grant(request)
                except OAuth2Error as error:
                    self._error(request, error)
                    return
                response = server.create_authorization_response(request, grant_user=subject, grant=grant)
                response = _misbehaved(state, response)
                self._send(response.status, b"", "text/plain", response.headers)
            elif path == "/token":
                self._answer(server.create_token_response(self._request(form)))
            elif path == "/revoke":
                self._answer(server.create_endpoint_response("revocation", self._request(form)))
            else:
                self._json(404, {"error": "not_found"})

        def _register(self) -> None:
            """RFC 7591: a public client with the redirect URIs it asks for."""
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                body = None
            uris = body.get("redirect_uris") if isinstance(body, dict) else None
            if not isinstance(uris, list) or not uris:
                self._json(400, {"error": "invalid_redirect_uri"})
                return
            client = state.register("dyn-" + secrets.token_hex(8), [str(u) for u in uris], " ".join(SCOPES))
            self._json(201, {"client_id": client.client_id, "redirect_uris": client.redirect_uris})

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(TEST_DEADLINE_S)


__all__ = ["InvalidGrantError", "OAuthState", "oauth_server"]
