"""The artifact directory's index, ``manifest.json``, as the runtime reads it: parsed once into
frozen records (``Manifest``, ``Library``, ...), checked for the format and fields this runtime
knows, the toolchain it was built with, and the target to run.

Nothing here loads native code: a manifest from another runtime version, or one edited by hand,
is refused with the fix before any library is opened, and every field the runtime later reads has
its type checked here, so a bad one fails at once with one message, not deep inside a load with
a ``KeyError``. ``pipeline/manifest.py`` writes the file (``manifest_entry.library_entry``, one
library's entry); its JSON is what these records read, unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .. import artifacts, cpuinfo
from ..devices import isa
from ..errors import KokoroTVMError
from ..manifest_entry import SPEED_FIELDS
from ..spec import COMPONENTS, FP32, PRECISIONS, Shapes
from ..toolchain import ToolchainError, runtime_versions
from . import tvm_import

#: manifest formats this runtime reads (``pipeline/manifest.py`` writes the newest)
FORMATS = (3,)
#: what every manifest of those formats holds, and what each key is for (named in errors)
REQUIRED = {
    "format": "the manifest format",
    "model": "the model config and checkpoint",
    "toolchain": "the versions the libraries were built with",
    "buckets": "the built buckets",
    "targets": "the built targets",
    "weights": "the weights files",
    "libraries": "the validated libraries",
}
#: ``model.checkpoint`` of libraries built from seeded random weights (no speech)
RANDOM_CHECKPOINT = "random"
#: what a caller may ask for: a precision (``spec.PRECISIONS``, widest first), or ``auto``
#: (``explain_precision``); an entry without ``precision`` (every float32 manifest's) is ``FP32``
PRECISION_REQUESTS = ("auto", *PRECISIONS)
REBUILD = "rebuild the artifacts with `dvc repro` (or `dvc pull` the ones built for this code)"
#: the CPU feature a narrower precision's libraries need, by architecture (named in errors;
#: docs/precision.md lists the CPUs that have it)
NARROW_CPUS = {
    "x86_64": "AVX512_BF16 (/proc/cpuinfo flag avx512_bf16)",
    "aarch64": "BF16 (Arm v8.6, /proc/cpuinfo feature bf16)",
}


class PrecisionError(KokoroTVMError, ValueError):
    """A precision asked for that is not one, or that these libraries cannot give here."""


# -- the records ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """The model the libraries were built from (params.yaml ``model``)."""

    config: str
    checkpoint: str
    seed: int

    @property
    def random(self) -> bool:
        """Built from seeded random weights: the audio is not speech."""
        return self.checkpoint == RANDOM_CHECKPOINT

    def as_dict(self) -> dict[str, Any]:
        """The manifest's form of it (its keys sorted, as the pipeline writes them)."""
        return {"checkpoint": self.checkpoint, "config": self.config, "seed": self.seed}


@dataclass(frozen=True)
class File:
    """A file the manifest lists with its sha256 (and, for most, its size)."""

    path: str
    sha256: str
    bytes: int | None = None


@dataclass(frozen=True)
class Tensor:
    """One input (named) or output of a library's signature: its shape (an output's may name a
    symbolic length), dtype, and for a lengths input the ``range`` it takes."""

    name: str | None
    shape: tuple[int | str, ...]
    dtype: str
    range: tuple[int, int] | None = None

    @property
    def is_length(self) -> bool:
        """The valid-length input (``input_lengths``, ``frame_lengths``)."""
        return self.name is not None and self.name.endswith("lengths")


