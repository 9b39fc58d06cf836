"""Stage ``voices``: the voice packs the runtime knows by name, as one file it memory-maps.

Kokoro-82M v1.0 has 54 voices, each a style pack [510, 1, 256] per utterance length. No PyPI
package ships them; npm's ``kokoro-js`` 1.2.1 does (``package/voices/<name>.bin``: raw
little-endian float32 [510, 256], Apache-2.0), so the default source is that package, fetched
with ``npm pack`` at build time and checked against the sha256 pinned here (the run time needs
no network). params ``voices.source`` may name instead:

* a kokoro-onnx voices file (``voices-v1.0.bin``, an ``.npz`` of named packs);
* a Kokoro-82M ``voices/`` folder of ``<name>.pt`` packs (or raw ``<name>.bin`` files, as
  kokoro-js ships them);
* a kokoro-js tarball already on disk (``.tgz``);
* ``none``: no named voices (a build from random weights; voice files and ``random`` still work).

The stage writes ``artifacts/voices/``: ``voices.npy`` [V, 510, 1, W] float32, voices sorted by
name, and ``voices.json`` with each voice's name, row and language (its name's first letter,
kokoro's convention), the source and the file's sha256. Every pack is checked (shape, width of
the model's style, finite values) before anything is written, and the directory is replaced
whole: a bad source leaves the previous voices, or none, never a mix.

A local source is read when the stage runs: DVC reruns it when ``voices.source`` changes, not
when the file it names does (``dvc repro -f voices`` rereads it).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .. import artifacts
from ..atomic import atomic_dir
from ..config import load_model_config
from ..errors import KokoroTVMError
from ..params import Params
from ..runtime import languages
from ..runtime.voices import VOICE_ROWS, VoiceError, check_pack, read_named_file, read_pt

#: the npm package that ships the 54 voices, and the sha256 of its tarball as npm serves it
KOKORO_JS = "kokoro-js@1.2.1"
KOKORO_JS_SHA256 = "1f0d0383ef0349af0bd9440d81dc12abbea3a5392eb645283eda876f537f5860"
NPM_SOURCE = "kokoro-js"
NO_VOICES = "none"
FORMAT = 1
#: names a user types as ``--voice``: no ``:``, ``,`` or ``/`` (file, blend and path syntax)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
NPM_TIMEOUT_S = 600


class VoicesSourceError(KokoroTVMError, ValueError):
    """A voices source that cannot be read or is not Kokoro voices; the message says why."""


def run(prm: Params) -> dict[str, Any]:
    width = 2 * load_model_config(prm.model.config)["style_dim"]
    packs, origin = read_source(prm.voices.source, width)
    return write(packs, origin, artifacts.voices_dir())


def read_source(
    source: str,
    width: int,
    npm_spec: str = KOKORO_JS,
    npm_sha256: str = KOKORO_JS_SHA256,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The checked packs of ``source`` by name, and where they came from (for ``voices.json``).
    ``npm_spec``/``npm_sha256``: what ``kokoro-js`` fetches, and the checksum it must have."""
    if source == NPM_SOURCE:
        return from_npm(npm_spec, npm_sha256, width)
    if source == NO_VOICES:
        return {}, {"source": NO_VOICES}
    path = Path(source)
    if not path.exists():
        raise VoicesSourceError(
            f"params.yaml 'voices.source' is {source!r}: no such file or folder; use "
            f"{NPM_SOURCE!r} (the 54 Kokoro-82M voices from npm), a kokoro-onnx voices file "
            "(voices-v1.0.bin), a Kokoro-82M voices/ folder of .pt packs, or 'none'"
        )
    if path.is_dir():
        packs = from_folder(path, width)
    elif path.name.endswith((".tgz", ".tar.gz")):
        packs = from_tarball(path, width)
    elif path.suffix in (".bin", ".npz"):
        packs = from_voices_file(path, width)
    else:
        raise VoicesSourceError(
            f"voices source {path}: expected a kokoro-onnx voices file (.bin/.npz), a kokoro-js "
            "tarball (.tgz) or a folder of .pt packs"
        )
    digest = artifacts.sha256(path) if path.is_file() else _folder_sha256(path)
    return packs, {"source": str(source), "source_sha256": digest}


