"""params.yaml's schema: a tree of pydantic (v2) models with ``extra="forbid"`` and strict types,
so an unknown key at any level (``tune.trial``) is an error instead of a value silently dropped.

Stages read the validated tree itself: ``prm.model.config``, ``prm.buckets.tokens``,
``prm.bench.repeats``; ``Params`` adds what several stages ask of it (a target's TVM dict, a
component's buckets and shapes, where a target runs).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..spec import (
    FP32,
    LSTM_STRATEGIES,
    MAX_TOKENS,
    MODEL_CONFIGS,
    PRECISIONS,
    Axis,
    Shapes,
    lookup,
)
from . import checks
from .checks import ParamsError
from .messages import message

#: ``shapes.<axis>``'s values, as params.yaml spells them
SHAPES = tuple(s.value for s in Shapes)
#: ``devices.<target>``: where validate and bench run a target's libraries. ``auto``: this CPU when
#: it runs the target, else qemu-user for aarch64; ``qemu``: always emulated; ``none``: build only.
DEVICE_CHOICES = ("auto", "qemu", "none")
#: precisions a library may be built in besides float32
NARROW_PRECISIONS = tuple(p for p in PRECISIONS if p != FP32)
#: ``bench.phonemes``' bound: ten of kokoro's longest utterances, which the runtime splits
MAX_BENCH_PHONEMES = 5100


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class ModelSection(_Section):
    config: Literal[MODEL_CONFIGS]  # type: ignore[valid-type]
    checkpoint: str = Field(min_length=1)
    seed: int = 0


class BucketsSection(_Section):
    tokens: list[int]
    frames: list[int]

    @field_validator("tokens")
    @classmethod
    def _tokens(cls, v: list[int]) -> list[int]:
        return checks.buckets(v, "buckets.tokens", MAX_TOKENS)

    @field_validator("frames")
    @classmethod
    def _frames(cls, v: list[int]) -> list[int]:
        return checks.buckets(v, "buckets.frames", None)

    def of(self, component: str) -> tuple[int, ...]:
        """The buckets of ``component``'s axis, ascending."""
        return tuple(self.tokens if lookup(component).axis is Axis.TOKENS else self.frames)


class LstmSection(_Section):
    strategy: Literal[LSTM_STRATEGIES]  # type: ignore[valid-type]


class ShapesSection(_Section):
    """Per bucket axis: ``padded`` or ``bounded`` libraries (``spec.Shapes``)."""

    tokens: Literal[SHAPES] = Shapes.PADDED.value  # type: ignore[valid-type]
    frames: Literal[SHAPES] = Shapes.PADDED.value  # type: ignore[valid-type]

    def of(self, component: str) -> Shapes:
        """How ``component``'s libraries are built."""
        return Shapes(getattr(self, lookup(component).axis.value))


class TargetSpec(_Section):
    """A TVM 0.27 LLVM target as a dict (``tvm.target.Target`` rejects CLI strings)."""

    kind: Literal["llvm"]
    mcpu: str | None = None
    mtriple: str | None = None
    mattr: list[str] | None = None

    @model_validator(mode="after")
    def _known_to_llvm(self) -> TargetSpec:
        checks.check_llvm_target(self.as_dict())
        return self

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class TrackerDevice(_Section):
    """A device registered with a TVM RPC tracker under ``key`` (a board running
    ``python -m tvm.exec.rpc_server --tracker HOST:PORT --key NAME``)."""

    tracker: str = Field(pattern=r"^[A-Za-z0-9_.-]+:[0-9]{1,5}$")
    key: str = Field(min_length=1)
    timeout_s: int = Field(60, ge=1)  # how long to wait for a free device before failing

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.tracker.rsplit(":", 1)
        return host, int(port)


class ToolchainSection(_Section):
    torch: str | None = None
    apache_tvm: str | None = Field(None, alias="apache-tvm")
    apache_tvm_ffi: str | None = Field(None, alias="apache-tvm-ffi")
    kokoro: str | None = None
    transformers: str | None = None
    llvm_major: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class TuneSection(_Section):
    trials: int = Field(0, ge=0)


class RuntimeSection(_Section):
    num_threads: int = Field(0, ge=0)


class BenchSection(_Section):
    repeats: int = Field(10, ge=1)
    onnxruntime: bool = True
    #: ``bench_e2e``'s input lengths: ``auto`` (``e2e.default_lengths`` of the token buckets) or
    #: phoneme counts; the tests' tiny pipeline times one short input, as each length costs a
    #: parity run and eager kokoro beside the runtime
    phonemes: Literal["auto"] | list[int] = "auto"

    @field_validator("phonemes")
    @classmethod
    def _phonemes(cls, v: Literal["auto"] | list[int]) -> Literal["auto"] | list[int]:
        if v == "auto":
            return v
        return checks.buckets(v, "bench.phonemes", MAX_BENCH_PHONEMES, "phoneme count")

    @property
    def lengths(self) -> tuple[int, ...] | None:
        """The phoneme counts ``phonemes`` names, ascending; None for ``auto``."""
        return None if self.phonemes == "auto" else tuple(self.phonemes)


