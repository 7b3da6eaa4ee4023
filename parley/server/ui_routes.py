"""`/ui`: the web page for people (their sessions, a live transcript, an inbox of decisions),
served as static files shipped inside the package (`parley/server/ui/`: HTML, ES modules, CSS; no
build step).

The page itself needs no token: it is the same for everyone and holds no data. What it shows
comes from the /v1 routes, which the bearer gate guards; the page sends the token the person
pasted in an `Authorization` header (never a cookie, so another site cannot make the browser
send it: no CSRF). It sits behind the Host/Origin guard like every route, and every answer
carries a strict Content-Security-Policy: scripts and styles only from parley itself, no inline
script, nothing framed, nothing sent elsewhere (with OAuth sign-in, ui_signin.py: also to the
authorization server's token endpoint, that one origin exactly).

Every URL in the page is relative, so it works under a path prefix (http.base_path): `/ui`
redirects to `ui/` (relative), and the files refer to each other by name. `/ui/callback` is the
page too: where the authorization server sends the browser back. `/ui/signin.json` tells the
page how to sign people in.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from parley.server.ui_signin import SignInPage, UiSignIn

UI_PATH = "/ui"
SIGN_IN_PATH = f"{UI_PATH}/signin.json"
CALLBACK_PATH = f"{UI_PATH}/callback"


def content_security_policy(connect_origin: str | None = None) -> str:
    """The page's policy; `connect_origin`: the one origin besides parley's it may fetch from."""
    connect = "connect-src 'self'" + (f" {connect_origin}" if connect_origin else "")
    return "; ".join(
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' blob:",
            connect,
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )


CONTENT_SECURITY_POLICY = content_security_policy()

SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    # The files change with parley's version; a browser asks again (a 304 costs nothing here).
    "cache-control": "no-cache",
}

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    media_type: str


def load_assets() -> dict[str, Asset]:
    """Every file of the page by its URL path, read once at start: only these paths are served,
    so no request can name anything else on the disk."""
    folder = resources.files("parley.server") / "ui"
    assets: dict[str, Asset] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in MEDIA_TYPES:
            assets[f"{UI_PATH}/{entry.name}"] = Asset(entry.read_bytes(), MEDIA_TYPES[suffix])
    page = assets[f"{UI_PATH}/index.html"]
    assets[f"{UI_PATH}/"] = assets[CALLBACK_PATH] = page
    return assets


def is_ui_path(path: str) -> bool:
    return path == UI_PATH or path.startswith(UI_PATH + "/")


class UiFiles:
    """Answers GET and HEAD of the page's files; anything else under /ui is 404 or 405.
    `sign_in`: the OAuth sign-in of the page, when configured."""

    def __init__(self, assets: dict[str, Asset], sign_in: UiSignIn | None = None) -> None:
        self._assets = assets
        self._sign_in = sign_in

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        asset = self._assets.get(path)
        if scope["method"] not in ("GET", "HEAD"):
            response: Response = PlainTextResponse(
                "The page's files are only read (GET).", status_code=405, headers={"allow": "GET, HEAD"}
            )
        elif path == UI_PATH:
            # Relative, so a prefix the browser sees (a proxy's /parley/ui) is kept.
            response = Response(status_code=308, headers={"location": "ui/"})
        elif path == SIGN_IN_PATH:
            page = await self._sign_in.page() if self._sign_in else SignInPage(method="token")
            response = JSONResponse(page.model_dump(exclude_none=True))
        elif asset is None:
            response = PlainTextResponse(f"No such file of the page; open {UI_PATH}/", status_code=404)
        else:
            response = Response(asset.body, media_type=asset.media_type)
        response.headers.update(SECURITY_HEADERS)
        # The document's policy is the one that governs its scripts' fetches: only the page asks
        # for the authorization server's origin (and so waits for its metadata).
        if self._sign_in is not None and asset is not None and asset.media_type.startswith("text/html"):
            response.headers["content-security-policy"] = content_security_policy(
                await self._sign_in.connect_origin()
            )
        await response(scope, receive, send)


def with_ui(app: ASGIApp, sign_in: UiSignIn | None = None) -> ASGIApp:
    """`app`, with /ui and its files answered before it (before the bearer gate: the page asks
    for the token, or signs the person in at the authorization server: `sign_in`)."""
    files = UiFiles(load_assets(), sign_in)

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_ui_path(scope["path"]):
            await files(scope, receive, send)
        else:
            await app(scope, receive, send)

    return route
