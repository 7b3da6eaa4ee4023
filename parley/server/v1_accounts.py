"""`/v1/accounts`: the caller's connected accounts (credentials for downstream servers), which
`/ui`'s "Connected accounts" view lists and revokes. Only the caller's own, never a token
(docs/credentials.md#connected-accounts)."""

from __future__ import annotations

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from parley.runtime.service import ConnectedAccount, SessionService
from parley.server.v1_common import V1Context, caller, guarded
from parley.server.wire import iso


class AccountView(BaseModel):
    server: str = Field(description="The MCP server (its name under mcp_servers) the credential is for.")
    issuer: str = Field(description="The authorization server that issued it.")
    scopes: list[str]
    expires_at: str | None = Field(description="When its access token expires (it is refreshed before).")
    connected_at: str | None
    updated_at: str | None

    @classmethod
    def of(cls, account: ConnectedAccount) -> AccountView:
        return cls(
            server=account.server,
            issuer=account.issuer,
            scopes=list(account.scopes),
            expires_at=iso(account.expires_at),
            connected_at=iso(account.connected_at),
            updated_at=iso(account.updated_at),
        )


class AccountEndpoints:
    def __init__(self, ctx: V1Context) -> None:
        self._service: SessionService = ctx.service

    def routes(self) -> list[Route]:
        return [
            Route("/v1/accounts", guarded(self._list), methods=["GET"]),
            Route("/v1/accounts/{server}", guarded(self._revoke), methods=["DELETE"]),
        ]

    async def _list(self, request: Request) -> Response:
        accounts = await self._service.accounts.mine(caller(request))
        return JSONResponse({"accounts": [AccountView.of(a).model_dump(mode="json") for a in accounts]})

    async def _revoke(self, request: Request) -> Response:
        server = request.path_params["server"]
        revoked = await self._service.accounts.revoke(caller(request), server)
        return JSONResponse({"server": server, "revoked": revoked})
