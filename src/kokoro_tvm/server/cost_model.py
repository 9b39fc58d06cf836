"""What a chunk costs, learned from the chunks the workers ran: the scheduler orders its queue by
it and admission plans with it.

Compute seconds for a chunk of ``a`` audio seconds are ``c0 + r * a``, fitted by least squares
with exponential forgetting, so that the model follows the machine's load. Audio per input
character, and per chunk by its place in its stream, are learned beside it: chunks end at words
and sentences, well short of their phoneme limits, so a limit alone overstates a chunk.

A chunk's cost is predicted from its length: a stream's first chunk from the characters of its
first sentence (or clause), read from the request's text before any G2P (``first_chunk_chars``),
so that a newcomer whose first sentence is long is known to need more; a later chunk from what is
left of its text, up to a chunk's limit (``Stream.next_audio``). With whole sentences a chunk
holds anything from a word to a paragraph, so no average of other chunks predicts the one at hand.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from ..runtime.chunking import MAX_PHONEMES, RUN_ON_FIRST
from ..runtime.options import Cuts

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
        """A chunk's place: its index up to the last limit's, the first always a place of its
        own (it ends early, at its first sentence or clause, whatever the limits)."""
        return min(index, max(len(self.limits), 2) - 1)

    def limit_audio(self, index: int) -> float:
        """The audio at speed 1 of a chunk that fills the ``index``-th chunk's phoneme limit,
        at the model's audio per character (a phoneme is about a character)."""
        return self.limits[min(index, len(self.limits) - 1)] * self.per_char

    def learn_chunk(self, index: int, audio: float) -> None:
        """A stream's ``index``-th chunk gave ``audio`` seconds at speed 1."""
        self.place_audio.setdefault(self.place(index), RatioSums()).add(audio, 1.0, self.forget)

    def chunk_audio(self, index: int) -> float:
        """Expected audio seconds of a stream's ``index``-th chunk at speed 1: what chunks at its
        place gave so far, else its phoneme limit at the model's audio per character."""
        sums = self.place_audio.get(self.place(index))
        if sums is not None:
            return sums.ratio
        return self.limit_audio(index)

    def first_chunk_audio(self, first_chars: int, speed: float) -> float:
        """Audio seconds of a stream's first chunk of ``first_chars`` input characters; when
        that is unknown (0), what first chunks gave so far."""
        return (first_chars * self.per_char if first_chars else self.chunk_audio(0)) / speed

    def margin(self) -> float | None:
        """How much slower than predicted a chunk may run: the ``ERROR_QUANTILE`` of the recent
        chunks' compute over prediction, at least 1; None before ``MIN_ERRORS`` chunks."""
        if len(self.errors) < MIN_ERRORS:
            return None
        return max(1.0, _quantile(self.errors))


#: where a sentence ends (kokoro's and misaki's split: after a run of ``.!?``, with the quotes or
#: brackets that close it, before a space or the end) and where a clause may end a first chunk
SENTENCE_END = re.compile(r"[.!?…]+[\"')\]”’]*(?=\s|$)")
CLAUSE_END = re.compile(r"[,;:.!?—…]")


def first_chunk_chars(text: str, cuts: Cuts) -> int:
    """Input characters of a stream's first chunk as ``cuts`` ends it, read from the text alone
    (admission runs before the G2P): up to its first sentence end (``sentence``) or clause mark
    (``clause``), at most the first chunk's phoneme limit, else a whole chunk of kokoro's; a
    run-on's first chunk is about a sentence (``chunking.first_cut``). A phoneme is about a
    character."""
    n = len(text)
    found = {"sentence": SENTENCE_END, "clause": CLAUSE_END}.get(cuts.first)
    if found is not None:
        end = found.search(text)
        n = end.end() if end else n
        head = text[:MAX_PHONEMES]  # where ``first_cut`` looks for a mark
        if cuts.first == "sentence" and n > MAX_PHONEMES and not CLAUSE_END.search(head):
            n = RUN_ON_FIRST
    limit = cuts.limit(0)
    return max(1, min(n, limit or MAX_PHONEMES, MAX_PHONEMES))


def _quantile(values: deque[float]) -> float:
    """The ``ERROR_QUANTILE`` of ``values`` (not empty), by rank."""
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, int(ERROR_QUANTILE * len(ranked)))]
