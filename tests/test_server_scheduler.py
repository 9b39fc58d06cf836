"""The server's scheduler on stand-in streams: earliest deadline first, cancellation, admission.

The streams here are plain generators that sleep for their "compute" and yield chunks of known
audio length, so the order the real ``Scheduler`` runs them in, and what it refuses, can be
checked exactly without a model. The server tests (``test_server.py``) run it on the real one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, replace

import numpy as np
import pytest

from kokoro_tvm.server.admission import Overloaded
from kokoro_tvm.server.cost_model import CostModel
from kokoro_tvm.server.metrics import Metrics
from kokoro_tvm.server.scheduler import Scheduler
from kokoro_tvm.server.streams import SchedulerConfig, Stream

SR = 24000


@dataclass
class Part:
    """Shaped like the runtime's ``ChunkAudio`` where the scheduler reads it."""

    audio: np.ndarray
    graphemes: str
    phonemes: str = ""
    sample_rate: int = SR


class Log:
    def __init__(self) -> None:
        self.runs: list[tuple[str, int, float]] = []  # (stream, chunk index, start time)
        self.closed: set[str] = set()
        self.lock = threading.Lock()


def fake_stream(log: Log, name: str, chunks: int, audio_s: float, cost_s: float, chars: int = 10):
    """A runtime stand-in: each ``next()`` takes ``cost_s`` and yields ``audio_s`` of audio."""
    try:
        for i in range(chunks):
            with log.lock:
                log.runs.append((name, i, time.monotonic()))
            time.sleep(cost_s)
            yield Part(np.zeros(int(audio_s * SR), np.float32), "x" * chars)
    finally:
        with log.lock:
            log.closed.add(name)


def scheduler(**kw) -> Scheduler:
    config = SchedulerConfig(**{"workers": 1, "admission": False, "max_ahead": 100, **kw})
    s = Scheduler(Metrics(), config)
    s.start()
    return s


async def consume(sched: Scheduler, stream, into: list) -> None:
    while True:
        item = await stream.items.get()
        sched.taken(stream)
        if item.part is None:
            return
        into.append(item.part)


def tight_model(sched: Scheduler) -> Scheduler:
    """A cost model that knows the stand-ins: compute = audio (r = 1), 3 characters per chunk."""
    model(sched, r=1.0, c0=0.0, per_char=0.1 / 3)
    return sched


def order_of(log: Log) -> list[tuple[str, int]]:
    return [(n, i) for n, i, _ in log.runs]


async def far_ahead(sched: Scheduler, log: Log, chunks: int, wait_for: int):
    """Stream A, 2 s of audio per 0.05 s chunk, consumed at once: once ``wait_for`` chunks are
    out it is far ahead of its listener. Returns A and its consuming task."""
    a = sched.reserve(50 * chunks, 1.0, asyncio.get_running_loop())
    sched.attach(a, fake_stream(log, "A", chunks, audio_s=2.0, cost_s=0.05))
    got: list = []
    task = asyncio.create_task(consume(sched, a, got))
    while len(got) < wait_for:
        await asyncio.sleep(0.005)
    return a, task


def test_a_new_listener_goes_before_a_stream_with_audio_to_spare():
    """Stream A is 6 s of audio ahead of its listener; B arrives: B's first chunk is due (on
    arrival, plus ``first_slack``) long before A's next one, so it runs next."""
    log = Log()

    async def main():
        sched = scheduler(first_slack=0.5)
        loop = asyncio.get_running_loop()
        _, ta = await far_ahead(sched, log, chunks=6, wait_for=3)
        b = sched.reserve(10, 1.0, loop)
        sched.attach(b, fake_stream(log, "B", 1, audio_s=1.0, cost_s=0.05))
        await asyncio.gather(ta, consume(sched, b, []))
        sched.stop()

    asyncio.run(main())
    order = order_of(log)
    assert order.index(("B", 0)) <= order.index(("A", 4)), order


