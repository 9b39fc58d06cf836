"""Atomic file writes: a killed stage must never leave a file that DVC would cache."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temp path next to ``dest``; rename it onto ``dest`` only if the block succeeds.

    The temp file lives in the destination directory so the final ``os.replace`` is atomic
    (same filesystem). ``suffix`` keeps extensions that writers insist on (``.so``, ``.npz``).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=f".tmp{suffix}", dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp makes 0600; outputs are ordinary files
    try:
        yield tmp_path
        os.replace(tmp_path, dest)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(dest: str | os.PathLike, text: str) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(dest: str | os.PathLike, obj: Any) -> None:
    """Deterministic JSON (sorted keys) so unchanged content keeps the same DVC hash."""
    write_text(dest, json.dumps(obj, indent=2, sort_keys=True) + "\n")
