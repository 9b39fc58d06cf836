"""Latency of one compiled library against PyTorch eager and ONNX Runtime, in one process.

The three runners get the same weights (the manifest's checkpoint), the same full-bucket inputs
and the same thread count (``runtime.num_threads``), and are timed in interleaved rounds whose
order rotates, so load from other processes on a shared machine hits all three alike. The inputs
are the reference stage's full-bucket case, and each runner's first outputs are judged against
kokoro in float64 there, by validation's criterion (``eval.verdicts``): a speedup of a library
that computes something else is worthless. Eager float32 is no yardstick: float32 kokoro is
itself chaotic on voiced audio, and two correct float32 decoders can disagree by more than a
fixed log-mel floor allows while both meet the float64 criterion.

Each call includes the runtime's own host<->tensor conversions (numpy in, numpy out for ORT and
TVM), i.e. what a caller of that runtime pays.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import artifacts
from ..errors import KokoroTVMError
from ..params import Params
from ..spec import lookup
from .timing import SETTLE_S, apply_threads, cpu_name, time_interleaved, timed_call
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


def _tvm_runner(lib, inputs):
    arrays = [x.numpy() for x in inputs]
    return lambda: lib(*arrays)


def _eager_runner(component: str, bucket: int, km, inputs, cfg: dict[str, Any]):
    """kokoro's own modules (packed LSTMs, TorchSTFT) at full length: what users run today."""
    from .eager import reference

    return lambda: [o.numpy() for o in reference(component, km, inputs, bucket, cfg)]


def ort_runner(
    component: str, bucket: int, km, cfg: dict[str, Any], inputs, threads: int, dynamo: bool = False
) -> Callable[[], Any]:
    """Export ``component`` to ONNX (``export_onnx``) and return one ORT call on ``inputs``."""
    from .onnx_export import export_onnx, ort_feeds, ort_session

    session = ort_session(export_onnx(component, bucket, km, cfg, dynamo=dynamo), threads)
    feeds = ort_feeds(session, component, inputs)
    return lambda: session.run(None, feeds)


def full_bucket_case(
    component: str, bucket: int, cfg: dict[str, Any], root: Path = artifacts.ROOT
) -> dict[str, Any]:
    """The reference stage's case at the full bucket: inputs, float64 and float32 kokoro outputs."""
    from .case_files import load_cases

    path = artifacts.reference_file(component, bucket, root)
    cases = load_cases(path, component, bucket, cfg)
    if bucket not in cases:
        raise artifacts.ArtifactError(
            f"{path} has no full-bucket case (lengths {sorted(cases)}); rerun its reference stage"
        )
    return cases[bucket]


def verdict(component: str, case: dict[str, Any], got: list[np.ndarray]) -> dict[str, Any]:
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
    component: str, bucket: int, target: str, prm: Params, root: Path = artifacts.ROOT, model=None
) -> dict[str, Any]:
    """Median ms of eager, ORT and TVM on ``component`` at full ``bucket`` length, and ratios.

    ``speedup_vs_eager`` = eager/tvm and ``speedup_vs_ort`` = ort/tvm (> 1: TVM is faster).
    Repeats, thread count and whether ORT runs come from ``prm`` (``bench``, ``runtime``).
    The inputs are the reference stage's full-bucket case (English text, the validation voice),
    and every runner's outputs get validation's verdict against float64 kokoro on it
    (``<runner>_vs_float64``); the library's must pass. ``model`` = ``(cfg, km)`` skips loading
    kokoro from the artifacts when the caller already has it.
    """
    import torch

    from ..runtime.built import load_built
    from .eager import load_kokoro

    lookup(component)  # an unknown name, and below a missing library, fail before the slow part
    threads = apply_threads(prm.num_threads)
    lib = load_built(root, component, bucket, target, validated=True)
    cfg, km = model or load_kokoro(
        artifacts.kokoro_checkpoint_file(root), artifacts.model_config_file(root)
    )
    pack = artifacts.load_array(artifacts.voice_file(root))
    case = full_bucket_case(component, bucket, cfg, root)
    inputs = tuple(torch.from_numpy(np.ascontiguousarray(x)) for x in case["inputs"])
    runners = {
        "eager": _eager_runner(component, bucket, km, inputs, cfg),
        "tvm": _tvm_runner(lib, inputs),
    }
    if prm.bench_onnxruntime:
        runners["ort"] = ort_runner(component, bucket, km, cfg, inputs, threads)
    checks: dict[str, dict[str, Any]] = {}

    def check(outputs: dict[str, Any]) -> None:
        checks.update(
            {f"{name}_vs_float64": verdict(component, case, out) for name, out in outputs.items()}
        )
        refuse_disagreement(component, checks)

    samples, warmup = checked_rounds(runners, prm.bench_repeats, check)
    load = os.getloadavg()[0]  # > threads: other processes share the cores, timings are inflated
    ms = {name: round(statistics.median(s) * 1e3, 3) for name, s in samples.items()}
    roof, kernels = roofline_of(
        lib, runners, ms, prm.targets[target], threads, component, bucket, root
    )
    ratios = {"speedup_vs_eager": round(ms["eager"] / ms["tvm"], 4)}
    if lib.bounded:
        ratios |= quarter_scaling(
            lib, runners["tvm"], component, bucket, cfg, pack, km, prm.bench_repeats
        )
    if "ort" in ms:
        ratios |= {
            "speedup_vs_ort": round(ms["ort"] / ms["tvm"], 4),
            "ort_vs_eager": round(ms["ort"] / ms["eager"], 4),
        }
    return {
        "component": component,
        "bucket": bucket,
        "target": target,
        "timed": True,
        "device": "host",
        "emulated": False,
        **{f"{name}_ms": v for name, v in ms.items()},
        **ratios,
        "criterion": criterion(component),
        **checks,
        **roof,
        "top_kernels": kernels,
        "library_sha256": lib.entry["sha256"],
        "weights_sha256": lib.weights_sha256,
        "threads": threads,
        "repeats": prm.bench_repeats,
        "warmup": warmup,
        "load_avg_1m": round(load, 2),
        "cpu": cpu_name(),
    }


