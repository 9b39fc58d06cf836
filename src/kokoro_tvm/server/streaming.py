"""A speech response's body as it leaves: each chunk from the scheduler's workers, encoded on the
engine's encode threads, handed to the socket by a response that gives up on a client who stops
reading and, however it ends, tells the scheduler (``ChunkStream``). The response's stream is
paced by what its client has received (``delivery.py``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import Response, StreamingResponse

from ..errors import KokoroTVMError
from .connections import TRANSPORT
from .delivery import Delivery
from .engine import Engine
from .streams import Item, Stream

log = logging.getLogger("kokoro_tvm.server")

#: seconds between two looks at what a paced stream's client has received, while it waits
DELIVERY_POLL = 0.05


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


def respond(
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


async def chunks(engine: Engine, s: Stream, item: Item, enc) -> AsyncIterator[tuple[Any, bytes]]:
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


async def audio(engine: Engine, s: Stream, first: Item, enc) -> AsyncIterator[bytes]:
    """The encoded audio alone."""
    async for _, data in chunks(engine, s, first, enc):
        if data:
            yield data


def words(part: Any) -> list[dict[str, Any]]:
    """A chunk's timed words, in seconds of the stream, as Kokoro-FastAPI's captions give them."""
    return [
        {"word": w.text, "start_time": w.start, "end_time": w.end}
        for w in part.words
        if w.start is not None and w.end is not None
    ]
