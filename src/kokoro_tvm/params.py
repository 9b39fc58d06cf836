"""Strict validation of ``params.yaml``: every stage calls ``load`` first, so a bad edit fails
before any work, naming the key at fault and the fix.

The schema is a tree of pydantic (v2) models with ``extra="forbid"`` and strict types: an
unknown key at any level (``tune.trial``) is an error that suggests the closest valid spelling,
instead of a value silently dropped. Targets are checked against the installed LLVM: a CPU or
feature LLVM does not know would otherwise be ignored with a warning, and the library built for
a generic CPU under the name of the one asked for.

Stages read the validated values through ``Params``, a flat view that keeps call sites short.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import KokoroTVMError
from .spec import LSTM_STRATEGIES, MAX_TOKENS, MODEL_CONFIGS, Axis, Shapes, lookup

#: ``shapes.<axis>``'s values, as params.yaml spells them
SHAPES = tuple(s.value for s in Shapes)
_TARGET_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class ParamsError(KokoroTVMError, ValueError):
    """A params.yaml problem; the message names the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


def _buckets(value: list[int], key: str, limit: int | None, what: str = "bucket") -> list[int]:
    if not value:
        raise ValueError(f"'{key}' must list at least one {what}")
    bad = [v for v in value if v <= 0 or (limit is not None and v > limit)]
    if bad:
        bound = f"1..{limit}" if limit else "positive"
        why = f" (the model's limit is {limit} tokens)" if limit and what == "bucket" else ""
        raise ValueError(f"'{key}' has {what}(s) {bad} outside {bound}{why}")
    dupes = sorted({v for v in value if value.count(v) > 1})
    if dupes:
        raise ValueError(f"'{key}' lists {what}(s) {dupes} more than once; remove the duplicates")
    return sorted(value)


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
        return _buckets(v, "buckets.tokens", MAX_TOKENS)

    @field_validator("frames")
    @classmethod
    def _frames(cls, v: list[int]) -> list[int]:
        return _buckets(v, "buckets.frames", None)


class LstmSection(_Section):
    strategy: Literal[LSTM_STRATEGIES]  # type: ignore[valid-type]


class ShapesSection(_Section):
    """Per bucket axis: ``padded`` or ``bounded`` libraries (``spec.Shapes``)."""

    tokens: Literal[SHAPES] = Shapes.PADDED.value  # type: ignore[valid-type]
    frames: Literal[SHAPES] = Shapes.PADDED.value  # type: ignore[valid-type]


class TargetSpec(_Section):
    """A TVM 0.27 LLVM target as a dict (``tvm.target.Target`` rejects CLI strings)."""

    kind: Literal["llvm"]
    mcpu: str | None = None
    mtriple: str | None = None
    mattr: list[str] | None = None

    @model_validator(mode="after")
    def _known_to_llvm(self) -> TargetSpec:
        check_llvm_target(self.as_dict())
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


#: ``devices.<target>``: where validate and bench run a target's libraries. ``auto``: this CPU when
#: it runs the target, else qemu-user for aarch64; ``qemu``: always emulated; ``none``: build only.
DEVICE_CHOICES = ("auto", "qemu", "none")


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


#: ``bench.phonemes``' bound: ten of kokoro's longest utterances, which the runtime splits
MAX_BENCH_PHONEMES = 5100


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
        return (
            v if v == "auto" else _buckets(v, "bench.phonemes", MAX_BENCH_PHONEMES, "phoneme count")
        )


class VoicesSection(_Section):
    """Where stage ``voices`` gets the voices users pick by name: ``kokoro-js`` (npm, the 54
    Kokoro-82M voices, checksum pinned), a kokoro-onnx voices file or a Kokoro-82M ``voices/``
    folder, or ``none`` (pipeline/voices.py)."""

    source: str = Field("kokoro-js", min_length=1)


