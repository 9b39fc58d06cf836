"""Load compiled libraries from the manifest and call them with numpy arrays.

Nothing native is loaded before it is verified: the manifest's toolchain must be the installed
TVM runtime, and every ``.so`` and weights file must match its recorded sha256 (loading a
library runs its code). Weights are bound once per component and shared by all its buckets,
so a call passes only the component's own inputs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import artifacts as A
from ..devices import isa
from ..manifest_entry import check_validated, library_entry
from ..spec import unpadded
from ..toolchain import ToolchainError, runtime_versions


def read_manifest(root: Path) -> dict[str, Any]:
    """``root/manifest.json`` (``root`` is the artifacts directory), with a fix in every error."""
    root = Path(root)
    if not root.is_dir():
        raise A.ArtifactError(
            f"artifact directory {root} does not exist; run `dvc repro` (or `dvc pull`) "
            "in the pipeline checkout, or pass the directory that holds manifest.json"
        )
    manifest = A.read_json(A.manifest_file(root), "library index")
    if not isinstance(manifest, dict) or "libraries" not in manifest:
        raise A.ArtifactError(
            f"{A.manifest_file(root)} is not a kokoro-tvm manifest; run `dvc repro`"
        )
    return manifest


def check_toolchain(manifest: dict[str, Any], found: dict[str, Any] | None = None) -> None:
    """Refuse libraries built by another TVM runtime than the installed one, before loading any.

    Only what loading needs is compared (``toolchain.runtime_versions``): torch, kokoro and
    transformers shape the *build* (DVC reruns stages when they change), not the loading."""
    built = manifest.get("toolchain", {})
    found = runtime_versions() if found is None else found
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
        raise A.ArtifactError(
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
            raise A.ArtifactError(
                f"target {target!r} was not built and validated (validated targets: {built}); "
                "add it to params.yaml 'targets' and run `dvc repro` on a machine that can "
                "validate it (params.yaml 'devices')"
            )
        if lacks[target]:
            raise A.ArtifactError(
                f"target {target!r} needs CPU features this machine lacks "
                f"({', '.join(lacks[target])}); pick one that runs here: "
                f"{[t for t in built if not lacks[t]]}"
            )
        return target, why + [f"picked {target}: asked for"]
    usable = [t for t in built if not lacks[t]]
    if not usable:
        raise A.ArtifactError(
            f"none of the validated targets {built} runs on this CPU ({'; '.join(why)}); add a "
            "target this machine runs to params.yaml 'targets' and run `dvc repro`"
        )
    best = max(usable, key=lambda t: (len(target_needs(manifest, t)["isa"]), t))
    return best, why + [f"picked {best}: the richest ISA this CPU runs"]


class ComponentWeights:
    """One component's weights, verified once, read into device tensors when a library binds them.

    A library built with ``LiftTransformParams`` binds transformed copies of most weights (packed,
    transposed, weight-normed); the raw tensors it transformed are then released (``release``), so
    the process holds each weight once rather than raw and transformed (a quarter of the peak
    RSS of a long utterance: README, "Measurements behind the code"). Weights a library passes through stay here,
    shared by every bucket; another bucket of the component re-reads the released ones from the
    file, checked against the verified hash again.
    """

    def __init__(self, root: Path, info: dict[str, Any], session=None):
        self.path = Path(root) / info["path"]
        self.sha256 = verify_file(self.path, info["sha256"], "its manifest")
        self.session = session or local_session()
        self.dev = self.session.dev
        with np.load(self.path) as z:
            self.names = set(z.files)
        self.tensors: dict[str, Any] = {}
        self.reads = 0  # file reads after the first: what releasing costs a second bucket

    def args(self, names: list[str]) -> list[Any]:
        import tvm

        missing = [n for n in names if n not in self.names]
        if missing:
            raise A.ArtifactError(
                f"{self.path} lacks weights {missing[:3]}...; rebuild with `dvc repro`"
            )
        need = [n for n in names if n not in self.tensors]
        if need:
            if self.reads:
                verify_file(self.path, self.sha256, "the hash it had when first read")
            self.reads += 1
            with np.load(self.path) as z:
                self.tensors.update({n: tvm.runtime.tensor(z[n], self.dev) for n in need})
        return [self.tensors[n] for n in names]

    def release(self, names: list[str], bound: list[Any]) -> None:
        """Drop the raw tensors of ``names`` that a library did not bind as they are (``bound``)."""
        kept = {id(t) for t in bound}
        for n in names:
            if n in self.tensors and id(self.tensors[n]) not in kept:
                del self.tensors[n]


class CompiledComponent:
    """One library (component x bucket x target) with its weights bound."""

    def __init__(
        self,
        root: Path,
        entry: dict[str, Any],
        weights: dict[str, Any] | ComponentWeights,
        session=None,
    ):
        # the VM from the runtime package: ``tvm.relax`` registers compiler ops, which a runtime-only
        # TVM (``TVM_USE_RUNTIME_LIB=1``, the aarch64 install) lacks ("no attribute 'RegisterOpAttr'")
        from tvm.runtime.vm import VirtualMachine

        self.entry = entry
        lib_path = Path(root) / entry["path"]
        verify_file(lib_path, entry["sha256"], entry.get("sha256_source", "its manifest"))
        if not isinstance(weights, ComponentWeights):
            weights = ComponentWeights(root, weights, session)
        validation = entry.get("validation")
        if validation is not None:
            check_validated(validation, entry["sha256"], weights.sha256, lib_path)
        self.weights_sha256 = weights.sha256
        self.dev = weights.dev
        self.stateful = (
            weights.session.stateful
        )  # an RPC device (``devices.session.RemoteSession``)
        self.vm = VirtualMachine(weights.session.load_module(lib_path), self.dev)
        # Libraries with ``main_transform_params`` (LiftTransformParams) take transformed weights:
        # transform once here; weights it passes through stay the shared ComponentWeights tensors.
        self.params = bind_params(self.vm, weights.args(entry["params"]), self.stateful)
        weights.release(entry["params"], self.params)
        return_freed_memory()

    @property
    def bucket(self) -> int:
        return int(self.entry["bucket"])

    @property
    def bounded(self) -> bool:
        """A bounded library (issue 17) computes only the valid length; a padded one its bucket."""
        return self.entry.get("shapes", "padded") == "bounded"

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Inputs as ``entry["inputs"]`` lists them, with their valid length in the lengths input.
        A padded library takes them bucket-sized. A bounded library takes them bucket-sized or
        already cut to the valid length along their length axes (what the runtime passes: no
        bucket-sized buffer is filled), and returns that length: its outputs' length axes are
        shorter than a padded library's, past-the-length values absent."""
        args = self.device_args(*inputs)
        out = invoke_stateful(self.vm, "main", args) if self.stateful else self.vm["main"](*args)
        return [out[i].numpy() for i in range(len(out))]

    def device_args(self, *inputs: np.ndarray) -> list[Any]:
        """What ``vm["main"]`` takes for these inputs: checked, cut (bounded), on the device,
        followed by the bound weights."""
        import tvm

        specs = self.entry["inputs"]
        if len(inputs) != len(specs):
            raise ValueError(
                f"{self.entry['component']} takes {len(specs)} inputs, got {len(inputs)}"
            )
        lengths = [
            np.asarray(x) for spec, x in zip(specs, inputs) if spec["name"].endswith("lengths")
        ]
        for spec, x in zip(specs, inputs):
            if spec["name"].endswith("lengths"):
                self._check_lengths(np.asarray(x, dtype=spec["dtype"]), spec.get("range"))
        n = int(lengths[0].reshape(-1)[0]) if lengths else None
        arrays = {}
        for spec, x in zip(specs, inputs):
            x = np.ascontiguousarray(x, dtype=spec["dtype"])
            if list(x.shape) not in self._shapes(spec, n):
                raise ValueError(
                    f"{self.entry['component']} input '{spec['name']}' must have shape "
                    f"{' or '.join(map(str, self._shapes(spec, n)))}, got {list(x.shape)}"
                )
            arrays[spec["name"]] = x
        if self.bounded:
            arrays = self._unpadded(arrays)
        return [*(tvm.runtime.tensor(x, self.dev) for x in arrays.values()), *self.params]

    def _shapes(self, spec: dict[str, Any], n: int | None) -> list[list[int]]:
        """Accepted shapes of one input: the bucket's; for a bounded library's length-axis
        inputs also the valid length's (``scale * n`` along the axis)."""
        shapes = [list(spec["shape"])]
        axes = self.entry.get("length_axes", {}) if self.bounded else {}
        if spec["name"] in axes and n is not None:
            axis, scale = axes[spec["name"]]
            cut = list(spec["shape"])
            cut[axis] = scale * n
            shapes.append(cut)
        return shapes

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
            raise ValueError(
                f"{self.entry['component']} bucket {bucket}: length {int(bad[0])} is outside "
                f"{lo}..{hi}; pick a bucket that fits (or split the input)"
            )


