"""Load compiled libraries from the manifest and call them with numpy arrays.

Nothing native is loaded before it is verified: the manifest's toolchain must be the installed
TVM runtime, and every ``.so`` and weights file must match its recorded sha256 (loading a
library runs its code). Weights are bound once per component and shared by all its buckets,
so a call passes only the component's own inputs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import artifacts as A
from ..spec import unpadded
from ..toolchain import ToolchainError, runtime_versions

# LLVM reports tuning flags (fast-*, slow-*) next to ISA extensions; only the latter decide
# whether a library can run on this CPU.
_ISA = re.compile(r"^(avx|sse|ssse|fma|f16c|bmi|popcnt|lzcnt|movbe|cx16|aes|pclmul|vpclmul|vaes|gfni|sha|adx|"
                  r"xsave|amx|evex512|neon|sve|fp-armv8|dotprod|i8mm|bf16|fullfp16)")


def read_manifest(root: Path) -> dict[str, Any]:
    """``root/manifest.json`` (``root`` is the artifacts directory), with a fix in every error."""
    root = Path(root)
    if not root.is_dir():
        raise A.ArtifactError(f"artifact directory {root} does not exist; run `dvc repro` (or `dvc pull`) "
                              "in the pipeline checkout, or pass the directory that holds manifest.json")
    manifest = A.read_json(A.manifest_file(root), "library index")
    if not isinstance(manifest, dict) or "libraries" not in manifest:
        raise A.ArtifactError(f"{A.manifest_file(root)} is not a kokoro-tvm manifest; run `dvc repro`")
    return manifest


def check_toolchain(manifest: dict[str, Any], found: dict[str, Any] | None = None) -> None:
    """Refuse libraries built by another TVM runtime than the installed one, before loading any.

    Only what loading needs is compared (``toolchain.runtime_versions``): torch, kokoro and
    transformers shape the *build* (DVC reruns stages when they change), not the loading."""
    built = manifest.get("toolchain", {})
    found = runtime_versions() if found is None else found
    for key, have in found.items():
        want = str(built.get(key, "unknown"))
        if want != str(have):
            raise ToolchainError(f"the libraries were built with {key} {want} but {have} is installed; "
                                 f"install {key}=={want} (pip install kokoro-tvm-pipeline) or rebuild them "
                                 "with `dvc repro`")


def _isa(spec: dict[str, Any]) -> set[str]:
    import tvm
    from tvm.target import codegen

    return {f for f in codegen.llvm_get_cpu_features(tvm.target.Target(dict(spec))) if _ISA.match(f)}


def host_supports(spec: dict[str, Any]) -> bool:
    """True when every ISA extension the target assumes is present on this CPU."""
    from tvm.target import codegen

    host = {"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()}
    return _isa(spec) <= _isa(host)


def pick_target(manifest: dict[str, Any], target: str | None = None) -> str:
    """The requested target if it was built (and runs here); else the richest built one this CPU runs."""
    specs = manifest.get("targets", {})
    built = sorted({e["target"] for e in manifest["libraries"]})
    if target is not None:
        if target not in built:
            raise A.ArtifactError(f"target {target!r} was not built (built targets: {built}); add it to "
                                  "params.yaml 'targets' and run `dvc repro`")
        if target in specs and not host_supports(specs[target]):
            raise A.ArtifactError(f"target {target!r} ({specs[target]}) uses CPU features this machine lacks; "
                                  f"pick another built target: {built}")
        return target
    usable = [t for t in built if t not in specs or host_supports(specs[t])]
    if not usable:
        raise A.ArtifactError(f"none of the built targets {built} runs on this CPU; add a target this machine "
                              "supports (e.g. {kind: llvm}) to params.yaml 'targets' and run `dvc repro`")
    return max(usable, key=lambda t: (len(_isa(specs[t])) if t in specs else 0, t))


class ComponentWeights:
    """One component's weights, verified and copied to the device once, shared by every bucket."""

    def __init__(self, root: Path, info: dict[str, Any]):
        import tvm

        self.path = Path(root) / info["path"]
        self.sha256 = verify_file(self.path, info["sha256"], "its manifest")
        self.dev = tvm.cpu()
        with np.load(self.path) as z:
            self.tensors = {name: tvm.runtime.tensor(z[name], self.dev) for name in z.files}

    def args(self, names: list[str]) -> list[Any]:
        missing = [n for n in names if n not in self.tensors]
        if missing:
            raise A.ArtifactError(f"{self.path} lacks weights {missing[:3]}...; rebuild with `dvc repro`")
        return [self.tensors[n] for n in names]


