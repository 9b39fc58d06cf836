"""Start and end times from predicted durations: per model token, and per word as kokoro gives them.

Every token of an utterance lasts ``durations[k]`` frames of ``samples_per_frame`` samples, so
token times tile the utterance's audio exactly, boundary tokens included.

Word times are kokoro's ``KPipeline.join_timestamps``, re-implemented because kokoro.pipeline
imports torch: it counts half-frames so that the space after a word is split half to each side
(a word ends, and the next begins, in the middle of the space between them), and it starts the
first word ``min(3, durations[0])`` frames before the end of the leading boundary token, so every
word time is that much earlier than the token times (kokoro's "TODO: Is -3 an appropriate
offset?"). Tokens without phonemes get no time (``None``), as in kokoro.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

KOKORO_LEAD_FRAMES = 3  # join_timestamps: left = right = 2 * max(0, pred_dur[0] - 3)


@dataclass(frozen=True)
class Timestamp:
    """One token or word: ``start``/``end`` in seconds from the start of the whole audio."""

    text: str  # the word (text input), or the phoneme symbol; "" for a boundary token
    phonemes: str
    start: float | None
    end: float | None
    chunk: int  # index of the utterance it belongs to

    def as_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "phonemes": self.phonemes,
            "start": self.start,
            "end": self.end,
            "chunk": self.chunk,
        }


@dataclass(frozen=True)
class Placement:
    """Where an utterance's audio sits in the whole: ``offset`` samples in, ``chunk`` its index."""

    offset: int
    chunk: int
    samples_per_frame: int
    sample_rate: int

    def seconds(self, half_frames: float) -> float:
        """Seconds from the start of the whole audio at ``half_frames`` into the utterance."""
        return (2 * self.offset + half_frames * self.samples_per_frame) / (2 * self.sample_rate)


def symbol_durations(phonemes: str, durations: np.ndarray, vocab: dict[str, int]) -> np.ndarray:
    """Frames per position of ``[boundary, *phonemes, boundary]``: the model's durations with 0
    for each symbol outside the vocabulary (the model never saw it)."""
    known = np.array([c in vocab for c in phonemes], bool)
    if int(known.sum()) + 2 != len(durations):
        raise ValueError(
            f"{len(durations)} durations for {int(known.sum())} known symbols + 2 boundary tokens"
        )
    out = np.zeros(len(phonemes) + 2, np.int64)
    out[0], out[-1] = durations[0], durations[-1]
    out[1:-1][known] = durations[1:-1]
    return out


def token_times(
    phonemes: str, durations: np.ndarray, vocab: dict[str, int], at: Placement
) -> list[Timestamp]:
    """Each model token's span (boundary tokens as ``""``)."""
    symbols = ["", *(c for c in phonemes if c in vocab), ""]
    edges = 2 * np.concatenate([[0], np.cumsum(durations)])
    return [
        Timestamp(s, s, at.seconds(edges[k]), at.seconds(edges[k + 1]), at.chunk)
        for k, s in enumerate(symbols)
    ]


def kokoro_word_times(
    tokens: Sequence[Any], durations: Sequence[int]
) -> list[tuple[int, int] | None]:
    """kokoro's ``join_timestamps`` in half-frames from the utterance start, one entry per token.

    ``durations``: frames per position of ``[boundary, *ps, boundary]`` where ``ps`` is the
    tokens' phonemes, one position for each token's whitespace.
    """
    d = [int(x) for x in durations]
    out: list[tuple[int, int] | None] = [None] * len(tokens)
    if not tokens or len(d) < 3:
        return out
    left = right = 2 * max(0, d[0] - KOKORO_LEAD_FRAMES)
    i = 1  # position of the token's first phoneme
    for k, t in enumerate(tokens):
        if i >= len(d) - 1:
            break
        ps = t.phonemes or ""
        if not ps:
            if t.whitespace:  # kokoro steps over two positions here, and so do we
                i += 1
                left = right + d[i]
                right = left + d[i]
                i += 1
            continue
        j = i + len(ps)
        if j >= len(d):
            break
        space = d[j] if t.whitespace else 0
        start = left
        left = right + 2 * sum(d[i:j]) + space
        out[k] = (start, left)
        right = left + space
        i = j + (1 if t.whitespace else 0)
    return out


def word_times(tokens: Sequence[Any], durations: Sequence[int], at: Placement) -> list[Timestamp]:
    """``kokoro_word_times`` in seconds from the start of the whole audio, one per token."""
    out = []
    for t, span in zip(tokens, kokoro_word_times(tokens, durations)):
        times = (None, None) if span is None else tuple(at.seconds(h) for h in span)
        out.append(Timestamp(t.text, t.phonemes or "", *times, at.chunk))
    return out


def merge_pieces(words: list[Timestamp], tokens: list[Any]) -> list[Timestamp]:
    """One entry per original token: pieces of a token that was cut (``part_of``) merge back."""
    out: list[Timestamp] = []
    owners: list[Any] = []
    for w, t in zip(words, tokens):
        owner = getattr(t, "part_of", None)
        if owner is not None and owners and owners[-1] is owner:
            prev = out[-1]
            out[-1] = Timestamp(
                prev.text,
                owner.phonemes or "",
                prev.start if prev.start is not None else w.start,
                w.end if w.end is not None else prev.end,
                prev.chunk,
            )
        else:
            out.append(
                w
                if owner is None
                else Timestamp(owner.text, owner.phonemes or "", w.start, w.end, w.chunk)
            )
        owners.append(owner)
    return out
