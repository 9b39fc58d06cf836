"""Stage ``manifest``: index every validated library for the runtime.

A library is listed only when the bytes on disk are the ones its build recorded and its
validation ran, with the weights its validation ran; anything else is an error, so a library
swapped after validation never reaches the runtime. A target no device could validate
(``devices.resolve``) is left out whole, with one line saying so: the runtime never loads it.
The voices users pick by name are listed with their file's sha256 (``voices.manifest_entry``),
which the runtime checks as it checks the libraries.

A narrower precision's libraries (params ``precision``) are listed beside float32's, each with its
``precision`` and its ``needs`` (the ISA beyond its target's), where they were built and validated;
float32 entries are the bytes they were before precision was an axis.
"""

from __future__ import annotations

from typing import Any

from .. import artifacts
from ..config import load_model_config
from ..manifest_entry import SPEED_FIELDS, check_validated, library_entry, validation_entry
from ..params import Params
from ..spec import COMPONENTS, FP32
from . import voices


def _library(
    component: str,
    bucket: int,
    target: str,
    weights_sha: dict[str, str],
    precision: str = FP32,
) -> dict[str, Any]:
    at = {"precision": precision}
    lib = artifacts.library_file(component, bucket, target, **at)
    info = artifacts.read_json(
        artifacts.build_info_file(component, bucket, target, **at), "build info"
    )
    check = artifacts.read_json(
        artifacts.validation_file(component, bucket, target, **at), "validation metrics"
    )
    sha = artifacts.sha256(lib)
    if info.get("sha256") != sha:
        raise artifacts.ArtifactError(
            f"{lib} is not what was built and validated (its build recorded other bytes: "
            "tampered, or a stage was skipped); run `dvc repro` to rebuild and revalidate it"
        )
    check_validated(check, sha, weights_sha[component], lib)
    packed = artifacts.packed_file(component, bucket, target, **at)
    if not packed.exists():
        raise artifacts.ArtifactError(f"{packed} is missing; run `dvc repro`")
    check_validated(check, sha, artifacts.sha256(packed), packed, weights_key="packed_sha256")
    sig = info["signature"]
    # a narrower precision's library says so, with what it needs beyond its target's needs
    narrow = {} if precision == FP32 else {"precision": precision, "needs": info["needs"]}
    return library_entry(
        component,
        bucket,
        target,
        lib.relative_to(artifacts.ROOT).as_posix(),
        sha,
        sig,
        bytes=lib.stat().st_size,
        lstm_strategy=sig["info"]["lstm_strategy"],
        validation=validation_entry(check),
        packed={
            "path": packed.relative_to(artifacts.ROOT).as_posix(),
            "sha256": check["packed_sha256"],
            "bytes": packed.stat().st_size,
        },
        **narrow,
    )


def validated_targets(prm: Params) -> tuple[list[str], dict[str, str]]:
    """Targets whose every library was validated, and why each other one was not."""
    ok, skipped = [], {}
    for target in sorted(prm.targets):
        docs = [
            artifacts.read_json(artifacts.validation_file(c, b, target), "validation metrics")
            for c in COMPONENTS
            for b in prm.buckets.of(c)
        ]
        not_run = [d for d in docs if not d.get("validated", True)]
        if not_run:
            skipped[target] = f"{not_run[0]['reason']}; fix: {not_run[0]['fix']}"
        else:
            ok.append(target)
    return ok, skipped


def narrow_libraries(
    prm: Params, targets: list[str]
) -> tuple[list[tuple[str, int, str, str]], dict[str, str]]:
    """The narrower-precision libraries of the validated ``targets`` to list: a precision is listed
    for a component and target only when every bucket's library of it was built and validated
    (the runtime picks a precision per component, over all its buckets); else why not."""
    listed, left_out = [], {}
    for target in targets:
        for component in COMPONENTS:
            for precision in prm.precision.of(component):
                docs = [
                    artifacts.read_json(
                        artifacts.validation_file(component, b, target, precision=precision),
                        "validation metrics",
                    )
                    for b in prm.buckets.of(component)
                ]
                not_run = [d for d in docs if not d["validated"]]
                if not_run:
                    name = f"{component} {precision} on {target}"
                    left_out[name] = not_run[0]["reason"]
                    continue
                listed += [(component, b, target, precision) for b in prm.buckets.of(component)]
    return listed, left_out


def measured_speeds(libs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``bench_narrow``'s timing of each listed narrower library against float32, with the CPU
    kind that took it: the runtime's ``auto`` precision leaves a precision out where it was timed
    slower on the CPU kind it runs on. A timing of other bytes than the listed library's, or one
    not taken on this host, is left out."""
    speeds = []
    for lib in libs:
        precision = lib.get("precision", FP32)
        path = artifacts.bench_file(
            lib["component"], lib["bucket"], lib["target"], precision=precision
        )
        if precision == FP32 or not path.exists():
            continue
        rec = artifacts.read_json(path, "bench metrics")
        if rec.get("timed") and rec.get("library_sha256") == lib["sha256"] and "cpu_kind" in rec:
            speeds.append({k: rec[k] for k in SPEED_FIELDS})
    return speeds


def run(prm: Params) -> dict[str, Any]:
    weights = {
        c: {
            "path": artifacts.weights_file(c).relative_to(artifacts.ROOT).as_posix(),
            "sha256": artifacts.sha256(artifacts.weights_file(c)),
            "bytes": artifacts.weights_file(c).stat().st_size,
        }
        for c in COMPONENTS
    }
    shas = {c: w["sha256"] for c, w in weights.items()}
    targets, skipped = validated_targets(prm)
    for target, why in skipped.items():
        print(f"manifest: {target} left out, not validated: {why}", flush=True)
    libs = [
        _library(component, bucket, target, shas)
        for target in targets
        for component in COMPONENTS
        for bucket in prm.buckets.of(component)
    ]
    narrow, left_out = narrow_libraries(prm, targets)
    for name, why in left_out.items():
        print(f"manifest: {name} left out: {why}", flush=True)
    libs += [_library(c, b, t, shas, precision) for c, b, t, precision in narrow]
    needs = {
        t: artifacts.read_json(artifacts.build_info_file(c, b, t), "build info")["needs"]
        for t in targets
        for c in COMPONENTS
        for b in prm.buckets.of(c)
    }
    doc = {
        "format": 3,
        "model": {
            "config": prm.model.config,
            "checkpoint": prm.model.checkpoint,
            "seed": prm.model.seed,
        },
        "toolchain": artifacts.read_json(artifacts.toolchain_file(), "toolchain versions"),
        "buckets": {"tokens": list(prm.buckets.tokens), "frames": list(prm.buckets.frames)},
        "targets": {t: prm.target(t) for t in targets},
        "target_needs": needs,
        "unvalidated": skipped,
        "weights": weights,
        "libraries": libs,
        "speeds": measured_speeds(libs),
    }
    named = voices.manifest_entry(2 * load_model_config(prm.model.config)["style_dim"])
    if named is not None:  # the voices users pick by name (``voices.source: none``: no entry)
        doc["voices"] = named
    artifacts.write_json(artifacts.manifest_file(), doc)
    return doc


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run)
