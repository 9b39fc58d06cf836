"""Every open stream's chunks on a few worker threads, earliest deadline first.

Audio is consumed in real time, so the only chunk that is urgent is the one whose listener is
about to run out of audio. A stream's next chunk is due when the audio already produced for it
runs out (its first chunk is due on arrival, plus ``first_slack``), and workers always take the
chunk whose latest start (deadline minus its expected compute) is earliest. A chunk cannot be
interrupted, so its length bounds how long a new listener waits: the chunk limits keep every
chunk short (they do not depend on the load, so a request gives the same audio however many
others run beside it), and a free worker does not start a chunk that can wait while a
newcomer's input is still being prepared.

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

Admission: before a stream is opened (on a thread of its own, ``admit``: the test below takes
milliseconds with dozens of streams open, which the event loop must not wait for), the scheduler
asks whether every open stream, and the
new one, can still get its audio in time, with a cost model learned from the chunks it ran
(compute = ``c0 + r * audio seconds`` per chunk; audio seconds per input character, and per
chunk by its place in its stream). At each chunk deadline t it checks the processor-demand
condition of EDF scheduling: the compute of
every chunk due by t (each chunk is due when the audio before it has played; the new stream's
first within ``first_audio`` less recent requests' preparation time; a chunk being made counts
as its remaining time; first chunks not yet started count by every t, since the workers run
them before any other) must fit in ``workers * load_factor * t`` (up to the newcomer's first
audio: ``workers * t`` over the model's recent error). When it does not, the request is
refused (503 with ``Retry-After``) instead of making every stream late.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .metrics import Metrics

log = logging.getLogger("kokoro_tvm.server")


class Overloaded(Exception):
    """The request cannot be served in time (or the server holds its limit of streams)."""

    def __init__(self, message: str, retry_after: int, too_many: bool = False):
        super().__init__(message)
        self.retry_after, self.too_many = retry_after, too_many


@dataclass
class Item:
    """What a worker hands a stream's consumer: a chunk, the end, or an error."""

    part: Any = None  # runtime ChunkAudio
    error: BaseException | None = None
    compute: float = 0.0  # seconds this chunk took

    @property
    def end(self) -> bool:
        return self.part is None and self.error is None


@dataclass(eq=False)
class Stream:
    """One response's runtime stream and its place in the schedule (fields below ``arrival``
    change under the scheduler's lock only)."""

    id: int
    chars: int  # input characters: remaining audio is estimated from those not yet spoken
    speed: float
    loop: asyncio.AbstractEventLoop
    items: asyncio.Queue
    arrival: float  # time.monotonic()
    gen: Iterator[Any] | None = None
    chars_done: int = 0
    produced: int = 0
    taken: int = 0
    audio_out: float = 0.0  # seconds of audio produced
    playback_start: float | None = None  # when the first chunk was produced
    last_cost: float | None = None
    running: bool = False
    finished: bool = False
    cancelled: bool = False
    token: int = 0  # invalidates older heap entries of this stream
    run_started: float = 0.0
    paced: bool = False  # its response reports what its client has received (``received``)
    received: float = 0.0  # seconds of its audio the client has received
    delivery: Any = None  # the response's ``delivery.Delivery``, which tells it

    def deadline(self, first_slack: float) -> float:
        """When the next chunk must be out: when the audio produced so far has played."""
        if self.playback_start is None:
            return self.arrival + first_slack
        return self.playback_start + self.audio_out

    def buffered(self, now: float) -> float:
        """Seconds of audio produced but not yet played (by a listener who started at the
        first chunk and plays in real time); negative when it ran dry."""
        if self.playback_start is None:
            return 0.0
        return self.playback_start + self.audio_out - now


#: seconds below which a worker does not wait for a newcomer before the queue's head
HOLD_MIN = 0.001
#: seconds of audio a paced stream may have made beyond what its client has received, before
#: it makes one more chunk: ahead of a listener's playback by more than any chunk's compute
AHEAD_SECONDS = 4.0
#: recent chunks whose prediction error the first-audio margin is taken from, the quantile it
#: takes, and how many it needs before it replaces the load factor there
ERROR_WINDOW = 64
ERROR_QUANTILE = 0.95
MIN_ERRORS = 8


