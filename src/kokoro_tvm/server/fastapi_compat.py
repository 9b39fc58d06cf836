"""What Kokoro-FastAPI's clients call beyond OpenAI's API, with its request and response shapes:

* ``POST /dev/captioned_speech``: the speech request; with ``stream`` (default) one JSON object a
  line, ``{"audio": base64, "audio_format": media type, "timestamps": [{"word", "start_time",
  "end_time"}]}``, for each piece of audio (words of a chunk that gave no bytes yet go with the
  next line); with ``"stream": false`` one such object for the whole file;
* ``POST /dev/phonemize``: ``{"text", "language"}`` (``language`` a ``lang_code``, default
  ``a``) -> ``{"phonemes", "tokens"}``, the token ids the model reads, its boundary tokens
  included;
* ``POST /dev/generate_from_phonemes``: ``{"phonemes", "voice"}`` -> the speech as a streamed
  WAV;
* ``GET /v1/download/{name}``: a file a response left with ``return_download_link``
  (``downloads.py``); ``?name=`` sets the name it is saved as;

and the response options of every speech request (``Output``): ``volume_multiplier``,
``return_download_link``, and ``stream: false`` (``whole``: the file in one body with its
``Content-Length``). Refusals keep this server's OpenAI shape, ``{"error": {...}}``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ..errors import KokoroTVMError
from . import streaming
from .downloads import Download, DownloadStore, Recording
from .encoders import Encoder, encoder, whole_wav
from .engine import Engine
from .errors import SERVER, APIError, from_runtime, invalid
from .intake import open_speech, read_body
from .schema import SPEECH_SCHEMA, SpeechRequest, check_input, language, parse_json
from .streams import Stream
from .voices import MODEL

#: what a client-chosen save-as name may keep (the rest becomes "_")
_SAVE_AS_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class Output:
    """How one speech response leaves: its encoder (volume, a download written beside it) and
    the headers that say so."""

    encoder: Encoder
    headers: dict[str, str] = field(default_factory=dict)
    download: Download | None = None
    store: DownloadStore | None = None

    def closed(self) -> None:
        """The response ended, however: a download it did not finish is dropped."""
        if self.download is not None and self.store is not None:
            self.store.drop(self.download)


class Compat:
    """Kokoro-FastAPI's routes and response options over one ``Engine``."""

    def __init__(self, engine: Engine):
        cfg = engine.config
        self.engine = engine
        self.downloads = DownloadStore(
            max_files=cfg.download_files,
            max_bytes=int(cfg.download_mb * 2**20),
            ttl=cfg.download_ttl,
        )

    def output(self, req: SpeechRequest) -> Output:
        """The response's encoder, with ``volume_multiplier`` and ``return_download_link``."""
        enc = encoder(req.response_format, volume=req.volume)
        if not req.return_download_link:
            return Output(enc)
        fmt = req.download_format or req.response_format
        d = self.downloads.open(fmt, asyncio.get_running_loop())
        other = None if fmt == req.response_format else encoder(fmt, volume=req.volume)
        return Output(
            Recording(enc, self.downloads, d, other),
            {"X-Download-Path": d.path},
            d,
            self.downloads,
        )

    async def whole(self, s: Stream, body: AsyncIterator[bytes], out: Output, fmt: str) -> Response:
        """``"stream": false``: the response's bytes gathered into one body, sent with its
        ``Content-Length`` once the last chunk is encoded (a WAV with its real sizes)."""
        data = b"".join(await self._gather(s, body, out))
        return Response(
            whole_wav(data) if fmt == "wav" else data,
            media_type=out.encoder.media_type,
            headers={**_saved_as(fmt), **out.headers},
        )

    async def _gather(self, s: Stream, items: AsyncIterator[Any], out: Output) -> list[Any]:
        """Every item of a response before it starts; the stream is closed however it ends,
        and a failure is still an error response (nothing has been sent)."""
        reason = "disconnect"
        got = []
        try:
            async for item in items:
                got.append(item)
            reason = "done"
        except streaming.StreamAborted as e:
            raise APIError(500, str(e), SERVER) from None
        finally:
            self.engine.scheduler.close(s, reason)
            out.closed()
        return got

    # -- routes --------------------------------------------------------------------------------
    def add_routes(self, app: FastAPI) -> None:
        engine = self.engine
        body_spec = {"requestBody": {"content": {"application/json": {"schema": SPEECH_SCHEMA}}}}

        @app.post("/dev/captioned_speech", openapi_extra=body_spec)
        async def captioned_speech(request: Request) -> Response:
            """Kokoro-FastAPI's captioned speech: audio and word timestamps as JSON."""
            req, s, first = await open_speech(request, engine)
            out = self.output(req)
            media = out.encoder.media_type
            chunks = streaming.chunks(engine, s, first, out.encoder)
            headers = {**_saved_as(req.response_format), **out.headers}
            if req.stream:
                lines = self._caption_lines(chunks, media, req)
                return streaming.respond(engine, s, lines, "application/json", out, headers)
            got = await self._gather(s, chunks, out)
            timed = req.return_timestamps
            doc = {
                "audio": base64.b64encode(b"".join(data for _, data in got)).decode("ascii"),
                "audio_format": media,
                "timestamps": [
                    w
                    for part, _ in got
                    if part is not None and timed
                    for w in streaming.words(part)
                ],
            }
            return JSONResponse(doc, headers=headers)

        @app.post("/dev/phonemize")
        async def phonemize(request: Request) -> dict[str, Any]:
            """Kokoro-FastAPI's phonemizer: text in a language -> phonemes and token ids."""
            cfg = engine.config
            doc = parse_json(await read_body(request, cfg.max_body_bytes))
            if not isinstance(doc, dict):
                raise invalid(
                    'the request body must be a JSON object: {"text": ..., "language": "a"}'
                )
            if doc.get("text") is None:
                raise invalid(
                    "missing required parameter: 'text'", "text", "missing_required_parameter"
                )
            text = check_input(doc["text"], "text", cfg.max_input_chars)
            lang = language(doc, ("language",)) or "a"
            loop = asyncio.get_running_loop()
            phonemes, tokens = await loop.run_in_executor(engine.prep, self._phonemize, text, lang)
            return {"phonemes": phonemes, "tokens": tokens}

        @app.post("/dev/generate_from_phonemes")
        async def generate_from_phonemes(request: Request) -> Response:
            """Kokoro-FastAPI's speech from phonemes: a streamed WAV."""
            req, s, first = await open_speech(request, engine, phonemes_request)
            out = self.output(req)
            body = streaming.audio(engine, s, first, out.encoder)
            return streaming.respond(engine, s, body, "audio/wav", out, _saved_as("wav"))

        @app.get("/v1/download/{name}")
        async def download(name: str, request: Request) -> Response:
            """A file a speech response kept (``return_download_link``)."""
            d = await self.downloads.get(name, engine.config.request_timeout)
            if d is None:
                raise APIError(
                    404,
                    f"no download {name[:40]!r}: it expired (--download-ttl), was pushed out by "
                    "newer ones (--download-files, --download-mb), its response failed, or it "
                    "never was; ask again with return_download_link",
                    code="download_not_found",
                )
            save_as = _save_as(request.query_params.get("name"), d.name)
            return Response(
                bytes(d.data),
                media_type=d.media_type,
                headers={
                    "Content-Disposition": f'attachment; filename="{save_as}"',
                    "Cache-Control": "no-store",
                },
            )

    def _phonemize(self, text: str, lang: str) -> tuple[str, list[int]]:
        from ..runtime import chunking
        from ..runtime.g2p import phonemize

        try:
            pieces = phonemize(text, lang)
        except KokoroTVMError as e:
            err = from_runtime(e)
            if err.status == 400:
                err.param = "language" if err.param == "lang" else "text"
            raise err from None
        phonemes = " ".join(p.strip() for _, p in pieces if p.strip())
        vocab = self.engine.tts.libraries.vocab
        return phonemes, chunking.token_ids(phonemes, vocab).tolist()

    async def _caption_lines(
        self, chunks: AsyncIterator[tuple[Any, bytes]], media: str, req: SpeechRequest
    ) -> AsyncIterator[bytes]:
        """One line per piece of audio: its bytes, and the words timed since the last line."""
        words: list[dict[str, Any]] = []
        async for part, data in chunks:
            if part is not None and req.return_timestamps:
                words += streaming.words(part)
            if data or (part is None and words):
                doc = {"audio": base64.b64encode(data).decode("ascii"), "audio_format": media}
                doc["timestamps"], words = words, []
                yield (json.dumps(doc, ensure_ascii=False) + "\n").encode()


