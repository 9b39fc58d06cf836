"""What a chunk costs, learned from the chunks the workers ran: the scheduler orders its queue by
it and admission plans with it.

Compute seconds for a chunk of ``a`` audio seconds are ``c0 + r * a``, fitted by least squares
with exponential forgetting, so that the model follows the machine's load. Audio per input
character, and per chunk by its place in its stream, are learned beside it: chunks end at words
and sentences, well short of their phoneme limits, so a limit alone overstates a chunk.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

#: recent chunks whose prediction error the first-audio margin is taken from, the quantile it
#: takes, and how many it needs before it replaces the load factor there
ERROR_WINDOW = 64
ERROR_QUANTILE = 0.95
MIN_ERRORS = 8


@dataclass
class LineSums:
    """The forgotten sums a least-squares line ``cost = c0 + r * audio`` is solved from."""

    chunks: float = 0.0
    audio: float = 0.0
    cost: float = 0.0
    audio_sq: float = 0.0
    audio_cost: float = 0.0

    def add(self, audio: float, cost: float, forget: float) -> None:
        self.chunks = self.chunks * forget + 1
        self.audio = self.audio * forget + audio
        self.cost = self.cost * forget + cost
        self.audio_sq = self.audio_sq * forget + audio * audio
        self.audio_cost = self.audio_cost * forget + audio * cost


@dataclass
class RatioSums:
    """Forgotten sums of a quantity and of what it is counted per (audio per character, per
    chunk at one place)."""

    amount: float = 0.0
    per: float = 0.0

    def add(self, amount: float, per: float, forget: float) -> None:
        self.amount = self.amount * forget + amount
        self.per = self.per * forget + per

    @property
    def ratio(self) -> float:
        return self.amount / self.per


@dataclass
class CostModel:
    """Compute seconds for a chunk of ``a`` audio seconds: ``c0 + r * a``; audio seconds per
    input character at speed 1; and the audio of a stream's chunks by their place in it, where
    ``limits`` (the phoneme limits of a stream's first chunks, the last standing for all later
    ones) say what a chunk holds before any chunk at its place ran."""

    c0: float = 0.05
    r: float = 0.3
    per_char: float = 0.07
    forget: float = 0.97
    limits: tuple[int, ...] = (16, 60, 150)
    line: LineSums = field(default_factory=LineSums)
    char_audio: RatioSums = field(default_factory=RatioSums)  # audio at speed 1 per character
    place_audio: dict[int, RatioSums] = field(default_factory=dict)  # at speed 1, per chunk
    #: each recent chunk's compute over what the model predicted for it just before
    errors: deque[float] = field(default_factory=lambda: deque(maxlen=ERROR_WINDOW))
    #: recent requests' seconds from arrival until their input was prepared (voice, G2P, on
    #: one thread, so queued behind each other's): before its first chunk can start
    prep: deque[float] = field(default_factory=lambda: deque(maxlen=ERROR_WINDOW))

    def learn(self, audio: float, cost: float, chars: int, speed: float) -> None:
        if self.line.chunks >= 3:  # a prediction from fewer chunks says nothing of the error
            self.errors.append(cost / max(self.cost(audio), 1e-6))
        s = self.line
        s.add(audio, cost, self.forget)
        var = s.chunks * s.audio_sq - s.audio * s.audio
        if s.chunks >= 3 and var > 1e-9 * max(s.chunks * s.audio_sq, 1e-12):
            r = (s.chunks * s.audio_cost - s.audio * s.cost) / var
            c0 = (s.cost - r * s.audio) / s.chunks
            if r > 0 and c0 >= 0:
                self.r, self.c0 = r, c0
            else:  # one parameter: the ratio
                self.r, self.c0 = max(s.cost, 1e-6) / max(s.audio, 1e-6), 0.0
        elif s.audio > 0:
            self.r = max(s.cost - s.chunks * self.c0, 1e-6) / s.audio
        if chars > 0 and audio > 0:
            self.char_audio.add(audio * speed, chars, self.forget)
            self.per_char = self.char_audio.ratio

    def cost(self, audio: float) -> float:
        return self.c0 + self.r * audio

    def prep_latency(self) -> float:
        """The ``ERROR_QUANTILE`` of recent preparation times; 0 before any."""
        return _quantile(self.prep) if self.prep else 0.0

    def place(self, index: int) -> int:
        """A chunk's place in the limits: its index, or the last limit's for later ones."""
        return min(index, len(self.limits) - 1)

    def learn_chunk(self, index: int, audio: float) -> None:
        """A stream's ``index``-th chunk gave ``audio`` seconds at speed 1."""
        self.place_audio.setdefault(self.place(index), RatioSums()).add(audio, 1.0, self.forget)

    def chunk_audio(self, index: int) -> float:
        """Expected audio seconds of a stream's ``index``-th chunk at speed 1: what chunks at its
        place gave so far, else its phoneme limit at the model's audio per character."""
        sums = self.place_audio.get(self.place(index))
        if sums is not None:
            return sums.ratio
        return self.limits[self.place(index)] * self.per_char

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
