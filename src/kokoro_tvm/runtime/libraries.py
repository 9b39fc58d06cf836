"""The built libraries of one target, as the runtime uses them: one precision per component
(``manifest.explain_precision``), buckets per length axis, and each library verified and loaded
on first use (weights once per component).

Shared by threads: the first use of a library loads it under one lock, so two threads asking
for the same bucket at once load it once; later uses read the loaded table without locking."""

from __future__ import annotations

import threading
from pathlib import Path

from .. import artifacts
from ..config import load_model_config
from ..errors import KokoroTVMError
from ..spec import COMPONENTS, Axis, samples_per_frame
from . import integrity
from .component import CompiledComponent, ComponentWeights, PackedWeights
from .manifest import Library, Manifest, explain_precision


class BucketError(KokoroTVMError, ValueError):
    """No built bucket can hold the input, even after splitting."""


class Libraries:
    """One target's libraries from a manifest, in one precision per component, and the model
    facts the host code needs.

    ``precision``: ``auto``, ``fp32`` or a narrower one (``explain_precision``); ``precision``
    then holds what each component runs in, and ``precision_reasons`` why."""

    def __init__(self, root: Path, manifest: Manifest, target: str, precision: str = "auto"):
        self.root, self.manifest, self.target = Path(root), manifest, target
        cfg = load_model_config(manifest.model.config)
        self.vocab: dict[str, int] = cfg["vocab"]
        self.samples_per_frame = samples_per_frame(cfg)
        self.style_width = 2 * cfg["style_dim"]
        self.precision, self.precision_reasons = explain_precision(manifest, target, precision)
        #: per component, its libraries in the precision it runs in
        self._entries: dict[str, list[Library]] = {
            c: [e for e in manifest.of_target(target, p) if e.component == c]
            for c, p in self.precision.items()
        }
        built = {c: {e.bucket for e in self._entries[c]} for c in COMPONENTS}
        missing = [c for c, b in built.items() if not b]
        if missing:
            shown = ", ".join(f"{c} {self.precision[c]}" for c in missing)
            raise artifacts.ArtifactError(
                f"target {target!r} has no library for {missing} (in the precision picked: "
                f"{shown}); run `dvc repro`"
            )
        #: per length axis, the buckets every component it sizes was built for (``spec``)
        self.buckets: dict[Axis, list[int]] = {
            axis: sorted(
                set.intersection(*(built[c] for c, comp in COMPONENTS.items() if comp.axis is axis))
            )
            for axis in Axis
        }
        unshared = [a.value for a, b in self.buckets.items() if not b]
        if unshared:
            raise artifacts.ArtifactError(
                f"target {target!r} has no {' or '.join(unshared)} bucket that every component "
                "on that axis was built for; run `dvc repro`"
            )
        self._weights: dict[str, ComponentWeights] = {}
        self._libs: dict[tuple[str, int], CompiledComponent] = {}
        self._load_lock = threading.Lock()

    @property
    def token_buckets(self) -> list[int]:
        return self.buckets[Axis.TOKENS]

    @property
    def frame_buckets(self) -> list[int]:
        return self.buckets[Axis.FRAMES]

    def verify_ahead(self) -> None:
        """Start hashing the files the first call will load (``integrity.verify_ahead``): each
        component's libraries and the packed weights of a component built for one bucket (a
        ladder's weights wait until their bucket is used)."""
        paths = []
        for component in COMPONENTS:  # in the order a call loads them
            entries = self._entries[component]
            paths += [self.root / e.path for e in entries]
            if len(entries) == 1 and entries[0].packed is not None:
                paths.append(self.root / entries[0].packed.path)
        integrity.verify_ahead(paths)

    def get(self, component: str, bucket: int) -> CompiledComponent:
        """The library of one bucket, loaded on first use."""
        key = (component, bucket)
        lib = self._libs.get(key)
        if lib is not None:
            return lib
        with self._load_lock:
            if key not in self._libs:
                entry = self.manifest.library(
                    component, bucket, self.target, self.precision[component]
                )
                if entry.packed is not None:  # weights in the library's own layout, mapped
                    weights = PackedWeights(self.root, entry.packed)
                else:  # the component's raw weights, transformed at load
                    if component not in self._weights:
                        self._weights[component] = ComponentWeights(
                            self.root, self.manifest.weights[component]
                        )
                    weights = self._weights[component]
                self._libs[key] = CompiledComponent(self.root, entry, weights)
            return self._libs[key]

    def loaded(self) -> list[CompiledComponent]:
        """The libraries loaded so far."""
        return list(self._libs.values())

    def bucket(self, axis: Axis | str, n: int) -> int:
        """The smallest built bucket of ``axis`` (``tokens`` or ``frames``) that holds ``n``."""
        axis = Axis(axis)
        buckets = self.buckets[axis]
        fits = [b for b in buckets if b >= n]
        if not fits:
            raise BucketError(
                f"{n} {axis.value} exceed the largest {axis.value} bucket {buckets[-1]}"
            )
        return fits[0]
