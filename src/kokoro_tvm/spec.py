"""What the pipeline builds, as plain data: components, their length axes and input signatures.

Pure Python (no torch, no TVM), so the params check, the compile stages and the torch-free
runtime all read one definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import KokoroTVMError

#: shipped model configurations (``config.load_model_config``)
MODEL_CONFIGS = ("kokoro-82m", "tiny")

#: component -> the bucket list (``buckets.<axis>`` in params.yaml) that sizes it
COMPONENTS = {"duration": "tokens", "text_encoder": "tokens", "decoder": "frames"}

#: Shortest valid length per component: kokoro's own. Every utterance kokoro runs has >= 3 tokens
#: (BOS + >= 1 phoneme + EOS) of >= 1 frame each. Shorter inputs are outside what the model was
#: trained on and validated for: kokoro's InstanceNorm refuses 1 frame, 2 frames normalise over 2
#: values (43 dB log-mel SNR measured), and a lone BOS token gives ALBERT one position to attend to.
MIN_LENGTH = {"duration": 3, "text_encoder": 3, "decoder": 3}

#: kokoro's Generator hard-codes harmonic_num=8: fundamental + 8 overtones
HARMONICS = 9
SAMPLE_RATE = 24000
#: ALBERT's position table: 510 phonemes + 2 boundary tokens
MAX_TOKENS = 512
LSTM_STRATEGIES = ("unroll", "loop")
#: ``padded``: a library computes its whole bucket, masked past the valid length. ``bounded``
#: (issue 17): a library takes the unpadded input, of any length up to its bucket, and computes
#: only that; it needs the loop LSTM (the one lowering with a symbolic time axis).
SHAPES = ("padded", "bounded")


class UnknownComponent(KokoroTVMError, ValueError):
    pass


def check_component(name: str) -> str:
    if name not in COMPONENTS:
        raise UnknownComponent(f"unknown component {name!r}; choose one of {sorted(COMPONENTS)}")
    return name


def samples_per_frame(cfg: dict[str, Any]) -> int:
    """Audio samples per acoustic frame: F0 runs at 2x frame rate, then upsample x istft hop."""
    ist = cfg["istftnet"]
    prod = 1
    for r in ist["upsample_rates"]:
        prod *= r
    return 2 * prod * ist["gen_istft_hop_size"]


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    bounds: tuple[int, int] | None = None  # allowed values, inclusive (the lengths input)

    def as_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.bounds is not None:
            d["range"] = list(self.bounds)
        return d


def length_axes(component: str, cfg: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Per input that spans the length: (axis, samples per length unit). A bounded library takes
    these inputs cut to ``scale * n`` along ``axis`` (and that axis split into ``[n, scale]``
    when ``scale > 1``: ``model.components.BoundedDecoder`` says why), no lengths input, and the others whole."""
    if COMPONENTS[check_component(component)] == "tokens":
        return {"input_ids": (1, 1)}
    return {"en": (2, 1), "asr": (2, 1), "noise": (1, samples_per_frame(cfg))}


def unpadded(arrays: dict[str, Any], axes: dict[str, Any], n: int) -> dict[str, Any]:
    """Bucket-sized inputs by name (numpy or torch) as a bounded library takes them at length n:
    each input in ``axes`` (``length_axes``, or a manifest's copy) cut to ``scale * n`` along its
    axis, split into ``[n, scale]`` when ``scale > 1``; the lengths input dropped. Views: the
    caller makes them contiguous its own way."""
    cut = {}
    for name, x in arrays.items():
        if name.endswith("lengths"):
            continue
        if name in axes:
            axis, scale = axes[name]
            x = x[(slice(None),) * axis + (slice(0, scale * n),)]
            if scale > 1:
                x = x.reshape(*x.shape[:axis], n, scale, *x.shape[axis + 1 :])
        cut[name] = x
    return cut


def input_specs(component: str, bucket: int, cfg: dict[str, Any]) -> list[TensorSpec]:
    """The static signature of a component at a bucket; the manifest and runtime use it."""
    lengths = (MIN_LENGTH[check_component(component)], bucket)
    if component == "duration":
        return [
            TensorSpec("input_ids", (1, bucket), "int64"),
            TensorSpec("input_lengths", (1,), "int64", lengths),
            TensorSpec("style", (1, cfg["style_dim"]), "float32"),
        ]
    if component == "text_encoder":
        return [
            TensorSpec("input_ids", (1, bucket), "int64"),
            TensorSpec("input_lengths", (1,), "int64", lengths),
        ]
    hid, sty, spf = cfg["hidden_dim"], cfg["style_dim"], samples_per_frame(cfg)
    return [
        TensorSpec("en", (1, hid + sty, bucket), "float32"),
        TensorSpec("asr", (1, hid, bucket), "float32"),
        TensorSpec("frame_lengths", (1,), "int64", lengths),
        TensorSpec("ref_s", (1, 2 * sty), "float32"),
        TensorSpec("rand_ini", (1, HARMONICS), "float32"),
        TensorSpec("noise", (1, spf * bucket, HARMONICS), "float32"),
    ]