@dataclass(frozen=True)
class Validation:
    """What the validate stage ran a library with (``*_sha256``), where, and its worst errors
    against float64 kokoro (``worst_<metric>``) at the lengths it checked."""

    worst: Mapping[str, float]  # metric name without ``worst_`` -> its worst value
    lengths: tuple[int, ...]
    sha256: Mapping[str, str]  # ``library_sha256``, ``weights_sha256``, ``packed_sha256``
    device: str | None = None
    emulated: bool | None = None
    #: per language code (``a``, ``j``...), whether its sentence passed (none under emulation)
    languages: Mapping[str, bool] = field(default_factory=lambda: _frozen({}))

    def as_dict(self) -> dict[str, Any]:
        """The manifest's form of it (what ``kokoro-tvm info --json`` prints)."""
        doc: dict[str, Any] = {f"worst_{k}": v for k, v in self.worst.items()}
        if self.languages:
            doc["languages"] = dict(self.languages)
        doc |= dict(self.sha256)
        if self.lengths:
            doc["lengths"] = list(self.lengths)
        if self.device is not None:
            doc["device"] = self.device
        if self.emulated is not None:
            doc["emulated"] = self.emulated
        return dict(sorted(doc.items()))


@dataclass(frozen=True)
class TargetNeeds:
    """What a target's libraries need of a CPU (``isa.requirements``, recorded at build)."""

    arch: str
    isa: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"arch": self.arch, "isa": list(self.isa)}


@dataclass(frozen=True)
class Library:
    """One library (component x bucket x target x precision): where it is, its bytes, its
    signature, and how it takes its length axis."""

    component: str
    bucket: int
    target: str
    path: str
    sha256: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    params: tuple[str, ...]  # the weight names ``main`` takes after the inputs, in order
    bytes: int | None = None  # every manifest entry has it; build outputs (``built``) do not
    shapes: Shapes = Shapes.PADDED
    #: per length-axis input of a bounded library: (axis, samples per length unit)
    length_axes: Mapping[str, tuple[int, int]] = field(default_factory=lambda: _frozen({}))
    validation: Validation | None = None
    packed: File | None = None  # the weights in the library's own layout
    #: where ``sha256`` was recorded, for the error a mismatch raises
    sha256_source: str = "its manifest"
    precision: str = FP32  # what its products are computed in (``PRECISIONS``)
    #: what it needs of a CPU beyond its target's ``target_needs`` (a bf16 library's extensions)
    needs: TargetNeeds | None = None

    @property
    def bounded(self) -> bool:
        """A bounded library computes only the valid length; a padded one its bucket."""
        return self.shapes is Shapes.BOUNDED

    def input(self, name: str) -> Tensor:
        """The input called ``name``."""
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise artifacts.ArtifactError(
            f"{self.path}: its manifest entry lists no input {name!r}; {REBUILD}"
        )


@dataclass(frozen=True)
class Speed:
    """A narrower library timed against the float32 library of its target (``bench_narrow``),
    on the CPU kind that ran the bench (``cpuinfo.CPU.kind``)."""

    component: str
    bucket: int
    target: str
    precision: str
    cpu: str
    cpu_kind: str
    speedup: float  # float32's time over the narrower library's


@dataclass(frozen=True)
class Voice:
    name: str
    row: int
    lang: str | None


@dataclass(frozen=True)
class Voices:
    """The built voices (the ``voices`` stage): one ``.npy`` of packs, a row per name."""

    path: str
    sha256: str
    shape: tuple[int, ...]
    voices: tuple[Voice, ...]
    source: str = ""


