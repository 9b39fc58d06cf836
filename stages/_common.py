"""Shared by the stage scripts: argument parsing, and known errors as one line with exit code 1."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from kokoro_tvm.errors import KokoroTVMError


def main(run: Callable[[], object]) -> None:
    try:
        run()
    except KokoroTVMError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


def args(doc: str | None, *names: str) -> argparse.Namespace:
    """Positional arguments: ``component``, ``bucket`` (an int) and ``target``, as named."""
    ap = argparse.ArgumentParser(description=doc)
    for name in names:
        ap.add_argument(name, type=int if name == "bucket" else str)
    return ap.parse_args()
