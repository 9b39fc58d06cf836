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