@dataclass(frozen=True)
class Manifest:
    """A whole ``manifest.json``, checked (``parse_manifest``)."""

    format: int
    model: Model
    toolchain: Mapping[str, Any]  # package -> the version the libraries were built with
    buckets: Mapping[str, tuple[int, ...]]  # ``tokens`` / ``frames`` -> the built buckets
    targets: Mapping[str, Mapping[str, Any]]  # name -> the TVM target (params.yaml ``targets``)
    weights: Mapping[str, File]  # component -> its raw weights
    libraries: tuple[Library, ...]
    target_needs: Mapping[str, TargetNeeds] = field(default_factory=lambda: _frozen({}))
    unvalidated: Mapping[str, Any] = field(default_factory=lambda: _frozen({}))  # target -> why
    voices: Voices | None = None
    speeds: tuple[Speed, ...] = ()

    @property
    def built_targets(self) -> list[str]:
        """The targets the manifest lists libraries of: validated ones only."""
        return sorted({lib.target for lib in self.libraries})

    def of_target(self, target: str, precision: str | None = None) -> list[Library]:
        """The libraries of ``target``: of every precision, or of ``precision`` alone."""
        return [
            lib
            for lib in self.libraries
            if lib.target == target and precision in (None, lib.precision)
        ]

    def library(self, component: str, bucket: int, target: str, precision: str = FP32) -> Library:
        """The one library of a component x bucket x target in ``precision``."""
        key = (component, bucket, target, precision)
        for lib in self.libraries:
            if (lib.component, lib.bucket, lib.target, lib.precision) == key:
                return lib
        shown = "" if precision == FP32 else f" in {precision}"
        raise artifacts.ArtifactError(
            f"no library for {component} bucket {bucket} target {target!r}{shown} "
            f"(built targets: {self.built_targets}); add it to params.yaml and run `dvc repro`"
        )

    def needs(self, target: str) -> TargetNeeds:
        """What the libraries of ``target`` need of a CPU."""
        needs = self.target_needs.get(target)
        if needs is None:
            raise artifacts.ArtifactError(
                f"the manifest records no CPU needs for target {target!r} (built before they "
                "were recorded); rebuild with `dvc repro`"
            )
        return needs


# -- reading and checking -------------------------------------------------------------------------


def read_manifest(root: Path) -> Manifest:
    """``root/manifest.json`` (``root`` is the artifacts directory), checked against the format
    and fields this runtime reads, with a fix in every error."""
    root = Path(root)
    if not root.is_dir():
        raise artifacts.ArtifactError(
            f"artifact directory {root} does not exist; run `dvc repro` (or `dvc pull`) "
            "in the pipeline checkout, or pass the directory that holds manifest.json"
        )
    path = artifacts.manifest_file(root)
    return parse_manifest(artifacts.read_json(path, "library index"), path)