class CompiledComponent:
    """One library (component x bucket x target) with its weights bound."""

    def __init__(self, root: Path, entry: dict[str, Any], weights: dict[str, Any] | ComponentWeights):
        import tvm
        from tvm import relax

        self.entry = entry
        lib_path = Path(root) / entry["path"]
        verify_file(lib_path, entry["sha256"], entry.get("sha256_source", "its manifest"))
        if not isinstance(weights, ComponentWeights):
            weights = ComponentWeights(root, weights)
        validation = entry.get("validation")
        if validation is not None:
            check_validated(entry, validation, weights.sha256, lib_path)
        self.weights_sha256 = weights.sha256
        self.dev = weights.dev
        self.vm = relax.VirtualMachine(tvm.runtime.load_module(str(lib_path)), self.dev)
        # Libraries with ``main_transform_params`` (LiftTransformParams) take transformed weights:
        # transform once here; weights it passes through stay the shared ComponentWeights tensors.
        self.params = bind_params(self.vm, weights.args(entry["params"]))

    @property
    def bucket(self) -> int:
        return int(self.entry["bucket"])

    @property
    def bounded(self) -> bool:
        """A bounded library (issue 17) computes only the valid length; a padded one its bucket."""
        return self.entry.get("shapes", "padded") == "bounded"

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Bucket-sized inputs and their valid length (``entry["inputs"]``, for both kinds of
        library). A bounded library gets them cut to that length and returns that length: its
        outputs' length axes are shorter than a padded library's, past-the-length values absent."""
        import tvm

        specs = self.entry["inputs"]
        if len(inputs) != len(specs):
            raise ValueError(f"{self.entry['component']} takes {len(specs)} inputs, got {len(inputs)}")
        arrays = {}
        for spec, x in zip(specs, inputs):
            x = np.ascontiguousarray(x, dtype=spec["dtype"])
            if list(x.shape) != spec["shape"]:
                raise ValueError(f"{self.entry['component']} input '{spec['name']}' must have shape "
                                 f"{spec['shape']}, got {list(x.shape)}")
            if spec["name"].endswith("lengths"):
                self._check_lengths(x, spec.get("range"))
            arrays[spec["name"]] = x
        if self.bounded:
            arrays = self._unpadded(arrays)
        out = self.vm["main"](*[tvm.runtime.tensor(x, self.dev) for x in arrays.values()], *self.params)
        return [out[i].numpy() for i in range(len(out))]

    def _unpadded(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What a bounded library takes: every input cut to the valid length, no lengths input."""
        (n,) = (int(x.reshape(-1)[0]) for name, x in arrays.items() if name.endswith("lengths"))
        cut = unpadded(arrays, self.entry["length_axes"], n)
        return {name: np.ascontiguousarray(x) for name, x in cut.items()}

    def _check_lengths(self, lengths: np.ndarray, bounds: list[int] | None) -> None:
        """The kernels clamp silently (0 gives zeros, > bucket acts as the bucket); refuse instead."""
        bucket = self.entry["bucket"]
        lo, hi = bounds or (1, bucket)
        bad = lengths[(lengths < lo) | (lengths > hi)]
        if bad.size:
            raise ValueError(f"{self.entry['component']} bucket {bucket}: length {int(bad[0])} is outside "
                             f"{lo}..{hi}; pick a bucket that fits (or split the input)")


def bounded_fields(signature: dict[str, Any]) -> dict[str, Any]:
    """The manifest fields that tell a bounded library's entry from a padded one's (none for
    padded, whose entries predate them)."""
    info = signature.get("info", {})
    if info.get("shapes") != "bounded":
        return {}
    return {"shapes": "bounded", "length_axes": info["length_axes"]}


def find_entry(manifest: dict[str, Any], component: str, bucket: int, target: str) -> dict[str, Any]:
    for entry in manifest["libraries"]:
        if (entry["component"], entry["bucket"], entry["target"]) == (component, bucket, target):
            return entry
    built = sorted({e["target"] for e in manifest["libraries"]})
    raise A.ArtifactError(f"no library for {component} bucket {bucket} target {target!r} "
                          f"(built targets: {built}); add it to params.yaml and run `dvc repro`")


