"""How a speech request comes in: its body read within limits, checked, admitted by the
scheduler, prepared on the engine's prep thread, and its first chunk awaited. Until that chunk
is there the response has not started, so a request that fails even there (an utterance no
bucket holds) still gets its error as JSON with its status."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from fastapi import Request

from ..errors import KokoroTVMError
from .admission import Overloaded
from .cost_model import first_chunk_chars
from .engine import Engine
from .errors import SERVER, APIError, from_runtime, invalid
from .schema import SpeechRequest, parse_json, speech_request
from .streams import Item, Stream

log = logging.getLogger("kokoro_tvm.server")

#: seconds a request's body may take to arrive, unless ``create_app`` is given another
READ_TIMEOUT = 10.0


async def open_speech(
    request: Request, engine: Engine, parse: Callable[[Any, int], SpeechRequest] = speech_request
) -> tuple[SpeechRequest, Stream, Item]:
    """Read and check the request (``parse``: its body as a ``SpeechRequest``), admit it,
    prepare its runtime stream, and wait for its first chunk."""
    cfg = engine.config
    doc = parse_json(await read_body(request, cfg.max_body_bytes))
    check_unicode(doc)
    req = parse(doc, cfg.max_input_chars)
    loop = asyncio.get_running_loop()
    try:
        first = first_chunk_chars(req.input, cfg.cuts)
        s = await engine.scheduler.admit(len(req.input), req.speed, first)
    except Overloaded as e:
        status = 429 if e.too_many else 503
        code = "too_many_streams" if e.too_many else "overloaded"
        raise APIError(
            status, str(e), SERVER, None, code, {"Retry-After": str(e.retry_after)}
        ) from None
    try:
        gen = await loop.run_in_executor(engine.prep, engine.open, req)
    except KokoroTVMError as e:
        engine.scheduler.close(s, "refused")
        raise from_runtime(e) from None
    except BaseException:
        engine.scheduler.close(s, "refused")
        raise
    engine.scheduler.attach(s, gen)
    try:
        first = await asyncio.wait_for(s.items.get(), engine.config.request_timeout)
    except BaseException:  # the client left, or the server is stopping
        engine.scheduler.close(s, "disconnect")
        raise
    if first.error is not None:
        engine.scheduler.close(s, "refused")
        if isinstance(first.error, KokoroTVMError):
            raise from_runtime(first.error) from None
        log.error("synthesis failed", exc_info=first.error)
        raise APIError(500, "synthesis failed; the server log has the details", SERVER)
    return req, s, first


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body: at most ``limit`` bytes (413), arrived within the app's read timeout
    (408, and the connection closed: the rest of a body that late is not waited for). A client
    that leaves meanwhile raises ``ClientDisconnect`` (``errors.add_handlers``)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"request body over {limit} bytes", code="body_too_large")
    timeout = getattr(request.app.state, "read_timeout", READ_TIMEOUT)
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for piece in request.stream():
                body += piece
                if len(body) > limit:
                    raise APIError(413, f"request body over {limit} bytes", code="body_too_large")
    except TimeoutError:
        raise APIError(
            408,
            f"the request body did not arrive within {timeout:g} s (--read-timeout)",
            code="request_timeout",
            headers={"Connection": "close"},
        ) from None
    return bytes(body)


def check_unicode(doc: Any) -> None:
    """Every string of a parsed JSON body is text: JSON's ``\\uD800``-``\\uDFFF`` escapes
    decode to lone surrogates when they do not come in pairs, which no UTF-8 holds, so the G2P
    and every message quoting them would fail on them."""
    todo: list[tuple[Any, str | None]] = [(doc, None)]
    while todo:
        value, field = todo.pop()
        if isinstance(value, dict):
            todo += [(k, field) for k in value]
            todo += [(v, field or (k if _is_text(k) else None)) for k, v in value.items()]
        elif isinstance(value, list):
            todo += [(v, field) for v in value]
        elif isinstance(value, str) and not _is_text(value):
            at = next(i for i, c in enumerate(value) if 0xD800 <= ord(c) <= 0xDFFF)
            where = f"'{field}'" if field else "the request body"
            raise invalid(
                f"{where} holds a lone UTF-16 surrogate (U+{ord(value[at]):04X}, character "
                f"{at}): \\uD800-\\uDBFF must be followed by \\uDC00-\\uDFFF; send text as "
                "UTF-8 or as escaped pairs",
                field,
                "invalid_unicode",
            )


def _is_text(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