def parse_manifest(doc: Any, path: Path | str = "manifest.json") -> Manifest:
    """The records of a manifest's JSON, or an error naming the first thing wrong in it."""
    if not isinstance(doc, dict):
        raise artifacts.ArtifactError(
            f"{path} is not a kokoro-tvm manifest (not a JSON object); {REBUILD}"
        )
    missing = [f"'{k}' ({why})" for k, why in REQUIRED.items() if k not in doc]
    if missing:
        raise artifacts.ArtifactError(f"{path} lacks {', '.join(missing)}; {REBUILD}")
    if doc["format"] not in FORMATS:
        raise artifacts.ArtifactError(
            f"{path} has format {doc['format']!r}, and this runtime reads format "
            f"{' or '.join(map(str, FORMATS))}; install the kokoro-tvm-pipeline version that "
            f"built it, or {REBUILD}"
        )
    _expect(doc, "model", dict, path)
    for key, kind in (("config", str), ("checkpoint", str), ("seed", int)):
        _expect(doc["model"], key, kind, path, "model.")
    model = Model(doc["model"]["config"], doc["model"]["checkpoint"], doc["model"]["seed"])
    _expect(doc, "toolchain", dict, path)
    _expect(doc, "targets", dict, path)
    _expect(doc, "buckets", dict, path)
    for axis in ("tokens", "frames"):
        _expect(doc["buckets"], axis, list, path, "buckets.")
        if not all(_is_int(b) for b in doc["buckets"][axis]):
            raise artifacts.ArtifactError(
                f"{path}: buckets.{axis} should be bucket sizes; {REBUILD}"
            )
    buckets = {a: tuple(b) for a, b in doc["buckets"].items() if a in ("tokens", "frames")}
    _expect(doc, "weights", dict, path)
    _expect(doc, "libraries", list, path)
    weights = {}
    for name in doc["weights"]:
        _expect(doc["weights"], name, dict, path, "weights.")
        weights[name] = _file(doc["weights"][name], path, f"weights.{name}.", sized=True)
    for key in ("target_needs", "unvalidated"):
        if key in doc:
            _expect(doc, key, dict, path)
    speeds = _speeds(doc.get("speeds", []), path)
    needs = {}
    for target in doc.get("target_needs", {}):
        _expect(doc["target_needs"], target, dict, path, "target_needs.")
        needs[target] = _needs(doc["target_needs"][target], path, f"target_needs.{target}.")
    libraries = []
    seen: set[tuple[str, int, str, str]] = set()
    for i, entry in enumerate(doc["libraries"]):
        lib = parse_library(entry, path, f"libraries[{i}].")
        if lib.component not in weights:
            raise artifacts.ArtifactError(
                f"{path}: libraries[{i}].component {lib.component!r} has no weights entry; "
                f"{REBUILD}"
            )
        key = (lib.component, lib.bucket, lib.target, lib.precision)
        if key in seen:  # the runtime could not tell which of the two to load
            raise artifacts.ArtifactError(
                f"{path}: libraries[{i}] is a second {lib.precision} {lib.component} library of "
                f"bucket {lib.bucket} for target {lib.target!r}; {REBUILD}"
            )
        seen.add(key)
        libraries.append(lib)
    return Manifest(
        format=doc["format"],
        model=model,
        toolchain=_frozen(doc["toolchain"]),
        buckets=_frozen(buckets),
        targets=_frozen(doc["targets"]),
        weights=_frozen(weights),
        libraries=tuple(libraries),
        target_needs=_frozen(needs),
        unvalidated=_frozen(doc.get("unvalidated", {})),
        voices=_voices(doc["voices"]) if doc.get("voices") else None,
        speeds=speeds,
    )


def _speeds(entries: Any, path: Path | str) -> tuple[Speed, ...]:
    if not isinstance(entries, list):
        raise artifacts.ArtifactError(f"{path}: 'speeds' should be a list; {REBUILD}")
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise artifacts.ArtifactError(f"{path}: speeds[{i}] should be an object; {REBUILD}")
        for key, kind in SPEED_FIELDS.items():
            _expect(entry, key, kind, path, f"speeds[{i}].")
        out.append(
            Speed(
                component=entry["component"],
                bucket=entry["bucket"],
                target=entry["target"],
                precision=entry["precision"],
                cpu=entry["cpu"],
                cpu_kind=entry["cpu_kind"],
                speedup=float(entry[f"speedup_vs_{FP32}"]),
            )
        )
    return tuple(out)


#: a library entry's fields and their JSON types (``manifest_entry.library_entry`` writes them)
LIBRARY_FIELDS: dict[str, type | tuple[type, ...]] = {
    "component": str,
    "bucket": int,
    "target": str,
    "path": str,
    "sha256": str,
    "inputs": list,
    "outputs": list,
    "params": list,
    "bytes": int,
}
#: fields only some entries have: bounded libraries, and what validation ran
OPTIONAL_LIBRARY_FIELDS: dict[str, type | tuple[type, ...]] = {
    "shapes": str,
    "length_axes": dict,
    "validation": dict,
    "packed": dict,
    "precision": str,  # absent: float32
    "needs": dict,  # absent: its target's ``target_needs``
}


