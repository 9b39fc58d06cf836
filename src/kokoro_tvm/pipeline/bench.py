"""Stage ``bench@<component>-<bucket>-<target>``: the validated library against kokoro eager and
ONNX Runtime on one thread count, interleaved; medians and ratios as DVC metrics plus a plot row
and the roofline plot of its top kernels.

What is measured depends on the target's device (``devices.resolve``): on this CPU, the three
runtimes side by side (``eval.latency.measure``); on a board through a tracker, the library's own
time there (kokoro and ONNX Runtime do not run on the board); under qemu, no time at all
(emulated time means nothing), only the validation verdict on that device, marked ``emulated``;
with no device, a record that nothing ran. This module reads what the measurement needs (params,
the library, kokoro, the voice, the reference's full-bucket case, the legalized module) and
writes the outputs; ``eval.latency`` only computes.

A narrower precision's library (``bench_narrow``) is timed against the float32 library of its
target, interleaved (``against_fp32``): one metrics file, the speedup and its fidelity."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .. import artifacts, cpuinfo
from ..devices.resolve import HOST, NONE, QEMU
from ..eval import latency
from ..eval.case_files import cases_from_arrays
from ..eval.cases import Case
from ..eval.eager import load_kokoro
from ..eval.timing import apply_threads, cpu_name, time_interleaved
from ..params import Params
from ..runtime.built import Built, load_built
from ..spec import FP32, lookup


def run(prm: Params, component: str, bucket: int, target: str, precision: str = FP32) -> None:
    prm.check_bucket(component, bucket)
    prm.check_target(target)
    if precision != FP32:
        prm.check_precision(component, precision)
        result = against_fp32(prm, component, bucket, target, precision)
        path = artifacts.bench_file(component, bucket, target, precision=precision)
        artifacts.write_json(path, result)
        return
    device = artifacts.read_json(artifacts.device_file(target), "device record")
    if device["device"] == HOST:
        result = on_host(prm, component, bucket, target)
    elif device["device"] == NONE:
        result = _untimed(component, bucket, target, device, reason=device["reason"])
    elif device["device"] == QEMU:
        check = artifacts.read_json(
            artifacts.validation_file(component, bucket, target), "validation metrics"
        )
        result = _untimed(
            component, bucket, target, device, reason="emulated device: correctness only"
        )
        result |= {
            "validation_ok": check["ok"],
            "validated_lengths": sorted(int(n) for n in check["lengths"]),
            **{k: v for k, v in check.items() if k.startswith("worst_")},
        }
    else:
        result = on_board(prm, component, bucket, target, device)
    write_outputs(result)


def on_host(
    prm: Params,
    component: str,
    bucket: int,
    target: str,
    root: Path = artifacts.ROOT,
    model: tuple[dict[str, Any], Any] | None = None,
) -> dict[str, Any]:
    """The bench metrics of ``component``-``bucket`` for ``target`` on this CPU
    (``latency.measure``), with repeats, threads and whether ONNX Runtime runs from ``prm``.
    ``model`` = ``(cfg, km)`` skips loading kokoro when the caller already has it."""
    lookup(component)  # an unknown name, and below a missing library, fail before the slow part
    threads = apply_threads(prm.runtime.num_threads)  # before the first TVM call
    lib = load_built(root, Built(component, bucket, target), validated=True)
    cfg, km = model or load_kokoro(
        artifacts.kokoro_checkpoint_file(root), artifacts.model_config_file(root)
    )
    measured = latency.measure(
        component,
        bucket,
        lib,
        (cfg, km),
        full_bucket_case(component, bucket, cfg, root),
        artifacts.load_array(artifacts.voice_file(root)),
        artifacts.load_ir(artifacts.legalized_file(component, bucket, root)),
        threads=threads,
        repeats=prm.bench.repeats,
        target=prm.target(target),
        onnxruntime=prm.bench.onnxruntime,
    )
    return {
        "component": component,
        "bucket": bucket,
        "target": target,
        "timed": True,
        "device": HOST,
        "emulated": False,
        **measured,
        "cpu": cpu_name(),
    }


def on_board(
    prm: Params,
    component: str,
    bucket: int,
    target: str,
    device: dict[str, Any],
    root: Path = artifacts.ROOT,
) -> dict[str, Any]:
    """The library's median ms on a board reached through an RPC tracker, on the reference's
    full-bucket inputs. kokoro and ONNX Runtime do not run on the board, so there is no ratio;
    ``benchmarks`` on the board give them."""
    from ..devices.session import open_session

    cfg = artifacts.read_json(artifacts.model_config_file(root), "model config")
    inputs = full_bucket_case(component, bucket, cfg, root)["inputs"]
    with open_session(device) as session:
        lib = load_built(root, Built(component, bucket, target), validated=True, session=session)
        ms = latency.board_ms(lib, inputs, prm.bench.repeats)
    return {
        "component": component,
        "bucket": bucket,
        "target": target,
        "timed": True,
        "device": device["device"],
        "key": device["key"],
        "tvm_ms": ms,
        "repeats": prm.bench.repeats,
        "library_sha256": lib.entry.sha256,
        "weights_sha256": lib.weights_sha256,
    }


def against_fp32(
    prm: Params,
    component: str,
    bucket: int,
    target: str,
    precision: str,
    root: Path = artifacts.ROOT,
) -> dict[str, Any]:
    """A narrower precision's library against the float32 library of the same target, on the
    reference's full-bucket inputs, interleaved on this CPU: what the precision buys, beside its
    validation's worst distances to float64 kokoro. Not timed where it was not validated (no
    build for the target, or a CPU without its ISA) or where the target runs elsewhere."""
    record: dict[str, Any] = {
        "component": component,
        "bucket": bucket,
        "target": target,
        "precision": precision,
    }
    check = artifacts.read_json(
        artifacts.validation_file(component, bucket, target, root, precision=precision),
        "validation metrics",
    )
    device = artifacts.read_json(artifacts.device_file(target, root), "device record")
    if not check["validated"] or device["device"] != HOST:
        why = check.get("reason") or f"{target} runs on {device['device']}: timed on this CPU only"
        return record | {"timed": False, "reason": why}
    threads = apply_threads(prm.runtime.num_threads)  # before the first TVM call
    narrow = load_built(root, Built(component, bucket, target, precision), validated=True)
    wide = load_built(root, Built(component, bucket, target), validated=True)
    cfg = artifacts.read_json(artifacts.model_config_file(root), "model config")
    inputs = full_bucket_case(component, bucket, cfg, root)["inputs"]
    samples = time_interleaved(
        {FP32: lambda: wide(*inputs), precision: lambda: narrow(*inputs)},
        prm.bench.repeats,
        warmup=latency.DEFAULT_WARMUP,
    )
    ms = {name: round(1e3 * statistics.median(s), 3) for name, s in samples.items()}
    return record | {
        "timed": True,
        "device": HOST,
        "threads": threads,
        "repeats": prm.bench.repeats,
        f"{FP32}_ms": ms[FP32],
        f"{precision}_ms": ms[precision],
        f"speedup_vs_{FP32}": round(ms[FP32] / ms[precision], 3),
        **{k: v for k, v in check.items() if k.startswith("worst_")},
        "library_sha256": narrow.entry.sha256,
        "cpu": cpu_name(),
        "cpu_kind": cpuinfo.this_cpu().kind,  # what the runtime's auto precision matches on
        "load_average": cpuinfo.load_average(),
    }


def full_bucket_case(
    component: str, bucket: int, cfg: dict[str, Any], root: Path = artifacts.ROOT
) -> Case:
    """The reference stage's case at the full bucket: inputs, float64 and float32 kokoro outputs."""
    path = artifacts.reference_file(component, bucket, root)
    with artifacts.load_array(path) as z:  # an .npz of the reference stage's cases
        cases = cases_from_arrays(component, bucket, dict(z), cfg)
    if bucket not in cases:
        raise artifacts.ArtifactError(
            f"{path} has no full-bucket case (lengths {sorted(cases)}); rerun its reference stage"
        )
    return cases[bucket]


def _untimed(
    component: str, bucket: int, target: str, device: dict[str, Any], reason: str
) -> dict[str, Any]:
    return {
        "component": component,
        "bucket": bucket,
        "target": target,
        "timed": False,
        "device": device["device"],
        "emulated": device["emulated"],
        "reason": reason,
    }


def write_outputs(result: dict[str, Any], root: Path = artifacts.ROOT) -> tuple[Path, Path, Path]:
    """The stage's three DVC outputs, each written atomically: metrics (the per-kernel rows
    aside), its plot row, and the roofline plot of its top kernels (empty where nothing ran
    here)."""
    comp, bucket, target = result["component"], result["bucket"], result["target"]
    paths = (
        artifacts.bench_file(comp, bucket, target, root),
        artifacts.bench_plot_file(comp, bucket, target, root),
        artifacts.roofline_file(comp, bucket, target, root),
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


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run, "component", "bucket", "target", "precision?")
