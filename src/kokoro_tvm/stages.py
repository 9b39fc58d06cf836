"""What each DVC stage does. ``stages/*.py`` are argument parsers over these functions.

Every stage starts with ``setup``: params are validated and the installed toolchain is checked
against ``params.yaml`` before any work, so a bad edit fails fast with the key it concerns.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import artifacts as A
from . import params as P
from .toolchain import check_installed, versions


def setup(params_path: str | Path = "params.yaml") -> P.Params:
    prm = P.load(params_path)
    check_installed(prm.toolchain, versions())
    threads = prm.num_threads or os.cpu_count() or 1
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))  # TVM defaults to half the cores
    import torch

    torch.set_num_threads(threads)
    return prm


def _model(prm: P.Params, checkpoint: str | None = None, seed: int | None = None):
    from .model import load

    return load(prm.model_config, checkpoint or prm.checkpoint, prm.seed if seed is None else seed)


def _check_bucket(prm: P.Params, component: str, bucket: int) -> None:
    P.check_component(component)
    if bucket not in prm.buckets(component):
        axis = P.COMPONENTS[component]
        raise P.ParamsError(f"bucket {bucket} is not in params.yaml 'buckets.{axis}' {list(prm.buckets(component))}")


def _check_target(prm: P.Params, target: str) -> None:
    if target not in prm.targets:
        raise P.ParamsError(f"target {target!r} is not in params.yaml 'targets' {sorted(prm.targets)}")


def toolchain(prm: P.Params) -> None:
    """Record the versions that shape artifacts (``setup`` already checked them against params)."""
    A.write_json(A.toolchain_file(), versions())


def weights(prm: P.Params) -> None:
    """Materialize the checkpoint once, as one ``.npz`` per component shared by every bucket."""
    from .compiler import component_weights
    from .params import COMPONENTS

    cfg, km = _model(prm)
    for component in COMPONENTS:
        arrays = {k: v.numpy() for k, v in component_weights(component, km).items()}
        A.save_weights(A.weights_file(component), arrays)
    A.write_json(A.weights_dir() / "weights.json",
                 {"config": prm.model_config, "checkpoint": prm.checkpoint, "seed": prm.seed})


def export(prm: P.Params, component: str, bucket: int) -> None:
    """Graphs do not depend on weight values, so export uses seeded random weights: a new
    checkpoint then reruns only ``weights`` and what reads it, never a compile. The ``.pt2``
    keeps the graph and buffers, not the parameter values (``weights`` has those)."""
    import torch

    from .compiler import export as export_component
    from .compiler import without_parameter_values

    _check_bucket(prm, component, bucket)
    cfg, km = _model(prm, checkpoint="random", seed=0)
    ep = without_parameter_values(export_component(component, bucket, km, cfg))
    with A.atomic_path(A.export_file(component, bucket), suffix=".pt2") as tmp:
        torch.export.save(ep, tmp)


def relax(prm: P.Params, component: str, bucket: int) -> None:
    import torch

    from .compiler import to_relax
    from .config import load_model_config
    from .lstm_op import lstm  # noqa: F401  (registers kokoro_tvm::lstm for torch.export.load)

    _check_bucket(prm, component, bucket)
    path = A.export_file(component, bucket)
    if not path.exists():
        raise A.ArtifactError(f"{path} is missing; run `dvc repro`")
    ep = torch.export.load(path)
    mod, sig = to_relax(ep, component, bucket, load_model_config(prm.model_config), prm.lstm_strategy)
    A.save_ir(A.relax_file(component, bucket), mod)
    A.write_json(A.signature_file(component, bucket), sig.as_dict())


def legalize(prm: P.Params, component: str, bucket: int) -> None:
    from .compiler import legalize as legalize_mod

    _check_bucket(prm, component, bucket)
    A.save_ir(A.legalized_file(component, bucket), legalize_mod(A.load_ir(A.relax_file(component, bucket))))


def tune(prm: P.Params, component: str, bucket: int, target: str) -> None:
    """MetaSchedule ``tune.trials`` trials per kernel; keep the records that beat the rules.
    ``trials: 0`` (the default) writes an empty database without loading anything."""
    from . import tune as T
    from .atomic import atomic_dir

    _check_bucket(prm, component, bucket)
    _check_target(prm, target)
    threads = 0
    if prm.tune_trials:  # the runner measures with the runtime's threads
        from .bench import apply_threads

        threads = apply_threads(prm.num_threads)
    with atomic_dir(A.tune_dir(component, bucket, target)) as tmp:
        report = T.tune(lambda: A.load_ir(A.legalized_file(component, bucket)), prm.targets[target],
                        prm.tune_trials, tmp, threads, seed=prm.seed)
        A.write_json(tmp / "report.json", {"target": target, **report})


def build(prm: P.Params, component: str, bucket: int, target: str) -> None:
    from .compiler import build as build_mod

    _check_bucket(prm, component, bucket)
    _check_target(prm, target)
    ex, seconds, report = build_mod(A.load_ir(A.legalized_file(component, bucket)), prm.targets[target],
                                    A.tune_dir(component, bucket, target))
    lib = A.library_file(component, bucket, target)
    A.export_library(ex, lib)
    sig = A.read_json(A.signature_file(component, bucket), "signature")
    A.write_json(A.build_info_file(component, bucket, target),
                 {"target": target, "target_spec": prm.targets[target], "signature": sig,
                  "build_s": round(seconds, 2), "schedule": report.as_dict()})


def validate(prm: P.Params, component: str, bucket: int, target: str) -> None:
    """Run the library at several lengths inside its bucket against eager kokoro on the unpadded
    input; write the DVC metrics, or fail the stage (writing nothing) when a threshold is missed."""
    from . import validate as V
    from .library import load_built

    _check_bucket(prm, component, bucket)
    _check_target(prm, target)
    cfg, km = _model(prm)
    lib = load_built(A.ROOT, component, bucket, target)
    doc = V.summary(component, bucket, target, V.check(lib, component, bucket, km, cfg))
    V.raise_if_failed(doc)
    A.write_json(A.validation_file(component, bucket, target), doc)


def bench(prm: P.Params, component: str, bucket: int, target: str) -> None:
    """Time the library against PyTorch eager (and ONNX Runtime) on one thread count, interleaved;
    write the medians and ratios as DVC metrics plus a plot row."""
    from . import bench as B

    _check_bucket(prm, component, bucket)
    _check_target(prm, target)
    B.write_outputs(B.measure(component, bucket, target, prm, A.ROOT, model=_model(prm)))


def bench_summary(prm: P.Params, target: str) -> None:
    """One file per component with every bucket's ratios: the lines of the speedup plot."""
    from . import bench as B

    _check_target(prm, target)
    B.write_summary(target, prm)


