"""How many cores this process may use, and how TVM's thread pools share them.

``os.cpu_count()`` counts the machine, not what a container or ``taskset`` grants: a process
limited to 2 CPUs of 64 that starts 64 threads runs them 32 to a core. The budget here is the
smaller of the CPU affinity mask and the cgroup CPU quota (v2 ``cpu.max``, v1
``cpu.cfs_quota_us``), rounded up.

TVM keeps one thread pool per *calling* thread, sized by ``TVM_NUM_THREADS`` when that thread
first runs a kernel, and by default pins each pool's workers to the first cores. Several callers
(server workers) would then stack all their workers on the same cores. ``share`` is for those
callers: each sizes its own pool to its share of the budget and leaves scheduling to the OS.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ..errors import KokoroTVMError

#: the TVM variable that pins pool workers to cores (read when a pool is made)
BIND_VARIABLE = "TVM_BIND_THREADS"
NUM_VARIABLE = "TVM_NUM_THREADS"


class ThreadCountError(KokoroTVMError, ValueError):
    """A thread count that is not a positive integer."""


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _cgroup_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs the cgroup quota allows (a fraction is allowed), or None when unlimited/unknown."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def available_cores(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may use: its affinity mask, capped by its cgroup quota."""
    cores = _affinity()
    quota = _cgroup_quota(cgroup_root)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def check_count(value: object, what: str = "threads") -> int | None:
    """``None`` or 0 (every available core) as None; a positive int as itself; else an error."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 0):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ThreadCountError(
            f"{what} must be a positive whole number (or 0 for every available core), got {value!r}"
        )
    return value


def configure_process(num_threads: int | None) -> int:
    """Set the pool size every calling thread starts with; returns it. Call before any kernel
    runs (TVM reads the variable when a thread's pool is made)."""
    n = check_count(num_threads) or available_cores()
    os.environ[NUM_VARIABLE] = str(n)
    return n


def share(workers: int, cores: int | None = None) -> int:
    """Threads per worker when ``workers`` threads call kernels at once: an equal share of the
    budget, at least one. Also turns off TVM's core pinning for pools made from now on, so the
    workers' pools do not pile onto the same cores."""
    workers = check_count(workers, "workers") or 1
    os.environ[BIND_VARIABLE] = "0"
    return max(1, (cores or available_cores()) // workers)


def use_threads(n: int) -> None:
    """Size the calling thread's own TVM pool to ``n`` threads (this thread only)."""
    from . import tvm_runtime

    tvm_runtime.config_threadpool(check_count(n) or available_cores())
