"""Admission: whether every open stream, and a new one, can still get its audio in time.

Before a stream is opened the scheduler asks ``fits``, with the cost model learned from the
chunks it ran (``cost_model.py``). At each chunk deadline t it checks the processor-demand
condition of EDF scheduling: the compute of every chunk due by t (each chunk is due when the
audio before it has played; the new stream's first within ``first_audio`` less recent requests'
preparation time, or, when its first sentence alone takes longer than that, when it alone can
be ready: others must not delay it, but refusing it would not make it sooner; a chunk being
made counts as its remaining time; first chunks not yet started count by every t, since the
workers run them before any other) must fit in ``workers * load_factor * t`` (up to the
newcomer's first audio: ``workers * t`` over the model's recent error). When it does not, the
request is refused (503 with ``Retry-After``, ``Overloaded``) instead of making every stream
late. A chunk's compute is predicted from its length: the new stream's first chunk from its own
first sentence (``cost_model.first_chunk_chars``), a chunk in the making from what is left of
its stream's text (``Stream.next_audio``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .cost_model import CostModel
from .streams import SchedulerConfig, Stream

log = logging.getLogger("kokoro_tvm.server")

#: deadlines checked per stream: its next chunks' (the demand only steps up at a deadline)
DEADLINES = 64


class Overloaded(Exception):
    """The request cannot be served in time (or the server holds its limit of streams)."""

    def __init__(self, message: str, retry_after: int, too_many: bool = False):
        super().__init__(message)
        self.retry_after, self.too_many = retry_after, too_many


class Need(NamedTuple):
    """What one stream needs made, in audio seconds from now."""

    start: float  # when its next audio not yet in the making must start flowing
    audio: float  # the audio it must make from then on
    step: float  # the audio of each chunk that makes it


@dataclass
class Demand:
    """What the open streams ask of the workers."""

    busy: float = 0.0  # what the chunks in the making still need, as the model predicts them
    firsts: float = 0.0  # first chunks not yet started: due by every deadline (first first)
    waiting: list[float] = field(default_factory=list)  # those first chunks' own deadlines
    needs: list[Need] = field(default_factory=list)


class Newcomer(NamedTuple):
    """A stream asking to open: ``chars`` input characters at ``speed``, ``first_chars`` of them
    in its first chunk (0: unknown; the model's first chunks then)."""

    chars: int
    speed: float
    first_chars: int = 0


def fits(
    streams: list[Stream], new: Newcomer, now: float, model: CostModel, config: SchedulerConfig
) -> bool:
    """EDF's processor-demand test over the open ``streams`` and the ``new`` one (module
    docstring)."""
    demand = open_demand(streams, now, model, config)
    first, rest, step = split_first(model, new.chars, new.speed, new.first_chars)
    demand.firsts += model.cost(first)
    # its first audio is due at ``first_audio``, less the time its input takes to prepare
    # before its first chunk can start; or, for a first sentence longer than that, when its
    # first chunk alone can be ready at the capacity planned with (it is refused only when
    # others would make it later than that: alone it would be no sooner)
    first_due = max(
        config.first_audio - model.prep_latency(), model.cost(first) / first_capacity(model, config)
    )
    demand.needs.append(Need(first_due + first, rest, step))
    over = first_overload(demand, first_due, model, config)
    if over is None:
        return True
    log.debug(
        "refused: %.3f s of compute due by %.3f s from now (first audio due at "
        "%.3f s, margin %s), %d open streams, %.3f s in the making",
        over[0],
        over[1],
        first_due,
        model.margin(),
        len(streams),
        demand.busy,
    )
    return False


def open_demand(
    streams: list[Stream], now: float, model: CostModel, config: SchedulerConfig
) -> Demand:
    """What the open ``streams`` need made, and by when."""
    d = Demand()
    alone = first_capacity(model, config)
    for s in streams:
        remaining = max(0, s.chars - s.chars_done) * model.per_char / s.speed
        # a chunk being made is the ``busy`` time: its audio is as good as produced
        inflight = s.next_audio(model) if s.running else 0
        if s.running:
            d.busy += max(0.0, model.cost(inflight) - (now - s.run_started))
        remaining -= inflight
        chunk = min(remaining, model.chunk_audio(s.produced + bool(s.running)) / s.speed)
        # its first audio's deadline, as ``fits`` set it when it was admitted
        due = s.arrival + max(config.first_audio, model.cost(s.next_audio(model)) / alone) - now
        if s.playback_start is None and not s.running:
            first, rest, step = split_first(model, s.chars - s.chars_done, s.speed, s.first_chars)
            d.firsts += model.cost(first)
            d.waiting.append(due)
            d.needs.append(Need(due + first, rest, step))
        elif s.playback_start is None:  # its first chunk is the one in the making
            d.needs.append(Need(due + inflight, remaining, chunk))
        else:
            d.needs.append(Need(s.buffered(now) + inflight, remaining, chunk))
    return d


def split_first(
    model: CostModel, chars: int, speed: float, first_chars: int
) -> tuple[float, float, float]:
    """A stream of ``chars`` input characters not yet started: its first chunk's audio (by the
    length of its own first chunk, ``first_chars``), the audio after it, and the length of the
    chunks that follow."""
    audio = max(0, chars) * model.per_char / speed
    first = min(audio, model.first_chunk_audio(first_chars, speed))
    rest = audio - first
    return first, rest, min(rest, model.chunk_audio(1) / speed)


def first_overload(
    d: Demand, first_due: float, model: CostModel, config: SchedulerConfig
) -> tuple[float, float] | None:
    """The compute due by the first deadline where it exceeds the workers' capacity, and that
    deadline (seconds from now); None when every deadline is met.

    In arrays: with dozens of streams that is thousands of deadlines times dozens of streams,
    too slow for Python loops; the arithmetic is the loops' own, term by term and summed in the
    same order, so the answer is the same to the last bit."""
    start = np.array([n.start for n in d.needs])
    audio = np.array([n.audio for n in d.needs])
    step = np.maximum(np.array([n.step for n in d.needs]), 1e-3)
    k = np.arange(DEADLINES, dtype=np.float64)[:, None] * step  # each need's next deadlines
    horizons = np.unique(
        np.concatenate(
            [
                np.maximum((start + k)[k < audio], 1e-3),
                [first_due, *(max(t, 1e-3) for t in d.waiting)],
            ]
        )
    )
    capacity = config.workers * config.load_factor
    t = horizons[:, None]
    due = np.floor((t - start) / step) + 1  # chunks whose audio starts by t
    need = np.minimum(audio, due * step)
    terms = np.where(t < start, 0.0, model.r * need + model.c0 * np.ceil(need / step))
    # summed left to right from the work already due, as a running total
    terms = np.concatenate([np.full((len(horizons), 1), d.busy + d.firsts), terms], axis=1)
    demand = np.add.accumulate(terms, axis=1)[:, -1]
    limit = np.where(horizons <= first_due, first_capacity(model, config), capacity) * horizons
    over = np.flatnonzero(demand > limit + 1e-9)  # a first chunk alone meets its own due
    if not over.size:
        return None
    return float(demand[over[0]]), float(horizons[over[0]])


def first_capacity(model: CostModel, config: SchedulerConfig) -> float:
    """The workers' share admission plans with until a newcomer's first audio is due. That plan
    is a fraction of a second of work whose error the model has seen: it may fill the workers
    up to that error, so that two listeners who arrive together both start in time when they
    can. Beyond it the load factor keeps room for what the next seconds bring (encoding, G2P,
    new arrivals)."""
    margin = model.margin()
    return config.workers * config.load_factor if margin is None else config.workers / margin


def retry_after(streams: list[Stream], now: float, model: CostModel) -> int:
    """Seconds until the first open stream has played to its end (when its load is gone)."""
    ends = [
        s.buffered(now) + max(0, s.chars - s.chars_done) * model.per_char / s.speed for s in streams
    ]
    return int(min(60, max(1, math.ceil(min(ends, default=1.0)))))
