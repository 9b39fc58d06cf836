"""Schedule every kernel for a CPU target and compile the library."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def make_target(spec: dict[str, Any]):
    import tvm

    return tvm.target.Target(dict(spec))


def build(mod, target_spec: dict[str, Any], tune_db: Path | None = None):
    """Schedule every kernel for the CPU target, then ``tvm.compile``.

    PrimFuncs with a record in the ``tune_db`` database (``tune.tune``: only records that beat
    the rules are there) take the tuned schedule; the schedule pass does the rest.
    Returns the executable, the build seconds (schedule pass included) and the ``ScheduleReport``
    (which rule each PrimFunc got, ``tuned`` included, and which fell back to the generic one).
    """
    import tvm

    from . import schedule, tune

    target = make_target(target_spec)
    t0 = time.perf_counter()
    mod, tuned = tune.apply(mod, target, tune_db)
    mod, report = schedule.apply(mod, target, tuned)
    ex = tvm.compile(mod, target=target)
    return ex, time.perf_counter() - t0, report