def load_component(root: Path, manifest: dict[str, Any], component: str, bucket: int, target: str,
                   weights: ComponentWeights | None = None) -> CompiledComponent:
    """Verify and load one library; pass ``weights`` to share a component's weights across buckets."""
    check_toolchain(manifest)
    entry = find_entry(manifest, component, bucket, target)
    return CompiledComponent(root, entry, weights or manifest["weights"][component])


def verify_file(path: Path, expected: str, source: str) -> str:
    """The file's sha256, after checking it is ``expected`` (what ``source`` recorded)."""
    if not path.exists():
        raise A.ArtifactError(f"{path} is missing; run `dvc repro` (or `dvc pull`)")
    actual = A.sha256(path)
    if actual != expected:
        raise A.ArtifactError(f"{path} does not match the sha256 recorded in {source} (tampered or stale); "
                              "run `dvc checkout` or `dvc repro`")
    return actual


def check_validated(entry: dict[str, Any], validation: dict[str, Any], weights_sha256: str, path: Path) -> None:
    """Refuse a library whose validation ran other bytes (of the library or of its weights)."""
    ran = (validation.get("library_sha256"), validation.get("weights_sha256"))
    if ran != (entry["sha256"], weights_sha256):
        raise A.ArtifactError(f"{path} (or its weights) is not the file its validation ran; "
                              "rerun validation with `dvc repro`")


def load_built(root: Path, component: str, bucket: int, target: str,
               validated: bool = False) -> CompiledComponent:
    """One library straight from its build outputs, for the stages that run before the manifest.

    ``validate`` and ``bench`` read the build outputs, not the manifest: the manifest lists only
    validated libraries, and depending on it would rerun every one of those stages whenever a
    bucket is added. The library must be the bytes its build recorded (build info ``sha256``);
    with ``validated``, also the bytes its validation ran, with the same weights.
    """
    lib = A.library_file(component, bucket, target, root)
    if not lib.exists():
        raise A.ArtifactError(f"{lib} is missing; run `dvc repro`")
    weights = A.weights_file(component, root)
    if not weights.exists():
        raise A.ArtifactError(f"{weights} is missing; run `dvc repro`")
    info = A.read_json(A.build_info_file(component, bucket, target, root), "build info")
    spec = info.get("target_spec")
    if spec is not None and not host_supports(spec):
        raise A.ArtifactError(
            f"target {target!r} ({spec}) needs CPU features this machine lacks, so its libraries cannot "
            f"be validated or timed here: remove {target!r} from params.yaml 'targets' (the other targets "
            "still build and run), or run `dvc repro` on a CPU that has them")
    sig = info["signature"]
    entry = {"component": component, "bucket": bucket, "target": target, "path": lib.relative_to(root).as_posix(),
             "sha256": info["sha256"], "sha256_source": f"{A.build_info_file(component, bucket, target, root)}",
             "inputs": sig["inputs"], "outputs": sig["outputs"], "params": sig["params"], **bounded_fields(sig)}
    if validated:
        entry["validation"] = A.read_json(A.validation_file(component, bucket, target, root), "validation")
    return CompiledComponent(root, entry, {"path": weights.relative_to(root).as_posix(),
                                           "sha256": A.sha256(weights)})


def has_transform_params(vm) -> bool:
    try:
        vm["main_transform_params"]
    except Exception:  # noqa: BLE001  (AttributeError / TVMError by version)
        return False
    return True


def bind_params(vm, weights: Sequence[Any]) -> list:
    """What ``vm["main"]`` takes after its inputs, given the raw weights in signature order.

    Libraries built with ``LiftTransformParams`` carry ``main_transform_params`` (weight
    transposes, LSTM bias sums, weight-norm, conv_transpose kernel rearrangement): run it once
    here and pass its outputs on every call. Weights it passes through unchanged come back as
    the very objects given (so weights shared by several buckets stay shared). Without that
    function (libraries built before it existed), the raw weights are the arguments.
    ``weights``: ``tvm.runtime.Tensor`` or numpy arrays.
    """
    import tvm

    raw = [w if isinstance(w, tvm.runtime.Tensor) else tvm.runtime.tensor(w) for w in weights]
    if not has_transform_params(vm):
        return raw
    out = vm["main_transform_params"](raw)
    by_ptr = {(w.data_ptr(), tuple(w.shape), str(w.dtype)): w for w in raw}
    return [by_ptr.get((t.data_ptr(), tuple(t.shape), str(t.dtype)), t) for t in out]
