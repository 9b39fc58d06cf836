"""Decoded audio out, chunk by chunk or joined, with timestamps.

``stream`` plans and decodes one chunk at a time, so the first audio is out after the first
chunk; its pieces concatenate to exactly what ``joined`` returns (kokoro's own pipeline output:
``seams``). Draws are seeded by ``options.seed`` in chunk order, so a stream and a whole call
give the same audio.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..spec import SAMPLE_RATE
from . import seams, timestamps
from .decoder import Decoded, decode
from .libraries import Libraries
from .options import SpeechOptions
from .planner import Chunk, Pending, chunks
from .timestamps import Timestamp


@dataclass(frozen=True)
class ChunkAudio:
    """One decoded chunk: play ``audio`` next. Like kokoro's ``KPipeline`` ``Result`` it is
    ``graphemes, phonemes, audio`` when unpacked or indexed; the pieces of one call concatenate
    to exactly ``Synthesis.audio``."""

    index: int
    chunk: Chunk
    audio: np.ndarray = field(repr=False)  # float32: the chunk's audio as it plays
    last: bool  # no chunk follows
    latency: float  # seconds from the call until this chunk was ready
    offset: int  # samples of audio before this chunk in the joined output
    frame_bucket: int
    seconds: float  # compute time: planning and decoding this chunk
    tokens: list[Timestamp] = field(repr=False)  # per model token, seconds from the start
    words: list[Timestamp] = field(repr=False)  # per word (kokoro's join_timestamps)
    decoded: Decoded | None = field(default=None, repr=False)  # with ``keep_draws`` only
    sample_rate: int = SAMPLE_RATE

    @property
    def graphemes(self) -> str:
        """The chunk's text (its phonemes, for phoneme input)."""
        return self.chunk.text

    @property
    def phonemes(self) -> str:
        return self.chunk.phonemes

    @property
    def samples(self) -> int:
        return int(self.audio.size)

    def __iter__(self) -> Iterator:
        yield from (self.graphemes, self.phonemes, self.audio)

    def __getitem__(self, index):
        return [self.graphemes, self.phonemes, self.audio][index]

    def __len__(self) -> int:
        return 3


@dataclass(frozen=True)
class Synthesis:
    audio: np.ndarray = field(repr=False)  # float32, mono
    parts: list[ChunkAudio] = field(repr=False)
    seconds: float  # wall time of the whole call
    sample_rate: int = SAMPLE_RATE
    tokens: list[Timestamp] = field(default_factory=list, repr=False)  # per model token
    words: list[Timestamp] = field(default_factory=list, repr=False)  # as kokoro times them

    @property
    def chunks(self) -> list[Chunk]:
        """The planned chunks, in order."""
        return [p.chunk for p in self.parts]

    @property
    def audio_seconds(self) -> float:
        return self.audio.size / self.sample_rate

    @property
    def rtf(self) -> float:
        """Real-time factor: compute seconds per second of audio (< 1 is faster than real time)."""
        return self.seconds / max(self.audio_seconds, 1e-9)


def stream(
    libs: Libraries, pending: Pending, options: SpeechOptions, started: float
) -> Iterator[ChunkAudio]:
    """Plan and decode ``pending`` one chunk at a time (``started``: the call's perf_counter).

    Nothing of a yielded chunk stays here once the consumer asks for the next, and without
    ``options.keep_draws`` the decoder's draws are dropped as soon as the chunk is made (its
    noise is the size of its audio times the harmonics, as large as the decoder's biggest
    activation at kokoro's longest utterance), so the next chunk's decode does not hold the last
    one's and a stream's memory does not grow with its length."""
    rng = np.random.default_rng(options.seed)

    def made(index: int, chunk: Chunk, offset: int) -> ChunkAudio:
        """``chunk`` decoded: a function of its own so that its draws go when it returns."""
        decoded = decode(libs, chunk, rng)
        # after the decode: looking one utterance ahead may run the G2P, which the first audio
        # need not wait for. Planning consumed the last utterance when none is left
        last = not pending
        return ChunkAudio(
            index=index,
            chunk=chunk,
            audio=seams.segment(_heard(libs, chunk, decoded.audio), index == 0, last),
            last=last,
            latency=time.perf_counter() - started,
            offset=offset,
            frame_bucket=decoded.frame_bucket,
            seconds=chunk.seconds + decoded.seconds,
            tokens=token_times(libs, chunk, index, offset),
            words=word_times(libs, chunk, index, offset),
            decoded=decoded if options.keep_draws else None,
        )

    offset = 0
    for i, chunk in enumerate(chunks(libs, pending, options)):
        part = made(i, chunk, offset)
        offset += part.samples
        yield part
        del part


def joined(libs: Libraries, parts: list[ChunkAudio], started: float) -> Synthesis:
    """A whole stream as one ``Synthesis``."""
    return Synthesis(
        np.concatenate([p.audio for p in parts]),
        parts,
        time.perf_counter() - started,
        tokens=[t for p in parts for t in p.tokens],
        words=timestamps.merge_pieces(
            [w for p in parts for w in piece_times(libs, p.chunk, p.index, p.offset)],
            [t for p in parts for t in p.chunk.words],
        ),
    )


def _heard(libs: Libraries, chunk: Chunk, audio: np.ndarray) -> np.ndarray:
    """A decoded chunk's audio less the silence trimmed from its start (``Chunk.lead_trim``),
    faded in where it now starts, as a seam is (the cut falls inside the boundary token's
    near-silence)."""
    if not chunk.lead_trim:
        return audio
    audio = audio[chunk.lead_trim * libs.samples_per_frame :].copy()
    n = min(seams.FADE_SAMPLES, audio.size)
    audio[:n] *= seams.fade_window(n)
    return audio


def _placement(libs: Libraries, index: int, offset: int) -> timestamps.Placement:
    return timestamps.Placement(offset, index, libs.samples_per_frame, SAMPLE_RATE)


def token_times(libs: Libraries, chunk: Chunk, index: int, offset: int) -> list[Timestamp]:
    """Each model token's span in the joined audio, the chunk starting at sample ``offset``."""
    at = _placement(libs, index, offset)
    return timestamps.token_times(chunk.phonemes, chunk.heard_durations, libs.vocab, at)


def word_times(libs: Libraries, chunk: Chunk, index: int, offset: int) -> list[Timestamp]:
    """Each word's span as kokoro's ``join_timestamps`` gives it, in the joined audio (a word
    cut across two chunks, only ever by a bucket overflow, shows in both)."""
    return timestamps.merge_pieces(piece_times(libs, chunk, index, offset), list(chunk.words))


def piece_times(libs: Libraries, chunk: Chunk, index: int, offset: int) -> list[Timestamp]:
    per_symbol = timestamps.symbol_durations(chunk.phonemes, chunk.heard_durations, libs.vocab)
    return timestamps.word_times(list(chunk.words), per_symbol, _placement(libs, index, offset))
