"""Joining utterance audio the way kokoro's pipeline output is joined: end to end.

kokoro's ``KPipeline`` yields each utterance's audio for the caller to concatenate, with nothing
inserted between them. Every utterance starts and ends with the boundary token 0 (at least one
600-sample frame each), which a trained model renders as near-silence, so the concatenation has
no gap and each seam lands in silence. A 5 ms raised-cosine fade on each side of an inner seam,
well inside those boundary frames, stops a click when an edge is not silent (random weights, a
cut mid-word); no sample is removed or inserted.

Each side's fade depends only on its own utterance and on whether a neighbour exists, so a
stream can fade an utterance as soon as it is decoded (``segment``) and the streamed pieces
concatenate to exactly ``join``'s output.
"""

from __future__ import annotations

import numpy as np

FADE_SAMPLES = 120  # 5 ms at 24 kHz; a boundary token lasts >= 600 samples


def fade_window(n: int) -> np.ndarray:
    """Raised-cosine ramp 0 -> 1 over ``n`` samples, never exactly 0 (no inserted silence)."""
    return (np.sin(0.5 * np.pi * (np.arange(n) + 0.5) / n) ** 2).astype(np.float32)


def segment(audio: np.ndarray, first: bool, last: bool, fade: int = FADE_SAMPLES) -> np.ndarray:
    """One utterance's audio as it goes into the joined output: faded in unless ``first``, out
    unless ``last``."""
    out = np.asarray(audio, np.float32).reshape(-1).copy()
    n = min(fade, out.size)
    if n and not first:
        out[:n] *= fade_window(n)
    if n and not last:
        out[-n:] *= fade_window(n)[::-1]
    return out


def join(chunks: list[np.ndarray], fade: int = FADE_SAMPLES) -> np.ndarray:
    """Concatenate utterance audio (as kokoro does), fading each inner seam; keeps every sample."""
    if not chunks:
        return np.zeros(0, np.float32)
    last = len(chunks) - 1
    return np.concatenate([segment(c, i == 0, i == last, fade) for i, c in enumerate(chunks)])
