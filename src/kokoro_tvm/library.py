"""Load one compiled library from the manifest and call it with numpy arrays.

The sha256 recorded in the manifest is checked before the ``.so`` is loaded (loading runs native
code), and weights are bound once so a call passes only the component's own inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from . import artifacts as A


class CompiledComponent:
    def __init__(self, root: Path, entry: dict[str, Any], weights: dict[str, Any]):
        import tvm
        from tvm import relax

        self.entry = entry
        lib_path = root / entry["path"]
        if not lib_path.exists():
            raise A.ArtifactError(f"{lib_path} is missing; run `dvc repro` (or `dvc pull`)")
        digest = A.sha256(lib_path)
        if digest != entry["sha256"]:
            raise A.ArtifactError(f"{lib_path} does not match its manifest sha256 (tampered or stale); "
                                  "run `dvc checkout` or `dvc repro`")
        w_path = root / weights["path"]
        if A.sha256(w_path) != weights["sha256"]:
            raise A.ArtifactError(f"{w_path} does not match its manifest sha256; run `dvc checkout`")
        self.dev = tvm.cpu()
        self.vm = relax.VirtualMachine(tvm.runtime.load_module(str(lib_path)), self.dev)
        self.params = [tvm.runtime.tensor(w, self.dev) for w in A.load_weights(w_path, entry["params"])]

    def __call__(self, *inputs: np.ndarray) -> list[np.ndarray]:
        import tvm

        specs = self.entry["inputs"]
        if len(inputs) != len(specs):
            raise ValueError(f"{self.entry['component']} takes {len(specs)} inputs, got {len(inputs)}")
        args = []
        for spec, x in zip(specs, inputs):
            x = np.ascontiguousarray(x, dtype=spec["dtype"])
            if list(x.shape) != spec["shape"]:
                raise ValueError(f"{self.entry['component']} input '{spec['name']}' must have shape "
                                 f"{spec['shape']}, got {list(x.shape)}")
            if spec["name"].endswith("lengths"):
                self._check_lengths(x)
            args.append(tvm.runtime.tensor(x, self.dev))
        out = self.vm["main"](*args, *self.params)
        return [out[i].numpy() for i in range(len(out))]

    def _check_lengths(self, lengths: np.ndarray) -> None:
        """The kernels clamp silently (0 gives zeros, > bucket acts as the bucket); refuse instead."""
        bucket = self.entry["bucket"]
        bad = lengths[(lengths < 1) | (lengths > bucket)]
        if bad.size:
            raise ValueError(f"{self.entry['component']} bucket {bucket}: length {int(bad[0])} is outside "
                             f"1..{bucket}; pick a bucket that fits (or split the input)")


def load_component(root: Path, manifest: dict[str, Any], component: str, bucket: int,
                   target: str) -> CompiledComponent:
    for entry in manifest["libraries"]:
        if (entry["component"], entry["bucket"], entry["target"]) == (component, bucket, target):
            return CompiledComponent(root, entry, manifest["weights"][component])
    built = sorted({e["target"] for e in manifest["libraries"]})
    raise A.ArtifactError(f"no library for {component} bucket {bucket} target {target!r} "
                          f"(built targets: {built}); add it to params.yaml and run `dvc repro`")