def find_entry(
    manifest: dict[str, Any], component: str, bucket: int, target: str
) -> dict[str, Any]:
    for entry in manifest["libraries"]:
        if (entry["component"], entry["bucket"], entry["target"]) == (component, bucket, target):
            return entry
    built = sorted({e["target"] for e in manifest["libraries"]})
    raise A.ArtifactError(
        f"no library for {component} bucket {bucket} target {target!r} "
        f"(built targets: {built}); add it to params.yaml and run `dvc repro`"
    )


def load_component(
    root: Path,
    manifest: dict[str, Any],
    component: str,
    bucket: int,
    target: str,
    weights: ComponentWeights | None = None,
) -> CompiledComponent:
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
        raise A.ArtifactError(
            f"{path} does not match the sha256 recorded in {source} (tampered or stale); "
            "run `dvc checkout` or `dvc repro`"
        )
    return actual


def load_built(
    root: Path, component: str, bucket: int, target: str, validated: bool = False, session=None
) -> CompiledComponent:
    """One library straight from its build outputs, for the stages that run before the manifest.

    ``validate`` and ``bench`` read the build outputs, not the manifest: the manifest lists only
    validated libraries, and depending on it would rerun every one of those stages whenever a
    bucket is added. The library must be the bytes its build recorded (build info ``sha256``);
    with ``validated``, also the bytes its validation ran, with the same weights. ``session``:
    the device to run it on (``devices.session``; default this CPU).
    """
    lib = A.library_file(component, bucket, target, root)
    if not lib.exists():
        raise A.ArtifactError(f"{lib} is missing; run `dvc repro`")
    weights = A.weights_file(component, root)
    if not weights.exists():
        raise A.ArtifactError(f"{weights} is missing; run `dvc repro`")
    info = A.read_json(A.build_info_file(component, bucket, target, root), "build info")
    lacks = isa.missing(info["needs"]) if session is None else []
    if lacks:
        raise A.ArtifactError(
            f"target {target!r} needs CPU features this machine lacks ({', '.join(lacks)}), so its libraries "
            "cannot run here; run them on a device that has them (params.yaml 'devices')"
        )
    sig = info["signature"]
    entry = library_entry(
        component,
        bucket,
        target,
        lib.relative_to(root).as_posix(),
        info["sha256"],
        sig,
        sha256_source=f"{A.build_info_file(component, bucket, target, root)}",
    )
    if validated:
        entry["validation"] = A.read_json(
            A.validation_file(component, bucket, target, root), "validation"
        )
    return CompiledComponent(
        root,
        entry,
        {"path": weights.relative_to(root).as_posix(), "sha256": A.sha256(weights)},
        session,
    )