def parse_library(entry: Any, path: Path | str, where: str = "", sized: bool = True) -> Library:
    """One library entry (``manifest_entry.library_entry``'s dict) as a record. ``sized``: it
    must have its ``bytes`` (every manifest entry does; one made of build outputs not yet)."""
    if not isinstance(entry, dict):
        raise artifacts.ArtifactError(f"{path}: {where[:-1]} is not an object; {REBUILD}")
    for key, kind in LIBRARY_FIELDS.items():
        if sized or key != "bytes":
            _expect(entry, key, kind, path, where)
    for key, kind in OPTIONAL_LIBRARY_FIELDS.items():
        if key in entry:
            _expect(entry, key, kind, path, where)
    packed = _file(entry["packed"], path, f"{where}packed.") if "packed" in entry else None
    validation = None
    if "validation" in entry:
        validation = _validation(entry["validation"], path, f"{where}validation.")
    precision = entry.get("precision", FP32)
    if precision not in PRECISIONS:
        raise artifacts.ArtifactError(
            f"{path}: {where}precision {precision!r} is not one this runtime computes in "
            f"({', '.join(PRECISIONS)}); install the kokoro-tvm-pipeline version that built it, "
            f"or {REBUILD}"
        )
    needs = _needs(entry["needs"], path, f"{where}needs.") if "needs" in entry else None
    if entry.get("shapes", Shapes.PADDED.value) not in {s.value for s in Shapes}:
        raise artifacts.ArtifactError(
            f"{path}: {where}shapes should be bounded or padded; {REBUILD}"
        )
    length_axes = {}
    for name, axis in entry.get("length_axes", {}).items():
        if not (
            isinstance(axis, list) and len(axis) == 2 and all(_is_int(a) and a >= 0 for a in axis)
        ):
            raise artifacts.ArtifactError(
                f"{path}: {where}length_axes.{name} should be [axis, scale]; {REBUILD}"
            )
        length_axes[name] = (axis[0], axis[1])
    inputs = tuple(
        _tensor(spec, path, f"{where}inputs[{j}]", named=True)
        for j, spec in enumerate(entry["inputs"])
    )
    outputs = tuple(
        _tensor(spec, path, f"{where}outputs[{j}]", named=False)
        for j, spec in enumerate(entry.get("outputs", []))
    )
    if not all(isinstance(p, str) for p in entry["params"]):
        raise artifacts.ArtifactError(f"{path}: {where}params should be weight names; {REBUILD}")
    return Library(
        component=entry["component"],
        bucket=entry["bucket"],
        target=entry["target"],
        path=entry["path"],
        sha256=entry["sha256"],
        inputs=inputs,
        outputs=outputs,
        params=tuple(entry["params"]),
        bytes=entry.get("bytes"),
        shapes=Shapes(entry.get("shapes", Shapes.PADDED.value)),
        length_axes=_frozen(length_axes),
        validation=validation,
        packed=packed,
        precision=precision,
        needs=needs,
    )


def _needs(entry: dict[str, Any], path: Path | str, where: str) -> TargetNeeds:
    """What a target's (or one library's) code needs of a CPU: ``{"arch", "isa": [names]}``."""
    _expect(entry, "arch", str, path, where)
    _expect(entry, "isa", list, path, where)
    if not all(isinstance(f, str) for f in entry["isa"]):
        raise artifacts.ArtifactError(f"{path}: {where}isa should be names; {REBUILD}")
    return TargetNeeds(entry["arch"], tuple(entry["isa"]))


def _file(doc: dict[str, Any], path: Path | str, where: str, sized: bool = False) -> File:
    _expect(doc, "path", str, path, where)
    _expect(doc, "sha256", str, path, where)
    if sized:
        _expect(doc, "bytes", int, path, where)
    size = doc.get("bytes")
    return File(doc["path"], doc["sha256"], size if _is_int(size) else None)


