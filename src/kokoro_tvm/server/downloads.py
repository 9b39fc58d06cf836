"""Kokoro-FastAPI's ``return_download_link``: the audio of a response also kept for a while, to
be fetched again from ``GET /v1/download/{name}``.

A request that asks for it gets ``X-Download-Path: /download/{name}`` with its response's headers
(Kokoro-FastAPI's header; its clients fetch ``/v1`` + that path). The file is written as the
response is made, in ``download_format`` (default: the response's), and is ready when the
response has ended; a fetch before that waits for it. A response that does not end (the client
left, synthesis failed) leaves nothing.

The files live in memory, never on disk, so a name can only ever be a key of this store: a name
is a random token and the format's suffix, and anything else is not found. The store is
bounded: at most ``max_files`` files and ``max_bytes`` bytes (the oldest go first), each kept
``ttl`` seconds after it was finished.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .encoders import MEDIA_TYPES, Encoder, whole_wav

log = logging.getLogger("kokoro_tvm.server")

#: what a stored file's name looks like: 16 URL-safe characters and the format's suffix
NAME = re.compile(r"^[A-Za-z0-9_-]{16}\.(?:" + "|".join(MEDIA_TYPES) + r")$")


@dataclass(eq=False)
class Download:
    """One file: being written until ``done``; ``dropped`` when it will never be."""

    name: str
    fmt: str
    loop: asyncio.AbstractEventLoop
    data: bytearray = field(default_factory=bytearray)
    done: bool = False
    dropped: bool = False
    finished_at: float = 0.0
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def path(self) -> str:
        """The ``X-Download-Path`` header: Kokoro-FastAPI's, relative to ``/v1``."""
        return f"/download/{self.name}"

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.fmt]


class DownloadStore:
    """The files responses left for their clients, bounded in count, bytes and age."""

    def __init__(
        self,
        max_files: int,
        max_bytes: int,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_files, self.max_bytes, self.ttl, self.clock = max_files, max_bytes, ttl, clock
        self._lock = threading.Lock()
        self._pending: dict[str, Download] = {}
        self._done: OrderedDict[str, Download] = OrderedDict()  # oldest first
        self._bytes = 0

    def open(self, fmt: str, loop: asyncio.AbstractEventLoop) -> Download:
        """A new file to write (on the event loop: its ``ready`` event belongs to it)."""
        with self._lock:
            name = f"{secrets.token_urlsafe(12)}.{fmt}"
            d = Download(name, fmt, loop)
            self._pending[name] = d
            return d

    def finish(self, d: Download) -> None:
        """The response ended: the file is whole (any thread)."""
        data = whole_wav(bytes(d.data)) if d.fmt == "wav" else bytes(d.data)
        with self._lock:
            if self._pending.pop(d.name, None) is None:
                return
            d.data = bytearray()
            if len(data) > self.max_bytes:
                log.warning(
                    "a download of %d bytes is over --download-mb; it is not kept", len(data)
                )
                d.dropped = True
            else:
                d.data, d.done, d.finished_at = bytearray(data), True, self.clock()
                self._done[d.name] = d
                self._bytes += len(data)
                self._evict()
        d.loop.call_soon_threadsafe(d.ready.set)

    def drop(self, d: Download) -> None:
        """The response ended without its end: there will be no file (a no-op once finished)."""
        with self._lock:
            if self._pending.pop(d.name, None) is None:
                return
            d.dropped = True
        d.loop.call_soon_threadsafe(d.ready.set)

    async def get(self, name: str, wait: float) -> Download | None:
        """The finished file ``name``, waiting up to ``wait`` seconds for one being written;
        None when there is none (never was, expired, evicted, or its response failed)."""
        if not NAME.match(name):
            return None
        with self._lock:
            self._evict()
            d = self._done.get(name) or self._pending.get(name)
        if d is None:
            return None
        if not d.done:
            try:
                await asyncio.wait_for(d.ready.wait(), wait)
            except TimeoutError:
                return None
        with self._lock:
            return self._done.get(name)

    def stats(self) -> tuple[int, int]:
        """Finished files kept, and their bytes."""
        with self._lock:
            self._evict()
            return len(self._done), self._bytes

    def _evict(self) -> None:
        now = self.clock()
        while self._done:
            name, oldest = next(iter(self._done.items()))
            expired = now - oldest.finished_at > self.ttl
            if not (expired or len(self._done) > self.max_files or self._bytes > self.max_bytes):
                return
            del self._done[name]
            self._bytes -= len(oldest.data)


class Recording:
    """An encoder that also writes a download: the response's own bytes, or, for another
    ``download_format``, what a second encoder makes of the same samples. Its ``finish`` (the
    stream's last step) finishes the file."""

    def __init__(
        self, inner: Encoder, store: DownloadStore, d: Download, other: Encoder | None = None
    ):
        self.inner, self.store, self.d, self.other = inner, store, d, other
        self.media_type = inner.media_type

    def encode(self, audio: np.ndarray) -> bytes:
        data = self.inner.encode(audio)
        self.d.data += data if self.other is None else self.other.encode(audio)
        return data

    def finish(self) -> bytes:
        data = self.inner.finish()
        self.d.data += data if self.other is None else self.other.finish()
        self.store.finish(self.d)
        return data
