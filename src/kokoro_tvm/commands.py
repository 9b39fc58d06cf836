"""What every command of the project (``kokoro-tvm``, the stages, ``python -m
kokoro_tvm.pipeline.ci`` and ``.lockfile``) shares: a problem the user can fix is one ``error:``
line and exit status 1, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .errors import KokoroTVMError


def exit_status(body: Callable[[], Any]) -> int:
    """Run a command's body: 0, or 1 after printing its ``KokoroTVMError`` as one line."""
    try:
        body()
    except KokoroTVMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