@dataclass
class CostModel:
    """Compute seconds for a chunk of ``a`` audio seconds: ``c0 + r * a``, fitted by least
    squares with exponential forgetting; and audio seconds per input character at speed 1."""

    c0: float = 0.05
    r: float = 0.3
    per_char: float = 0.07
    forget: float = 0.97
    _s: list[float] = field(default_factory=lambda: [0.0] * 5)  # w, x, y, xx, xy
    _chars: list[float] = field(default_factory=lambda: [0.0, 0.0])  # chars, audio*speed
    #: each recent chunk's compute over what the model predicted for it just before
    errors: deque[float] = field(default_factory=lambda: deque(maxlen=ERROR_WINDOW))
    #: by a chunk's place in its stream (the last place standing for all later ones): weighted
    #: sums of its audio seconds at speed 1 and of chunks. Chunks end at words and sentences,
    #: well short of their phoneme limits, so a limit alone overstates what a chunk costs.
    _places: dict[int, list[float]] = field(default_factory=dict)
    #: recent requests' seconds from arrival until their input was prepared (voice, G2P, on
    #: one thread, so queued behind each other's): before its first chunk can start
    prep: deque[float] = field(default_factory=lambda: deque(maxlen=ERROR_WINDOW))

    def learn(self, audio: float, cost: float, chars: int, speed: float) -> None:
        if self._s[0] >= 3:  # a prediction from fewer chunks says nothing of the model's error
            self.errors.append(cost / max(self.cost(audio), 1e-6))
        s = self._s
        for i in range(5):
            s[i] *= self.forget
        s[0] += 1
        s[1] += audio
        s[2] += cost
        s[3] += audio * audio
        s[4] += audio * cost
        var = s[0] * s[3] - s[1] * s[1]
        if s[0] >= 3 and var > 1e-9 * max(s[0] * s[3], 1e-12):
            r = (s[0] * s[4] - s[1] * s[2]) / var
            c0 = (s[2] - r * s[1]) / s[0]
            if r > 0 and c0 >= 0:
                self.r, self.c0 = r, c0
            else:  # one parameter: the ratio
                self.r, self.c0 = max(s[2], 1e-6) / max(s[1], 1e-6), 0.0
        elif s[1] > 0:
            self.r = max(s[2] - s[0] * self.c0, 1e-6) / s[1]
        if chars > 0 and audio > 0:
            self._chars[0] = self._chars[0] * self.forget + chars
            self._chars[1] = self._chars[1] * self.forget + audio * speed
            self.per_char = self._chars[1] / self._chars[0]

    def cost(self, audio: float) -> float:
        return self.c0 + self.r * audio

    def prep_latency(self) -> float:
        """The ``ERROR_QUANTILE`` of recent preparation times; 0 before any."""
        return _quantile(self.prep) if self.prep else 0.0

    def learn_chunk(self, place: int, audio: float) -> None:
        """One more chunk at ``place`` in its stream, of ``audio`` seconds at speed 1."""
        sums = self._places.setdefault(place, [0.0, 0.0])
        sums[0] = sums[0] * self.forget + audio
        sums[1] = sums[1] * self.forget + 1.0

    def chunk_audio(self, place: int) -> float | None:
        """Expected audio seconds at speed 1 of a chunk at ``place``; None before any."""
        sums = self._places.get(place)
        return sums[0] / sums[1] if sums else None

    def margin(self) -> float | None:
        """How much slower than predicted a chunk may run: the ``ERROR_QUANTILE`` of the recent
        chunks' compute over prediction, at least 1; None before ``MIN_ERRORS`` chunks."""
        if len(self.errors) < MIN_ERRORS:
            return None
        return max(1.0, _quantile(self.errors))


def _quantile(values: deque[float]) -> float:
    """The ``ERROR_QUANTILE`` of ``values`` (not empty), by rank."""
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, int(ERROR_QUANTILE * len(ranked)))]


