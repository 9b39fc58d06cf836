"""Latency of one compiled library against PyTorch eager and ONNX Runtime, in one process.

The three runners get the same weights (the manifest's checkpoint), the same full-bucket inputs
(``components.example_inputs``) and the same thread count (``runtime.num_threads``), and are
timed in interleaved rounds whose order rotates, so load from other processes on a shared
machine hits all three alike. Each runner's outputs are also checked against eager once: a
speedup of a library that computes something else is worthless.

Each call includes the runtime's own host<->tensor conversions (numpy in, numpy out for ORT and
TVM), i.e. what a caller of that runtime pays.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import artifacts as A
from . import params as P

RUNNERS = ("eager", "ort", "tvm")
DEFAULT_WARMUP = 2


def bench_file(component: str, bucket: int, target: str, root: Path = A.ROOT) -> Path:
    """Per-stage metrics (DVC ``metrics``, one flat dict)."""
    return root / "bench" / target / f"{component}-{bucket}.json"


def plot_file(component: str, bucket: int, target: str, root: Path = A.ROOT) -> Path:
    """Per-stage plot row (a one-element list: the shape ``dvc plots`` reads)."""
    return root / "bench_plots" / target / f"{component}-{bucket}.json"


def summary_file(component: str, target: str, root: Path = A.ROOT) -> Path:
    """Every bucket of one component on one target: one line in the speedup plot."""
    return root / "bench_summary" / target / f"{component}.json"


def apply_threads(num_threads: int) -> int:
    """One thread count for all three runtimes (0 = all cores). Returns the count used.

    TVM reads ``TVM_NUM_THREADS`` when its pool first starts (default: half the cores), so this
    must run before the first TVM call in the process; the stage script guarantees that.
    """
    import torch

    threads = num_threads or os.cpu_count() or 1
    os.environ["TVM_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    return threads


def _tvm_runner(lib, inputs):
    arrays = [x.numpy() for x in inputs]
    return lambda: lib(*arrays)


def _eager_runner(component: str, km, inputs):
    import torch

    from .components import build_component

    module = build_component(component, km)

    def run():
        with torch.inference_mode():
            out = module(*inputs)
        return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]

    return run


def _ort_runner(component: str, bucket: int, km, cfg: dict[str, Any], inputs, threads: int):
    from .onnx_export import export_onnx, ort_feeds, ort_session

    session = ort_session(export_onnx(component, bucket, km, cfg), threads)
    feeds = ort_feeds(session, component, bucket, cfg, inputs)
    return lambda: session.run(None, feeds)


def agreement(component: str, ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    """Decoder: log-mel SNR (dB, higher is better); text side: max rel err (lower is better)."""
    from .metrics import log_mel_snr, rel_err

    if component == "decoder":
        return round(log_mel_snr(ref[0], got[0]), 2)
    return float(f"{max(rel_err(r, g) for r, g in zip(ref, got)):.3e}")


#: Pause before each timed call. PyTorch's OpenMP, ONNX Runtime and TVM all keep their worker
#: threads spinning for a while after a run; on 2 cores the next runtime then shares the cores
#: with the previous one's spinners. ``python benchmarks/settle.py duration 64 --ort`` (medians,
#: ms): with no pause eager ran at 266 next to ORT's spinners against 136 with 0.3 s, and a
#: 0.05 s pause caught ORT's threads mid-way to sleep (ORT 150-167 against 82-93 at 0.3-1 s).
SETTLE_S = 0.3


def time_interleaved(runners: dict[str, Callable[[], Any]], repeats: int, warmup: int,
                     settle_s: float = SETTLE_S) -> dict[str, list[float]]:
    """Seconds per call for each runner: ``warmup`` untimed calls each, then ``repeats`` rounds,
    each round calling every runner once in an order that rotates between rounds, each timed
    call preceded by a ``settle_s`` pause (see ``SETTLE_S``)."""
    names = list(runners)
    for _ in range(warmup):
        for name in names:
            runners[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            time.sleep(settle_s)
            t0 = time.perf_counter()
            runners[name]()
            samples[name].append(time.perf_counter() - t0)
    return samples


def measure(component: str, bucket: int, target: str, prm: P.Params, root: Path = A.ROOT,
            model=None) -> dict[str, Any]:
    """Median ms of eager, ORT and TVM on ``component`` at full ``bucket`` length, and ratios.

    ``speedup_vs_eager`` = eager/tvm and ``speedup_vs_ort`` = ort/tvm (> 1: TVM is faster).
    Repeats, thread count and whether ORT runs come from ``prm`` (``bench``, ``runtime``).
    ``model`` = ``(cfg, km)`` skips rebuilding kokoro when the caller already has it.
    """
    from .components import example_inputs
    from .library import load_built
    from .model import load as load_model

    P.check_component(component)
    threads = apply_threads(prm.num_threads)
    lib = load_built(root, component, bucket, target)  # before the slow part: fail fast
    cfg, km = model or load_model(prm.model_config, prm.checkpoint, prm.seed)
    inputs = example_inputs(component, bucket, cfg)
    runners = {"eager": _eager_runner(component, km, inputs), "tvm": _tvm_runner(lib, inputs)}
    if prm.bench_onnxruntime:
        runners["ort"] = _ort_runner(component, bucket, km, cfg, inputs, threads)
    ref = runners["eager"]()
    checks = {f"{name}_agreement": agreement(component, ref, runners[name]()) for name in runners if name != "eager"}
    load = os.getloadavg()[0]  # > threads: other processes share the cores, timings are inflated
    samples = time_interleaved(runners, prm.bench_repeats, DEFAULT_WARMUP)
    ms = {name: round(statistics.median(s) * 1e3, 3) for name, s in samples.items()}
    ratios = {"speedup_vs_eager": round(ms["eager"] / ms["tvm"], 4)}
    if "ort" in ms:
        ratios |= {"speedup_vs_ort": round(ms["ort"] / ms["tvm"], 4), "ort_vs_eager": round(ms["ort"] / ms["eager"], 4)}
    return {
        "component": component, "bucket": bucket, "target": target,
        **{f"{name}_ms": v for name, v in ms.items()}, **ratios,
        "agreement_metric": "log_mel_snr_db" if component == "decoder" else "max_rel_err",
        **checks,
        "threads": threads, "repeats": prm.bench_repeats, "warmup": DEFAULT_WARMUP, "load_avg_1m": round(load, 2),
        "cpu": cpu_name(),
    }


def cpu_name() -> str:
    """Timings belong to a machine; the metrics say which."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def write_outputs(result: dict[str, Any], root: Path = A.ROOT) -> tuple[Path, Path]:
    """The stage's two DVC outputs, each written atomically: metrics and its plot row."""
    comp, bucket, target = result["component"], result["bucket"], result["target"]
    metrics, plot = bench_file(comp, bucket, target, root), plot_file(comp, bucket, target, root)
    A.write_json(metrics, result)
    A.write_json(plot, [_plot_row(result)])
    return metrics, plot


def _plot_row(result: dict[str, Any]) -> dict[str, Any]:
    keys = ("component", "bucket", "speedup_vs_eager", "speedup_vs_ort", "eager_ms", "ort_ms", "tvm_ms")
    return {k: result[k] for k in keys if k in result}


def write_summary(target: str, prm: P.Params, root: Path = A.ROOT) -> list[Path]:
    """Gather every bucket's plot row into one file per component (one plot line each).

    Stages cannot share an output file, so rows are written per stage and gathered here.
    """
    out = []
    for component in P.COMPONENTS:
        rows = [A.read_json(plot_file(component, b, target, root), "bench plot row")[0]
                for b in prm.buckets(component)]
        path = summary_file(component, target, root)
        A.write_json(path, sorted(rows, key=lambda r: r["bucket"]))
        out.append(path)
    return out
