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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import KokoroTVMError

INVALID = "invalid_request_error"
SERVER = "server_error"
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
