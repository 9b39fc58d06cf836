"""One compiled library and its component's weights, as the runtime calls them.

Nothing native is loaded before it is verified: every ``.so`` and weights file must match its
recorded sha256 (loading a library runs its code). Weights are bound once per component and
shared by all its buckets, so a call passes only the component's own inputs.

One ``CompiledComponent`` serves any number of threads: a Relax VM keeps per-call registers and
frames, so each concurrent caller takes a VM of its own from a pool, all of them over the one
module and the one set of bound (transformed) weights; a VM is created only when every existing
one is busy, so a process that calls from one thread holds one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .. import artifacts
from ..errors import InputError, KokoroTVMError
from ..manifest_entry import check_validated
from ..spec import unpadded
from . import tvm_runtime
from .integrity import verify_file
from .manifest import File, Library, Tensor
from .memory import return_freed_memory
from .transfer import to_device, to_host
from .vm import bind_params, invoke_stateful


class ComponentWeights:
    """One component's raw weights, verified once, read into device tensors when a library binds
    them: what validation and the benchmarks load, and the runtime for a manifest without
    packed weights (``PackedWeights`` is the runtime's usual path).

    A library built with ``LiftTransformParams`` binds transformed copies of most weights (packed,
    transposed, weight-normed); the raw tensors it transformed are then released (``release``), so
    the process holds each weight once rather than raw and transformed (docs/measurements.md,
    "Raw weights released"). Weights a library passes through stay here, shared by every bucket;
    another bucket of the component re-reads the released ones from the file, checked against
    the verified hash again.
    """

    def __init__(self, root: Path, info: File, session=None):
        self.path = Path(root) / info.path
        self.sha256 = verify_file(self.path, info.sha256, "its manifest")
        self.session = session or local_session()
        self.dev = self.session.dev
        with np.load(self.path) as z:
            self.names = set(z.files)
        self.tensors: dict[str, Any] = {}
        self.reads = 0  # file reads after the first: what releasing costs a second bucket

    def args(self, names: list[str]) -> list[Any]:

        missing = [n for n in names if n not in self.names]
        if missing:
            raise artifacts.ArtifactError(
                f"{self.path} lacks weights {missing[:3]}...; rebuild with `dvc repro`"
            )
        need = [n for n in names if n not in self.tensors]
        if need:
            if self.reads:
                verify_file(self.path, self.sha256, "the hash it had when first read")
            self.reads += 1
            with np.load(self.path) as z:
                self.tensors.update({n: to_device(z[n], self.dev) for n in need})
        return [self.tensors[n] for n in names]

    def release(self, names: list[str], bound: list[Any]) -> None:
        """Drop the raw tensors of ``names`` that a library did not bind as they are (``bound``)."""
        kept = {id(t) for t in bound}
        for n in names:
            if n in self.tensors and id(self.tensors[n]) not in kept:
                del self.tensors[n]


class PackedWeights:
    """One library's weights in the layout it takes them (``kokoro_tvm.packed``): the outputs
    its ``main_transform_params`` gave on the target's device at build time, verified by sha256
    (``integrity``), mapped from the file, and never transformed or copied here."""

    def __init__(self, root: Path, info: File, session=None):
        self.path = Path(root) / info.path
        self.sha256 = info.sha256
        self.session = session or local_session()
        self.dev = self.session.dev

    def tensors(self) -> list[Any]:
        """``main``'s weight arguments: views of the mapping on this CPU (no copy), or copies
        on a remote device."""
        from .. import packed

        verify_file(self.path, self.sha256, "its manifest")
        try:
            arrays = packed.map_arrays(self.path)
        except FileNotFoundError:
            raise artifacts.ArtifactError(
                f"{self.path} is missing; run `dvc repro` (or `dvc pull`)"
            ) from None
        except packed.PackedError as e:
            raise artifacts.ArtifactError(str(e)) from e
        if self.session.stateful:
            return [to_device(a, self.dev) for a in arrays]
        return [tvm_runtime.from_dlpack(a) for a in arrays]


class CompiledComponent:
    """One library (component x bucket x target) with its weights bound."""

    def __init__(
        self,
        root: Path,
        entry: Library,
        weights: File | ComponentWeights | PackedWeights,
        session=None,
    ):
        self.entry = entry
        lib_path = Path(root) / entry.path
        verify_file(lib_path, entry.sha256, entry.sha256_source)
        if not isinstance(weights, (ComponentWeights, PackedWeights)):
            weights = ComponentWeights(root, weights, session)
        if entry.validation is not None:
            key = "packed_sha256" if isinstance(weights, PackedWeights) else "weights_sha256"
            check_validated(entry.validation.sha256, entry.sha256, weights.sha256, lib_path, key)
        self.weights_sha256 = weights.sha256
        self.dev = weights.dev
        # an RPC device (``devices.session.RemoteSession``) takes calls one at a time
        self.stateful = weights.session.stateful
        self._bounded = weights.session.bounded  # a bound on each call to a remote device
        self._module = weights.session.load_module(lib_path)
        first = self._new_vm()
        if isinstance(weights, PackedWeights):  # already in final layout: map, bind nothing
            self.params = weights.tensors()
        else:
            # A library with ``main_transform_params`` (LiftTransformParams) takes transformed
            # weights: transform once here; weights it passes through stay the shared
            # ComponentWeights tensors.
            with self._bounded(), self._refused("the weights"):
                self.params = bind_params(first, weights.args(list(entry.params)), self.stateful)
            weights.release(list(entry.params), self.params)
            return_freed_memory()
        #: the first VM, for single-threaded tools that drive a VM themselves (bench's timers)
        self.vm = first
        self._idle = [first]  # VMs no caller holds; every VM binds the same ``params``
        self._pool_lock = threading.Lock()
        self._vms = 1

    def _new_vm(self) -> Any:
        return tvm_runtime.virtual_machine(self._module, self.dev)

    @property
    def vms(self) -> int:
        """VMs made so far: the most callers that ran this library at once."""
        return self._vms

    @contextlib.contextmanager
    def _vm(self) -> Iterator[Any]:
        """A VM no other thread is using, for one call (an RPC device has one, taken in turn)."""
        if self.stateful:
            with self._pool_lock:
                yield self._idle[0]
            return
        with self._pool_lock:
            vm = self._idle.pop() if self._idle else None
            if vm is None:
                self._vms += 1
        if vm is None:
            vm = self._new_vm()
        try:
            yield vm
        finally:
            with self._pool_lock:
                self._idle.append(vm)

    @property
    def bucket(self) -> int:
        return self.entry.bucket

    @property
    def bounded(self) -> bool:
        """A bounded library computes only the valid length; a padded one its bucket."""
        return self.entry.bounded

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Inputs as ``entry.inputs`` lists them, with their valid length in the lengths input.
        A padded library takes them bucket-sized. A bounded library takes them bucket-sized or
        already cut to the valid length along their length axes (what the runtime passes: no
        bucket-sized buffer is filled), and returns that length: its outputs' length axes are
        shorter than a padded library's, past-the-length values absent."""
        args = self.device_args(*inputs)
        with self._vm() as vm, self._bounded(), self._refused("the inputs"):
            out = invoke_stateful(vm, "main", args) if self.stateful else vm["main"](*args)
            return [to_host(out[i]) for i in range(len(out))]

    @contextlib.contextmanager
    def _refused(self, what: str) -> Iterator[None]:
        """A library that refuses what its manifest entry describes (its inputs or weights were
        checked against the entry first) was not built for that entry: an edited or stale
        manifest. Said so, with the fix, instead of TVM's own error."""
        try:
            yield
        except (KokoroTVMError, MemoryError):
            raise
        except Exception as e:
            first = (str(e).splitlines() or [""])[0][:200]
            raise artifacts.ArtifactError(
                f"{self.entry.path} refused {what} its manifest entry describes "
                f"({type(e).__name__}: {first}); the manifest does not match the library: run "
                "`dvc checkout` or `dvc repro`"
            ) from e

    def device_args(self, *inputs: np.ndarray) -> list[Any]:
        """What ``vm["main"]`` takes for these inputs: checked, cut (bounded), on the device,
        followed by the bound weights."""

        specs = self.entry.inputs
        if len(inputs) != len(specs):
            raise InputError(f"{self.entry.component} takes {len(specs)} inputs, got {len(inputs)}")
        lengths = [np.asarray(x) for spec, x in zip(specs, inputs) if spec.is_length]
        for spec, x in zip(specs, inputs):
            if spec.is_length:
                self._check_lengths(np.asarray(x, dtype=spec.dtype), spec.range)
        n = int(lengths[0].reshape(-1)[0]) if lengths else None
        arrays = {}
        for spec, x in zip(specs, inputs):
            x = np.ascontiguousarray(x, dtype=spec.dtype)
            if list(x.shape) not in self._shapes(spec, n):
                raise InputError(
                    f"{self.entry.component} input '{spec.name}' must have shape "
                    f"{' or '.join(map(str, self._shapes(spec, n)))}, got {list(x.shape)}"
                )
            arrays[spec.name] = x
        if self.bounded:
            arrays = self._unpadded(arrays)
        return [*(to_device(x, self.dev) for x in arrays.values()), *self.params]

    def _shapes(self, spec: Tensor, n: int | None) -> list[list[int]]:
        """Accepted shapes of one input: the bucket's; for a bounded library's length-axis
        inputs also the valid length's (``scale * n`` along the axis)."""
        shapes = [list(spec.shape)]
        axes = self.entry.length_axes if self.bounded else {}
        if spec.name in axes and n is not None:
            axis, scale = axes[spec.name]
            cut = list(spec.shape)
            cut[axis] = scale * n
            shapes.append(cut)
        return shapes

    def _unpadded(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What a bounded library takes: every input cut to the valid length, no lengths input."""
        (n,) = (int(x.reshape(-1)[0]) for name, x in arrays.items() if name.endswith("lengths"))
        cut = unpadded(arrays, self.entry.length_axes, n)
        return {name: np.ascontiguousarray(x) for name, x in cut.items()}

    def _check_lengths(self, lengths: np.ndarray, bounds: tuple[int, int] | None) -> None:
        """The kernels clamp silently (0 gives zeros, > bucket acts as the bucket); refuse
        instead."""
        bucket = self.entry.bucket
        lo, hi = bounds or (1, bucket)
        bad = lengths[(lengths < lo) | (lengths > hi)]
        if bad.size:
            raise InputError(
                f"{self.entry.component} bucket {bucket}: length {int(bad[0])} is outside "
                f"{lo}..{hi}; pick a bucket that fits (or split the input)"
            )


def local_session():
    """This CPU (``devices.session.LocalSession``), the default device of every library."""
    from ..devices.session import LocalSession

    return LocalSession()