def _validation(v: dict[str, Any], path: Path | str, where: str) -> Validation:
    """What ``info`` prints of a validation: its worst errors are numbers, its lengths integers."""
    bad = [
        k
        for k, x in v.items()
        if k.startswith("worst_") and (isinstance(x, bool) or not isinstance(x, int | float))
    ]
    lengths = v.get("lengths", [])
    if not isinstance(lengths, list) or not all(_is_int(n) for n in lengths):
        bad.append("lengths")
    languages = v.get("languages", {})
    if not isinstance(languages, dict) or not all(
        isinstance(k, str) and isinstance(ok, bool) for k, ok in languages.items()
    ):
        bad.append("languages")
    if bad:
        raise artifacts.ArtifactError(
            f"{path}: {where}{bad[0]} is not a number (or a list of lengths, or languages' "
            "verdicts); rebuild the artifacts with `dvc repro`"
        )
    device, emulated = v.get("device"), v.get("emulated")
    return Validation(
        worst=_frozen({k[len("worst_") :]: x for k, x in v.items() if k.startswith("worst_")}),
        lengths=tuple(lengths),
        sha256=_frozen({k: x for k, x in v.items() if k.endswith("_sha256")}),
        device=device if isinstance(device, str) else None,
        emulated=emulated if isinstance(emulated, bool) else None,
        languages=_frozen(dict(sorted(languages.items()))),
    )


def _tensor(spec: Any, path: Path | str, where: str, named: bool) -> Tensor:
    """One input (named) or output of a library signature: a shape of sizes (an output's may
    name a symbolic length), a dtype, and for a lengths input its ``range``."""
    ok = (
        isinstance(spec, dict)
        and (isinstance(spec.get("name"), str) or not named)
        and isinstance(spec.get("dtype"), str)
        and isinstance(spec.get("shape"), list)
        and all(
            (_is_int(d) and d >= 0) or (isinstance(d, str) and not named) for d in spec["shape"]
        )
    )
    bounds = spec.get("range") if isinstance(spec, dict) else None
    if ok and bounds is not None:
        ok = isinstance(bounds, list) and len(bounds) == 2 and all(_is_int(b) for b in bounds)
    if not ok:
        raise artifacts.ArtifactError(
            f"{path}: {where} is not a tensor signature (name, shape, dtype); rebuild the "
            "artifacts with `dvc repro`"
        )
    name = spec.get("name")
    return Tensor(
        name=name if isinstance(name, str) else None,
        shape=tuple(spec["shape"]),
        dtype=spec["dtype"],
        range=None if bounds is None else (bounds[0], bounds[1]),
    )


def _voices(doc: Any) -> Voices:
    """The ``voices`` entry (``pipeline.voices.manifest_entry``)."""
    try:
        return Voices(
            path=str(doc["path"]),
            sha256=str(doc["sha256"]),
            shape=tuple(int(n) for n in doc["shape"]),
            voices=tuple(_voice(v) for v in doc["voices"]),
            source=doc.get("source", ""),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise artifacts.ArtifactError(
            f"the manifest's 'voices' entry is malformed ({type(e).__name__}: {e}); rebuild "
            "it with `dvc repro`"
        ) from e


def _voice(doc: Any) -> Voice:
    name, lang = doc["name"], doc.get("lang")
    if not isinstance(name, str) or not (lang is None or isinstance(lang, str)):
        raise TypeError(f"voice {name!r}: its name and language should be strings")
    return Voice(name, int(doc["row"]), lang)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _frozen(value: Any) -> Any:
    """A read-only copy of parsed JSON: objects as mappings, lists as tuples."""
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def thawed(value: Any) -> Any:
    """``_frozen``'s inverse, for JSON output and for TVM, which take plain dicts and lists."""
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thawed(v) for v in value]
    return value


def _expect(
    doc: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path | str, where: str = ""
) -> None:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):
        what = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise artifacts.ArtifactError(
            f"{path}: '{where}{key}' should be a {what}, found {type(value).__name__} "
            f"{str(value)[:40]!r}; rebuild the artifacts with `dvc repro`"
        )


# -- what the manifest decides ------------------------------------------------------------------


