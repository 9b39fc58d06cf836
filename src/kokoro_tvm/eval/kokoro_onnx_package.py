"""kokoro-onnx itself, as its users run it:
``Kokoro(...).create(phonemes, voice, is_phonemes=True)``.

The ORT harness (``onnx_kmodel``) runs kokoro-onnx's models on the runtime's own chunks: the
model's cost alone. A user of the package also pays for what ``create()`` does around it: its
own split of the phonemes into batches, its tokenizer, silence trimming and pauses. Its models
are the harness's files (fp32: this checkpoint exported the way kokoro-onnx's ``scripts/export.py``
does; int8: the registry file its users download), whose agreement with kokoro the harness checks;
the audio the package returns is trimmed and paused, so only its length is recorded. The sessions
get the bench's thread count through ``Kokoro.from_session`` (the package alone would use ORT's
default, every physical core: the same on the bench machines).

kokoro-onnx 0.6.1 requires ``phonemizer``, whose import name is also misaki's ``phonemizer-fork``;
with ``is_phonemes=True`` it never phonemizes, and its tokenizer imports run on the fork (its
releases up to 0.4 required that fork), so ``make setup`` installs it without dependencies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import KokoroTVMError
from .onnx_export import ort_session

VERSION = "0.6.1"
INSTALL = f"pip install --no-deps kokoro-onnx=={VERSION}"


class PackageMissingError(KokoroTVMError, ImportError):
    """bench.onnxruntime asks for kokoro-onnx, and it is not installed."""


def packages(
    models: dict[str, Path], voices: Path, vocab: dict[str, int], threads: int
) -> dict[str, Any]:
    """A ``kokoro_onnx.Kokoro`` per model file by name, with ``voices`` (a kokoro-onnx voices
    ``.npz`` of ``voices_arrays``) and the model's vocabulary. The package reads both from files,
    which its caller writes."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("kokoro-onnx")
        import kokoro_onnx
    except (ImportError, PackageNotFoundError) as e:
        raise PackageMissingError(
            f"bench.onnxruntime times kokoro-onnx, which is not installed ({e}); "
            f"`make setup` installs it, or `{INSTALL}`"
        ) from e
    if found != VERSION:
        raise PackageMissingError(
            f"kokoro-onnx {found} is installed; the bench pins {VERSION}: `{INSTALL}`"
        )
    return {
        name: kokoro_onnx.Kokoro.from_session(
            ort_session(str(path), threads), str(voices), vocab_config={"vocab": vocab}
        )
        for name, path in models.items()
    }


def voices_arrays(pack: np.ndarray) -> dict[str, np.ndarray]:
    """A kokoro-onnx voices ``.npz``'s arrays, ``pack`` its one voice (``create`` passes the pack
    itself, so the name is never looked up)."""
    return {"bench": np.asarray(pack, np.float32)}


def create(kokoro, phonemes: str, pack: np.ndarray, speed: float = 1.0) -> np.ndarray:
    """What a kokoro-onnx user calls: ``create`` with its defaults (trim, pauses) on phonemes."""
    audio, _ = kokoro.create(
        phonemes, voice=np.asarray(pack, np.float32), speed=speed, is_phonemes=True
    )
    return audio
