"""Shared by the stage scripts: argument parsing, and known errors as one line with exit code 1
(``kokoro_tvm.commands.exit_status``, as every command of the project)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from kokoro_tvm.commands import exit_status


def main(run: Callable[[], object]) -> None:
    sys.exit(exit_status(run))


def args(doc: str | None, *names: str) -> argparse.Namespace:
    """Positional arguments: ``component``, ``bucket`` (an int) and ``target``, as named."""
    ap = argparse.ArgumentParser(description=doc)
    for name in names:
        ap.add_argument(name, type=int if name == "bucket" else str)
    return ap.parse_args()
