"""Drop the ``dvc.lock`` entries of stages that ``dvc.yaml`` no longer defines.

DVC keeps the entry of a stage removed from the pipeline (treeverse/dvc#5293; here every removed
bucket or target leaves ~5 per-library entries). They change nothing DVC decides, but DVC
re-reads and rewrites the whole lockfile through ruamel's round-trip YAML after every stage, so
they cost every stage of every later repro (docs/measurements.md, "Stale lock entries pruned").
The run-cache (``.dvc/cache/runs``) is separate and keeps what those stages built.

Their outputs stay in the workspace too (a removed bucket's libraries, validation and bench
files), where a glob over ``artifacts/`` (``benchmarks/once/modes.py``) would take them for current
ones: they are removed with the entries, and stay in the DVC cache (``dvc checkout`` of a commit
that built them brings them back).

usage: python -m kokoro_tvm.pipeline.lockfile   (``make repro`` runs it before and after
``dvc repro``)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ..atomic import atomic_path
from ..commands import exit_status
from ..errors import KokoroTVMError


def defined_stages(cwd: Path = Path(".")) -> set[str]:
    """Every stage name ``dvc.yaml`` defines (matrix items expanded), as DVC itself lists them."""
    p = subprocess.run(
        [sys.executable, "-m", "dvc", "stage", "list", "--name-only"],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    names = set(p.stdout.split())
    if p.returncode or not names:  # never prune against a pipeline DVC could not read
        raise KokoroTVMError(
            f"`dvc stage list` failed ({p.returncode}): {p.stderr.strip()[-500:]}; "
            "fix dvc.yaml or params.yaml first"
        )
    return names


def prune(lock: Path, keep: set[str]) -> list[str]:
    """Remove the entries not in ``keep`` from ``lock`` (atomically, formatting kept), and their
    outputs from the workspace; returns the entries' names."""
    from ruamel.yaml import YAML

    if not lock.is_file():
        return []
    yaml = YAML()  # round-trip, as DVC writes it: the rest of the file stays byte for byte
    doc = yaml.load(lock)
    stages = doc.get("stages", {})
    stale = [name for name in stages if name not in keep]
    if stale:
        outputs = _outputs(stages, stale) - _outputs(stages, [n for n in stages if n not in stale])
        for name in stale:
            del stages[name]
        with atomic_path(lock) as tmp:
            yaml.dump(doc, tmp)
        for path in sorted(outputs):
            _remove(lock.parent, path)
    return stale


def _outputs(stages, names: list[str]) -> set[str]:
    return {out["path"] for name in names for out in stages[name].get("outs", [])}


def _remove(root: Path, path: str) -> None:
    """Delete a stale output inside the project (never a path that leaves it)."""
    target = (root / path).resolve()
    if root.resolve() not in target.parents:
        return
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()


def main(root: Path = Path(".")) -> None:
    stale = prune(root / "dvc.lock", defined_stages(root))
    if stale:
        print(
            f"dvc.lock: dropped {len(stale)} entries of stages dvc.yaml no longer defines, and "
            f"their outputs (still in the DVC cache): {', '.join(stale)}"
        )


if __name__ == "__main__":
    sys.exit(exit_status(main))