class ParamsFile(_Section):
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

    @field_validator("targets", mode="before")
    @classmethod
    def _target_names(cls, v: Any) -> Any:
        for name in v if isinstance(v, dict) else ():
            if not isinstance(name, str) or not _TARGET_NAME.match(name):
                raise ValueError(
                    f"target name {name!r} must use letters, digits and '_' only "
                    "(it becomes part of DVC stage names)"
                )
        return v

    @field_validator("devices", mode="before")
    @classmethod
    def _no_devices(cls, v: Any) -> Any:
        return {} if v is None else v  # a `devices:` key whose entries are all commented out

    @model_validator(mode="after")
    def _devices_name_targets(self) -> ParamsFile:
        unknown = sorted(set(self.devices) - set(self.targets))
        if unknown:
            raise ValueError(
                f"'devices.{unknown[0]}' names no target; 'targets' has {sorted(self.targets)}"
                + _suggest(unknown[0], list(self.targets))
            )
        return self

    @model_validator(mode="after")
    def _bounded_needs_loop(self) -> ParamsFile:
        bounded = [
            axis
            for axis in ("tokens", "frames")
            if getattr(self.shapes, axis) == Shapes.BOUNDED.value
        ]
        if bounded and self.lstm.strategy != "loop":
            raise ValueError(
                f"'shapes.{bounded[0]}' is 'bounded' but 'lstm.strategy' is {self.lstm.strategy!r}: "
                "only the loop LSTM runs a symbolic length; set 'lstm.strategy: loop' or "
                "'shapes' to 'padded'"
            )
        return self


@dataclass(frozen=True)
class Params:
    """The validated values, flat: what stages read."""

    model_config: str
    checkpoint: str
    seed: int
    tokens: tuple[int, ...]
    frames: tuple[int, ...]
    lstm_strategy: str
    targets: dict[str, dict[str, Any]]
    toolchain: dict[str, Any]
    num_threads: int
    bench_repeats: int = 10
    bench_onnxruntime: bool = True
    tune_trials: int = 0
    shapes_tokens: Shapes = Shapes.PADDED
    shapes_frames: Shapes = Shapes.PADDED
    devices: dict[str, Any] = field(default_factory=dict)
    bench_phonemes: tuple[int, ...] | None = None  # None: ``auto``
    voices_source: str = "kokoro-js"

    def device(self, target: str) -> str | TrackerDevice:
        """``devices.<target>``: ``auto`` unless params say otherwise."""
        self.check_target(target)
        return self.devices.get(target, "auto")

    def shapes(self, component: str) -> Shapes:
        """How ``component``'s libraries are built (``shapes.<axis>``)."""
        return getattr(self, f"shapes_{lookup(component).axis.value}")

    def buckets(self, component: str) -> tuple[int, ...]:
        return self.tokens if lookup(component).axis is Axis.TOKENS else self.frames

    def check_bucket(self, component: str, bucket: int) -> None:
        if bucket not in self.buckets(component):
            axis = lookup(component).axis.value
            raise ParamsError(
                f"bucket {bucket} is not in params.yaml 'buckets.{axis}' {list(self.buckets(component))}"
            )

    def check_target(self, target: str) -> None:
        if target not in self.targets:
            raise ParamsError(
                f"target {target!r} is not in params.yaml 'targets' {sorted(self.targets)}"
            )


def check_llvm_target(spec: dict[str, Any]) -> None:
    """Refuse a triple, CPU or feature the installed LLVM does not know (it would only warn,
    and build for a generic CPU)."""
    from tvm.target import codegen

    triple = spec.get("mtriple") or codegen.llvm_get_system_triple()
    arch = triple.split("-", 1)[0]
    known_archs = list(codegen.llvm_get_targets())
    if spec.get("mtriple") and arch not in known_archs:
        raise ValueError(
            f"mtriple {triple!r}: LLVM {codegen.llvm_version_major()} has no target {arch!r}"
            + _suggest(arch, known_archs)
        )
    cpu = spec.get("mcpu")
    if cpu is not None and not codegen.llvm_is_valid_cpu(cpu, triple):
        cpus = _cpus(triple)
        raise ValueError(
            f"mcpu {cpu!r} is not a CPU LLVM {codegen.llvm_version_major()} knows for {triple}"
            + _suggest(cpu, cpus)
        )
    for feature in spec.get("mattr") or []:
        if not isinstance(feature, str) or feature[:1] not in "+-" or len(feature) < 2:
            raise ValueError(
                f"mattr entry {feature!r} must be '+feature' or '-feature' (e.g. '+avx2')"
            )
        if not _feature_known(feature[1:], triple):
            raise ValueError(
                f"mattr {feature!r}: LLVM does not know the feature {feature[1:]!r} for {triple}"
            )


