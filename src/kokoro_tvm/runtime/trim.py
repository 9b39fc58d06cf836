"""kokoro-onnx's ``trim``: each piece of speech without its leading and trailing silence, and the
pause its last mark calls for put back after it.

kokoro-onnx's ``Kokoro.create(..., trim=True)`` (its default) synthesizes its batches one by one
and trims each as librosa's ``effects.trim`` does with its defaults: the signal padded with half
a frame of zeros at each end, cut into frames of 2048 samples every 512, and a frame is silent
when its RMS is ``TOP_DB`` dB or more below the loudest frame's; what is kept runs from the
first loud frame's start to the last loud frame's end. Trimming takes the model's own pause
between two batches away, so kokoro-onnx 0.6 puts a pause back after every batch but the last:
``sentence_pause`` seconds after a sentence end, ``clause_pause`` after a clause mark.

The runtime's pieces are kokoro's chunks, not kokoro-onnx's batches (its own split of the
phonemes), and each is trimmed and followed by its pause the same way. kokoro-onnx also
lengthens short pauses inside a batch where its model reports durations; that is not done here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..errors import InputError

FRAME = 2048  #: librosa's frame_length
HOP = 512  #: librosa's hop_length
TOP_DB = 60.0  #: below the loudest frame, a frame is silent
SENTENCE_PAUSE = 0.25  #: kokoro-onnx's seconds after a batch that ends a sentence
CLAUSE_PAUSE = 0.1  #: ... and after one that ends at a clause mark
SENTENCE_MARKS = ".!?…"
CLAUSE_MARKS = ",;:"


def trim(audio: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    """``audio`` less its leading and trailing silence, and the span kept (``start, end``)."""
    y = np.pad(np.asarray(audio, np.float32), FRAME // 2)
    frames = np.lib.stride_tricks.sliding_window_view(y, FRAME)[::HOP]
    power = np.sqrt(np.mean(np.square(frames, dtype=np.float32), axis=-1)) ** 2
    db = 10.0 * np.log10(np.maximum(1e-10, power)) - 10.0 * np.log10(max(1e-10, power.max()))
    loud = np.flatnonzero(db > -TOP_DB)
    if not loud.size:
        return audio[:0], (0, 0)
    start, end = int(loud[0]) * HOP, min(audio.size, (int(loud[-1]) + 1) * HOP)
    return audio[start:end], (start, end)


def pause_after(phonemes: str, sentence: float, clause: float) -> float:
    """Seconds of silence after a piece whose phonemes (or text) end as ``phonemes`` does."""
    mark = phonemes.rstrip()[-1:]
    return sentence if mark in SENTENCE_MARKS else clause if mark in CLAUSE_MARKS else 0.0


def pauses(more: dict[str, Any]) -> tuple[float, float]:
    """kokoro-onnx's ``sentence_pause`` and ``clause_pause`` taken out of a call's keywords,
    checked."""
    out = []
    for name, default in (("sentence_pause", SENTENCE_PAUSE), ("clause_pause", CLAUSE_PAUSE)):
        value = more.pop(name, default)
        if isinstance(value, bool) or not (
            isinstance(value, (int, float)) and np.isfinite(value) and value >= 0
        ):
            raise InputError(f"{name} must be a number of seconds >= 0, got {value!r}")
        out.append(float(value))
    return out[0], out[1]


def trimmed(
    parts: Iterable[Any], sentence: float = SENTENCE_PAUSE, clause: float = CLAUSE_PAUSE
) -> Iterator[np.ndarray]:
    """Each ``ChunkAudio``'s audio trimmed, followed by its pause unless it is the last."""
    for part in parts:
        audio, _ = trim(part.audio)
        pause = 0.0 if part.last else pause_after(part.phonemes, sentence, clause)
        if pause:
            silence = np.zeros(int(pause * part.sample_rate), audio.dtype)
            audio = np.concatenate([audio, silence])
        yield audio
