"""What the pipeline builds, as plain data: the component registry and the two library shapes.

Each compiled component has one entry here (``COMPONENTS``): the bucket list that sizes it, its
inputs and which axis of each spans the length, its outputs, and its two minimum lengths. Export,
validation, the bench and the reference read the entry instead of comparing component names, and
the bucket -> input shapes conversion (``Component.signature``) is written here alone.

Pure Python (no torch, no TVM), so the params check, the compile stages and the torch-free
runtime all read one definition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .errors import KokoroTVMError

#: shipped model configurations (``config.load_model_config``)
MODEL_CONFIGS = ("kokoro-82m", "tiny")

#: kokoro's Generator hard-codes harmonic_num=8: fundamental + 8 overtones
HARMONICS = 9
SAMPLE_RATE = 24000
#: ALBERT's position table: 510 phonemes + 2 boundary tokens
MAX_TOKENS = 512
LSTM_STRATEGIES = ("unroll", "loop")
#: What a library's products are computed in: float32 (kokoro's own), or bf16 pairs summed in
#: float32 (the decoder's convolutions, compile/bf16.py), built beside float32 where asked
FP32 = "fp32"
PRECISIONS = (FP32, "bf16")


class Shapes(Enum):
    """How a library takes its length axis: ``shapes.<axis>`` in params.yaml, ``shapes`` in a
    manifest entry (the values are those strings)."""

    #: The library takes the bucket-sized input and the valid length, and computes its whole
    #: bucket, masked past the length (``model.lengths.Padded``).
    PADDED = "padded"
    #: The library takes the unpadded input, of any length up to its bucket, and computes only
    #: that (``model.lengths.Bounded``); it needs the loop LSTM, the one lowering with a symbolic
    #: time axis.
    BOUNDED = "bounded"


class Axis(Enum):
    """The bucket list that sizes a component (``buckets.<axis>`` in params.yaml)."""

    TOKENS = "tokens"
    FRAMES = "frames"


class Output(Enum):
    """What a component returns, which decides how validation judges it (``eval.verdicts``)."""

    #: hidden features, judged by relative error against float64 kokoro
    FEATURES = "features"
    #: per-token durations then the features they came from: also judged as kokoro rounds them
    DURATIONS = "durations"
    #: one waveform, judged by log-mel SNR and mel-cepstral distortion
    AUDIO = "audio"


class UnknownComponent(KokoroTVMError, ValueError):
    pass


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


@dataclass(frozen=True)
class Input:
    """One input of a padded library, as a function of the bucket and the model config."""

    name: str
    dtype: str
    shape: Callable[[int, dict[str, Any]], tuple[int, ...]]
    #: the axis that spans the length (``bucket x scale`` long at a bucket): a bounded library
    #: takes the input cut to the valid length there
    length_axis: int | None = None
    #: the valid length itself: a padded library's only, bounded to ``min_length..bucket``
    is_length: bool = False


@dataclass(frozen=True)
class Component:
    """One compiled component: how its bucket becomes input shapes, and what it returns."""

    name: str
    #: the bucket list that sizes it
    axis: Axis
    #: a padded library's inputs, in argument order; a bounded library takes them all but the
    #: length (``bounded_inputs``)
    inputs: tuple[Input, ...]
    output: Output
    #: The shortest valid input: kokoro's own. Every utterance kokoro runs has >= 3 tokens
    #: (BOS + >= 1 phoneme + EOS) of >= 1 frame each. Shorter inputs are outside what the model
    #: was trained on and validated for: kokoro's InstanceNorm refuses 1 frame, 2 frames
    #: normalise over 2 values (docs/measurements.md, "Shortest input"), and a lone BOS token
    #: gives ALBERT one position to attend to. Validation starts here, and it is the lower end
    #: of the lengths input's range.
    min_length: int
    #: The shortest input a bounded library takes (its ``torch.export.Dim``'s min): the token
    #: components' graphs take any length; the decoder's instance norms need 2 frames, and
    #: kokoro's shortest utterance has 3 tokens of >= 1 frame, hence its 3.
    min_export_length: int

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    @property
    def bounded_inputs(self) -> list[Input]:
        """What a bounded library takes, in argument order: every input but the length."""
        return [i for i in self.inputs if not i.is_length]

    def signature(self, bucket: int, cfg: dict[str, Any]) -> list[TensorSpec]:
        """The static signature at a bucket: the padded inputs (a bounded library's are these, cut
        to the valid length along ``length_axes``); the manifest and the runtime use it."""
        return [
            TensorSpec(
                i.name,
                i.shape(bucket, cfg),
                i.dtype,
                (self.min_length, bucket) if i.is_length else None,
            )
            for i in self.inputs
        ]

    def length_axes(self, cfg: dict[str, Any]) -> dict[str, tuple[int, int]]:
        """Per input that spans the length: (axis, samples per length unit). A bounded library
        takes these inputs cut to ``scale * n`` along ``axis`` (and that axis split into
        ``[n, scale]`` when ``scale > 1``: ``model.components.BoundedDecoder`` says why), no
        lengths input, and the others whole."""
        return {
            i.name: (i.length_axis, i.shape(1, cfg)[i.length_axis])
            for i in self.inputs
            if i.length_axis is not None
        }

    def export_dims(self, n: Any) -> tuple[dict[int, Any] | None, ...]:
        """``torch.export``'s ``dynamic_shapes`` of a bounded library: ``n`` on each input's
        length axis (after the ``[n, scale]`` split it is still the first of the two)."""
        return tuple(
            None if i.length_axis is None else {i.length_axis: n} for i in self.bounded_inputs
        )


def _tokens(bucket: int, _cfg: dict[str, Any]) -> tuple[int, ...]:
    return (1, bucket)


def _one(_bucket: int, _cfg: dict[str, Any]) -> tuple[int, ...]:
    return (1,)


INPUT_IDS = Input("input_ids", "int64", _tokens, length_axis=1)

DURATION = Component(
    "duration",
    Axis.TOKENS,
    (
        INPUT_IDS,
        Input("input_lengths", "int64", _one, is_length=True),
        Input("style", "float32", lambda b, cfg: (1, cfg["style_dim"])),
    ),
    Output.DURATIONS,
    min_length=3,
    min_export_length=1,
)
TEXT_ENCODER = Component(
    "text_encoder",
    Axis.TOKENS,
    (INPUT_IDS, Input("input_lengths", "int64", _one, is_length=True)),
    Output.FEATURES,
    min_length=3,
    min_export_length=1,
)
DECODER = Component(
    "decoder",
    Axis.FRAMES,
    (
        Input(
            "en",
            "float32",
            lambda b, cfg: (1, cfg["hidden_dim"] + cfg["style_dim"], b),
            length_axis=2,
        ),
        Input("asr", "float32", lambda b, cfg: (1, cfg["hidden_dim"], b), length_axis=2),
        Input("frame_lengths", "int64", _one, is_length=True),
        Input("ref_s", "float32", lambda b, cfg: (1, 2 * cfg["style_dim"])),
        Input("rand_ini", "float32", lambda b, cfg: (1, HARMONICS)),
        # samples_per_frame(cfg) samples per frame: a bounded decoder takes it as [1, n, spf, 9]
        Input(
            "noise",
            "float32",
            lambda b, cfg: (1, samples_per_frame(cfg) * b, HARMONICS),
            length_axis=1,
        ),
    ),
    Output.AUDIO,
    min_length=3,
    min_export_length=3,
)

#: The registry, by name, in pipeline order.
COMPONENTS: dict[str, Component] = {c.name: c for c in (DURATION, TEXT_ENCODER, DECODER)}


def lookup(name: str) -> Component:
    """The registry entry of a component name, or an error that lists the names."""
    try:
        return COMPONENTS[name]
    except KeyError:
        raise UnknownComponent(
            f"unknown component {name!r}; choose one of {sorted(COMPONENTS)}"
        ) from None


def unpadded(arrays: dict[str, Any], axes: dict[str, Any], n: int) -> dict[str, Any]:
    """Bucket-sized inputs by name (numpy or torch) as a bounded library takes them at length n:
    each input in ``axes`` (``Component.length_axes``, or a manifest's copy) cut to ``scale * n``
    along its axis, split into ``[n, scale]`` when ``scale > 1``; the lengths input dropped.
    Views: the caller makes them contiguous its own way."""
    cut = {}
    for name, x in arrays.items():
        if name.endswith("lengths"):
            continue
        if name in axes:
            x = x[valid(axes[name], n)]
            axis, scale = axes[name]
            if scale > 1:
                x = x.reshape(*x.shape[:axis], n, scale, *x.shape[axis + 1 :])
        cut[name] = x
    return cut


def valid(axis_scale: tuple[int, int], n: int) -> tuple[slice, ...]:
    """The index of an input's first ``n`` length units along its length axis."""
    axis, scale = axis_scale
    return (slice(None),) * axis + (slice(0, scale * n),)


def past(axis_scale: tuple[int, int], n: int) -> tuple[slice, ...]:
    """The index of everything past an input's first ``n`` length units: its padding."""
    axis, scale = axis_scale
    return (slice(None),) * axis + (slice(scale * n, None),)