class VoicesSection(_Section):
    """Where stage ``voices`` gets the voices users pick by name: ``kokoro-js`` (npm, the 54
    Kokoro-82M voices, checksum pinned), a kokoro-onnx voices file or a Kokoro-82M ``voices/``
    folder, or ``none`` (pipeline/voices.py)."""

    source: str = Field("kokoro-js", min_length=1)


class PrecisionSection(_Section):
    """Per component, the precisions built beside float32 (which every library is built in: the
    reference every CPU of its target runs). Only the decoder has narrower kernels: its
    convolutions with bf16 products (compile/bf16.py); the text side stays float32 because the
    durations must stay kokoro's (docs/precision.md)."""

    decoder: list[Literal[NARROW_PRECISIONS]] = []  # type: ignore[valid-type]

    @field_validator("decoder")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"lists a precision twice ({v}); list each once")
        return v

    def of(self, component: str) -> tuple[str, ...]:
        """The precisions ``component`` is built in beside float32."""
        return tuple(getattr(self, component, ()))


class Params(_Section):
    """The whole of params.yaml, validated: what stages read."""

    model: ModelSection
    buckets: BucketsSection
    lstm: LstmSection
    shapes: ShapesSection = ShapesSection()
    targets: dict[str, TargetSpec] = Field(min_length=1)
    devices: dict[str, Literal[DEVICE_CHOICES] | TrackerDevice] = {}  # type: ignore[valid-type]
    toolchain: ToolchainSection = ToolchainSection()
    tune: TuneSection = TuneSection()
    runtime: RuntimeSection = RuntimeSection()
    bench: BenchSection = BenchSection()
    voices: VoicesSection = VoicesSection()
    precision: PrecisionSection = PrecisionSection()

    @field_validator("targets", mode="before")
    @classmethod
    def _target_names(cls, v: Any) -> Any:
        checks.target_names(v)
        return v

    @field_validator("devices", mode="before")
    @classmethod
    def _no_devices(cls, v: Any) -> Any:
        return {} if v is None else v  # a `devices:` key whose entries are all commented out

    @model_validator(mode="after")
    def _devices_name_targets(self) -> Params:
        checks.devices_name_targets(self.devices, self.targets)
        return self

    @model_validator(mode="after")
    def _bounded_needs_loop(self) -> Params:
        bounded = [
            axis
            for axis in ("tokens", "frames")
            if getattr(self.shapes, axis) == Shapes.BOUNDED.value
        ]
        checks.bounded_needs_loop(bounded, self.lstm.strategy)
        return self

    def target(self, name: str) -> dict[str, Any]:
        """``targets.<name>`` as the dict ``tvm.target.Target`` takes."""
        self.check_target(name)
        return self.targets[name].as_dict()

    def device(self, target: str) -> str | TrackerDevice:
        """``devices.<target>``: ``auto`` unless params say otherwise."""
        self.check_target(target)
        return self.devices.get(target, "auto")

    def check_bucket(self, component: str, bucket: int) -> None:
        if bucket not in self.buckets.of(component):
            axis = lookup(component).axis.value
            raise ParamsError(
                f"bucket {bucket} is not in params.yaml 'buckets.{axis}' "
                f"{list(self.buckets.of(component))}"
            )

    def check_precision(self, component: str, precision: str) -> None:
        if precision not in self.precision.of(component):
            raise ParamsError(
                f"precision {precision!r} is not in params.yaml 'precision.{component}' "
                f"{list(self.precision.of(component))}"
            )

    def check_target(self, target: str) -> None:
        if target not in self.targets:
            raise ParamsError(
                f"target {target!r} is not in params.yaml 'targets' {sorted(self.targets)}"
            )

    def updated(self, **sections: dict[str, Any]) -> Params:
        """These params with some keys changed, validated as params.yaml is: for callers that
        run a stage with other values (``prm.updated(bench={"repeats": 1})``)."""
        raw = self.model_dump(by_alias=True)
        for name, values in sections.items():
            raw[name] = {**raw[name], **values}
        return parse(raw)


def parse(raw: Any) -> Params:
    """params.yaml's parsed YAML, validated; ``ParamsError`` names every key at fault."""
    if not isinstance(raw, dict):
        raise ParamsError(
            "params.yaml: top level must be a mapping with keys model, buckets, lstm, targets"
        )
    try:
        return Params.model_validate(raw)
    except ValidationError as e:
        problems = [message(err, Params) for err in e.errors(include_url=False)]
        raise ParamsError("params.yaml: " + "; ".join(problems)) from None