class Scheduler:
    """Worker threads running the chunks of all streams, earliest deadline first."""

    def __init__(
        self,
        metrics: Metrics,
        workers: int = 1,
        threads_per_worker: int = 1,
        worker_setup: Callable[[], None] | None = None,
        max_ahead: int = 2,
        ahead_seconds: float = AHEAD_SECONDS,
        max_streams: int = 32,
        first_audio: float = 0.5,
        first_slack: float = 0.0,
        load_factor: float = 0.9,
        admission: bool = True,
        chunk_limits: tuple[int, ...] = (16, 60, 150),
    ):
        self.metrics = metrics
        self.workers, self.threads_per_worker = workers, threads_per_worker
        self.worker_setup = worker_setup
        self.max_ahead, self.max_streams = max_ahead, max_streams
        self.ahead_seconds = ahead_seconds
        self.first_audio, self.first_slack = first_audio, first_slack
        self.load_factor, self.admission = load_factor, admission
        self.chunk_limits = chunk_limits
        self.model = CostModel()
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
        self._register_metrics()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, warmup: Callable[[], Iterator[Any]] | None = None) -> None:
        """Start the workers; each first runs ``warmup()`` (a runtime stream) to the end, so its
        VMs and thread pool exist and the cost model has data before the first request."""
        ready = threading.Barrier(self.workers + 1)
        for i in range(self.workers):
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
    async def admit(self, chars: int, speed: float) -> Stream:
        """``reserve`` on the admission thread, so that the event loop goes on meanwhile."""
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._admission, self.reserve, chars, speed, loop)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:  # the request is gone: a stream admitted for it goes too
            fut.add_done_callback(self._close_orphan)
            raise

    def _close_orphan(self, fut: asyncio.Future) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self.close(fut.result(), "disconnect")

    def reserve(self, chars: int, speed: float, loop: asyncio.AbstractEventLoop) -> Stream:
        """Admit a new stream (or raise ``Overloaded``) and hold its place while its input is
        prepared; ``attach`` queues it."""
        with self._cond:
            open_streams = [s for s in self.streams.values() if not s.finished]
            if len(open_streams) >= self.max_streams:
                self.metrics.inc("requests_rejected_total", reason="too_many_streams")
                raise Overloaded(
                    f"this server already holds its limit of {self.max_streams} concurrent "
                    "streams (--max-streams); retry shortly",
                    self._retry_after(open_streams, time.monotonic()),
                    too_many=True,
                )
            now = time.monotonic()
            # an idle server admits anyone: refusing helps no listener, and its audio comes as
            # soon as this machine can make it
            if self.admission and open_streams and not self._fits(open_streams, chars, speed, now):
                self.metrics.inc("requests_rejected_total", reason="overloaded")
                raise Overloaded(
                    "the server cannot start this stream now without making it or the streams "
                    "it is playing run out of audio; retry after the Retry-After seconds",
                    self._retry_after(open_streams, now),
                )
            s = Stream(next(self._ids), chars, speed, loop, asyncio.Queue(), now)
            self.streams[s.id] = s
            return s

    def attach(self, s: Stream, gen: Iterator[Any]) -> None:
        """Queue a reserved stream's runtime stream for its first chunk."""
        with self._cond:
            s.gen = gen
            self.model.prep.append(time.monotonic() - s.arrival)
            if s.cancelled:
                self._close_gen(s)
                return
            self._push(s)

    def taken(self, s: Stream) -> None:
        """The consumer took one item: the stream may run further ahead."""
        with self._cond:
            s.taken += 1
            if self._eligible(s):
                self._push(s)

    def received(self, s: Stream, seconds: float) -> bool:
        """The client of a paced stream has received ``seconds`` of its audio: the stream may
        run further ahead. Whether it still waits for its client to take more."""
        with self._cond:
            if seconds > s.received:
                s.received = seconds
                if self._eligible(s):
                    self._push(s)
            return (
                s.gen is not None
                and not (s.running or s.finished or s.cancelled)
                and s.audio_out - s.received >= self.ahead_seconds
            )

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
            return sum(
                1
                for s in self.streams.values()
                if s.gen is not None and not (s.running or s.finished) and self._eligible(s)
            )

    def open_streams(self) -> int:
        return len(self.streams)

    # -- internals (under self._cond) ----------------------------------------------------------
    def _eligible(self, s: Stream) -> bool:
        return (
            s.gen is not None
            and not (s.running or s.finished or s.cancelled)
            and s.produced - s.taken < self.max_ahead
            and (not s.paced or s.audio_out - s.received < self.ahead_seconds)
        )

    def _push(self, s: Stream) -> None:
        s.token += 1
        cost = s.last_cost if s.last_cost is not None else self.model.cost(self._chunk_audio(0))
        key = s.deadline(self.first_slack) - cost
        heapq.heappush(self._heap, (key, next(self._seq), s.token, s))
        self._cond.notify()

    def _pop(self) -> Stream | None:
        while not self._stopping:
            head = self._head()
            if head is None:
                self._cond.wait()
                continue
            latest_start, s = head
            hold = self._hold(latest_start, time.monotonic())
            if hold > HOLD_MIN:  # until then, or until a newcomer is queued
                self._cond.wait(hold)
                continue
            heapq.heappop(self._heap)
            return s
        return None

    def _head(self) -> tuple[float, Stream] | None:
        """The queued chunk with the earliest latest start (stale entries dropped)."""
        while self._heap:
            key, _, token, s = self._heap[0]
            if token == s.token and self._eligible(s):
                return key, s
            heapq.heappop(self._heap)
        return None

    def _hold(self, latest_start: float, now: float) -> float:
        """Seconds a free worker leaves the queue's head waiting: while admitted newcomers'
        inputs are still being prepared and the head can start after their first chunks. A
        chunk cannot be interrupted, so one started now would hold their first audio back by
        all of its compute; waiting costs the head nothing it cannot spare."""
        firsts = [
            self.model.cost(self._chunk_audio(0) / p.speed)
            for p in self.streams.values()
            if p.gen is None and not p.finished
        ]
        if not firsts:
            return 0.0
        # the firsts may run as much slower than predicted as recent chunks did
        margin = self.model.margin() or 1 / self.load_factor
        return latest_start - now - margin * sum(firsts)

    def _cancel(self, s: Stream, reason: str) -> None:
        s.cancelled = s.finished = True
        self.metrics.inc("streams_cancelled_total", reason=reason)
        if not s.running:
            self._close_gen(s)

    def _close_gen(self, s: Stream) -> None:
        if s.gen is not None:
            try:
                s.gen.close()
            except Exception:  # a runtime stream's cleanup must not take a worker down
                log.exception("closing a cancelled stream")
            s.gen = None

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
                deadline = s.deadline(self.first_slack)
                consumer_waiting = s.taken == s.produced
            item = self._run(s)
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
                    self._close_gen(s)
                    continue
                if item.part is None:
                    s.finished = True
                    s.gen = None
                elif self._eligible(s):
                    self._push(s)
            s.loop.call_soon_threadsafe(s.items.put_nowait, item)

    def _run(self, s: Stream) -> Item:
        t0 = time.monotonic()
        try:
            part = next(s.gen)
        except StopIteration:
            return Item()
        except Exception as e:  # delivered to the request, which reports it
            return Item(error=e, compute=time.monotonic() - t0)
        return Item(part=part, compute=time.monotonic() - t0)

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
        s.last_cost = item.compute
        self.model.learn(audio, item.compute, chars, s.speed)
        self.model.learn_chunk(self._place(s.produced - 1), audio * s.speed)
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
                self.model.learn_chunk(self._place(index), audio)
            t0 = t1

    # -- admission ---------------------------------------------------------------------------
    def _place(self, index: int) -> int:
        """A chunk's place in the chunk limits: its index, or the last limit's for later ones."""
        return min(index, len(self.chunk_limits) - 1)

    def _chunk_audio(self, index: int) -> float:
        """Expected audio seconds of a stream's ``index``-th chunk at speed 1: what chunks at its
        place gave so far, else its phoneme limit at the model's audio per character."""
        learned = self.model.chunk_audio(self._place(index))
        if learned is not None:
            return learned
        return self.chunk_limits[self._place(index)] * self.model.per_char

    def _split_first(self, audio: float, speed: float) -> tuple[float, float, float]:
        """A stream of ``audio`` seconds not yet started: its first chunk's audio, the audio
        after it, and the length of the chunks that follow."""
        first = min(audio, self._chunk_audio(0) / speed)
        rest = audio - first
        return first, rest, min(rest, self._chunk_audio(1) / speed)

    def _fits(self, open_streams: list[Stream], chars: int, speed: float, now: float) -> bool:
        """EDF's processor-demand test over the open streams and a new one (module docstring)."""
        m = self.model
        busy = 0.0  # what the chunks in the making still need, as the model predicts them
        # first chunks not yet started: the workers run them before any playing stream's next
        # chunk (first chunks first), so they are due by every deadline, not only by their own
        firsts, waiting = 0.0, []
        needs = []  # (seconds from now at which audio must start flowing, audio needed, ahead)
        for s in open_streams:
            remaining = max(0, s.chars - s.chars_done) * m.per_char / s.speed
            # a chunk being made is the ``busy`` time: its audio is as good as produced
            inflight = min(remaining, self._chunk_audio(s.produced) / s.speed) if s.running else 0
            if s.running:
                busy += max(0.0, m.cost(inflight) - (now - s.run_started))
            remaining -= inflight
            chunk = min(remaining, self._chunk_audio(s.produced + bool(s.running)) / s.speed)
            due = s.arrival + self.first_audio - now  # its first audio's deadline
            if s.playback_start is None and not s.running:
                first, rest, step = self._split_first(remaining, s.speed)
                firsts += m.cost(first)
                waiting.append(due)
                needs.append((due + first, rest, step))
            elif s.playback_start is None:  # its first chunk is the one in the making
                needs.append((due + inflight, remaining, chunk))
            else:
                needs.append((s.buffered(now) + inflight, remaining, chunk))
        first, rest, step = self._split_first(chars * m.per_char / speed, speed)
        firsts += m.cost(first)
        # its first audio is due at ``first_audio``, less the time its input takes to prepare
        # before its first chunk can start; or when its first chunk alone can be ready
        first_due = max(self.first_audio - m.prep_latency(), m.cost(first))
        needs.append((first_due + first, rest, step))
        # the demand only steps up at a chunk's deadline: check each (a few dozen per stream).
        # In arrays: with dozens of streams that is thousands of deadlines times dozens of
        # streams, too slow for Python loops; the arithmetic is the loops' own, term by term
        # and summed in the same order, so the answer is the same to the last bit.
        start = np.array([n[0] for n in needs])
        audio = np.array([n[1] for n in needs])
        step = np.maximum(np.array([n[2] for n in needs]), 1e-3)
        k = np.arange(64, dtype=np.float64)[:, None] * step  # each need's first 64 deadlines
        horizons = np.unique(
            np.concatenate(
                [
                    np.maximum((start + k)[k < audio], 1e-3),
                    [first_due, *(max(t, 1e-3) for t in waiting)],
                ]
            )
        )
        # until the newcomer's first audio is due, the plan is a fraction of a second of work
        # whose error the model has seen: it may fill the workers up to that error, so that two
        # listeners who arrive together both start in time when they can. Beyond it the load
        # factor keeps room for what the next seconds bring (encoding, G2P, new arrivals).
        margin = m.margin()
        capacity = self.workers * self.load_factor
        first_capacity = capacity if margin is None else self.workers / margin
        t = horizons[:, None]
        due = np.floor((t - start) / step) + 1  # chunks whose audio starts by t
        need = np.minimum(audio, due * step)
        terms = np.where(t < start, 0.0, m.r * need + m.c0 * np.ceil(need / step))
        # summed left to right from the work already due, as a running total
        terms = np.concatenate([np.full((len(horizons), 1), busy + firsts), terms], axis=1)
        demand = np.add.accumulate(terms, axis=1)[:, -1]
        limit = np.where(horizons <= first_due, first_capacity, capacity) * horizons
        over = np.flatnonzero(demand > limit)
        if over.size:
            i = over[0]
            log.debug(
                "refused: %.3f s of compute due by %.3f s from now (first audio due at "
                "%.3f s, margin %s), %d open streams, %.3f s in the making",
                demand[i],
                horizons[i],
                first_due,
                margin,
                len(open_streams),
                busy,
            )
            return False
        return True

    def _retry_after(self, open_streams: list[Stream], now: float) -> int:
        """Seconds until the first open stream has played to its end (when its load is gone)."""
        ends = [
            s.buffered(now) + max(0, s.chars - s.chars_done) * self.model.per_char / s.speed
            for s in open_streams
        ]
        return int(min(60, max(1, math.ceil(min(ends, default=1.0)))))

    def _register_metrics(self) -> None:
        m = self.metrics
        m.counter("chunks_total", "Chunks synthesized.")
        m.counter("chunks_discarded_total", "Chunks finished after their stream was cancelled.")
        m.counter("compute_seconds_total", "Worker seconds spent synthesizing chunks.")
        m.counter("audio_seconds_total", "Seconds of audio synthesized.")
        m.counter(
            "late_chunks_total",
            "Chunks produced after the audio sent before them had played out (a listener "
            "playing in real time from the first chunk ran dry).",
        )
        m.counter("late_seconds_total", "Seconds by which late chunks missed their deadline.")
        m.counter(
            "streams_cancelled_total", "Streams ended before their last chunk.", labelled=True
        )
        m.counter(
            "requests_rejected_total",
            "Requests refused by admission control or limits.",
            labelled=True,
        )
        m.histogram("chunk_compute_seconds", "Compute seconds per chunk.")
        m.gauge("queue_depth", "Streams whose next chunk waits for a worker.", self.queue_depth)
        m.gauge("streams_open", "Streams open (admitted and not yet closed).", self.open_streams)
        m.gauge("workers_busy", "Workers synthesizing a chunk now.", lambda: self.busy)
        m.gauge("workers", "Worker threads.", lambda: self.workers)
        m.gauge(
            "real_time_factor",
            "Compute seconds per second of audio for one worker, as the cost model has learned "
            "it (chunk cost = c0 + r * audio; this is r).",
            lambda: self.model.r,
        )
        m.gauge("chunk_overhead_seconds", "The cost model's c0.", lambda: self.model.c0)
        m.gauge(
            "cost_model_margin",
            "How much slower than the cost model predicts recent chunks ran (their 95th "
            "percentile; 0 before enough chunks): admission plans first audio with it.",
            self._margin,
        )

    def _margin(self) -> float:
        with self._cond:
            return self.model.margin() or 0.0