def run_tight_and_newcomer(first_slack: float) -> list[tuple[str, int]]:
    """C's listener has no audio to spare (each chunk takes as long as it plays); D arrives
    just after C's first chunk."""
    log = Log()

    async def main():
        sched = tight_model(scheduler(first_slack=first_slack, chunk_limits=(3,)))
        loop = asyncio.get_running_loop()
        c = sched.reserve(30, 1.0, loop)
        sched.attach(c, fake_stream(log, "C", 6, audio_s=0.1, cost_s=0.1, chars=3))
        got: list = []
        tc = asyncio.create_task(consume(sched, c, got))
        while len(got) < 1:
            await asyncio.sleep(0.002)
        d = sched.reserve(3, 1.0, loop)
        sched.attach(d, fake_stream(log, "D", 1, audio_s=0.1, cost_s=0.1, chars=3))
        await asyncio.gather(tc, consume(sched, d, []))
        sched.stop()

    asyncio.run(main())
    return order_of(log)


def test_a_listener_about_to_run_dry_goes_before_a_newcomer_who_can_wait():
    order = run_tight_and_newcomer(first_slack=0.5)
    assert order.index(("C", 3)) < order.index(("D", 0)), order


def test_first_chunks_first_without_slack():
    """With ``first_slack`` 0 a new listener's first chunk is due on arrival: only C's chunk
    that was already due by then (or running) goes before it."""
    order = run_tight_and_newcomer(first_slack=0.0)
    assert order.index(("D", 0)) <= order.index(("C", 2)), order


def test_a_stream_runs_at_most_max_ahead_of_its_consumer():
    log = Log()

    async def main():
        sched = scheduler(max_ahead=2)
        loop = asyncio.get_running_loop()
        s = sched.reserve(10, 1.0, loop)
        sched.attach(s, fake_stream(log, "S", 10, audio_s=1.0, cost_s=0.01))
        await asyncio.sleep(0.3)  # nobody reads
        produced_unread = s.produced
        await consume(sched, s, [])
        sched.stop()
        return produced_unread

    assert asyncio.run(main()) == 2
    assert len(log.runs) == 10


def test_cancel_drops_queued_chunks_discards_the_running_one_and_closes_the_stream():
    log = Log()

    async def main():
        sched = scheduler(max_ahead=1)
        loop = asyncio.get_running_loop()
        s = sched.reserve(10, 1.0, loop)
        sched.attach(s, fake_stream(log, "S", 50, audio_s=1.0, cost_s=0.2))
        item = await s.items.get()  # the first chunk; the second is now running
        assert item.part is not None
        sched.taken(s)
        await asyncio.sleep(0.05)
        sched.close(s, "disconnect")
        await asyncio.sleep(0.5)  # the running chunk finishes, and nothing after it starts
        sched.stop()
        return sched.metrics

    m = asyncio.run(main())
    assert len(log.runs) == 2, log.runs
    assert "S" in log.closed
    assert m.value("streams_cancelled_total", reason="disconnect") == 1
    assert m.value("chunks_discarded_total") == 1
    assert m.value("chunks_total") == 2


def test_errors_reach_the_consumer_and_the_worker_survives():
    def broken():
        yield Part(np.zeros(SR, np.float32), "x")
        raise RuntimeError("planted")

    async def main():
        sched = scheduler()
        loop = asyncio.get_running_loop()
        s = sched.reserve(10, 1.0, loop)
        sched.attach(s, broken())
        first, second = await s.items.get(), await s.items.get()
        ok = sched.reserve(10, 1.0, loop)
        sched.attach(ok, fake_stream(Log(), "ok", 2, 0.5, 0.01))
        parts: list = []
        await consume(sched, ok, parts)
        sched.stop()
        return first, second, parts

    first, second, parts = asyncio.run(main())
    assert first.part is not None and isinstance(second.error, RuntimeError)
    assert len(parts) == 2