def manifest(prm: P.Params) -> dict[str, Any]:
    """Index every validated library with its sha256, signature and validation result, for the
    runtime to verify and load."""
    libs = []
    for target in sorted(prm.targets):
        for component in P.COMPONENTS:
            for bucket in prm.buckets(component):
                lib = A.library_file(component, bucket, target)
                info = A.read_json(A.build_info_file(component, bucket, target), "build info")
                sig = info["signature"]
                check = A.read_json(A.validation_file(component, bucket, target), "validation metrics")
                libs.append({
                    "component": component, "bucket": bucket, "target": target,
                    "path": lib.relative_to(A.ROOT).as_posix(), "sha256": A.sha256(lib),
                    "bytes": lib.stat().st_size, "inputs": sig["inputs"], "outputs": sig["outputs"],
                    "params": sig["params"], "lstm_strategy": sig["info"]["lstm_strategy"],
                    "validation": {k: v for k, v in check.items() if k.startswith("worst_")}
                    | {"lengths": sorted(int(n) for n in check["lengths"])},
                })
    weights = {c: {"path": A.weights_file(c).relative_to(A.ROOT).as_posix(), "sha256": A.sha256(A.weights_file(c)),
                   "bytes": A.weights_file(c).stat().st_size} for c in P.COMPONENTS}
    doc = {
        "format": 1,
        "model": {"config": prm.model_config, "checkpoint": prm.checkpoint, "seed": prm.seed},
        "toolchain": A.read_json(A.toolchain_file(), "toolchain versions"),
        "buckets": {"tokens": list(prm.tokens), "frames": list(prm.frames)},
        "targets": prm.targets,
        "weights": weights,
        "libraries": libs,
    }
    A.write_json(A.manifest_file(), doc)
    return doc
