"""The connect links and the OAuth callback of a parley with no public URL (over stdio, say), on a
listener of its own on 127.0.0.1, as command line OAuth clients do (RFC 8252 §7.3):

- `GET /connect/{flow_id}?code=...`: the link the session's owner was given (runtime/oauth/flows.py,
  LoopbackLinks). A wrong code is 403 and nothing changes. Otherwise the flow starts as
  `POST /v1/connect/{flow}` starts it, and the browser goes on to the authorization server with
  the cookie that binds the flow to it.
- `GET /oauth/callback`: the authorization server's redirect back, checked as over HTTP; the page
  then says the account is connected (there is no /ui here to go back to).

Nothing else is served: any other path is 404.
"""

from __future__ import annotations

import html
import logging
import socket

import uvicorn
from anyio.abc import TaskStatus
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from parley.errors import OAuthClientError
from parley.runtime.oauth.flows import LOOPBACK_CONNECT, FlowRefused, OAuthFlows, cookie_name
from parley.server.http import QuietUvicorn
from parley.server.oauth_routes import CALLBACK_PATH, bind_to_browser

logger = logging.getLogger(__name__)

_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>
<body><h1>{title}</h1><p>{detail}</p></body></html>"""
_HEADERS = {"Cache-Control": "no-store", "Content-Security-Policy": "default-src 'none'"}


def _page(status: int, title: str, detail: str) -> HTMLResponse:
    body = _PAGE.format(title=html.escape(title), detail=html.escape(detail))
    return HTMLResponse(body, status_code=status, headers=_HEADERS)


class LoopbackCallback:
    def __init__(self, flows: OAuthFlows) -> None:
        self._flows = flows

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route(LOOPBACK_CONNECT + "/{flow_id}", self.connect, methods=["GET"]),
                Route(CALLBACK_PATH, self.callback, methods=["GET"]),
            ]
        )

    async def connect(self, request: Request) -> Response:
        flow_id = str(request.path_params["flow_id"])
        try:
            started = await self._flows.connect_by_code(flow_id, request.query_params.get("code", ""))
        except FlowRefused as exc:
            logger.info("a loopback connect link was refused (%d): %s", exc.status, exc)
            return _page(exc.status, "Not connected", str(exc))
        response = RedirectResponse(started.authorize_url, status_code=302, headers=_HEADERS)
        bind_to_browser(response, started, CALLBACK_PATH, secure=False)  # http on 127.0.0.1
        return response

    async def callback(self, request: Request) -> Response:
        query = request.query_params
        try:
            await self._flows.callback(
                query.get("state"), query.get("code"), query.get("iss"), query.get("error"), request.cookies
            )
        except FlowRefused as exc:
            logger.info("an OAuth callback was refused (%d): %s", exc.status, exc)
            return _page(exc.status, "Not connected", f"{exc}. Nothing was stored; ask the agent again.")
        except OAuthClientError as exc:
            return _page(502, "Not connected", f"the authorization server cannot be used now: {exc}")
        response = _page(200, "Done", "You can close this tab and go back to the conversation.")
        response.delete_cookie(
            cookie_name(query.get("state") or ""), path=CALLBACK_PATH, httponly=True, samesite="lax"
        )
        return response


async def serve_loopback(flows: OAuthFlows, *, task_status: TaskStatus[None]) -> None:
    """Serve the loopback links on a free port of 127.0.0.1 until cancelled; started once bound."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.setblocking(False)
    port = int(listener.getsockname()[1])
    flows.bind_loopback(port)
    config = uvicorn.Config(LoopbackCallback(flows).app(), log_level="warning", lifespan="off")
    server = QuietUvicorn(config)
    logger.info("connect links for user_oauth servers are served at http://127.0.0.1:%d", port)
    with listener:
        task_status.started()
        await server.serve(sockets=[listener])