def from_npm(spec: str, sha256: str, width: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``npm pack spec`` into a temporary folder, its tarball checked against ``sha256``, then
    read; the tarball is not kept (DVC caches the stage's output)."""
    npm = shutil.which("npm")
    if npm is None:
        raise VoicesSourceError(
            f"voices.source {NPM_SOURCE!r} fetches {KOKORO_JS} with npm, which is not installed: "
            "install Node.js and npm (apt-get install npm), or set 'voices.source' to a "
            "kokoro-onnx voices-v1.0.bin or a Kokoro-82M voices/ folder"
        )
    with tempfile.TemporaryDirectory(prefix="kokoro-voices-") as tmp:
        try:
            done = subprocess.run(
                [npm, "pack", spec, "--pack-destination", tmp, "--json"],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=NPM_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise VoicesSourceError(
                f"`npm pack {spec}` took over {NPM_TIMEOUT_S} s; check the network to the npm "
                "registry, or set 'voices.source' to a local voices file"
            ) from None
        tarballs = sorted(Path(tmp).glob("*.tgz"))
        if done.returncode != 0 or len(tarballs) != 1:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise VoicesSourceError(
                f"`npm pack {spec}` failed ({' / '.join(tail) or f'exit {done.returncode}'}); "
                "it needs the npm registry at build time, or set 'voices.source' to a local "
                "voices file"
            )
        digest = artifacts.sha256(tarballs[0])
        if digest != sha256:
            raise VoicesSourceError(
                f"the tarball of {spec} has sha256 {digest}, not the pinned {sha256}: not the "
                "package this pipeline was checked with (republished or tampered); nothing was "
                "written"
            )
        packs = from_tarball(tarballs[0], width)
    return packs, {"source": spec, "source_sha256": digest}


def from_tarball(path: Path, width: int) -> dict[str, np.ndarray]:
    """The raw float32 packs of a kokoro-js tarball (``package/voices/<name>.bin``)."""
    packs: dict[str, np.ndarray] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for m in tar.getmembers():
                p = Path(m.name)
                if m.isfile() and p.suffix == ".bin" and p.parent.name == "voices":
                    data = tar.extractfile(m).read()
                    packs[_name(p.stem, path)] = _raw_pack(data, width, f"{path}:{m.name}")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise VoicesSourceError(f"voices source {path} is not a readable tarball: {e}") from e
    return _nonempty(packs, path, "package/voices/<name>.bin")


def from_folder(path: Path, width: int) -> dict[str, np.ndarray]:
    """A Kokoro-82M ``voices/`` folder: ``<name>.pt`` packs (read without torch), or raw
    ``<name>.bin`` float32 files as kokoro-js ships them."""
    packs: dict[str, np.ndarray] = {}
    for f in sorted(path.iterdir()):
        if f.suffix not in (".pt", ".bin") or not f.is_file():
            continue
        name = _name(f.stem, path)
        if name in packs:
            raise VoicesSourceError(f"voices folder {path} has voice {name!r} twice (.pt and .bin)")
        try:
            data = read_pt(f) if f.suffix == ".pt" else None
        except VoiceError as e:
            raise VoicesSourceError(str(e)) from e
        packs[name] = (
            _checked(data, width, str(f))
            if data is not None
            else _raw_pack(f.read_bytes(), width, str(f))
        )
    return _nonempty(packs, path, "<name>.pt")


def from_voices_file(path: Path, width: int) -> dict[str, np.ndarray]:
    """Every pack of a kokoro-onnx voices file (``voices-v1.0.bin``: an ``.npz`` of named packs)."""
    try:
        named = read_named_file(path)
    except VoiceError as e:
        raise VoicesSourceError(str(e)) from e
    packs = {_name(n, path): _checked(a, width, f"{path}:{n}") for n, a in named.items()}
    return _nonempty(packs, path, "named [510, 1, 256] arrays")


def write(packs: dict[str, np.ndarray], origin: dict[str, Any], dest: Path) -> dict[str, Any]:
    """``dest`` replaced whole by ``voices.npy`` and ``voices.json`` for ``packs``."""
    names = sorted(packs)
    index = {
        "format": FORMAT,
        **origin,
        "voices": [{"name": n, "row": i, "lang": _lang(n)} for i, n in enumerate(names)],
    }
    with atomic_dir(dest) as tmp:
        if names:
            stacked = np.stack([packs[n] for n in names]).astype("<f4", copy=False)
            with open(tmp / artifacts.VOICE_PACKS, "wb") as f:
                np.save(f, stacked, allow_pickle=False)
            index |= {
                "file": artifacts.VOICE_PACKS,
                "shape": list(stacked.shape),
                "sha256": artifacts.sha256(tmp / artifacts.VOICE_PACKS),
            }
        (tmp / artifacts.VOICE_INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return index


def read_index(root: Path = artifacts.ROOT) -> dict[str, Any]:
    return artifacts.read_json(artifacts.voice_index_file(root), "voices index")


def _lang(name: str) -> str | None:
    lang = languages.of_voice(name)
    return lang.code if lang else None


def _name(name: str, where: Path) -> str:
    if not _NAME.match(name):
        raise VoicesSourceError(
            f"voices source {where}: voice name {name!r} must be letters, digits, '_' and '-' "
            "(it is what users type as --voice); rename it"
        )
    return name


def _raw_pack(data: bytes, width: int, where: str) -> np.ndarray:
    if len(data) != VOICE_ROWS * width * 4:
        raise VoicesSourceError(
            f"{where} has {len(data)} bytes; a raw voice pack is {VOICE_ROWS} x {width} float32 "
            f"({VOICE_ROWS * width * 4} bytes)"
        )
    return _checked(np.frombuffer(data, "<f4").reshape(VOICE_ROWS, 1, width), width, where)


def _checked(data: Any, width: int, where: str) -> np.ndarray:
    try:
        pack = check_pack(np.asarray(data), width, where=f"voice {where}")
    except VoiceError as e:
        raise VoicesSourceError(str(e)) from e
    if pack.shape[0] != VOICE_ROWS:
        raise VoicesSourceError(
            f"voice {where} has {pack.shape[0]} rows; a Kokoro voice pack has one per utterance "
            f"length, {VOICE_ROWS}"
        )
    return pack


def _nonempty(packs: dict[str, np.ndarray], path: Path, what: str) -> dict[str, np.ndarray]:
    if not packs:
        raise VoicesSourceError(f"voices source {path} holds no voices (expected {what})")
    return packs


def _folder_sha256(path: Path) -> str:
    """One digest of a folder's voice files, names included."""
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.suffix in (".pt", ".bin") and f.is_file():
            h.update(f.name.encode() + b"\0" + bytes.fromhex(artifacts.sha256(f)))
    return h.hexdigest()


def read_packs(names: list[str], root: Path = artifacts.ROOT) -> dict[str, np.ndarray]:
    """The packs of the voices among ``names`` that the stage wrote ([510, 1, W] each); a build
    with no voices (``voices.source: none``) has none."""
    rows = {v["name"]: v["row"] for v in read_index(root).get("voices", [])}
    wanted = [n for n in names if n in rows]
    if not wanted:
        return {}
    packs = np.load(artifacts.voice_packs_file(root), mmap_mode="r")
    return {n: np.array(packs[rows[n]]) for n in wanted}


def manifest_entry(width: int, root: Path = artifacts.ROOT) -> dict[str, Any] | None:
    """The manifest's ``voices`` entry (None for a build with no voices): the file with its
    sha256, shape and every voice's name, row and language, after checking the file is the
    one the stage wrote and fits the model's style width."""
    index = read_index(root)
    if not index.get("voices"):
        return None
    path = artifacts.voice_packs_file(root)
    if not path.exists() or artifacts.sha256(path) != index.get("sha256"):
        raise artifacts.ArtifactError(
            f"{path} is not what the voices stage wrote (missing, or other bytes than "
            f"{artifacts.voice_index_file(root)} records); run `dvc repro` to rebuild it"
        )
    shape = index["shape"]
    if shape[1:] != [VOICE_ROWS, 1, width]:
        raise artifacts.ArtifactError(
            f"{path} holds packs {shape[1:]}, and this model's style is {width} wide; "
            "run `dvc repro` (the voices stage reads params 'model.config')"
        )
    return {
        "path": path.relative_to(root).as_posix(),
        "sha256": index["sha256"],
        "bytes": path.stat().st_size,
        "shape": shape,
        "source": index["source"],
        "source_sha256": index.get("source_sha256"),
        "voices": index["voices"],
    }


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run)
