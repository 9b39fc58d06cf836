"""Shared entry-point wrapper: turn known errors into one clear line and exit code 1."""

from __future__ import annotations

import sys
from typing import Callable


def main(run: Callable[[], None]) -> None:
    from kokoro_tvm.artifacts import ArtifactError
    from kokoro_tvm.model import CheckpointError
    from kokoro_tvm.params import ParamsError
    from kokoro_tvm.toolchain import ToolchainError
    from kokoro_tvm.validate import ValidationError

    try:
        run()
    except (ParamsError, ToolchainError, CheckpointError, ArtifactError, ValidationError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


def bucket_stage(name: str, doc: str | None, per_target: bool) -> None:
    """Run ``kokoro_tvm.stages.<name>(prm, component, bucket[, target])`` from the command line."""
    import argparse

    from kokoro_tvm import stages

    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("component")
    ap.add_argument("bucket", type=int)
    if per_target:
        ap.add_argument("target")
    a = ap.parse_args()
    args = (a.component, a.bucket) + ((a.target,) if per_target else ())
    main(lambda: getattr(stages, name)(stages.setup(), *args))
