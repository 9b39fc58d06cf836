"""Host-side alignment between the token and frame components (numpy, no model code).

kokoro builds a one-hot [T, M] matrix and multiplies (``d.T @ aln``, ``t_en @ aln``); gathering
the token of each frame is the same product without the matrix, and bit-exact (x*1 + 0s).
"""

from __future__ import annotations

import numpy as np


def frame_durations(durations: np.ndarray, speed: float) -> np.ndarray:
    """kokoro's ``round(duration / speed).clamp(min=1)`` in float32 (round half to even, like
    torch)."""
    if not (np.isfinite(speed) and speed > 0):
        raise ValueError(f"speed must be a positive number, got {speed!r}")
    d = np.asarray(durations, np.float32) / np.float32(speed)
    return np.maximum(np.round(d), 1).astype(np.int64)


def frame_tokens(durations: np.ndarray) -> np.ndarray:
    """Index of the token each frame belongs to (``repeat_interleave(arange(T), durations)``)."""
    return np.repeat(np.arange(len(durations)), durations)


def expand(x: np.ndarray, durations: np.ndarray, bucket: int | None = None) -> np.ndarray:
    """[1, C, T] token features -> [1, C, frames] frame features; zero-padded to ``bucket``
    frames when one is given (a padded library's input)."""
    idx = frame_tokens(durations)
    if bucket is None or bucket == idx.size:
        return np.ascontiguousarray(x[..., idx], dtype=np.float32)
    if idx.size > bucket:
        raise ValueError(f"{idx.size} frames do not fit frame bucket {bucket}")
    out = np.zeros((x.shape[0], x.shape[1], bucket), np.float32)
    out[..., : idx.size] = x[..., idx]
    return out