def check_toolchain(manifest: Manifest, found: dict[str, Any] | None = None) -> None:
    """Refuse libraries built by another TVM runtime than the installed one, before loading any.

    Only what loading needs is compared (``toolchain.runtime_versions``): torch, kokoro and
    transformers shape the *build* (DVC reruns stages when they change), not the loading."""
    built = manifest.toolchain
    if found is None:  # a runtime-only TVM cannot tell LLVM's version: not imported to ask
        found = runtime_versions(llvm=not tvm_import.runtime_only_wanted())
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


def pick_target(manifest: Manifest, target: str | None = None) -> str:
    """The requested target if it was built and runs on this CPU; else the richest one that does."""
    return explain_pick(manifest, target)[0]


def explain_pick(manifest: Manifest, target: str | None = None) -> tuple[str, list[str]]:
    """``pick_target``'s answer and why: one line per validated target (runs here or lacks what).

    Only targets the manifest lists are candidates, and it lists only validated ones. A target
    whose ISA this CPU lacks is refused here, with the missing extensions named, instead of
    running into SIGILL inside a kernel."""
    built = manifest.built_targets
    lacks = {t: isa.missing(manifest.needs(t).as_dict()) for t in built}
    why = [
        f"{t}: "
        + (
            f"runs here ({len(manifest.needs(t).isa)} ISA extensions)"
            if not lacks[t]
            else f"not on this CPU (lacks {', '.join(lacks[t])})"
        )
        for t in built
    ]
    if target is not None:
        if target not in built:
            raise artifacts.ArtifactError(
                f"target {target!r} was not built and validated (validated targets: {built}); "
                "add it to params.yaml 'targets' and run `dvc repro` on a machine that can "
                "validate it (params.yaml 'devices')"
            )
        if lacks[target]:
            raise artifacts.ArtifactError(
                f"target {target!r} needs CPU features this machine lacks "
                f"({', '.join(lacks[target])}); pick one that runs here: "
                f"{[t for t in built if not lacks[t]]}"
            )
        return target, why + [f"picked {target}: asked for"]
    usable = [t for t in built if not lacks[t]]
    if not usable:
        raise artifacts.ArtifactError(
            f"none of the validated targets {built} runs on this CPU ({'; '.join(why)}); add a "
            "target this machine runs to params.yaml 'targets' and run `dvc repro`"
        )
    best = max(usable, key=lambda t: (len(manifest.needs(t).isa), t))
    return best, why + [f"picked {best}: the richest ISA this CPU runs"]


def explain_precision(
    manifest: Manifest, target: str, requested: str = "auto"
) -> tuple[dict[str, str], list[str]]:
    """The precision each component of ``target`` runs in, and why (a line per component).

    ``auto``: per component, the narrowest precision whose libraries cover every bucket the
    component was built for on ``target``, whose CPU needs this CPU has, and that was not timed
    slower than float32 on this CPU kind (the manifest's ``speeds``, from ``bench_narrow``), else
    float32. A narrower library is in the manifest only if it passed its precision's criterion
    (the listener's, ``eval/verdicts.py``); it was built to be faster, which holds where its
    dot products outrun float32's FMAs, not on every CPU that has them (some issue them at a
    lower rate than FMAs), so a timing on this CPU kind overrules that.
    ``fp32``: float32 everywhere, kokoro's own numerics. A narrower precision
    (``bf16``): its libraries where the target has them, float32 for the components that have
    none (the text side); refused, naming the fix, where the target has none at all or this
    CPU lacks what they need (here, not as SIGILL inside a kernel)."""
    if requested not in PRECISION_REQUESTS:
        raise PrecisionError(
            f"precision {requested!r} is not one of {', '.join(PRECISION_REQUESTS)}: auto (the "
            "default) runs the fastest validated libraries this CPU runs, fp32 kokoro's float32 "
            "numerics everywhere"
        )
    entries = manifest.of_target(target)
    if requested not in ("auto", FP32) and not any(e.precision == requested for e in entries):
        built = [p for p in PRECISIONS if any(e.precision == p for e in entries)]
        raise PrecisionError(
            f"target {target!r} has no {requested} library (built: {', '.join(built)}); use "
            f"precision auto or fp32 (--precision auto/fp32), or build {requested} libraries "
            f"(params.yaml precision, e.g. decoder: [fp32, {requested}]) and run `dvc repro`"
        )
    picked: dict[str, str] = {}
    why: list[str] = []
    for component in COMPONENTS:
        own = [e for e in entries if e.component == component]
        choice, reason = _component_precision(manifest, component, own, requested)
        picked[component] = choice
        why.append(f"{component}: {choice}, {reason}")
    return picked, why


