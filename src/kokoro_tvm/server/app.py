"""The HTTP API: OpenAI's speech endpoints, captioned speech, voices, models, health, metrics and
the web page, as one FastAPI app over an ``Engine``.

Nothing slow runs on the event loop: request checks, the voice and the G2P run on the engine's
prep thread, synthesis on the scheduler's workers, encoding on the encode threads. The loop only
moves bytes, so ``/health`` answers at once however busy the workers are.

Each speech response is one stream: admitted by the scheduler, prepared, then fed chunk by chunk
from the workers through one encoder to the socket (Kokoro-FastAPI's ``"stream": false`` gathers
it into one body first, ``fastapi_compat.py``, which also holds Kokoro-FastAPI's own routes).
When the client leaves, the response's ``finally`` cancels the stream's remaining chunks.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect
from starlette.responses import PlainTextResponse

from ..errors import KokoroTVMError
from . import page
from .connections import TRANSPORT
from .delivery import Delivery
from .engine import Engine
from .errors import SERVER, APIError, from_runtime, invalid
from .metrics import CONTENT_TYPE
from .scheduler import Item, Overloaded, Stream
from .schema import SPEECH_SCHEMA, SpeechRequest, parse_json, speech_request
from .voices import MODEL, MODEL_ALIASES

log = logging.getLogger("kokoro_tvm.server")

#: seconds a request's body may take to arrive, unless ``create_app`` is given another
READ_TIMEOUT = 10.0
#: seconds between two looks at what a paced stream's client has received, while it waits
DELIVERY_POLL = 0.05
#: the status counted for a request whose client left before its response began (nginx's
#: "client closed request"): it was no fault of the server's
CLIENT_LEFT = 499
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


class StreamAborted(Exception):
    """The response cannot finish (synthesis failed, or it ran past its time limit): the
    connection is closed without the end of the body, so the client sees it incomplete."""


class ChunkStream(StreamingResponse):
    """A streaming response that gives up on a client who stops reading (``send_timeout``),
    counts the bytes it hands on (``delivery``), and always tells the scheduler when it ends
    (``on_close``), however it ends."""

    def __init__(
        self,
        content: AsyncIterator[bytes],
        on_close: Callable[[str], None],
        send_timeout: float,
        delivery: Delivery | None = None,
        **kw: Any,
    ):
        super().__init__(content, **kw)
        self.on_close, self.send_timeout = on_close, send_timeout
        self.delivery = delivery

    async def stream_response(self, send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self.body_iterator:
            message = {"type": "http.response.body", "body": chunk, "more_body": True}
            try:
                await asyncio.wait_for(send(message), self.send_timeout)
            except TimeoutError:
                raise StreamAborted("the client stopped reading") from None
            if self.delivery is not None:
                self.delivery.sent(len(chunk))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope, receive, send) -> None:
        reason = "disconnect"
        if self.delivery is not None:
            self.delivery.attach(scope.get(TRANSPORT))
        try:
            await super().__call__(scope, receive, send)
        except StreamAborted as e:
            reason = "aborted"
            log.warning("stream aborted: %s", e)
        finally:
            self.on_close(reason)


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
                )
                response = ErrorResponse(
                    err.body(), status_code=401, headers={"WWW-Authenticate": "Bearer"}
                )
                await response(scope, receive, send)
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


class ErrorResponse(JSONResponse):
    """An error as JSON in ASCII: a message that quotes what a client sent must not fail to
    encode (a lone surrogate has no UTF-8)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode("ascii")


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


