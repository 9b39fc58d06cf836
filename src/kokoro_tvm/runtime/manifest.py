"""The artifact directory's index, ``manifest.json``, as the runtime reads it: checked for the
format and keys this runtime knows, the toolchain it was built with, and the target to run.

Nothing here loads native code: a manifest from another runtime version, or one edited by hand,
is refused with the fix before any library is opened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import artifacts
from ..devices import isa
from ..toolchain import ToolchainError, runtime_versions
from . import tvm_import

#: manifest formats this runtime reads (``pipeline/manifest.py`` writes the newest)
FORMATS = (3,)
#: what every manifest of those formats holds, and what each key is for (named in errors)
REQUIRED = {
    "format": "the manifest format",
    "model": "the model config and checkpoint",
    "toolchain": "the versions the libraries were built with",
    "buckets": "the built buckets",
    "targets": "the built targets",
    "weights": "the weights files",
    "libraries": "the validated libraries",
}


def read_manifest(root: Path) -> dict[str, Any]:
    """``root/manifest.json`` (``root`` is the artifacts directory), checked against the format
    and keys this runtime reads, with a fix in every error."""
    root = Path(root)
    if not root.is_dir():
        raise artifacts.ArtifactError(
            f"artifact directory {root} does not exist; run `dvc repro` (or `dvc pull`) "
            "in the pipeline checkout, or pass the directory that holds manifest.json"
        )
    path = artifacts.manifest_file(root)
    manifest = artifacts.read_json(path, "library index")
    check_manifest(manifest, path)
    return manifest


def check_manifest(manifest: Any, path: Path | str = "manifest.json") -> None:
    """Refuse a manifest this runtime cannot read, naming the first thing wrong in it.

    Every field the runtime later reads is checked here, so a hand-edited or foreign manifest
    fails at once with one message, not deep inside a load with a ``KeyError``."""
    rebuild = "rebuild the artifacts with `dvc repro` (or `dvc pull` the ones built for this code)"
    if not isinstance(manifest, dict):
        raise artifacts.ArtifactError(
            f"{path} is not a kokoro-tvm manifest (not a JSON object); {rebuild}"
        )
    missing = [f"'{k}' ({why})" for k, why in REQUIRED.items() if k not in manifest]
    if missing:
        raise artifacts.ArtifactError(f"{path} lacks {', '.join(missing)}; {rebuild}")
    if manifest["format"] not in FORMATS:
        raise artifacts.ArtifactError(
            f"{path} has format {manifest['format']!r}, and this runtime reads format "
            f"{' or '.join(map(str, FORMATS))}; install the kokoro-tvm-pipeline version that "
            f"built it, or {rebuild}"
        )
    _expect(manifest, "model", dict, path)
    _expect(manifest["model"], "config", str, path, "model.")
    _expect(manifest["model"], "checkpoint", str, path, "model.")
    _expect(manifest["model"], "seed", int, path, "model.")
    _expect(manifest, "toolchain", dict, path)
    _expect(manifest, "targets", dict, path)
    _expect(manifest, "buckets", dict, path)
    for axis in ("tokens", "frames"):
        _expect(manifest["buckets"], axis, list, path, "buckets.")
        if not all(
            isinstance(b, int) and not isinstance(b, bool) for b in manifest["buckets"][axis]
        ):
            raise artifacts.ArtifactError(
                f"{path}: buckets.{axis} should be bucket sizes; {rebuild}"
            )
    _expect(manifest, "weights", dict, path)
    _expect(manifest, "libraries", list, path)
    for name, info in manifest["weights"].items():
        _expect(manifest["weights"], name, dict, path, "weights.")
        for key, kind in (("path", str), ("sha256", str), ("bytes", int)):
            _expect(info, key, kind, path, f"weights.{name}.")
    for key in ("target_needs", "unvalidated"):
        if key in manifest:
            _expect(manifest, key, dict, path)
    for target, needs in manifest.get("target_needs", {}).items():
        _expect(manifest["target_needs"], target, dict, path, "target_needs.")
        _expect(needs, "arch", str, path, f"target_needs.{target}.")
        _expect(needs, "isa", list, path, f"target_needs.{target}.")
        if not all(isinstance(f, str) for f in needs["isa"]):
            raise artifacts.ArtifactError(
                f"{path}: target_needs.{target}.isa should be names; {rebuild}"
            )
    for i, entry in enumerate(manifest["libraries"]):
        where = f"libraries[{i}]."
        if not isinstance(entry, dict):
            raise artifacts.ArtifactError(f"{path}: {where[:-1]} is not an object; {rebuild}")
        for key, kind in LIBRARY_FIELDS.items():
            _expect(entry, key, kind, path, where)
        for key, kind in OPTIONAL_LIBRARY_FIELDS.items():
            if key in entry:
                _expect(entry, key, kind, path, where)
        if "packed" in entry:
            _expect(entry["packed"], "path", str, path, f"{where}packed.")
            _expect(entry["packed"], "sha256", str, path, f"{where}packed.")
        if "validation" in entry:
            _check_validation(entry["validation"], path, f"{where}validation.")
        if entry.get("shapes", "padded") not in ("bounded", "padded"):
            raise artifacts.ArtifactError(
                f"{path}: {where}shapes should be bounded or padded; {rebuild}"
            )
        for name, axis in entry.get("length_axes", {}).items():
            if not (
                isinstance(axis, list)
                and len(axis) == 2
                and all(isinstance(a, int) and not isinstance(a, bool) and a >= 0 for a in axis)
            ):
                raise artifacts.ArtifactError(
                    f"{path}: {where}length_axes.{name} should be [axis, scale]; {rebuild}"
                )
        for j, spec in enumerate(entry["inputs"]):
            _check_tensor_spec(spec, path, f"{where}inputs[{j}]", named=True)
        for j, spec in enumerate(entry["outputs"]):
            _check_tensor_spec(spec, path, f"{where}outputs[{j}]", named=False)
        if not all(isinstance(p, str) for p in entry["params"]):
            raise artifacts.ArtifactError(
                f"{path}: {where}params should be weight names; {rebuild}"
            )
        if entry["component"] not in manifest["weights"]:
            raise artifacts.ArtifactError(
                f"{path}: {where}component {entry['component']!r} has no weights entry; {rebuild}"
            )


#: a library entry's fields and their JSON types (``manifest_entry.library_entry`` writes them)
LIBRARY_FIELDS: dict[str, type | tuple[type, ...]] = {
    "component": str,
    "bucket": int,
    "target": str,
    "path": str,
    "sha256": str,
    "inputs": list,
    "outputs": list,
    "params": list,
    "bytes": int,
}
#: fields only some entries have: bounded libraries, and what validation ran
OPTIONAL_LIBRARY_FIELDS: dict[str, type | tuple[type, ...]] = {
    "shapes": str,
    "length_axes": dict,
    "validation": dict,
    "packed": dict,
}


def _check_validation(v: dict[str, Any], path: Path | str, where: str) -> None:
    """What ``info`` prints of a validation: its worst errors are numbers, its lengths integers."""
    bad = [
        k
        for k, x in v.items()
        if k.startswith("worst_") and (isinstance(x, bool) or not isinstance(x, int | float))
    ]
    lengths = v.get("lengths", [])
    if not isinstance(lengths, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in lengths
    ):
        bad.append("lengths")
    if bad:
        raise artifacts.ArtifactError(
            f"{path}: {where}{bad[0]} is not a number (or a list of lengths); rebuild the "
            "artifacts with `dvc repro`"
        )


def _check_tensor_spec(spec: Any, path: Path | str, where: str, named: bool) -> None:
    """One input (named) or output of a library signature: a shape of sizes (an output's may
    name a symbolic length), a dtype, and for a lengths input its ``range``."""
    ok = (
        isinstance(spec, dict)
        and (isinstance(spec.get("name"), str) or not named)
        and isinstance(spec.get("dtype"), str)
        and isinstance(spec.get("shape"), list)
        and all(
            (isinstance(d, int) and not isinstance(d, bool) and d >= 0)
            or (isinstance(d, str) and not named)
            for d in spec["shape"]
        )
    )
    bounds = spec.get("range") if isinstance(spec, dict) else None
    if ok and bounds is not None:
        ok = (
            isinstance(bounds, list)
            and len(bounds) == 2
            and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
        )
    if not ok:
        raise artifacts.ArtifactError(
            f"{path}: {where} is not a tensor signature (name, shape, dtype); rebuild the "
            "artifacts with `dvc repro`"
        )


def _expect(
    doc: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path | str, where: str = ""
) -> None:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):
        what = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise artifacts.ArtifactError(
            f"{path}: '{where}{key}' should be a {what}, found {type(value).__name__} "
            f"{str(value)[:40]!r}; rebuild the artifacts with `dvc repro`"
        )


def check_toolchain(manifest: dict[str, Any], found: dict[str, Any] | None = None) -> None:
    """Refuse libraries built by another TVM runtime than the installed one, before loading any.

    Only what loading needs is compared (``toolchain.runtime_versions``): torch, kokoro and
    transformers shape the *build* (DVC reruns stages when they change), not the loading."""
    built = manifest.get("toolchain", {})
    if found is None:  # a runtime-only TVM cannot tell LLVM's version: not imported to ask
        found = runtime_versions(llvm=not tvm_import.runtime_only_wanted())
    for key, have in found.items():
        if have is None:  # not knowable here (``toolchain.llvm_major``)
            continue
        want = str(built.get(key, "unknown"))
        if want != str(have):
            raise ToolchainError(
                f"the libraries were built with {key} {want} but {have} is installed; "
                f"install {key}=={want} (pip install kokoro-tvm-pipeline) or rebuild them "
                "with `dvc repro`"
            )


def target_needs(manifest: dict[str, Any], target: str) -> dict[str, Any]:
    """What the libraries of ``target`` need of a CPU (``isa.requirements``, recorded at build)."""
    needs = manifest.get("target_needs", {}).get(target)
    if needs is None:
        raise artifacts.ArtifactError(
            f"the manifest records no CPU needs for target {target!r} (built before they were "
            "recorded); rebuild with `dvc repro`"
        )
    return needs


def pick_target(manifest: dict[str, Any], target: str | None = None) -> str:
    """The requested target if it was built and runs on this CPU; else the richest one that does."""
    return explain_pick(manifest, target)[0]


def explain_pick(manifest: dict[str, Any], target: str | None = None) -> tuple[str, list[str]]:
    """``pick_target``'s answer and why: one line per validated target (runs here or lacks what).

    Only targets the manifest lists are candidates, and it lists only validated ones. A target
    whose ISA this CPU lacks is refused here, with the missing extensions named, instead of
    running into SIGILL inside a kernel."""
    built = sorted({e["target"] for e in manifest["libraries"]})
    lacks = {t: isa.missing(target_needs(manifest, t)) for t in built}
    why = [
        f"{t}: "
        + (
            f"runs here ({len(target_needs(manifest, t)['isa'])} ISA extensions)"
            if not lacks[t]
            else f"not on this CPU (lacks {', '.join(lacks[t])})"
        )
        for t in built
    ]
    if target is not None:
        if target not in built:
            raise artifacts.ArtifactError(
                f"target {target!r} was not built and validated (validated targets: {built}); "
                "add it to params.yaml 'targets' and run `dvc repro` on a machine that can "
                "validate it (params.yaml 'devices')"
            )
        if lacks[target]:
            raise artifacts.ArtifactError(
                f"target {target!r} needs CPU features this machine lacks "
                f"({', '.join(lacks[target])}); pick one that runs here: "
                f"{[t for t in built if not lacks[t]]}"
            )
        return target, why + [f"picked {target}: asked for"]
    usable = [t for t in built if not lacks[t]]
    if not usable:
        raise artifacts.ArtifactError(
            f"none of the validated targets {built} runs on this CPU ({'; '.join(why)}); add a "
            "target this machine runs to params.yaml 'targets' and run `dvc repro`"
        )
    best = max(usable, key=lambda t: (len(target_needs(manifest, t)["isa"]), t))
    return best, why + [f"picked {best}: the richest ISA this CPU runs"]


def find_entry(
    manifest: dict[str, Any], component: str, bucket: int, target: str
) -> dict[str, Any]:
    for entry in manifest["libraries"]:
        if (entry["component"], entry["bucket"], entry["target"]) == (component, bucket, target):
            return entry
    built = sorted({e["target"] for e in manifest["libraries"]})
    raise artifacts.ArtifactError(
        f"no library for {component} bucket {bucket} target {target!r} "
        f"(built targets: {built}); add it to params.yaml and run `dvc repro`"
    )
