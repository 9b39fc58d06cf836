"""How a stage module runs as a program (``python -m kokoro_tvm.pipeline.<kind> ARGS``, the
``cmd`` of its stages in dvc.yaml): positional arguments, ``params.yaml`` checked first, and a
known error as one line with exit status 1 (``kokoro_tvm.commands.exit_status``, as every command
of the project). A module that runs through here is a stage kind (``pipeline.code.kinds``)."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from ..commands import exit_status
from ..spec import FP32, PRECISIONS
from .common import setup


def main(body: Callable[[], object]) -> NoReturn:
    signal.signal(signal.SIGTERM, _terminated)
    sys.exit(exit_status(body))


def _terminated(signum: int, _frame: object) -> NoReturn:
    """SIGTERM (DVC's, a user's ``kill``) as ``SystemExit``: Python's default dies on the spot,
    running no ``finally``, so the helpers a stage started in their own sessions (qemu-user RPC
    servers, trackers: ``devices.processes``) and its temporary files would outlive it. TVM's
    blocking calls check for signals, so the exception reaches the stage's frames."""
    raise SystemExit(128 + signum)


def args(doc: str | None, *names: str) -> argparse.Namespace:
    """Positional arguments: ``component``, ``bucket`` (an int) and ``target``, as named, and an
    optional ``precision?`` last (a narrower precision's stages pass it)."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)  # None when not run with -m
    prog = f"python -m {spec.name}" if spec else None
    ap = argparse.ArgumentParser(prog=prog, description=doc)
    for name in names:
        if name.endswith("?"):  # ``precision?``: optional, float32 when absent
            ap.add_argument(name[:-1], nargs="?", default=FP32, choices=PRECISIONS)
        else:
            ap.add_argument(name, type=int if name == "bucket" else str)
    return ap.parse_args()


def stage(doc: str | None, run: Callable[..., object], *names: str) -> NoReturn:
    """Run a stage body: ``run(params, *arguments)``, the arguments parsed as ``names`` say, after
    ``common.setup`` (params and toolchain) so a bad edit fails before any work."""
    a = args(doc, *names)
    main(lambda: run(setup(), *(getattr(a, n.rstrip("?")) for n in names)))