def model(sched: Scheduler, r: float = 0.25, c0: float = 0.0, per_char: float = 0.1) -> CostModel:
    """The scheduler's cost model set to these parameters (its chunk limits kept)."""
    m = sched.model
    m.r, m.c0, m.per_char = r, c0, per_char
    return m


def admitted(sched: Scheduler, chars: int, n: int, loop) -> int:
    """How many of ``n`` identical requests arriving together are admitted."""
    for i in range(n):
        try:
            sched.reserve(chars, 1.0, loop)
        except Overloaded:
            return i
    return n


@pytest.mark.parametrize(
    ("r", "workers", "expect"),
    [
        # 100 chars = 10 s of audio; first chunks 24 chars = 2.4 s; first audio within 0.5 s.
        # r = 0.05: a first chunk costs 0.12 s, so 3 fit in 0.45 s (0.5 s x load factor 0.9)
        (0.05, 1, 3),
        (0.05, 2, 7),  # twice the workers: 0.9 s of first-chunk compute in 0.5 s
        # one first chunk needs 0.48 s > 0.45 s: the idle server serves one as soon as it can
        (0.2, 1, 1),
    ],
)
def test_admission_keeps_first_audio_within_its_bound(r, workers, expect):
    async def main():
        config = SchedulerConfig(
            workers=workers, first_audio=0.5, load_factor=0.9, chunk_limits=(24, 60)
        )
        sched = Scheduler(Metrics(), config)
        model(sched, r=r)
        return admitted(sched, 100, 20, asyncio.get_running_loop()), sched

    n, sched = asyncio.run(main())
    assert n == expect
    assert sched.metrics.value("requests_rejected_total", reason="overloaded") == (n < 20)


def test_admission_counts_the_load_of_streams_already_playing():
    """Four streams playing, each with 1 s of audio to spare and 60 s left to make at r = 0.2
    (chunks of 1 s), need 0.8 of the one worker; a fifth like them does not fit in 0.9. With
    their audio nearly all made, the same four leave room for it."""

    async def main():
        loop = asyncio.get_running_loop()
        out = []
        for left_chars in (600, 5):
            config = SchedulerConfig(
                workers=1, first_audio=2.0, load_factor=0.9, admission=False, chunk_limits=(10,)
            )
            sched = Scheduler(Metrics(), config)
            model(sched, r=0.2, per_char=0.1)
            now = time.monotonic()
            for _ in range(4):
                s = sched.reserve(1000, 1.0, loop)
                s.playback_start, s.audio_out = now, 1.0
                s.produced, s.chars_done = 1, 1000 - left_chars
            sched.config = replace(config, admission=True)
            try:
                sched.reserve(600, 1.0, loop)
                out.append(True)
            except Overloaded as e:
                assert 1 <= e.retry_after <= 60
                out.append(False)
        return out

    assert asyncio.run(main()) == [False, True]


def test_max_streams_is_a_hard_limit():
    async def main():
        sched = Scheduler(Metrics(), SchedulerConfig(max_streams=2, admission=False))
        loop = asyncio.get_running_loop()
        sched.reserve(10, 1.0, loop)
        sched.reserve(10, 1.0, loop)
        with pytest.raises(Overloaded) as e:
            sched.reserve(10, 1.0, loop)
        return e.value

    e = asyncio.run(main())
    assert e.too_many and "2 concurrent streams" in str(e)


def test_cost_model_learns_overhead_and_rate():
    m = CostModel()
    rng = np.random.default_rng(0)
    for _ in range(60):
        a = float(rng.uniform(0.5, 8.0))
        m.learn(a, 0.03 + 0.12 * a, chars=int(a / 0.08), speed=1.0)
    assert m.r == pytest.approx(0.12, rel=0.02)
    assert m.c0 == pytest.approx(0.03, abs=0.01)
    assert m.per_char == pytest.approx(0.08, rel=0.1)


