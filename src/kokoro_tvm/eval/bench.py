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

from .. import artifacts as A
from ..errors import KokoroTVMError
from ..params import Params
from ..spec import check_component
from .timing import apply_threads, cpu_name, time_interleaved

RUNNERS = ("eager", "ort", "tvm")
#: Untimed calls of each runner before the timed rounds, counting the agreement check's call.
#: They amortize first-call costs (allocation, oneDNN primitives, thread-pool start) that last
#: milliseconds. Eager's first call decides for all three runners: if it took ``WARM_AFTER_S`` or
#: more, no runner gets another, since one multi-second call has paid those costs and each further
#: call costs the bench stage seconds (the three run the same work at similar speeds).
DEFAULT_WARMUP = 2
WARM_AFTER_S = 1.0
#: A runtime whose outputs miss these against eager (float32) kokoro computes something else, and
#: its time is not worth reporting: the bench stage refuses it. Decoder: log-mel SNR (dB); text
#: side: max relative error. Far looser than validation (which judges against float64): two
#: correct float32 builds of the trained decoder agree to only ~25 dB (chaotic sine phase and
#: near-zero STFT bins), while kokoro's two STFT paths, different computations, differ by 14.6 dB.
MIN_AGREEMENT = {"decoder": 20.0, "text": 1e-3}


class DisagreementError(KokoroTVMError, RuntimeError):
    """A benchmarked runtime's outputs differ from eager kokoro's."""


def _tvm_runner(lib, inputs):
    arrays = [x.numpy() for x in inputs]
    return lambda: lib(*arrays)


def _eager_runner(component: str, bucket: int, km, inputs, cfg: dict[str, Any]):
    """kokoro's own modules (packed LSTMs, TorchSTFT) at full length: what users run today."""
    from .reference import reference

    return lambda: [o.numpy() for o in reference(component, km, inputs, bucket, cfg)]


def ort_runner(component: str, bucket: int, km, cfg: dict[str, Any], inputs, threads: int,
               dynamo: bool = False) -> Callable[[], Any]:
    """Export ``component`` to ONNX (``export_onnx``) and return one ORT call on ``inputs``."""
    from .onnx_export import export_onnx, ort_feeds, ort_session

    session = ort_session(export_onnx(component, bucket, km, cfg, dynamo=dynamo), threads)
    feeds = ort_feeds(session, component, bucket, cfg, inputs)
    return lambda: session.run(None, feeds)


def agreement(component: str, ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    """Decoder: log-mel SNR (dB, higher is better); text side: max rel err (lower is better)."""
    from .metrics import log_mel_snr, rel_err

    if component == "decoder":
        return round(log_mel_snr(ref[0], got[0]), 2)
    return float(f"{max(rel_err(r, g) for r, g in zip(ref, got)):.3e}")


def measure(component: str, bucket: int, target: str, prm: Params, root: Path = A.ROOT,
            model=None) -> dict[str, Any]:
    """Median ms of eager, ORT and TVM on ``component`` at full ``bucket`` length, and ratios.

    ``speedup_vs_eager`` = eager/tvm and ``speedup_vs_ort`` = ort/tvm (> 1: TVM is faster).
    Repeats, thread count and whether ORT runs come from ``prm`` (``bench``, ``runtime``).
    The inputs are validation's (English text, the validation voice). ``model`` = ``(cfg, km)``
    skips loading kokoro from the artifacts when the caller already has it.
    """
    from ..runtime.library import load_built
    from .reference import as_float64, load_kokoro
    from .validate import inputs_for

    check_component(component)
    threads = apply_threads(prm.num_threads)
    lib = load_built(root, component, bucket, target, validated=True)  # before the slow part: fail fast
    cfg, km = model or load_kokoro(A.kokoro_checkpoint_file(root), A.model_config_file(root))
    pack = A.load_array(A.voice_file(root))
    inputs = inputs_for(component, bucket, bucket, cfg, pack, as_float64(km) if component == "decoder" else km)
    runners = {"eager": _eager_runner(component, bucket, km, inputs, cfg), "tvm": _tvm_runner(lib, inputs)}
    if prm.bench_onnxruntime:
        runners["ort"] = ort_runner(component, bucket, km, cfg, inputs, threads)
    t0 = time.perf_counter()
    ref = runners["eager"]()
    first_call_s = time.perf_counter() - t0
    checks = {f"{name}_agreement": agreement(component, ref, runners[name]()) for name in runners if name != "eager"}
    refuse_disagreement(component, checks)
    warmup = DEFAULT_WARMUP - 1 if first_call_s < WARM_AFTER_S else 0  # the check was the first
    load = os.getloadavg()[0]  # > threads: other processes share the cores, timings are inflated
    samples = time_interleaved(runners, prm.bench_repeats, warmup)
    ms = {name: round(statistics.median(s) * 1e3, 3) for name, s in samples.items()}
    ratios = {"speedup_vs_eager": round(ms["eager"] / ms["tvm"], 4)}
    if "ort" in ms:
        ratios |= {"speedup_vs_ort": round(ms["ort"] / ms["tvm"], 4), "ort_vs_eager": round(ms["ort"] / ms["eager"], 4)}
    return {
        "component": component, "bucket": bucket, "target": target,
        **{f"{name}_ms": v for name, v in ms.items()}, **ratios,
        "agreement_metric": "log_mel_snr_db" if component == "decoder" else "max_rel_err",
        **checks,
        "library_sha256": lib.entry["sha256"], "weights_sha256": lib.weights_sha256,
        "threads": threads, "repeats": prm.bench_repeats, "warmup": warmup + 1, "load_avg_1m": round(load, 2),
        "cpu": cpu_name(),
    }


def refuse_disagreement(component: str, checks: dict[str, float]) -> None:
    """Raise when a runtime's outputs miss ``MIN_AGREEMENT`` against eager kokoro."""
    bad = {}
    for name, value in checks.items():
        ok = (value >= MIN_AGREEMENT["decoder"] if component == "decoder"
              else value <= MIN_AGREEMENT["text"])
        if not ok:
            bad[name] = value
    if bad:
        bound = (f"log-mel SNR >= {MIN_AGREEMENT['decoder']} dB" if component == "decoder"
                 else f"max relative error <= {MIN_AGREEMENT['text']}")
        raise DisagreementError(f"{component}: {bad} against eager kokoro misses {bound}; its timing would "
                                "compare different computations, so it is not reported (for ONNX Runtime, "
                                "check the onnx/onnxruntime versions; for TVM, run the validate stage)")


def write_outputs(result: dict[str, Any], root: Path = A.ROOT) -> tuple[Path, Path]:
    """The stage's two DVC outputs, each written atomically: metrics and its plot row."""
    comp, bucket, target = result["component"], result["bucket"], result["target"]
    metrics, plot = A.bench_file(comp, bucket, target, root), A.bench_plot_file(comp, bucket, target, root)
    A.write_json(metrics, result)
    A.write_json(plot, [_plot_row(result)])
    return metrics, plot


def _plot_row(result: dict[str, Any]) -> dict[str, Any]:
    keys = ("component", "bucket", "speedup_vs_eager", "speedup_vs_ort", "eager_ms", "ort_ms", "tvm_ms")
    return {k: result[k] for k in keys if k in result}
