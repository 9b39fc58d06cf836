"""Latency of one compiled library against PyTorch eager and ONNX Runtime, in one process.

The three runners get the same weights, the same full-bucket inputs and the same thread count,
and are timed in interleaved rounds whose order rotates, so load from other processes on a shared
machine hits all three alike. The inputs are the reference stage's full-bucket case, and each
runner's first outputs are judged against kokoro in float64 there, by validation's criterion
(``eval.verdicts``): a speedup of a library that computes something else is worthless. Eager
float32 is no yardstick: float32 kokoro is itself chaotic on voiced audio, and two correct
float32 decoders can disagree by more than a fixed log-mel floor allows while both meet the
float64 criterion.

Each call includes the runtime's own host<->tensor conversions (numpy in, numpy out for ORT and
TVM), i.e. what a caller of that runtime pays. Everything here works on what its caller loaded
(the library, kokoro, the case, the legalized module): the ``bench`` stage reads them and writes
what this returns.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import KokoroTVMError
from ..spec import lookup
from .cases import Case
from .timing import SETTLE_S, time_interleaved, timed_call
from .verdicts import criterion, judge

RUNNERS = ("eager", "ort", "tvm")
#: Untimed calls of each runner before the timed rounds, counting the agreement check's call.
#: They amortize first-call costs (allocation, oneDNN primitives, thread-pool start) that last
#: milliseconds. Eager's first call decides for all three runners: if it took ``WARM_AFTER_S`` or
#: more, the agreement check's calls (each timed after the settle pause) are the first timed
#: round: a long first call is barely slow, once, and a median absorbs it, while a further round
#: of the large decoders would lengthen every bench stage; short first calls are slower by more
#: and keep a warm-up (docs/measurements.md, "No warm-up after a slow first call").
DEFAULT_WARMUP = 2
WARM_AFTER_S = 1.0
#: Runners whose float64 verdict must pass for the bench to report anything: the library under
#: test. kokoro eager is float32 kokoro itself, and ONNX Runtime a peer whose kernels round
#: differently (its duration predictor sits ~2e-5 from float64, twice the library's bound):
#: their verdicts are recorded beside their times, and a failed one is printed.
MUST_AGREE = ("tvm",)


class DisagreementError(KokoroTVMError, RuntimeError):
    """A benchmarked runtime's outputs differ from eager kokoro's."""


def tvm_runner(lib, inputs) -> Callable[[], Any]:
    """One call of ``lib`` (a ``CompiledComponent``) on ``inputs`` (tensors), numpy in and out."""
    arrays = [x.numpy() for x in inputs]
    return lambda: lib(*arrays)


def eager_runner(component: str, bucket: int, km, inputs, cfg: dict[str, Any]):
    """kokoro's own modules (packed LSTMs, TorchSTFT) at full length: what users run today."""
    from .eager import reference

    return lambda: [o.numpy() for o in reference(component, km, inputs, bucket, cfg)]


def ort_runner(component: str, km, inputs, threads: int, dynamo: bool = False) -> Callable[[], Any]:
    """Export ``component`` to ONNX traced on ``inputs`` (``export_onnx``) and return one ORT call
    on them."""
    from .onnx_export import export_onnx, ort_feeds, ort_session

    session = ort_session(export_onnx(component, km, inputs, dynamo=dynamo), threads)
    feeds = ort_feeds(session, component, inputs)
    return lambda: session.run(None, feeds)


def verdict(component: str, case: Case, got: list[np.ndarray]) -> dict[str, Any]:
    """Validation's verdict on ``got`` against float64 kokoro (``eval.verdicts``), compact."""
    row = judge(component, case, [np.asarray(g) for g in got])
    return {k: row[k] for k in VERDICT_KEYS if k in row}


#: The keys of a verdict row the bench keeps, of either criterion.
VERDICT_KEYS = (
    "log_mel_snr_db",
    "min_snr_db",
    "mcd_db",
    "max_mcd_db",
    "rel_err",
    "max_rel_err",
    "durations_equal",
    "ok",
)


def measure(
    component: str,
    bucket: int,
    lib,
    model: tuple[dict[str, Any], Any],
    case: Case,
    pack: np.ndarray,
    legalized,
    *,
    threads: int,
    repeats: int,
    target: dict[str, Any],
    onnxruntime: bool = True,
) -> dict[str, Any]:
    """Median ms of eager, ORT (with ``onnxruntime``) and TVM on ``case``, and their ratios.

    ``lib``: the validated library (``CompiledComponent``); ``model``: kokoro's ``(cfg, km)``;
    ``case``: the reference stage's full-bucket case (inputs, float64 and float32 outputs);
    ``pack``: the voice pack (a bounded library's quarter-length inputs); ``legalized``: the
    library's legalized module (the roofline's FLOPs per kernel); ``target``: its TVM target
    (the FMA peak). ``threads`` must already be applied (``timing.apply_threads``).

    ``speedup_vs_eager`` = eager/tvm and ``speedup_vs_ort`` = ort/tvm (> 1: TVM is faster). Every
    runner's outputs get validation's verdict against float64 kokoro (``<runner>_vs_float64``);
    the library's must pass (``DisagreementError``)."""
    import torch

    cfg, km = model
    inputs = tuple(torch.from_numpy(np.ascontiguousarray(x)) for x in case["inputs"])
    runners = {
        "eager": eager_runner(component, bucket, km, inputs, cfg),
        "tvm": tvm_runner(lib, inputs),
    }
    if onnxruntime:
        runners["ort"] = ort_runner(component, km, inputs, threads)
    checks: dict[str, dict[str, Any]] = {}

    def check(outputs: dict[str, Any]) -> None:
        checks.update(
            {f"{name}_vs_float64": verdict(component, case, out) for name, out in outputs.items()}
        )
        refuse_disagreement(component, checks)

    samples, warmup = checked_rounds(runners, repeats, check)
    load = os.getloadavg()[0]  # > threads: other processes share the cores, timings are inflated
    ms = {name: round(statistics.median(s) * 1e3, 3) for name, s in samples.items()}
    roof, kernels = roofline_of(lib, runners, ms, target, threads, legalized)
    ratios = {"speedup_vs_eager": round(ms["eager"] / ms["tvm"], 4)}
    if lib.bounded:
        ratios |= quarter_scaling(lib, runners["tvm"], component, bucket, cfg, pack, km, repeats)
    if "ort" in ms:
        ratios |= {
            "speedup_vs_ort": round(ms["ort"] / ms["tvm"], 4),
            "ort_vs_eager": round(ms["ort"] / ms["eager"], 4),
        }
    return {
        **{f"{name}_ms": v for name, v in ms.items()},
        **ratios,
        "criterion": criterion(component),
        **checks,
        **roof,
        "top_kernels": kernels,
        "library_sha256": lib.entry.sha256,
        "weights_sha256": lib.weights_sha256,
        "threads": threads,
        "repeats": repeats,
        "warmup": warmup,
        "load_avg_1m": round(load, 2),
    }