def test_a_worker_that_cannot_warm_up_stops_the_start():
    from kokoro_tvm.errors import KokoroTVMError

    def broken():
        raise KokoroTVMError("the libraries are missing; run `dvc repro`")
        yield

    sched = Scheduler(Metrics(), SchedulerConfig(workers=2))
    with pytest.raises(KokoroTVMError, match="dvc repro"):
        sched.start(broken)
    assert not any(t.is_alive() for t in sched._threads)


def test_admission_counts_a_chunk_in_the_making_once_and_each_chunk_at_its_deadline():
    """A stream with 0.75 s of audio buffered is making its next chunk (0.15 s of compute
    left): that chunk's audio is what keeps it playing, so it is not also due again when the
    buffer runs out; and a new listener's second chunk is due when its first has played, not
    as soon as it starts. Both together: a second listener fits beside the first, which the
    one-chunk-ahead bound refused."""

    async def main():
        loop = asyncio.get_running_loop()
        sched = Scheduler(Metrics(), SchedulerConfig(workers=1, chunk_limits=(16, 60, 150)))
        model(sched, r=0.166, c0=0.048, per_char=0.065)
        now = time.monotonic()
        s = Stream(1, 130, 1.0, loop, asyncio.Queue(), now - 0.5)
        s.playback_start, s.audio_out, s.produced, s.chars_done = now - 0.25, 1.0, 1, 16
        # the chunk in the making (its second: 60 phonemes of 130) has 0.15 s of compute left
        s.running, s.run_started = True, now - (sched.model.cost(60 * 0.065) - 0.15)
        fits = sched._fits([s], 130, 1.0, now)
        s.running = False  # control: the same stream with no chunk in the making needs it made
        s.playback_start, s.audio_out = now - 0.9, 1.0  # and has 0.1 s left to play
        return fits, sched._fits([s], 130, 1.0, now)

    assert asyncio.run(main()) == (True, False)


@pytest.mark.parametrize(("buffered", "admits"), [(0.3, False), (1.0, True)])
def test_admission_counts_a_newcomers_first_chunk_before_a_playing_streams_next(buffered, admits):
    """A stream playing with ``buffered`` s of audio left needs its next chunk (1 s of audio,
    0.25 s of compute) by then; a newcomer's first chunk, due only within its 2 s of first
    audio, still runs first (first chunks first). With 0.3 s left both need 0.5 s by 0.3 s:
    refused, where its first chunk's own deadline alone would have admitted it. The control:
    with 1 s left there is room for both."""

    async def main():
        loop = asyncio.get_running_loop()
        config = SchedulerConfig(workers=1, first_audio=2.0, load_factor=0.9, chunk_limits=(10,))
        sched = Scheduler(Metrics(), config)
        model(sched, r=0.2, c0=0.05, per_char=0.1)
        now = time.monotonic()
        s = Stream(1, 30, 1.0, loop, asyncio.Queue(), now - 2.0)
        s.playback_start, s.audio_out = now - 1.0 + buffered, 1.0
        s.produced, s.chars_done = 1, 10
        return sched._fits([s], 10, 1.0, now)

    assert asyncio.run(main()) == admits