def _cpus(triple: str) -> list[str]:
    import tvm
    from tvm.target import codegen

    try:
        return list(
            codegen.llvm_get_cpu_archlist(tvm.target.Target({"kind": "llvm", "mtriple": triple}))
        )
    except Exception:
        return []


def _feature_known(feature: str, triple: str) -> bool:
    """LLVM lists a feature among a target's features once it is enabled, and ignores (with a
    warning on stderr) one it does not know."""
    import tvm
    from tvm.target import codegen

    target = tvm.target.Target({"kind": "llvm", "mtriple": triple, "mattr": [f"+{feature}"]})
    return feature in set(codegen.llvm_get_cpu_features(target))


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _keys_at(loc: tuple[Any, ...]) -> list[str]:
    """The valid keys of the mapping at ``loc`` in the schema (for "did you mean")."""
    node: Any = ParamsFile
    for part in loc:
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = next((f for n, f in node.model_fields.items() if (f.alias or n) == part), None)
            if field is None:
                return []
            node = field.annotation
        elif getattr(node, "__origin__", None) is dict:
            node = node.__args__[1]
        else:
            return []
    if isinstance(node, type) and issubclass(node, BaseModel):
        return [f.alias or n for n, f in node.model_fields.items()]
    return []


def _message(err: dict[str, Any]) -> str:
    loc = tuple(err["loc"])
    key = ".".join(str(p) for p in loc)
    kind, value = err["type"], err.get("input")
    if kind == "extra_forbidden":
        valid = _keys_at(loc[:-1])
        parent = "".join(f"{p}." for p in loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6)
        hint = (
            f"; did you mean '{parent}{close[0]}'?"
            if close
            else (f"; valid keys here: {valid}" if valid else "")
        )
        return f"unknown key '{key}'{hint}"
    if kind == "missing":
        return f"missing key '{key}'"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", err["msg"])
        return f"'{key}' is {value!r}; choose one of {choices}" + _suggest(value, choices)
    if kind == "value_error":
        msg = err["msg"].removeprefix("Value error, ")
        return msg if msg.startswith("'") or not key else f"'{key}': {msg}"
    if kind in ("greater_than_equal", "greater_than"):
        return f"'{key}' must be {err['msg'].removeprefix('Input should be ')}, got {value!r}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        want = kind.removesuffix("_type").removesuffix("_parsing")
        want = {
            "int": "an integer",
            "bool": "true or false",
            "string": "a string",
            "list": "a list",
            "dict": "a mapping",
        }.get(want, want.replace("_", " "))
        return f"'{key}' must be {want}, got {value!r}"
    return f"'{key}': {err['msg']} (got {value!r})"


def parse(raw: Any) -> Params:
    if not isinstance(raw, dict):
        raise ParamsError(
            "params.yaml: top level must be a mapping with keys model, buckets, lstm, targets"
        )
    try:
        f = ParamsFile.model_validate(raw)
    except ValidationError as e:
        problems = [_message(err) for err in e.errors(include_url=False)]
        raise ParamsError("params.yaml: " + "; ".join(problems)) from None
    return Params(
        f.model.config,
        f.model.checkpoint,
        f.model.seed,
        tuple(f.buckets.tokens),
        tuple(f.buckets.frames),
        f.lstm.strategy,
        {n: t.as_dict() for n, t in f.targets.items()},
        f.toolchain.as_dict(),
        f.runtime.num_threads,
        f.bench.repeats,
        f.bench.onnxruntime,
        f.tune.trials,
        Shapes(f.shapes.tokens),
        Shapes(f.shapes.frames),
        dict(f.devices),
        None if f.bench.phonemes == "auto" else tuple(f.bench.phonemes),
        f.voices.source,
    )


def load(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path}: not found; run from the repository root or pass --params")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: malformed YAML ({e}); fix the syntax") from e
    return parse(raw)
