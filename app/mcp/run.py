"""The two transports of ``specledger mcp``: stdio (one key, the server's own) and streamable
HTTP (each request's ``Authorization: Bearer`` key, checked before the MCP layer sees the
request and again by every tool call)."""

import json
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from sqlalchemy import Engine
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.auth.service import Principal, authenticate
from app.db import read_session
from app.mcp.access import principal
from app.mcp.server import build_server, presenting
from app.settings import Settings

MCP_PATH = "/mcp"


def bearer(headers: Any) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header (or ``X-API-Key``), as the REST
    API reads it."""
    value = headers.get("authorization") or ""
    scheme, _, credentials = value.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return str(credentials.strip())
    key = headers.get("x-api-key")
    return str(key).strip() if key else None


def request_key(ctx: Context) -> str | None:
    request = ctx.request_context.request
    return bearer(request.headers) if isinstance(request, Request) else None


class RequireKey:
    """Refuse an HTTP request without a live API key with 401 and the REST API's error
    body, before the MCP transport reads it."""

    def __init__(self, app: ASGIApp, engine: Engine) -> None:
        self.app = app
        self.engine = engine

    def _principal(self, secret: str) -> Principal | None:
        with read_session(self.engine) as session:
            return authenticate(session, secret)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        secret = bearer(Request(scope).headers)
        found = None if secret is None else await anyio.to_thread.run_sync(self._principal, secret)
        if found is None:
            message = (
                "missing API key: send `Authorization: Bearer <key>`"
                if secret is None
                else "invalid or revoked API key"
            )
            body = json.dumps({"error": {"code": "unauthorized", "message": message}}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b"Bearer"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def http_app(engine: Engine, settings: Settings, host: str) -> ASGIApp:
    """The streamable HTTP app at ``/mcp``, behind the key check."""
    server = build_server(engine, settings, request_key)
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    return RequireKey(app, engine)


def check_key(engine: Engine, secret: str) -> None:
    """Refuse to start a stdio server whose key is unknown, revoked or a proxy key.

    Raises:
        Unauthorized: So the command stops with the reason, before a host connects.
    """
    with read_session(engine) as session:
        principal(session, secret)


def serve_stdio(engine: Engine, settings: Settings, secret: str) -> None:
    build_server(engine, settings, presenting(secret)).run("stdio")


def serve_http(engine: Engine, settings: Settings, host: str, port: int) -> None:
    import uvicorn

    app = http_app(engine, settings, host)
    uvicorn.run(app, host=host, port=port, log_level="warning", lifespan="on")