@pytest.mark.parametrize(
    ("errors", "admits"),
    [
        (None, False),  # no record of the model's error: the load factor holds (0.45 s of 0.5)
        ([1.0] * 20, True),  # chunks run as predicted: 0.49 s of work fits in 0.5 s
        ([1.0] * 18 + [1.1] * 2, False),  # 1 in 10 ran 10 % slow: 0.49 s might take 0.54 s
    ],
)
def test_two_listeners_who_arrive_together_both_start_when_the_model_says_they_can(errors, admits):
    """The first listener's first chunk (16 phonemes, 0.246 s at r = 0.19) has just started; a
    second arrives. Its own first chunk after that one ends 0.49 s from now: within the 0.5 s of
    first audio if the cost model is right, which its recent errors say, not a fixed factor."""

    async def main():
        loop = asyncio.get_running_loop()
        config = SchedulerConfig(
            workers=1, first_audio=0.5, load_factor=0.9, chunk_limits=(16, 24, 24)
        )
        sched = Scheduler(Metrics(), config)
        model(sched, r=0.19, c0=0.048, per_char=0.065)
        if errors is not None:
            sched.model.errors.extend(errors)
        first = sched.reserve(130, 1.0, loop)
        first.running, first.run_started = True, time.monotonic()
        try:
            sched.reserve(130, 1.0, loop)
            return True
        except Overloaded:
            return False

    assert asyncio.run(main()) == admits


def test_the_first_audio_margin_is_the_models_recent_error():
    """Chunks that run as predicted give a margin of 1; when one in ten runs 30 % slow, the
    margin is that 30 %; before enough chunks there is none (the load factor applies)."""
    m = CostModel()
    assert m.margin() is None
    rng = np.random.default_rng(1)
    for _ in range(64):
        a = float(rng.uniform(0.5, 4.0))
        m.learn(a, 0.05 + 0.15 * a, chars=int(a / 0.07), speed=1.0)
    assert m.margin() == pytest.approx(1.0, abs=1e-3)
    for i in range(64):
        a = float(rng.uniform(0.5, 4.0))
        m.learn(a, (0.05 + 0.15 * a) * (1.3 if i % 10 == 0 else 1.0), int(a / 0.07), 1.0)
    assert 1.2 < m.margin() < 1.4


def test_chunk_audio_is_learned_by_place_not_taken_from_the_limits():
    """Chunks end at words and sentences, short of their limits: admission expects what chunks
    at the same place gave (the last place standing for every later chunk), and the limit at
    the model's audio per character only before any such chunk ran."""
    m = CostModel(per_char=0.075, limits=(16, 24, 24))
    assert m.chunk_audio(0) == pytest.approx(16 * 0.075)
    assert m.chunk_audio(7) == pytest.approx(24 * 0.075)
    for audio in (0.9, 1.0, 0.95):
        m.learn_chunk(0, audio)
    for index, audio in enumerate((1.4, 1.2, 1.3), start=1):
        m.learn_chunk(index, audio)
    assert 0.9 < m.chunk_audio(0) < 1.0
    assert m.chunk_audio(1) == pytest.approx(1.4)
    assert 1.2 < m.chunk_audio(7) < 1.3  # places 2 and later


def test_a_free_worker_waits_for_a_newcomer_being_prepared_when_the_queue_can_wait():
    """A runs far ahead of its listener (2 s of audio per 0.05 s chunk). B is admitted and
    spends 0.15 s being prepared (G2P) before its stream is attached. A chunk of A started in
    that time would hold B's first audio back, and A can spare the wait: no chunk of A starts
    between B's admission and B's first chunk."""
    log = Log()
    marks: dict[str, float] = {}

    async def main():
        sched = scheduler()
        loop = asyncio.get_running_loop()
        a, ta = await far_ahead(sched, log, chunks=40, wait_for=2)
        b = sched.reserve(10, 1.0, loop)
        marks["reserved"] = time.monotonic()
        await asyncio.sleep(0.15)
        sched.attach(b, fake_stream(log, "B", 1, audio_s=1.0, cost_s=0.05))
        await consume(sched, b, [])
        sched.close(a)
        ta.cancel()
        sched.stop()

    asyncio.run(main())
    b0 = next(t for n, i, t in log.runs if (n, i) == ("B", 0))
    during = [i for n, i, t in log.runs if n == "A" and marks["reserved"] < t < b0]
    assert during == [], during