def _component_precision(
    manifest: Manifest, component: str, own: list[Library], requested: str
) -> tuple[str, str]:
    """One component's precision (``explain_precision``) and the reason shown for it."""
    buckets = {e.bucket for e in own}
    built = {e.precision for e in own}
    narrower = [p for p in reversed(PRECISIONS) if p in built and p != FP32]  # narrowest first
    gaps = {p: sorted(buckets - {e.bucket for e in own if e.precision == p}) for p in built}
    if requested == FP32:
        return FP32, "asked for" + (f" ({', '.join(narrower)} also built)" if narrower else "")
    if requested != "auto":
        if requested not in built:
            return FP32, f"no {requested} library built for it (it stays float32)"
        if gaps[requested]:
            raise PrecisionError(
                f"the {requested} {component} libraries lack buckets {gaps[requested]} that "
                f"its other libraries have; use precision auto or fp32 (--precision auto/fp32), "
                f"or {REBUILD}"
            )
        lacks = _lacks(manifest, [e for e in own if e.precision == requested])
        if lacks:
            raise PrecisionError(
                f"the {requested} {component} libraries need CPU features this machine lacks "
                f"({', '.join(lacks)}); use precision auto or fp32 (--precision auto/fp32), "
                f"which run float32 here, or a CPU with {_cpus(own)}"
            )
        return requested, "asked for"
    refused = []
    kind = cpuinfo.this_cpu().kind
    for p in narrower:
        lacks = _lacks(manifest, [e for e in own if e.precision == p])
        if gaps[p] or lacks:
            refused.append(
                f"{p} built, but this CPU lacks {', '.join(lacks)}"
                if lacks
                else f"{p} built without buckets {gaps[p]}"
            )
            continue
        timed = [
            s
            for s in manifest.speeds
            if (s.component, s.precision, s.cpu_kind) == (component, p, kind)
            and s.target in {e.target for e in own}
        ]
        worst = min(timed, key=lambda s: s.speedup, default=None)
        if worst is not None and worst.speedup < 1:
            refused.append(
                f"{p} timed slower than float32 on this CPU kind ({worst.cpu}, {kind}): "
                f"{worst.speedup}x at bucket {worst.bucket}"
            )
            continue
        timing = (
            f", timed {worst.speedup}x float32 on this CPU kind"
            if worst is not None
            else ", not timed on this CPU kind"
        )
        return p, "the narrowest validated precision built for all its buckets that runs here" + (
            timing
        )
    return FP32, "; ".join(refused) if refused else "the only precision built"


def _lacks(manifest: Manifest, libraries: list[Library]) -> list[str]:
    """What this CPU lacks of what ``libraries`` need (each its own ``needs``, else its
    target's), each named once."""
    lacks: list[str] = []
    for lib in libraries:
        needs = lib.needs if lib.needs is not None else manifest.needs(lib.target)
        lacks += [f for f in isa.missing(needs.as_dict()) if f not in lacks]
    return lacks


def _cpus(libraries: list[Library]) -> str:
    """The CPUs that run ``libraries`` (``NARROW_CPUS`` by their architecture)."""
    arches = {lib.needs.arch for lib in libraries if lib.needs is not None}
    named = [NARROW_CPUS[a] for a in sorted(arches) if a in NARROW_CPUS]
    return " or ".join(named) if named else "the extensions named"
