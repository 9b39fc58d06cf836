"""Timing side by side on a shared machine: interleaved rounds, one thread count, settled cores."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from .. import cpuinfo

#: Pause before each timed call. PyTorch's OpenMP, ONNX Runtime and TVM all keep their worker
#: threads spinning for a while after a run; on 2 cores the next runtime then shares the cores
#: with the previous one's spinners: without a pause eager ran at half speed next to ORT's, and a
#: much shorter pause caught ORT's threads mid-way to sleep (docs/measurements.md, "Settle
#: pause").
SETTLE_S = 0.3


def apply_threads(num_threads: int) -> int:
    """One thread count for every runtime in the process (0 = all cores). Returns the count.

    TVM reads ``TVM_NUM_THREADS`` when its pool first starts (default: half the cores), so this
    must run before the first TVM call in the process; the stages guarantee that.
    """
    import torch

    threads = num_threads or os.cpu_count() or 1
    os.environ["TVM_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    return threads


def timed_call(fn: Callable[[], Any], settle_s: float = SETTLE_S) -> tuple[Any, float]:
    """``fn()`` and its seconds, after a ``settle_s`` pause (see ``SETTLE_S``)."""
    time.sleep(settle_s)
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def time_interleaved(
    runners: dict[str, Callable[[], Any]],
    repeats: int,
    warmup: int,
    settle_s: float = SETTLE_S,
    first_round: int = 0,
) -> dict[str, list[float]]:
    """Seconds per call for each runner: ``warmup`` untimed calls each, then ``repeats`` rounds,
    each round calling every runner once in an order that rotates between rounds, each timed
    call preceded by a ``settle_s`` pause (see ``SETTLE_S``). ``first_round``: rounds the caller
    has already timed itself (in runner order), so the rotation goes on from there."""
    names = list(runners)
    for _ in range(warmup):
        for name in names:
            runners[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(first_round, first_round + repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            samples[name].append(timed_call(runners[name], settle_s)[1])
        # progress of a long stage (a decoder round takes minutes): the round and its times
        print(
            f"round {r + 1}/{first_round + repeats}: "
            + ", ".join(f"{name} {samples[name][-1]:.3g} s" for name in names),
            flush=True,
        )
    return samples


def cpu_name() -> str:
    """Timings belong to a machine; the metrics say which (``cpuinfo.model_name``)."""
    return cpuinfo.model_name()
