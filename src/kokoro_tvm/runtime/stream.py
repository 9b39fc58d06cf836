"""Decoded audio out, chunk by chunk or joined, with timestamps.

``stream`` decodes one planned chunk at a time, so the first audio is out after the first chunk;
its pieces concatenate to exactly what ``render`` joins (kokoro's own pipeline output: ``seams``).
Draws are seeded by ``seed`` in chunk order, so both give the same audio.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ..spec import SAMPLE_RATE
from . import seams, timestamps
from .chunking import Utterance
from .decoder import decode
from .libraries import Libraries
from .planner import Chunk, chunks
from .timestamps import Timestamp

Progress = Callable[
    [int, int, Chunk], None
]  # (chunks done, chunks known so far, chunk just decoded)


@dataclass
class ChunkAudio:
    """One decoded chunk: play ``audio`` next. Like a ``KPipeline`` result it carries the
    chunk's ``graphemes``, ``phonemes`` and ``audio``; the pieces of one call concatenate to
    exactly ``Synthesis.audio``."""

    index: int
    chunk: Chunk
    audio: np.ndarray  # float32: the chunk's audio, seams faded (``seams.segment``)
    last: bool  # no chunk follows
    latency: float  # seconds from the call until this chunk was ready
    tokens: list[Timestamp]  # per model token, seconds from the start of the stream
    words: list[Timestamp]  # per word (kokoro's join_timestamps), seconds from the start
    sample_rate: int = SAMPLE_RATE

    @property
    def graphemes(self) -> str:
        """The chunk's text (its phonemes, for phoneme input)."""
        return self.chunk.text

    @property
    def phonemes(self) -> str:
        return self.chunk.phonemes

    @property
    def offset(self) -> int:
        """Samples of audio before this chunk in the joined output."""
        return self.chunk.offset


@dataclass
class Synthesis:
    audio: np.ndarray  # float32, mono
    chunks: list[Chunk]
    seconds: float  # wall time of the whole call
    sample_rate: int = SAMPLE_RATE
    tokens: list[Timestamp] = field(
        default_factory=list, repr=False
    )  # per model token, tiling the audio
    words: list[Timestamp] = field(
        default_factory=list, repr=False
    )  # per word, as kokoro times them

    @property
    def audio_seconds(self) -> float:
        return self.audio.size / self.sample_rate

    @property
    def rtf(self) -> float:
        """Real-time factor: compute seconds per second of audio (< 1 is faster than real time)."""
        return self.seconds / max(self.audio_seconds, 1e-9)


def stream(
    libs: Libraries,
    pending: list[Utterance],
    pack: np.ndarray,
    speed: float,
    seed: int,
    started: float,
    keep_draws: bool = False,
    cut_pauses: int | None = None,
    lead_in: int | None = None,
    limit: Callable[[int], int] | None = None,
) -> Iterator[ChunkAudio]:
    """Plan and decode ``pending`` one chunk at a time (``started``: the call's perf_counter).

    Nothing of a yielded chunk stays here, and without ``keep_draws`` the chunk drops the
    decoder's draws (its noise is the size of its audio times the harmonics), so a stream's
    memory does not grow with its length. ``cut_pauses``, ``lead_in``, ``limit``:
    ``planner.chunks``."""
    planned = chunks(libs, pending, pack, speed, cut_pauses, lead_in, limit)
    for i, chunk in _decoded(libs, planned, seed):
        last = not pending  # planning consumed the last utterance
        audio = seams.segment(_heard(libs, chunk), i == 0, last)
        if not keep_draws:  # the faded copy is what plays; the rest only replays in kokoro
            chunk.audio = chunk.noise = chunk.rand_ini = chunk.d = None
        yield ChunkAudio(
            i,
            chunk,
            audio,
            last,
            time.perf_counter() - started,
            token_times(libs, chunk, i),
            word_times(libs, chunk, i),
        )


def joined(libs: Libraries, parts: list[ChunkAudio], started: float) -> Synthesis:
    """A whole stream as one ``Synthesis``."""
    return Synthesis(
        np.concatenate([p.audio for p in parts]),
        [p.chunk for p in parts],
        time.perf_counter() - started,
        tokens=[t for p in parts for t in p.tokens],
        words=all_word_times(libs, [p.chunk for p in parts]),
    )


def render(
    libs: Libraries, planned: list[Chunk], seed: int, progress: Progress | None, started: float
) -> Synthesis:
    """Decode planned chunks (draws seeded by ``seed``, in chunk order) and join them."""
    for i, chunk in _decoded(libs, planned, seed):
        if progress is not None:
            progress(i + 1, len(planned), chunk)
    return Synthesis(
        seams.join([_heard(libs, c) for c in planned]),
        planned,
        time.perf_counter() - started,
        tokens=[t for i, c in enumerate(planned) for t in token_times(libs, c, i)],
        words=all_word_times(libs, planned),
    )


def _decoded(libs: Libraries, planned: Iterable[Chunk], seed: int) -> Iterator[tuple[int, Chunk]]:
    """Each chunk decoded in order, draws from one generator seeded by ``seed``, and its
    ``offset`` in the joined audio set."""
    rng = np.random.default_rng(seed)
    offset = 0
    for i, chunk in enumerate(planned):
        decode(libs, chunk, rng)
        chunk.samples = chunk.audio.size - chunk.lead_trim * libs.samples_per_frame
        chunk.offset, offset = offset, offset + chunk.samples
        yield i, chunk


def _heard(libs: Libraries, chunk: Chunk) -> np.ndarray:
    """A decoded chunk's audio less the silence trimmed from its start (``Chunk.lead_trim``),
    faded in where it now starts, as a seam is (the cut falls inside the boundary token's
    near-silence)."""
    if not chunk.lead_trim:
        return chunk.audio
    audio = chunk.audio[chunk.lead_trim * libs.samples_per_frame :].copy()
    n = min(seams.FADE_SAMPLES, audio.size)
    audio[:n] *= seams.fade_window(n)
    return audio


def token_times(libs: Libraries, chunk: Chunk, index: int) -> list[Timestamp]:
    """Each model token's span in the joined audio (``chunk.offset`` must be set)."""
    return timestamps.token_times(
        chunk.phonemes,
        chunk.heard_durations,
        libs.vocab,
        chunk.offset,
        libs.samples_per_frame,
        SAMPLE_RATE,
        index,
    )


def word_times(libs: Libraries, chunk: Chunk, index: int) -> list[Timestamp]:
    """Each word's span as kokoro's ``join_timestamps`` gives it, in the joined audio (a word
    cut across two chunks, only ever by a bucket overflow, shows in both)."""
    return timestamps.merge_pieces(piece_times(libs, chunk, index), chunk.words)


def all_word_times(libs: Libraries, planned: list[Chunk]) -> list[Timestamp]:
    """Word spans over all chunks, pieces of a word cut between chunks merged."""
    return timestamps.merge_pieces(
        [w for i, c in enumerate(planned) for w in piece_times(libs, c, i)],
        [t for c in planned for t in c.words],
    )


def piece_times(libs: Libraries, chunk: Chunk, index: int) -> list[Timestamp]:
    per_symbol = timestamps.symbol_durations(chunk.phonemes, chunk.heard_durations, libs.vocab)
    return timestamps.word_times(
        chunk.words, per_symbol, chunk.offset, libs.samples_per_frame, SAMPLE_RATE, index
    )
