"""Libraries loaded straight from the pipeline's outputs, for the stages (validate, bench) that
run before the manifest exists, and from a manifest entry, for tests and benchmarks."""

from __future__ import annotations

from dataclasses import astuple, dataclass, replace
from pathlib import Path

from .. import artifacts
from ..devices import isa
from ..manifest_entry import library_entry, validation_entry
from ..spec import FP32
from .component import CompiledComponent, ComponentWeights
from .manifest import File, Manifest, check_toolchain, parse_library


def load_component(
    root: Path,
    manifest: Manifest,
    component: str,
    bucket: int,
    target: str,
    weights: ComponentWeights | None = None,
) -> CompiledComponent:
    """Verify and load one library; pass ``weights`` to share a component's weights across
    buckets."""
    check_toolchain(manifest)
    entry = manifest.library(component, bucket, target)
    return CompiledComponent(root, entry, weights or manifest.weights[component])


@dataclass(frozen=True)
class Built:
    """Which build outputs: the library of ``component`` at ``bucket`` for ``target``, in
    ``precision`` (``artifacts.library_name``)."""

    component: str
    bucket: int
    target: str
    precision: str = FP32


def load_built(
    root: Path, which: Built, validated: bool = False, session=None
) -> CompiledComponent:
    """One library straight from its build outputs, for the stages that run before the manifest.

    ``validate`` and ``bench`` read the build outputs, not the manifest: the manifest lists only
    validated libraries, and depending on it would rerun every one of those stages whenever a
    bucket is added. The library must be the bytes its build recorded (build info ``sha256``);
    with ``validated``, also the bytes its validation ran, with the same weights. ``session``:
    the device to run it on (``devices.session``; default this CPU).
    """
    component, bucket, target, precision = astuple(which)
    at = {"precision": precision}
    lib = artifacts.library_file(component, bucket, target, root, **at)
    if not lib.exists():
        raise artifacts.ArtifactError(f"{lib} is missing; run `dvc repro`")
    weights = artifacts.weights_file(component, root)
    if not weights.exists():
        raise artifacts.ArtifactError(f"{weights} is missing; run `dvc repro`")
    info = artifacts.read_json(
        artifacts.build_info_file(component, bucket, target, root, **at), "build info"
    )
    lacks = isa.missing(info["needs"]) if session is None else []
    if lacks:
        raise artifacts.ArtifactError(
            f"target {target!r} needs CPU features this machine lacks ({', '.join(lacks)}), so its "
            "libraries cannot run here; run them on a device that has them (params.yaml 'devices')"
        )
    info_file = artifacts.build_info_file(component, bucket, target, root, **at)
    doc = library_entry(
        component,
        bucket,
        target,
        lib.relative_to(root).as_posix(),
        info["sha256"],
        info["signature"],
        **({} if precision == FP32 else {"precision": precision, "needs": info["needs"]}),
    )
    if validated:
        doc["validation"] = validation_entry(
            artifacts.read_json(
                artifacts.validation_file(component, bucket, target, root, **at), "validation"
            )
        )
    # the same record a manifest entry becomes, but of the build outputs: no size yet
    entry = replace(parse_library(doc, info_file, sized=False), sha256_source=str(info_file))
    return CompiledComponent(
        root,
        entry,
        File(weights.relative_to(root).as_posix(), artifacts.sha256(weights)),
        session,
    )
