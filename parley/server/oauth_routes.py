"""The HTTP side of parley's OAuth to downstream servers (runtime/oauth/flows.py):

- `POST /v1/connect/{flow_id}`: the session's owner, signed in, opens a connect link; anyone else
  gets 403 and nothing changes. The answer is `{authorize_url}` for the page to go to, and a
  cookie (HttpOnly, SameSite=Lax, Secure over https, path /oauth/callback) binding the flow to
  this browser.
- `GET /oauth/callback`: the authorization server's redirect back (open: a browser navigation
  carries no bearer token; the state and the cookie are its credentials). Success or a decline
  goes on to the session's page; a forged, replayed or expired state is 400 and changes nothing.
- `GET /oauth/client-metadata.json`: parley's Client ID Metadata Document.
"""

from __future__ import annotations

import html
import logging

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from parley.core.oauth_flows import FLOW_S
from parley.errors import OAuthClientError
from parley.runtime.oauth.client import client_metadata
from parley.runtime.oauth.flows import Connect, FlowRefused, OAuthFlows, cookie_name
from parley.server.v1_common import caller, guarded, problem, require_json

logger = logging.getLogger(__name__)

CALLBACK_PATH = "/oauth/callback"
METADATA_PATH = "/oauth/client-metadata.json"
# The paths the bearer gate lets through: their requests are checked here, not by a token.
OPEN_PATHS = frozenset({CALLBACK_PATH, METADATA_PATH})

_REFUSED_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Not connected</title></head>
<body><h1>The account was not connected</h1><p>{detail}</p><p>Nothing was stored. Ask the agent again
to get a new connect link.</p></body></html>"""


def bind_to_browser(response: Response, started: Connect, path: str, secure: bool) -> None:
    """The cookie that binds a started flow to this browser until its callback (HttpOnly,
    SameSite=Lax, Secure over https, only sent to the callback's path)."""
    response.set_cookie(
        started.cookie,
        started.binding,
        max_age=int(FLOW_S),
        path=path,
        secure=secure,
        httponly=True,
        samesite="lax",
    )


class OAuthRoutes:
    def __init__(self, flows: OAuthFlows, base_path: str, secure: bool) -> None:
        self._flows = flows
        self._cookie_path = base_path + CALLBACK_PATH
        self._secure = secure

    def v1_routes(self) -> list[Route]:
        return [Route("/v1/connect/{flow_id}", guarded(self.connect), methods=["POST"])]

    def open_routes(self) -> list[Route]:
        return [
            Route(CALLBACK_PATH, self.callback, methods=["GET"]),
            Route(METADATA_PATH, self.metadata, methods=["GET"]),
        ]

    async def connect(self, request: Request) -> Response:
        # JSON only: a cross-site form cannot post here without a CORS preflight.
        require_json(request)
        who = caller(request)
        try:
            started = await self._flows.connect(str(request.path_params["flow_id"]), who)
        except FlowRefused as exc:
            kind = {403: "forbidden", 404: "not-found", 410: "gone"}.get(exc.status, "bad-gateway")
            return problem(exc.status, kind, str(exc))
        response = JSONResponse(
            {"authorize_url": started.authorize_url}, headers={"Cache-Control": "no-store"}
        )
        bind_to_browser(response, started, self._cookie_path, self._secure)
        return response

    async def callback(self, request: Request) -> Response:
        query = request.query_params
        try:
            page = await self._flows.callback(
                query.get("state"),
                query.get("code"),
                query.get("iss"),
                query.get("error"),
                request.cookies,
            )
        except FlowRefused as exc:
            return self._refused(exc.status, str(exc))
        except OAuthClientError as exc:
            return self._refused(502, f"the authorization server cannot be used now: {exc}")
        response = RedirectResponse(page, status_code=303, headers={"Cache-Control": "no-store"})
        response.delete_cookie(
            cookie_name(query.get("state") or ""),
            path=self._cookie_path,
            secure=self._secure,
            httponly=True,
            samesite="lax",
        )
        return response

    def _refused(self, status: int, detail: str) -> Response:
        logger.info("an OAuth callback was refused (%d): %s", status, detail)
        body = _REFUSED_PAGE.format(detail=html.escape(detail))
        return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})

    async def metadata(self, request: Request) -> Response:
        return JSONResponse(client_metadata(self._flows.public_base))