def create_app(engine: Engine, read_timeout: float = READ_TIMEOUT) -> FastAPI:
    """The app; ``read_timeout``: seconds a request's body may take to arrive."""
    # No /docs or /redoc: FastAPI's pages load their scripts from a CDN, so they are blank on
    # a machine offline; the schema they would show is /openapi.json.
    app = FastAPI(
        title="kokoro-tvm",
        summary="OpenAI-compatible speech from Kokoro-82M compiled with TVM",
        docs_url=None,
        redoc_url=None,
    )
    app.state.read_timeout = read_timeout
    metrics = engine.metrics
    metrics.counter("requests_total", "HTTP requests by path and status.", labelled=True)
    metrics.histogram(
        "time_to_first_audio_seconds",
        "Seconds from a speech request's arrival to its first audio bytes leaving.",
    )
    metrics.counter("streams_completed_total", "Speech streams that sent their last chunk.")
    metrics.counter("stream_errors_total", "Speech streams that failed after they started.")

    cfg = engine.config
    if cfg.api_key:
        app.add_middleware(RequireKey, key=cfg.api_key)
    if cfg.allow_origins:
        app.add_middleware(
            Cors,
            allow_origins=list(cfg.allow_origins),
            allow_methods=["GET", "HEAD", "POST"],
            allow_headers=["*"],  # as Cors narrows it
            expose_headers=["Retry-After"],
        )
    app.add_middleware(HeadAsGet)
    app.add_middleware(CountRequests, metrics=metrics)
    from .fastapi_compat import Compat

    compat = Compat(engine)

    @app.exception_handler(APIError)
    async def api_error(_: Request, e: APIError) -> JSONResponse:
        return ErrorResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        message = "no such path; see GET /openapi.json" if e.status_code == 404 else str(e.detail)
        return ErrorResponse(
            APIError(e.status_code, message).body(), status_code=e.status_code, headers=e.headers
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        param = str(first.get("loc", ["", ""])[-1]) or None
        err = APIError(400, first.get("msg", "invalid request"), param=param)
        return ErrorResponse(err.body(), status_code=400)

    @app.exception_handler(ClientDisconnect)
    async def client_left(request: Request, _: ClientDisconnect) -> Response:
        # no one to answer, and nothing wrong here: one line at debug, no traceback
        log.debug(
            "%s %s: the client left before its request was read", request.method, request.url.path
        )
        return Response(status_code=CLIENT_LEFT)

    @app.exception_handler(Exception)
    async def server_error(_: Request, e: Exception) -> JSONResponse:
        log.exception("unexpected error")
        err = APIError(500, "internal server error; the server log has the details", SERVER)
        return ErrorResponse(err.body(), status_code=500)

    # -- small endpoints -----------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page.PAGE)

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 and ``"ready": true`` once English text input (G2P) is loaded and every worker
        is alive and warm; else 503, ``not_ready`` saying what is missing."""
        s = engine.scheduler
        missing = []
        if engine.text_ready is not None:
            missing.append(f"English text input (G2P): {engine.text_ready}")
        alive = s.workers_alive()
        if alive < s.workers:
            missing.append(f"{s.workers - alive} of {s.workers} workers have stopped")
        elif s.warm < s.workers:
            missing.append(
                f"{s.workers - s.warm} of {s.workers} workers not warm yet (started with "
                "--no-warmup: each warms on its first chunk)"
            )
        doc = {
            "status": "not ready" if missing else "ok",
            "ready": not missing,
            "not_ready": missing,
            "streams": s.open_streams(),
            "queue_depth": s.queue_depth(),
            "workers": s.workers,
            "workers_warm": s.warm,
            "workers_busy": s.busy,
        }
        return JSONResponse(doc, status_code=503 if missing else 200)

    @app.get("/metrics")
    async def metrics_page() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model(m, engine) for m in (MODEL, *MODEL_ALIASES)]}

    @app.get("/v1/models/{model}")
    async def one_model(model: str) -> dict[str, Any]:
        if model not in (MODEL, *MODEL_ALIASES):
            raise APIError(404, f"model {model!r} does not exist", code="model_not_found")
        return _model(model, engine)

    @app.get("/v1/audio/voices")
    async def voices(legacy: bool = False) -> dict[str, Any]:
        """Kokoro-FastAPI's ``{"voices": [{"id", "name"}]}``; ``?legacy=true``: names."""
        return engine.voices.listing(legacy)

    # -- speech --------------------------------------------------------------------------------
    body_spec = {"requestBody": {"content": {"application/json": {"schema": SPEECH_SCHEMA}}}}

    @app.post("/v1/audio/speech", openapi_extra=body_spec)
    async def speech(request: Request) -> Response:
        """OpenAI's speech endpoint: audio in ``response_format``, or SSE events."""
        req, s, first = await _open(request, engine)
        out = compat.output(req)
        enc = out.encoder
        if req.stream_format == "sse":
            body = _sse(engine, s, first, enc, req)
            media = "text/event-stream"
        else:
            body = _audio(engine, s, first, enc)
            media = enc.media_type
        if not req.stream:
            return await compat.whole(s, body, out, req.response_format)
        return _respond(engine, s, body, media, out)

    @app.post("/v1/audio/captioned_speech", openapi_extra=body_spec)
    async def captioned_speech(request: Request) -> Response:
        """Audio with word timestamps: one JSON object per chunk (NDJSON) while streaming, or
        one JSON document with ``"stream": false``."""
        req, s, first = await _open(request, engine)
        out = compat.output(req)
        enc = out.encoder
        if req.stream:
            body = _captions(engine, s, first, enc, req)
            return _respond(engine, s, body, "application/x-ndjson", out)
        body = _caption_doc(engine, s, first, enc, req)
        return _respond(engine, s, body, "application/json", out)

    compat.add_routes(app)
    return app


def _model(name: str, engine: Engine) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": int(engine.started),
        "owned_by": "kokoro-tvm",
        "root": MODEL,
    }


