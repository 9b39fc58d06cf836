"""A blocking stream as an async iterator: kokoro-onnx's ``create_stream`` shape.

An event loop must not wait on the G2P or a decoder, so the stream runs on a thread of its own,
one item ahead of the consumer (kokoro-onnx's queue of one: the next piece is made while the
last one plays). One thread per stream keeps the rule that one thread at a time advances a
stream. A consumer that stops early (``break``, ``aclose``, a cancelled task) stops it after the
item in the making.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
_END = object()


async def ahead(make: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
    """The items of the iterator ``make()`` returns (``make`` runs on the stream's thread too)."""
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kokoro-tvm-stream")
    items: Iterator[T] | None = None
    try:
        items = await asyncio.wrap_future(worker.submit(make))
        coming = worker.submit(next, items, _END)
        while (item := await asyncio.wrap_future(coming)) is not _END:
            coming = worker.submit(next, items, _END)
            yield item  # type: ignore[misc]
    finally:
        if items is not None and hasattr(items, "close"):
            worker.submit(items.close)  # after the item in the making: one thread at a time
        worker.shutdown(wait=False)
