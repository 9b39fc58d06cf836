"""Style vectors: Kokoro voice packs (``voices/*.pt``) or a seeded random style.

A voice pack holds one 256-wide style per utterance length ([510, 1, 256]); kokoro's
``KPipeline.infer`` picks row ``len(phonemes) - 1``, so each chunk gets the row for its own
length. The first half of a style drives the decoder, the second half prosody (durations, F0).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class VoiceError(ValueError):
    """A voice or style the model cannot use; the message says what was expected."""


def check_pack(pack: np.ndarray, style_width: int, where: str = "style") -> np.ndarray:
    """A [N, 1, W] float32 pack; a single style ([W] or [1, W]) becomes a 1-row pack."""
    arr = np.asarray(pack, dtype=np.float32)
    if arr.ndim in (1, 2) and arr.shape[-1] == style_width and arr.size == style_width:
        arr = arr.reshape(1, 1, style_width)
    if arr.ndim != 3 or arr.shape[1] != 1 or arr.shape[2] != style_width or arr.shape[0] < 1:
        raise VoiceError(f"{where} has shape {list(np.shape(pack))}; expected a Kokoro voice pack "
                         f"[510, 1, {style_width}] or one style [1, {style_width}]")
    if not np.isfinite(arr).all():
        raise VoiceError(f"{where} contains NaN or inf values")
    return arr


def load_voice(path: str | Path, style_width: int) -> np.ndarray:
    """Read a Kokoro voice pack (``.pt``, saved with ``torch.save``) as a checked numpy array."""
    path = Path(path)
    if not path.is_file():
        raise VoiceError(f"voice file {path} does not exist; pass a Kokoro voice pack such as "
                         "voices/af_heart.pt from hexgrad/Kokoro-82M")
    if path.suffix == ".npy":
        data = np.load(path)
    else:
        import torch

        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise VoiceError(f"voice file {path} is not a loadable torch tensor ({type(e).__name__}: {e})") from e
        if not isinstance(data, torch.Tensor):
            raise VoiceError(f"voice file {path} holds a {type(data).__name__}, not a style tensor")
        data = data.float().numpy()
    return check_pack(data, style_width, where=f"voice file {path}")


def random_style(seed: int, style_width: int) -> np.ndarray:
    """A seeded random style ([1, 1, W] pack), for random-weight builds and tests."""
    rng = np.random.default_rng(seed)
    return (0.3 * rng.standard_normal((1, 1, style_width))).astype(np.float32)


def style_for(pack: np.ndarray, n_phonemes: int) -> np.ndarray:
    """kokoro's ``pack[len(ps) - 1]`` ([1, W]); longer inputs use the last row."""
    row = min(max(n_phonemes, 1), pack.shape[0]) - 1
    return pack[row]
