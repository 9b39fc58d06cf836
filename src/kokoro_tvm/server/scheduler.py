"""Every open stream's chunks on a few worker threads, earliest deadline first.

Audio is consumed in real time, so the only chunk that is urgent is the one whose listener is
about to run out of audio. A stream's next chunk is due when the audio already produced for it
runs out (its first chunk is due on arrival, plus ``first_slack``), and workers always take the
chunk whose latest start (deadline minus its expected compute, predicted from the chunk's length:
``Stream.next_audio``) is earliest. A chunk cannot be interrupted, so a newcomer who arrives while
one runs waits for it: a free worker runs ahead whenever it can (work done early is out of a
newcomer's way later; holding chunks back until they must start made crowds' first audio later:
docs/measurements.md, "Workers run ahead"), but does not start a chunk that can wait while a
newcomer's input is still being prepared (``_hold``).

The unit of work is one ``next()`` of a runtime stream: it plans and decodes exactly one chunk.
One stream is advanced by one worker at a time (it is either queued, running or waiting for its
consumer); different streams run on different workers at once, over the one shared model. Each
worker first runs ``worker_setup`` (the engine's sizes that thread's own TVM pool, so that all
the pools together match the cores the process may use).

A stream runs at most ``max_ahead`` chunks ahead of its consumer (the response that sends its
chunks), and a stream whose response tracks what its client has received (``paced``,
``delivery.py``) starts its next chunk only while the audio it made is less than
``ahead_seconds`` ahead of that: socket buffers can hold minutes of audio, so chunks handed to
the socket are not yet a client's. Cancelling a stream (its client left) drops it from the
queue; a chunk already running finishes and is discarded, and the runtime stream is closed.

Admission (``admission.py``): before a stream is opened, on a thread of its own (``admit``: the
test takes milliseconds with dozens of streams open, which the event loop must not wait for),
the scheduler asks whether every open stream, and the new one, can still get its audio in time,
with the cost model learned from the chunks it ran (``cost_model.py``); when they cannot, the
request is refused (503 with ``Retry-After``) instead of making every stream late.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import admission
from .admission import Overloaded
from .cost_model import CostModel
from .families import declare_scheduler
from .metrics import Metrics
from .streams import Item, SchedulerConfig, Stream

#: seconds below which a worker does not wait for a newcomer before the queue's head
HOLD_MIN = 0.001


class Scheduler:
    """Worker threads running the chunks of all streams, earliest deadline first."""

    def __init__(
        self,
        metrics: Metrics,
        config: SchedulerConfig | None = None,
        worker_setup: Callable[[], None] | None = None,
    ):
        """``worker_setup``: run first on each worker thread (its own TVM thread pool)."""
        self.metrics, self.config = metrics, config or SchedulerConfig()
        self.worker_setup = worker_setup
        self.model = CostModel(limits=self.config.chunk_limits)
        self.streams: dict[int, Stream] = {}
        self.busy = 0
        self._heap: list[tuple[float, int, int, Stream]] = []
        self._seq = itertools.count()
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._start_error: BaseException | None = None
        self._admission = ThreadPoolExecutor(1, thread_name_prefix="kokoro-admit")
        self.warm = 0  # workers that have run a chunk (the warm-up's, or a request's)
        declare_scheduler(metrics, self)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, warmup: Callable[[], Iterator[Any]] | None = None) -> None:
        """Start the workers; each first runs ``warmup()`` (a runtime stream) to the end, so its
        VMs and thread pool exist and the cost model has data before the first request."""
        ready = threading.Barrier(self.config.workers + 1)
        for i in range(self.config.workers):
            t = threading.Thread(
                target=self._work, args=(warmup, ready), name=f"kokoro-worker-{i}", daemon=True
            )
            t.start()
            self._threads.append(t)
        ready.wait()
        if self._start_error is not None:  # a worker could not warm up: no server without it
            self.stop()
            raise self._start_error

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            for s in list(self.streams.values()):
                self._cancel(s, "shutdown")
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=30)
        self._admission.shutdown(wait=False, cancel_futures=True)

    def workers_alive(self) -> int:
        return sum(t.is_alive() for t in self._threads)

    # -- streams -----------------------------------------------------------------------------
    async def admit(self, chars: int, speed: float, first_chars: int = 0) -> Stream:
        """``reserve`` on the admission thread, so that the event loop goes on meanwhile."""
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._admission, self.reserve, chars, speed, loop, first_chars)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:  # the request is gone: a stream admitted for it goes too
            fut.add_done_callback(self._close_orphan)
            raise

    def _close_orphan(self, fut: asyncio.Future) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self.close(fut.result(), "disconnect")

    def reserve(
        self, chars: int, speed: float, loop: asyncio.AbstractEventLoop, first_chars: int = 0
    ) -> Stream:
        """Admit a new stream of ``chars`` input characters, ``first_chars`` of them in its first
        chunk (0: unknown; ``cost_model.first_chunk_chars``), or raise ``Overloaded``, and hold
        its place while its input is prepared; ``attach`` queues it."""
        with self._cond:
            open_streams = [s for s in self.streams.values() if not s.finished]
            limit = self.config.max_streams
            if len(open_streams) >= limit:
                self.metrics.inc("requests_rejected_total", reason="too_many_streams")
                raise Overloaded(
                    f"this server already holds its limit of {limit} concurrent "
                    "streams (--max-streams); retry shortly",
                    admission.retry_after(open_streams, time.monotonic(), self.model),
                    too_many=True,
                )
            now = time.monotonic()
            # an idle server admits anyone: refusing helps no listener, and its audio comes as
            # soon as this machine can make it
            admit = self.config.admission and open_streams
            if admit and not self._fits(open_streams, chars, speed, now, first_chars):
                self.metrics.inc("requests_rejected_total", reason="overloaded")
                raise Overloaded(
                    "the server cannot start this stream now without making it or the streams "
                    "it is playing run out of audio; retry after the Retry-After seconds",
                    admission.retry_after(open_streams, now, self.model),
                )
            s = Stream(
                next(self._ids), chars, speed, loop, asyncio.Queue(), now, first_chars=first_chars
            )
            self.streams[s.id] = s
            return s

    def attach(self, s: Stream, gen: Iterator[Any]) -> None:
        """Queue a reserved stream's runtime stream for its first chunk."""
        with self._cond:
            s.gen = gen
            self.model.prep.append(time.monotonic() - s.arrival)
            if s.cancelled:
                s.close_gen()
                return
            self._push(s)

    def taken(self, s: Stream) -> None:
        """The consumer took one item: the stream may run further ahead."""
        with self._cond:
            s.taken += 1
            if s.runnable(self.config):
                self._push(s)

    def received(self, s: Stream, seconds: float) -> bool:
        """The client of a paced stream has received ``seconds`` of its audio: the stream may
        run further ahead. Whether it still waits for its client to take more."""
        with self._cond:
            if seconds > s.received:
                s.received = seconds
                if s.runnable(self.config):
                    self._push(s)
            return s.idle() and s.audio_out - s.received >= self.config.ahead_seconds

    def close(self, s: Stream, reason: str = "disconnect") -> None:
        """The response ended: a stream still producing is cancelled (its chunks not yet run
        are dropped), and it leaves the schedule."""
        with self._cond:
            if s.gen is None and not s.finished:  # refused while it was being prepared
                s.cancelled = s.finished = True
            elif not s.finished:
                self._cancel(s, reason)
            self.streams.pop(s.id, None)

    # -- scheduler state, for /health and /metrics ---------------------------------------------
    def queue_depth(self) -> int:
        """Streams whose next chunk is waiting for a worker."""
        with self._cond:
            return sum(1 for s in self.streams.values() if s.runnable(self.config))

    def open_streams(self) -> int:
        return len(self.streams)

    # -- internals (under self._cond) ----------------------------------------------------------
    def _push(self, s: Stream) -> None:
        s.token += 1
        key = s.deadline(self.config.first_slack) - self.model.cost(s.next_audio(self.model))
        heapq.heappush(self._heap, (key, next(self._seq), s.token, s))
        self._cond.notify()

    def _pop(self) -> Stream | None:
        while not self._stopping:
            head = self._head()
            if head is None:
                self._cond.wait()
                continue
            hold = self._hold(time.monotonic())
            if hold > HOLD_MIN:  # until then, or until a newcomer is queued
                self._cond.wait(hold)
                continue
            heapq.heappop(self._heap)
            return head[1]
        return None

    def _head(self) -> tuple[float, Stream] | None:
        """The queued chunk with the earliest latest start (stale entries dropped)."""
        while self._heap:
            key, _, token, s = self._heap[0]
            if token == s.token and s.runnable(self.config):
                return key, s
            heapq.heappop(self._heap)
        return None

    def _hold(self, now: float) -> float:
        """Seconds a free worker leaves the queue waiting: while admitted newcomers' inputs are
        still being prepared and the queue can start after their first chunks. A chunk cannot be
        interrupted, so one started now would hold their first audio back by all of its compute;
        waiting costs the queue nothing it cannot spare."""
        firsts = [
            self.model.cost(p.next_audio(self.model))
            for p in self.streams.values()
            if p.gen is None and not p.finished
        ]
        if not firsts:
            return 0.0
        # the firsts may run as much slower than predicted as recent chunks did
        margin = self.model.margin() or 1 / self.config.load_factor
        return self._latest_start(margin) - now - margin * sum(firsts)

    def _latest_start(self, margin: float) -> float:
        """The latest moment the queued chunks can start, run earliest deadline first on the
        workers, and each still end by its deadline; their costs times ``margin``."""
        queued = sorted(
            (
                s.deadline(self.config.first_slack),
                margin * self.model.cost(s.next_audio(self.model)),
            )
            for _, _, token, s in self._heap
            if token == s.token and s.runnable(self.config)
        )
        latest, work = float("inf"), 0.0
        for deadline, cost in queued:
            work += cost / self.config.workers
            latest = min(latest, deadline - work)
        return latest

    def _cancel(self, s: Stream, reason: str) -> None:
        s.cancelled = s.finished = True
        self.metrics.inc("streams_cancelled_total", reason=reason)
        if not s.running:
            s.close_gen()

    # -- the workers -------------------------------------------------------------------------
    def _work(self, warmup, ready: threading.Barrier) -> None:
        try:
            if self.worker_setup is not None:
                self.worker_setup()
            if warmup is not None:
                self._warm(warmup)
                with self._cond:
                    self.warm += 1
        except Exception as e:
            self._start_error = e
        finally:
            ready.wait()
        if self._start_error is not None:
            return
        cold = warmup is None  # until it has run a request's chunk
        while True:
            with self._cond:
                s = self._pop()
                if s is None:
                    return
                s.running, s.run_started = True, time.monotonic()
                self.busy += 1
                deadline = s.deadline(self.config.first_slack)
                consumer_waiting = s.taken == s.produced
            item = s.advance()
            with self._cond:
                self.busy -= 1
                s.running = False
                if cold and item.part is not None:
                    cold, self.warm = False, self.warm + 1
                if item.part is not None:
                    self._account(s, item, deadline, consumer_waiting)
                if s.cancelled:
                    if item.part is not None:
                        self.metrics.inc("chunks_discarded_total")
                    s.close_gen()
                    continue
                if item.part is None:
                    s.finished = True
                    s.gen = None
                elif s.runnable(self.config):
                    self._push(s)
            s.loop.call_soon_threadsafe(s.items.put_nowait, item)

    def _account(self, s: Stream, item: Item, deadline: float, consumer_waiting: bool) -> None:
        now = time.monotonic()
        part = item.part
        audio = part.audio.size / part.sample_rate
        chars = len(part.graphemes or part.phonemes)
        if s.playback_start is None:
            s.playback_start = now
        elif consumer_waiting and now > deadline:
            self.metrics.inc("late_chunks_total")
            self.metrics.inc("late_seconds_total", now - deadline)
        s.produced += 1
        s.audio_out += audio
        s.chars_done += chars
        self.model.learn(audio, item.compute, chars, s.speed)
        self.model.learn_chunk(s.produced - 1, audio * s.speed)
        self.metrics.inc("chunks_total")
        self.metrics.inc("compute_seconds_total", item.compute)
        self.metrics.inc("audio_seconds_total", audio)
        self.metrics.observe("chunk_compute_seconds", item.compute)

    def _warm(self, warmup) -> None:
        """Run ``warmup`` twice, learning from the second run only: the first one's chunks pay
        for creating the VMs and the thread pool, which no request pays again."""
        for _ in warmup():
            pass
        t0 = time.monotonic()
        for index, part in enumerate(warmup()):
            t1 = time.monotonic()
            audio = part.audio.size / part.sample_rate
            with self._cond:
                self.model.learn(audio, t1 - t0, len(part.graphemes or part.phonemes), 1.0)
                self.model.learn_chunk(index, audio)
            t0 = t1

    def _fits(
        self, open_streams: list[Stream], chars: int, speed: float, now: float, first_chars: int = 0
    ) -> bool:
        new = admission.Newcomer(chars, speed, first_chars)
        return admission.fits(open_streams, new, now, self.model, self.config)

    def margin(self) -> float:
        """The cost model's margin for the metrics page: 0 before it has one."""
        with self._cond:
            return self.model.margin() or 0.0