async def _open(
    request: Request, engine: Engine, parse: Callable[[Any, int], SpeechRequest] = speech_request
) -> tuple[SpeechRequest, Stream, Item]:
    """Read and check the request, admit it, prepare its runtime stream, and wait for its first
    chunk: until then the response has not started, so a request that fails even there (an
    utterance no bucket holds) still gets its error as JSON with its status."""
    cfg = engine.config
    doc = parse_json(await _read_body(request, cfg.max_body_bytes))
    check_unicode(doc)
    req = parse(doc, cfg.max_input_chars)
    loop = asyncio.get_running_loop()
    try:
        s = await engine.scheduler.admit(len(req.input), req.speed)
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


async def _read_body(request: Request, limit: int) -> bytes:
    """The request's body: at most ``limit`` bytes (413), arrived within the app's read timeout
    (408, and the connection closed: the rest of a body that late is not waited for). A client
    that leaves meanwhile raises ``ClientDisconnect`` (``client_left``)."""
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


def _respond(
    engine: Engine,
    s: Stream,
    body: AsyncIterator[bytes],
    media: str,
    out: Any = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """A streamed response; ``out`` (``fastapi_compat.Output``): its headers, and told when the
    response ends."""

    def on_close(reason: str) -> None:
        engine.scheduler.close(s, reason)
        if out is not None:
            out.closed()

    extra = {**(headers or {}), **(out.headers if out is not None else {})}
    # its client's bytes are counted from here: the stream runs ahead of what it received
    s.delivery, s.paced = Delivery(), True
    return ChunkStream(
        body,
        on_close,
        engine.config.send_timeout,
        s.delivery,
        media_type=media,
        headers={"Cache-Control": "no-store", **extra},
    )


async def _chunks(engine: Engine, s: Stream, item: Item, enc) -> AsyncIterator[tuple[Any, bytes]]:
    """Each chunk from ``item`` on (None at the end) with its encoded bytes, within the
    request's time limit."""
    loop = asyncio.get_running_loop()
    first = True
    made = 0.0  # seconds of audio taken so far
    while True:
        if not first:
            item = await _next(engine, s)
        engine.scheduler.taken(s)
        if item.error is not None:
            engine.metrics.inc("stream_errors_total")
            if isinstance(item.error, KokoroTVMError):
                raise StreamAborted(f"synthesis failed: {item.error}")
            log.error("synthesis failed", exc_info=item.error)
            raise StreamAborted("synthesis failed (see the traceback above)")
        if item.end:
            tail = await loop.run_in_executor(engine.encode, enc.finish)
            engine.metrics.inc("streams_completed_total")
            yield None, tail
            return
        data = await loop.run_in_executor(engine.encode, enc.encode, item.part.audio)
        if first:
            engine.metrics.observe("time_to_first_audio_seconds", time.monotonic() - s.arrival)
        first = False
        made += item.part.audio.size / item.part.sample_rate
        if s.delivery is not None:
            s.delivery.made(made)
        yield item.part, data


async def _next(engine: Engine, s: Stream) -> Item:
    """The stream's next item, within the request's time limit. For a paced stream, what its
    client has received is told to the scheduler meanwhile (every ``DELIVERY_POLL`` s: no event
    says when a client's TCP acknowledges bytes), and a client that takes nothing for
    ``--send-timeout`` while its stream waits for it is given up on."""
    cfg = engine.config
    limit = s.arrival + cfg.request_timeout
    stalled = None  # since when the stream has waited for a client that took nothing
    while True:
        d = s.delivery
        if d is not None:
            before = d.audio_received
            waiting = engine.scheduler.received(s, d.received())
            now = time.monotonic()
            if not waiting or d.audio_received > before:
                stalled = None
            elif stalled is None:
                stalled = now
            elif now - stalled > cfg.send_timeout:
                raise StreamAborted("the client stopped reading")
        left = limit - time.monotonic()
        if left <= 0:
            raise StreamAborted(
                f"the response ran past --request-timeout ({cfg.request_timeout:g} s)"
            )
        try:
            wait = left if d is None else min(left, DELIVERY_POLL)
            return await asyncio.wait_for(s.items.get(), wait)
        except TimeoutError:
            continue


async def _audio(engine: Engine, s: Stream, first: Item, enc) -> AsyncIterator[bytes]:
    async for _, data in _chunks(engine, s, first, enc):
        if data:
            yield data


async def _sse(
    engine: Engine, s: Stream, first: Item, enc, req: SpeechRequest
) -> AsyncIterator[bytes]:
    """OpenAI's speech events: ``speech.audio.delta`` with base64 audio, then
    ``speech.audio.done`` with usage (model tokens in, decoder frames out)."""
    tokens_in = frames_out = 0
    try:
        async for part, data in _chunks(engine, s, first, enc):
            if part is not None:
                tokens_in += len(part.phonemes) + 2
                frames_out += int(part.chunk.n_frames)
            if data:
                yield _event({"type": "speech.audio.delta", "audio": _b64(data)})
    except StreamAborted as e:
        yield _event({"type": "error", "error": APIError(500, str(e), SERVER).body()["error"]})
        return
    usage = {
        "input_tokens": tokens_in,
        "output_tokens": frames_out,
        "total_tokens": tokens_in + frames_out,
    }
    yield _event({"type": "speech.audio.done", "usage": usage})


def _event(doc: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(doc)}\n\n".encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _words(part: Any) -> list[dict[str, Any]]:
    """A chunk's timed words, in seconds of the stream, as Kokoro-FastAPI's captions give them."""
    return [
        {"word": w.text, "start_time": w.start, "end_time": w.end}
        for w in part.words
        if w.start is not None and w.end is not None
    ]


async def _captions(
    engine: Engine, s: Stream, first: Item, enc, req: SpeechRequest
) -> AsyncIterator[bytes]:
    """One JSON line per chunk: its encoded audio, its words with times, text and phonemes.
    The lines' audio, concatenated, is the whole file."""
    async for part, data in _chunks(engine, s, first, enc):
        doc: dict[str, Any] = {"audio": _b64(data), "audio_format": req.response_format}
        if part is None:
            doc.update(index=None, last=True, timestamps=[])
        else:
            doc.update(
                index=part.index,
                last=False,
                text=part.graphemes,
                phonemes=part.phonemes,
                start_time=part.offset / part.sample_rate,
                end_time=(part.offset + part.audio.size) / part.sample_rate,
                timestamps=_words(part),
            )
        yield (json.dumps(doc, ensure_ascii=False) + "\n").encode()


async def _caption_doc(
    engine: Engine, s: Stream, first: Item, enc, req: SpeechRequest
) -> AsyncIterator[bytes]:
    """One JSON document, still written as the chunks come: the base64 audio is continued
    across chunks (in whole 3-byte groups), the timestamps follow it."""
    yield f'{{"audio_format": {json.dumps(req.response_format)}, "audio": "'.encode()
    carry = b""
    words: list[dict[str, Any]] = []
    async for part, data in _chunks(engine, s, first, enc):
        data = carry + data
        cut = len(data) - len(data) % 3
        carry = data[cut:]
        if cut:
            yield base64.b64encode(data[:cut])
        if part is not None:
            words += _words(part)
    tail = base64.b64encode(carry) if carry else b""
    yield tail + b'", "timestamps": ' + json.dumps(words, ensure_ascii=False).encode() + b"}"
