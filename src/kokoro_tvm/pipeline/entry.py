"""How a stage module runs as a program (``python -m kokoro_tvm.pipeline.<kind> ARGS``, the
``cmd`` of its stages in dvc.yaml): positional arguments, ``params.yaml`` checked first, and a
known error as one line with exit status 1 (``kokoro_tvm.commands.exit_status``, as every command
of the project). A module that runs through here is a stage kind (``pipeline.code.kinds``)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

from ..commands import exit_status
from ..devices import processes
from ..spec import FP32, PRECISIONS
from .common import setup


def main(body: Callable[[], object]) -> NoReturn:
    _end_on_sigterm()
    sys.exit(exit_status(body))


#: how long a stage ended by SIGTERM may take to unwind (``finally`` blocks, temporary files)
#: once its helpers are stopped
SIGTERM_GRACE_S = 5.0


def _end_on_sigterm() -> None:
    """End the stage on SIGTERM (DVC's, a user's ``kill``), its helpers first.

    Python's default dies on the spot, running no ``finally``, so the helpers a stage started in
    their own sessions (qemu-user RPC servers, trackers: ``devices.processes``) outlived it. The
    signal now raises ``SystemExit`` where the stage's Python runs; and since it may be inside
    TVM or LLVM for minutes, where no Python runs, a thread woken by the signal itself stops the
    helpers at once and ends the process if it has not unwound within ``SIGTERM_GRACE_S``."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write)  # written by the C-level handler, whatever the main thread runs
    signal.signal(signal.SIGTERM, _terminated)

    def watch() -> None:
        while signal.SIGTERM not in os.read(read, 64):
            pass
        processes.stop_all()
        time.sleep(SIGTERM_GRACE_S)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="sigterm", daemon=True).start()


def _terminated(signum: int, _frame: object) -> NoReturn:
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