def roofline_of(
    lib,
    runners: dict[str, Callable[[], Any]],
    ms: dict[str, float],
    target_spec: dict[str, Any],
    threads: int,
    component: str,
    bucket: int,
    root: Path,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The roofline view of one bench (``eval.roofline``), after the timed rounds: FLOPs counted
    on eager kokoro's call, the target's FMA peak measured here, and one instrumented run of the
    library against its legalized module. Returns the metrics and the per-kernel rows."""
    from . import roofline

    flops = roofline.model_flops(runners["eager"])
    peak = roofline.fma_peak(target_spec, threads)
    kernels = roofline.kernel_profile(
        lib.vm,
        runners["tvm"],
        artifacts.load_ir(artifacts.legalized_file(component, bucket, root)),
        peak["gflops"],
    )
    return roofline.summary(flops, ms, peak, kernels), kernels["top"]


def measure_on_board(
    component: str,
    bucket: int,
    target: str,
    prm: Params,
    device: dict[str, Any],
    root: Path = artifacts.ROOT,
) -> dict[str, Any]:
    """Median ms of the library on a board reached through an RPC tracker, at full ``bucket``
    length, timed there (``time_evaluator``: no transfer over the connection). kokoro and ONNX
    Runtime do not run on the board, so there is no ratio; ``benchmarks`` on the board give them."""
    from ..devices.session import open_session
    from ..runtime.built import load_built
    from .cases import inputs_for, inputs_model
    from .eager import load_kokoro

    cfg, km = load_kokoro(artifacts.kokoro_checkpoint_file(root), artifacts.model_config_file(root))
    pack = artifacts.load_array(artifacts.voice_file(root))
    inputs = inputs_for(component, bucket, bucket, cfg, pack, inputs_model(component, km))
    with open_session(device) as session:
        lib = load_built(root, component, bucket, target, validated=True, session=session)
        lib.vm.set_input("main", *lib.device_args(*[x.numpy() for x in inputs]))  # RPC: no tuples
        timer = lib.vm.time_evaluator(
            "invoke_stateful", lib.dev, number=1, repeat=prm.bench_repeats, min_repeat_ms=0
        )
        ms = timer("main").median * 1e3
    return {
        "component": component,
        "bucket": bucket,
        "target": target,
        "timed": True,
        "device": device["device"],
        "key": device["key"],
        "tvm_ms": round(ms, 3),
        "repeats": prm.bench_repeats,
        "library_sha256": lib.entry["sha256"],
        "weights_sha256": lib.weights_sha256,
    }


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
    samples = time_interleaved({"full": full, "quarter": _tvm_runner(lib, quarter)}, repeats, 1)
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
                f"{component}: {name.removesuffix('_vs_float64')} misses the float64 criterion ({row}); "
                "its time is recorded with that verdict"
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


def roofline_file(component: str, bucket: int, target: str, root: Path = artifacts.ROOT) -> Path:
    """Per-library top kernels: time, GFLOP/s and share of the FMA peak (DVC ``plots``). Here, not
    in ``artifacts`` (every stage depends on that module): only the bench stage writes it."""
    return root / "roofline" / target / f"{component}-{bucket}.json"


def write_outputs(result: dict[str, Any], root: Path = artifacts.ROOT) -> tuple[Path, Path, Path]:
    """The stage's three DVC outputs, each written atomically: metrics (the per-kernel rows
    aside), its plot row, and the roofline plot of its top kernels (empty where nothing ran here)."""
    comp, bucket, target = result["component"], result["bucket"], result["target"]
    paths = (
        artifacts.bench_file(comp, bucket, target, root),
        artifacts.bench_plot_file(comp, bucket, target, root),
        roofline_file(comp, bucket, target, root),
    )
    kernels = [
        {"component": comp, "bucket": bucket, **row} for row in result.get("top_kernels", [])
    ]
    artifacts.write_json(paths[0], {k: v for k, v in result.items() if k != "top_kernels"})
    artifacts.write_json(paths[1], [_plot_row(result)])
    artifacts.write_json(paths[2], kernels)
    return paths


def _plot_row(result: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "component",
        "bucket",
        "speedup_vs_eager",
        "speedup_vs_ort",
        "eager_ms",
        "ort_ms",
        "tvm_ms",
        "gflop",
        "tvm_gflops",
        "eager_gflops",
        "ort_gflops",
        "peak_gflops",
        "tvm_of_peak",
    )
    return {k: result[k] for k in keys if k in result}
