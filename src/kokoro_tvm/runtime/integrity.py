"""Files checked against the sha256 their producer recorded, before anything reads them: loading
a library runs its code, and a flipped byte in weights is wrong audio, not an error."""

from __future__ import annotations

from pathlib import Path

from .. import artifacts


def verify_file(path: Path, expected: str, source: str) -> str:
    """The file's sha256, after checking it is ``expected`` (what ``source`` recorded)."""
    if not path.exists():
        raise artifacts.ArtifactError(f"{path} is missing; run `dvc repro` (or `dvc pull`)")
    actual = artifacts.sha256(path)
    if actual != expected:
        raise artifacts.ArtifactError(
            f"{path} does not match the sha256 recorded in {source} (tampered or stale); "
            "run `dvc checkout` or `dvc repro`"
        )
    return actual
