"""Stage ``manifest``: index every validated library for the runtime.

A library is listed only when the bytes on disk are the ones its build recorded and its
validation ran, with the weights its validation ran; anything else is an error, so a library
swapped after validation never reaches the runtime.
"""

from __future__ import annotations

from typing import Any

from .. import artifacts as A
from ..params import Params
from ..runtime.library import bounded_fields
from ..spec import COMPONENTS


def _library(component: str, bucket: int, target: str, weights_sha: dict[str, str]) -> dict[str, Any]:
    lib = A.library_file(component, bucket, target)
    info = A.read_json(A.build_info_file(component, bucket, target), "build info")
    check = A.read_json(A.validation_file(component, bucket, target), "validation metrics")
    sha = A.sha256(lib)
    ran = (check.get("library_sha256"), check.get("weights_sha256"))
    if info.get("sha256") != sha or ran != (sha, weights_sha[component]):
        raise A.ArtifactError(f"{lib} or {A.weights_file(component)} is not what was built and validated "
                              "(tampered, or a stage was skipped); run `dvc repro` to rebuild and revalidate it")
    sig = info["signature"]
    return {"component": component, "bucket": bucket, "target": target,
            "path": lib.relative_to(A.ROOT).as_posix(), "sha256": sha, "bytes": lib.stat().st_size,
            "inputs": sig["inputs"], "outputs": sig["outputs"], "params": sig["params"],
            "lstm_strategy": sig["info"]["lstm_strategy"], **bounded_fields(sig),
            "validation": {k: v for k, v in check.items() if k.startswith("worst_") or k.endswith("_sha256")}
            | {"lengths": sorted(int(n) for n in check["lengths"])}}


def run(prm: Params) -> dict[str, Any]:
    weights = {c: {"path": A.weights_file(c).relative_to(A.ROOT).as_posix(), "sha256": A.sha256(A.weights_file(c)),
                   "bytes": A.weights_file(c).stat().st_size} for c in COMPONENTS}
    shas = {c: w["sha256"] for c, w in weights.items()}
    libs = [_library(component, bucket, target, shas)
            for target in sorted(prm.targets) for component in COMPONENTS for bucket in prm.buckets(component)]
    doc = {
        "format": 2,
        "model": {"config": prm.model_config, "checkpoint": prm.checkpoint, "seed": prm.seed},
        "toolchain": A.read_json(A.toolchain_file(), "toolchain versions"),
        "buckets": {"tokens": list(prm.tokens), "frames": list(prm.frames)},
        "targets": prm.targets,
        "weights": weights,
        "libraries": libs,
    }
    A.write_json(A.manifest_file(), doc)
    return doc