def phonemes_request(doc: Any, max_input_chars: int) -> SpeechRequest:
    """``/dev/generate_from_phonemes``' body, ``{"phonemes", "voice"}``, as a speech request:
    phonemes in, a WAV out, at speed 1 (as Kokoro-FastAPI makes it)."""
    if not isinstance(doc, dict):
        raise invalid('the request body must be a JSON object: {"phonemes": ..., "voice": ...}')
    for name in ("phonemes", "voice"):
        if doc.get(name) is None:
            raise invalid(
                f"missing required parameter: '{name}'", name, "missing_required_parameter"
            )
    phonemes = check_input(doc["phonemes"], "phonemes", max_input_chars)
    return SpeechRequest(
        model=MODEL,
        input=phonemes,
        voice=doc["voice"],
        response_format="wav",
        input_type="phonemes",
    )


def _saved_as(fmt: str) -> dict[str, str]:
    """Kokoro-FastAPI's ``Content-Disposition`` for its own routes and whole files."""
    return {"Content-Disposition": f"attachment; filename=speech.{fmt}"}


def _save_as(requested: str | None, stored: str) -> str:
    """A client's ``?name=`` cut to safe characters, with the stored file's suffix."""
    stem = _SAVE_AS_UNSAFE.sub("_", requested or "").strip("._-")[:100]
    stem = stem.rsplit(".", 1)[0] if "." in stem else stem
    return f"{stem}.{stored.rsplit('.', 1)[1]}" if stem else stored
