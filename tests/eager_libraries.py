"""The runtime's ``Libraries`` with eager kokoro doing the compute: the runtime's own planning,
cuts, pauses, seams and streaming on Kokoro-82M's trained weights, where no compiled build of the
full model exists (the suite builds only tiny random-weight libraries).

Each component is kokoro's own code for that slice (``eval.eager.reference``, what validation
holds every compiled library to), called with the inputs the runtime passes a bounded library.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from kokoro_tvm.eval.eager import reference
from kokoro_tvm.runtime.manifest import Library, Tensor
from kokoro_tvm.spec import samples_per_frame

#: one bucket per axis, as large as any input here: nothing is cut for a bucket
TOKENS, FRAMES = 512, 1 << 20


class EagerComponent:
    """One component as the runtime calls a bounded library: numpy in, numpy out."""

    bounded = True

    def __init__(self, component: str, km, cfg: dict[str, Any], bucket: int):
        self.component, self.km, self.cfg, self.bucket = component, km, cfg, bucket
        harmonics = km.decoder.generator.m_source.l_sin_gen.harmonic_num + 1
        rand_ini = Tensor("rand_ini", (1, harmonics), "float32")  # what the decoder reads of it
        self.entry = Library(component, bucket, "eager", "", "", (rand_ini,), (), ())

    def __call__(self, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        inputs = tuple(None if a is None else torch.from_numpy(np.asarray(a)) for a in arrays)
        length = int(arrays[2 if self.component == "decoder" else 1][0])
        with torch.no_grad():
            out = reference(self.component, self.km, inputs, length, self.cfg)
        return tuple(o.float().numpy() for o in out)


class EagerLibraries:
    """What ``planner``, ``decoder`` and ``stream`` read of ``runtime.libraries.Libraries``."""

    def __init__(self, km, cfg: dict[str, Any]):
        self.km, self.cfg = km, cfg
        self.vocab: dict[str, int] = cfg["vocab"]
        self.samples_per_frame = samples_per_frame(cfg)
        self.style_width = 2 * cfg["style_dim"]
        self.token_buckets, self.frame_buckets = [TOKENS], [FRAMES]

    def bucket(self, axis: str, n: int) -> int:
        return TOKENS if axis == "tokens" else FRAMES

    def get(self, component: str, bucket: int) -> EagerComponent:
        return EagerComponent(component, self.km, self.cfg, bucket)
