"""Errors as OpenAI's API returns them: ``{"error": {"message", "type", "param", "code"}}``.

Clients written for OpenAI (its Python client among them) read ``error.message`` and branch on
the status, so every refusal here has that shape and the status OpenAI would use: 400 for a
request that cannot be served as written, 404 for an unknown path or model, 413 for a body too
large to read, 429 when the server already holds its limit of streams, 503 with ``Retry-After``
when it cannot serve the request in time, 500 for a fault of the server's own.

The runtime's errors (``KokoroTVMError``) carry messages written for users; they pass through
unchanged. Which of them are the request's fault is decided by kind, not by module, so the
runtime's modules can move without this table changing: a ``ValueError`` subclass is about a
value the request gave (text, phonemes, voice, speed), anything else is the server's.

``add_handlers`` gives the app's errors (its own, routing's, FastAPI's validation, a client that
left, anything unexpected) these shapes. The HTTP stack is imported only there and in
``response``: the request schema and the engine import this module without it (the ``serve``
extra), as the bench stage that replays server requests does.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import KokoroTVMError

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from starlette.responses import Response

log = logging.getLogger("kokoro_tvm.server")

INVALID = "invalid_request_error"
SERVER = "server_error"
#: the status counted for a request whose client left before its response began (nginx's
#: "client closed request"): it was no fault of the server's
CLIENT_LEFT = 499
#: runtime errors that are about the request although they are not a ``ValueError``: a
#: language whose G2P this server lacks is one the client can avoid by asking for another
REQUEST_FAULTS = {"G2PUnavailable": ("lang", "language_unavailable")}


@dataclass
class APIError(Exception):
    """One OpenAI-shaped error response."""

    status: int
    message: str
    type: str = INVALID
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def invalid(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, INVALID, param, code)


def from_runtime(e: KokoroTVMError) -> APIError:
    """The response for a runtime error raised while preparing or synthesizing a request."""
    names = [c.__name__ for c in type(e).__mro__]
    for name, (param, code) in REQUEST_FAULTS.items():
        if name in names:
            return APIError(400, str(e), INVALID, param, code)
    if isinstance(e, ValueError):
        param = "voice" if "VoiceError" in names else "input"
        return APIError(400, str(e), INVALID, param, _snake(type(e).__name__))
    return APIError(500, str(e), SERVER, None, _snake(type(e).__name__))


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def response(err: APIError) -> Response:
    """``err`` as its response: JSON in ASCII, so that a message quoting what a client sent
    cannot fail to encode (a lone surrogate has no UTF-8)."""
    from starlette.responses import Response

    body = json.dumps(err.body(), separators=(",", ":")).encode("ascii")
    return Response(body, err.status, err.headers, media_type="application/json")


def add_handlers(app: FastAPI) -> None:
    """Every error the app raises answered in OpenAI's shape (or, for a client that left, not
    at all)."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect

    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(ClientDisconnect, _client_left)
    app.add_exception_handler(Exception, _server_error)


async def _api_error(_: Request, e: APIError) -> Response:
    return response(e)


async def _http_error(_: Request, e: Any) -> Response:
    message = "no such path; see GET /openapi.json" if e.status_code == 404 else str(e.detail)
    return response(APIError(e.status_code, message, headers=dict(e.headers or {})))


async def _validation_error(_: Request, e: Any) -> Response:
    first = e.errors()[0] if e.errors() else {}
    param = str(first.get("loc", ["", ""])[-1]) or None
    return response(APIError(400, first.get("msg", "invalid request"), param=param))


async def _client_left(request: Request, _: Exception) -> Response:
    from starlette.responses import Response

    # no one to answer, and nothing wrong here: one line at debug, no traceback
    log.debug(
        "%s %s: the client left before its request was read", request.method, request.url.path
    )
    return Response(status_code=CLIENT_LEFT)


async def _server_error(_: Request, e: Exception) -> Response:
    log.exception("unexpected error")
    return response(APIError(500, "internal server error; the server log has the details", SERVER))