def local_session():
    """This CPU (``devices.session.LocalSession``), the default device of every library."""
    from ..devices.session import LocalSession

    return LocalSession()


def return_freed_memory() -> None:
    """Give the pages of the weights a library just released back to the OS.

    glibc keeps freed blocks in its heap (its mmap threshold rises with every large block freed,
    so most weights come from the heap), and the raw weights a library transformed stayed
    resident: 196 of the decoder's 640 MB after loading, once its conv weights were packed at
    load (README, "Measurements behind the code"). Where the C library has no ``malloc_trim``
    (musl, macOS), nothing to do."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def has_transform_params(vm) -> bool:
    try:
        vm["main_transform_params"]
    except Exception:
        return False
    return True


def invoke_stateful(vm, name: str, args: Sequence[Any]) -> tuple:
    """``vm[name](*args)`` for a VM over RPC, which can pass no tuple: arguments set one by one,
    outputs fetched one by one."""
    vm.set_input(name, *args)
    vm.invoke_stateful(name)
    out = vm.get_outputs(name)
    return out if isinstance(out, tuple) else (out,)


def bind_params(vm, weights: Sequence[Any], stateful: bool = False) -> list:
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
    if stateful:  # over RPC: the flat entry (``compile.build.with_flat_transform_params``)
        return list(invoke_stateful(vm, "main_transform_params_flat", raw))
    out = vm["main_transform_params"](raw)
    by_ptr = {(w.data_ptr(), tuple(w.shape), str(w.dtype)): w for w in raw}
    return [by_ptr.get((t.data_ptr(), tuple(t.shape), str(t.dtype)), t) for t in out]
