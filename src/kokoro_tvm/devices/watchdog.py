"""A bound on how long a remote device may stay silent.

TVM's RPC client waits on its socket for ever: a board that loses power or network mid-call,
or a qemu server that hangs, would hold a stage (and its CI runner) until someone kills it.
Every remote call runs under ``deadline``; past it the process prints one ``error:`` line that
names the device and exits, so the stage fails within minutes and, its outputs being atomic,
leaves nothing half-written.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

from . import processes

#: the longest one remote call (an upload, one library run under emulation) may take
CALL_TIMEOUT_S = float(os.environ.get("KOKORO_TVM_RPC_CALL_TIMEOUT", "900"))


def _expire(what: str, seconds: float) -> None:
    print(
        f"error: {what} did not answer within {seconds:g} s: the device was lost or hangs; check "
        "it (and its tracker), or raise KOKORO_TVM_RPC_CALL_TIMEOUT for a slow one, then rerun",
        file=sys.stderr,
        flush=True,
    )
    # no ``finally`` runs past ``os._exit``: the helpers' own sessions would outlive the stage
    processes.stop_all()
    os._exit(1)  # the call cannot be interrupted from Python: it blocks inside TVM's socket


@contextlib.contextmanager
def deadline(what: str, seconds: float | None = None) -> Iterator[None]:
    """Run the block, or end the process with a clear error if it outlasts ``seconds``."""
    seconds = CALL_TIMEOUT_S if seconds is None else seconds
    timer = threading.Timer(seconds, _expire, args=(what, seconds))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