def roofline_of(
    lib,
    runners: dict[str, Callable[[], Any]],
    ms: dict[str, float],
    target: dict[str, Any],
    threads: int,
    legalized,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The roofline view of one bench (``eval.roofline``), after the timed rounds: FLOPs counted
    on eager kokoro's call, the target's FMA peak measured here, and one instrumented run of the
    library against its legalized module. Returns the metrics and the per-kernel rows."""
    from . import roofline

    flops = roofline.model_flops(runners["eager"])
    peak = roofline.fma_peak(target, threads)
    kernels = roofline.kernel_profile(lib.vm, runners["tvm"], legalized, peak["gflops"])
    return roofline.summary(flops, ms, peak, kernels), kernels["top"]


def board_ms(lib, inputs: list[np.ndarray], repeats: int) -> float:
    """Median ms of ``lib`` on a board reached through an RPC tracker (``lib`` loaded in that
    session), timed there (``time_evaluator``: no transfer over the connection)."""
    lib.vm.set_input("main", *lib.device_args(*inputs))  # RPC: no tuples
    timer = lib.vm.time_evaluator(
        "invoke_stateful", lib.dev, number=1, repeat=repeats, min_repeat_ms=0
    )
    return round(timer("main").median * 1e3, 3)


def quarter_scaling(
    lib,
    full: Callable[[], Any],
    component: str,
    bucket: int,
    cfg: dict[str, Any],
    pack: np.ndarray,
    km,
    repeats: int,
) -> dict[str, float]:
    """A bounded library at n = B/4 against itself at n = B, interleaved: what it saves on inputs
    that do not fill their bucket, which a padded one cannot (docs/measurements.md, "Bounded
    against padded libraries")."""
    from .cases import inputs_for, inputs_model

    n = max(lookup(component).min_length, bucket // 4)
    quarter = inputs_for(component, bucket, n, cfg, pack, inputs_model(component, km))
    samples = time_interleaved({"full": full, "quarter": tvm_runner(lib, quarter)}, repeats, 1)
    ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    return {
        "tvm_quarter_ms": round(ms["quarter"], 3),
        "quarter_over_full": round(ms["quarter"] / ms["full"], 4),
    }


def checked_rounds(
    runners: dict[str, Callable[[], Any]],
    repeats: int,
    check: Callable[[dict[str, Any]], None],
    settle_s: float = SETTLE_S,
) -> tuple[dict[str, list[float]], int]:
    """``repeats`` timed calls of each runner, interleaved, and the untimed calls each got.

    Every runner is first called once, in order, each call timed after the settle pause; ``check``
    gets those outputs and raises to stop before any further call. If the first runner's call
    took ``WARM_AFTER_S`` or more, that round is the first timed one; otherwise each runner gets
    ``DEFAULT_WARMUP`` untimed calls (the check's included) before ``repeats`` timed rounds.
    """
    first = {name: timed_call(runner, settle_s) for name, runner in runners.items()}
    check({name: out for name, (out, _) in first.items()})
    if first[next(iter(runners))][1] >= WARM_AFTER_S:
        rest = time_interleaved(runners, repeats - 1, 0, settle_s, first_round=1)
        return {name: [first[name][1], *s] for name, s in rest.items()}, 0
    return time_interleaved(runners, repeats, DEFAULT_WARMUP - 1, settle_s), DEFAULT_WARMUP


def refuse_disagreement(component: str, checks: dict[str, dict[str, Any]]) -> None:
    """Raise when a ``MUST_AGREE`` runner's float64 verdict failed; print a peer's failed one."""
    failed = {name: row for name, row in checks.items() if not row["ok"]}
    for name, row in failed.items():
        if name.removesuffix("_vs_float64") not in MUST_AGREE:
            print(
                f"{component}: {name.removesuffix('_vs_float64')} misses the float64 criterion "
                f"({row}); its time is recorded with that verdict"
            )
    bad = {
        name: row for name, row in failed.items() if name.removesuffix("_vs_float64") in MUST_AGREE
    }
    if bad:
        raise DisagreementError(
            f"{component}: {bad} misses the float64 criterion ({criterion(component)}); "
            "its timing would compare different computations, so it is not reported "
            "(run the validate stage, which holds the library to the same criterion)"
        )
