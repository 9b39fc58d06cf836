"""Pauses at the cuts the server makes inside a sentence, as short as a word gap.

kokoro wraps every utterance in a boundary token, and the model gives the first one about a
third of a second of silence (14 frames of 25 ms here) and the last one a frame or more: between
two sentences that is a natural pause. A cut inside a sentence (a chunk limit, or the first
clause) makes the same pause where a listener expects none: "Please leave the package at ...
the front door". So where a chunk does not end a sentence and another follows, the boundary
silence on both sides of the seam is cut to ``keep`` frames; the faded edges of the runtime's
seams are faded again where they now fall. Sentence ends keep kokoro's pause, and a comma keeps
its own (the comma is a token with its duration, inside the chunk).

Word times move with the audio: each chunk's words are shifted by the samples cut before them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..runtime.seams import FADE_SAMPLES, fade_window

#: a chunk whose phonemes end with one of these (closing quotes and brackets aside) ends a
#: sentence: the pause after it is kokoro's
SENTENCE_ENDS = frozenset(".!?…。！？")
CLOSERS = "\"'”’)]}»」』）"
KEEP_FRAMES = 1  # boundary frames kept on each side of a cut inside a sentence


@dataclass
class Piece:
    """A chunk as the listener gets it: the runtime's ``ChunkAudio`` with its audio shortened at
    the seams and its words shifted."""

    part: Any  # runtime ChunkAudio
    audio: np.ndarray
    shift: int = 0  # samples by which this piece's audio comes earlier than the runtime's
    head: int = 0  # samples cut from this piece's start

    def __getattr__(self, name: str) -> Any:
        """The runtime chunk's own fields (sample_rate, graphemes, phonemes, index, chunk, ...)."""
        if name == "part":  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.part, name)

    @property
    def start(self) -> int:
        """Samples of the stream before this piece, as sent."""
        return self.part.offset - self.shift + self.head

    def words(self) -> list[dict[str, Any]]:
        """The piece's words, ``start_time``/``end_time`` in seconds of the stream as sent."""
        shift = self.shift / self.sample_rate
        return [
            {"word": w.text, "start_time": w.start - shift, "end_time": w.end - shift}
            for w in self.part.words
            if w.start is not None and w.end is not None
        ]


def ends_sentence(phonemes: str) -> bool:
    return phonemes.rstrip().rstrip(CLOSERS)[-1:] in SENTENCE_ENDS


class PauseTrimmer:
    """One stream's seams, chunk by chunk (``keep`` None: kokoro's pauses, untouched)."""

    def __init__(self, samples_per_frame: int, keep: int | None = KEEP_FRAMES):
        self.spf, self.keep = samples_per_frame, keep
        self.open = False  # the previous chunk did not end its sentence
        self.cut = 0  # samples cut from the stream so far

    def __call__(self, part: Any) -> Piece:
        if self.keep is None:
            return Piece(part, part.audio)
        durations = np.asarray(part.chunk.durations)
        head = self._frames(int(durations[0])) if self.open else 0
        self.open = not part.last and not ends_sentence(part.phonemes)
        tail = self._frames(int(durations[-1])) if self.open else 0
        audio = part.audio
        if head or tail:
            audio = audio[head : audio.size - tail].copy()
            n = min(FADE_SAMPLES, audio.size)
            if head and n:
                audio[:n] *= fade_window(n)
            if tail and n:
                audio[-n:] *= fade_window(n)[::-1]
        piece = Piece(part, audio, self.cut + head, head)
        self.cut += head + tail
        return piece

    def _frames(self, frames: int) -> int:
        """Samples to cut from a boundary of ``frames`` frames."""
        return max(0, frames - self.keep) * self.spf
