"""What every request passes through before its route (plain ASGI, so a streamed body passes
untouched): the API key, CORS, ``HEAD`` on ``GET`` routes, and the request count by route and
status. The connection's own limits (read deadline, connection count) are uvicorn's protocol's,
``connections.py``."""

from __future__ import annotations

import hmac

from fastapi import FastAPI
from fastapi.responses import Response
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import PlainTextResponse

from .engine import ServerConfig
from .errors import APIError, response
from .metrics import Metrics

#: request headers a web page may send (CORS): the openai clients' own (``x-stainless-*``, any
#: of them) and these
CORS_HEADERS = (
    "authorization",
    "content-type",
    "openai-organization",
    "openai-project",
    "openai-beta",
    "idempotency-key",
)


def install(app: FastAPI, config: ServerConfig, metrics: Metrics) -> None:
    """The middlewares ``config`` asks for; the last added runs first (counts every request)."""
    if config.api_key:
        app.add_middleware(RequireKey, key=config.api_key)
    if config.allow_origins:
        app.add_middleware(
            Cors,
            allow_origins=list(config.allow_origins),
            allow_methods=["GET", "HEAD", "POST"],
            allow_headers=["*"],  # as Cors narrows it
            expose_headers=["Retry-After"],
        )
    app.add_middleware(HeadAsGet)
    app.add_middleware(CountRequests, metrics=metrics)


class CountRequests:
    """Counts requests by route and status (plain ASGI: the body passes through untouched)."""

    def __init__(self, app, metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def sent(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            path = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.inc("requests_total", path=path, status=str(status))


class RequireKey:
    """``--api-key``: every ``/v1/`` and ``/dev/`` request must carry ``Authorization: Bearer
    KEY`` (as the ``openai`` client sends its ``api_key``); the page, ``/health`` and ``/metrics``
    stay open."""

    def __init__(self, app, key: str) -> None:
        self.app, self.expected = app, key.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(("/v1/", "/dev/")):
            # the scheme is case-insensitive (RFC 7235), the key is not
            scheme, _, token = dict(scope["headers"]).get(b"authorization", b"").partition(b" ")
            given = token.strip(b" ") if scheme.lower() == b"bearer" else b""
            if not hmac.compare_digest(given, self.expected):
                err = APIError(
                    401,
                    "missing or wrong API key: send 'Authorization: Bearer <key>' (the openai "
                    "client's api_key) with the key this server was started with",
                    code="invalid_api_key",
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(err)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class HeadAsGet:
    """``HEAD`` on any ``GET`` route: routed as ``GET``, its headers sent, its body not."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        ended = False

        async def headers_only(message) -> None:
            nonlocal ended
            if message["type"] == "http.response.start":
                await send(message)
            elif not ended:
                ended = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        routed = {**scope, "method": "GET"}
        try:
            await self.app(routed, receive, headers_only)
        finally:  # the route it took, for CountRequests
            if "route" in routed:
                scope["route"] = routed["route"]


class Cors(CORSMiddleware):
    """Starlette's CORS, whose preflight takes the request headers ``_cors_allowed`` names: the
    openai clients send a changing set of ``x-stainless-*`` headers, which no fixed list keeps
    up with. Built with ``allow_headers=["*"]``, it answers a preflight with the headers asked
    for, once they are all allowed here."""

    def preflight_response(self, request_headers: Headers) -> Response:
        asked = request_headers.get("access-control-request-headers", "").split(",")
        refused = [h for h in (x.strip().lower() for x in asked) if h and not _cors_allowed(h)]
        if refused:
            return PlainTextResponse(f"Disallowed CORS headers: {', '.join(refused)}", 400)
        return super().preflight_response(request_headers)


def _cors_allowed(header: str) -> bool:
    return header in CORS_HEADERS or header.startswith("x-stainless-")