@pytest.mark.parametrize(
    ("first_chars", "busy", "admits"),
    [
        (10, None, True),  # 1 s of audio first: 0.1 s of compute
        (90, None, True),  # 9 s first: 0.5 s of compute, 0.56 s at the planned 0.9 of a worker
        (90, 0.3, False),  # the control: another stream's chunk has 0.3 s to run first
    ],
)
def test_admission_predicts_a_newcomers_first_chunk_from_its_first_sentence(
    first_chars, busy, admits
):
    """Whole sentences: one chunk limit, kokoro's 510 phonemes. A request of 100 characters
    beside a stream with 6 s of audio to spare. Its first chunk is its first sentence: 10
    characters fit its 0.5 s of first audio (predicted from the limit, the first chunk would
    have been all 100 characters, and refused). A first sentence of 90 characters cannot be
    heard within 0.5 s even alone; the stream beside it does not delay it, so it is admitted,
    due when it alone can be ready. With another chunk in the making before it, it is refused."""

    async def main():
        loop = asyncio.get_running_loop()
        config = SchedulerConfig(workers=1, first_audio=0.5, load_factor=0.9, chunk_limits=(510,))
        sched = Scheduler(Metrics(), config)
        model(sched, r=0.05, c0=0.05, per_char=0.1)
        now = time.monotonic()
        s = Stream(1, 200, 1.0, loop, asyncio.Queue(), now - 5.0)  # 6 s of audio to spare
        s.playback_start, s.audio_out, s.produced, s.chars_done = now - 4.0, 10.0, 1, 100
        if busy is not None:  # its next chunk (the rest: 10 s, 0.55 s) has ``busy`` s left
            s.running, s.run_started = True, now - (sched.model.cost(10.0) - busy)
        return sched._fits([s], 100, 1.0, now, first_chars)

    assert asyncio.run(main()) == admits


def test_a_first_chunk_is_read_from_the_text_as_the_cuts_end_it():
    from kokoro_tvm.runtime.chunking import RUN_ON_FIRST
    from kokoro_tvm.runtime.options import FAST, KOKORO, SENTENCES
    from kokoro_tvm.server.cost_model import first_chunk_chars

    first = "Please leave the package at the front door before noon."
    text = f"{first} Ring twice, then wait."
    assert first_chunk_chars(text, SENTENCES) == len(first)
    assert first_chunk_chars('He said "stop." Then he left.', SENTENCES) == len('He said "stop."')
    assert first_chunk_chars("no end in sight", SENTENCES) == len("no end in sight")
    assert first_chunk_chars("Ring twice, then wait.", FAST) == len("Ring twice,")
    assert first_chunk_chars(text, FAST) == 16  # the first chunk's phoneme limit
    assert first_chunk_chars(text, KOKORO) == len(text)
    assert first_chunk_chars("x" * 2000, KOKORO) == 510  # one utterance at most
    run_on = "hello " * 200
    assert first_chunk_chars(run_on, SENTENCES) == RUN_ON_FIRST  # as ``chunking.first_cut``
    assert first_chunk_chars(run_on, KOKORO) == 510
    assert first_chunk_chars("hello, " + run_on, SENTENCES) == 510  # control: a mark breaks it
    late = run_on + "there, and then it ends."  # marks only past 510: still a run-on there
    assert first_chunk_chars(late, SENTENCES) == RUN_ON_FIRST


def test_the_first_chunk_has_a_place_of_its_own_with_one_limit():
    """With whole sentences there is one limit (510) for every chunk, but a first chunk ends at
    its first sentence: first chunks and later ones are learned apart."""
    m = CostModel(per_char=0.07, limits=(510,))
    for audio in (3.0, 3.2):
        m.learn_chunk(0, audio)
    for index, audio in enumerate((10.0, 12.0), start=1):
        m.learn_chunk(index, audio)
    assert 3.0 <= m.chunk_audio(0) <= 3.2
    assert 10.0 <= m.chunk_audio(5) <= 12.0
    assert m.limit_audio(5) == pytest.approx(510 * 0.07)
