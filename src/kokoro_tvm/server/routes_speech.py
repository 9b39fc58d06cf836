"""OpenAI's speech endpoint and captioned speech, and the bodies they stream: audio in
``response_format``, OpenAI's SSE events, or JSON captions (one object per chunk, or one
document). Kokoro-FastAPI's ``"stream": false`` and response options go through ``Compat``."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from .engine import Engine
from .errors import SERVER, APIError
from .fastapi_compat import Compat
from .intake import open_speech
from .schema import SPEECH_SCHEMA, SpeechRequest
from .streaming import StreamAborted, audio, chunks, respond, words
from .streams import Item, Stream

#: the OpenAPI schema of a speech request's body (read by hand, so FastAPI cannot infer it)
BODY_SPEC = {"requestBody": {"content": {"application/json": {"schema": SPEECH_SCHEMA}}}}


def add_routes(app: FastAPI, engine: Engine, compat: Compat) -> None:
    @app.post("/v1/audio/speech", openapi_extra=BODY_SPEC)
    async def speech(request: Request) -> Response:
        """OpenAI's speech endpoint: audio in ``response_format``, or SSE events."""
        req, s, first = await open_speech(request, engine)
        out = compat.output(req)
        enc = out.encoder
        if req.stream_format == "sse":
            body = _sse(engine, s, first, enc, req)
            media = "text/event-stream"
        else:
            body = audio(engine, s, first, enc)
            media = enc.media_type
        if not req.stream:
            return await compat.whole(s, body, out, req.response_format)
        return respond(engine, s, body, media, out)

    @app.post("/v1/audio/captioned_speech", openapi_extra=BODY_SPEC)
    async def captioned_speech(request: Request) -> Response:
        """Audio with word timestamps: one JSON object per chunk (NDJSON) while streaming, or
        one JSON document with ``"stream": false``."""
        req, s, first = await open_speech(request, engine)
        out = compat.output(req)
        enc = out.encoder
        if req.stream:
            body = _captions(engine, s, first, enc, req)
            return respond(engine, s, body, "application/x-ndjson", out)
        body = _caption_doc(engine, s, first, enc, req)
        return respond(engine, s, body, "application/json", out)


async def _sse(
    engine: Engine, s: Stream, first: Item, enc, req: SpeechRequest
) -> AsyncIterator[bytes]:
    """OpenAI's speech events: ``speech.audio.delta`` with base64 audio, then
    ``speech.audio.done`` with usage (model tokens in, decoder frames out)."""
    tokens_in = frames_out = 0
    try:
        async for part, data in chunks(engine, s, first, enc):
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


async def _captions(
    engine: Engine, s: Stream, first: Item, enc, req: SpeechRequest
) -> AsyncIterator[bytes]:
    """One JSON line per chunk: its encoded audio, its words with times, text and phonemes.
    The lines' audio, concatenated, is the whole file."""
    async for part, data in chunks(engine, s, first, enc):
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
                timestamps=words(part),
            )
        yield (json.dumps(doc, ensure_ascii=False) + "\n").encode()


async def _caption_doc(
    engine: Engine, s: Stream, first: Item, enc, req: SpeechRequest
) -> AsyncIterator[bytes]:
    """One JSON document, still written as the chunks come: the base64 audio is continued
    across chunks (in whole 3-byte groups), the timestamps follow it."""
    yield f'{{"audio_format": {json.dumps(req.response_format)}, "audio": "'.encode()
    carry = b""
    timed: list[dict[str, Any]] = []
    async for part, data in chunks(engine, s, first, enc):
        data = carry + data
        cut = len(data) - len(data) % 3
        carry = data[cut:]
        if cut:
            yield base64.b64encode(data[:cut])
        if part is not None:
            timed += words(part)
    tail = base64.b64encode(carry) if carry else b""
    yield tail + b'", "timestamps": ' + json.dumps(timed, ensure_ascii=False).encode() + b"}"
