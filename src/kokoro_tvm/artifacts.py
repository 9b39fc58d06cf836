"""Where each stage's outputs live, and how they are read and written (atomically).

One module owns the layout so stage scripts, the manifest and the runtime agree on it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .atomic import atomic_path, write_json, write_text  # noqa: F401  (stages write through here)
from .errors import KokoroTVMError
from .spec import FP32

ROOT = Path("artifacts")


class ArtifactError(KokoroTVMError, RuntimeError):
    """A missing, corrupted or tampered artifact; the message says how to rebuild it."""


def code_dir(root: Path = ROOT) -> Path:
    return root / "code"


def code_file(kind: str, root: Path = ROOT) -> Path:
    """The fingerprint of the code one stage kind runs (pipeline/code.py)."""
    return code_dir(root) / f"{kind}.json"


def toolchain_file(root: Path = ROOT) -> Path:
    return root / "toolchain.json"


def weights_dir(root: Path = ROOT) -> Path:
    return root / "weights"


def weights_file(component: str, root: Path = ROOT) -> Path:
    return weights_dir(root) / f"{component}.npz"


def kokoro_checkpoint_file(root: Path = ROOT) -> Path:
    """The checkpoint in kokoro's own format (``{submodule: state_dict}``): the eager reference."""
    return weights_dir(root) / "kokoro.pth"


def model_config_file(root: Path = ROOT) -> Path:
    return weights_dir(root) / "config.json"


def voice_file(root: Path = ROOT) -> Path:
    """The voice pack ([N, 1, 256]) validation and benchmarks use."""
    return weights_dir(root) / "voice.npy"


def weights_info_file(root: Path = ROOT) -> Path:
    """What the weights were made from: model config, checkpoint, seed and reference voice."""
    return weights_dir(root) / "weights.json"


#: The files of ``voices_dir``, by name: the stage writes them into a temporary folder that
#: replaces the directory whole (``atomic_dir``), and the index records the packs' name.
VOICE_PACKS = "voices.npy"
VOICE_INDEX = "voices.json"


def voices_dir(root: Path = ROOT) -> Path:
    """The voices users pick by name (stage ``voices``)."""
    return root / "voices"


def voice_packs_file(root: Path = ROOT) -> Path:
    """The packs, [V, 510, 1, W] float32, in the index's order."""
    return voices_dir(root) / VOICE_PACKS


def voice_index_file(root: Path = ROOT) -> Path:
    """Each voice's name, row and language, the source, and the packs' sha256."""
    return voices_dir(root) / VOICE_INDEX


def library_name(component: str, bucket: int, precision: str = FP32) -> str:
    """``decoder-1536``, or ``decoder-1536-bf16`` for a library built in a narrower precision:
    float32's names are the ones every stage had before precision was an axis."""
    return f"{component}-{bucket}" if precision == FP32 else f"{component}-{bucket}-{precision}"


def export_file(component: str, bucket: int, root: Path = ROOT) -> Path:
    return root / "export" / f"{component}-{bucket}.pt2"


def relax_file(component: str, bucket: int, root: Path = ROOT) -> Path:
    return root / "relax" / f"{component}-{bucket}.json"


def signature_file(component: str, bucket: int, root: Path = ROOT) -> Path:
    return root / "relax" / f"{component}-{bucket}.sig.json"


def legalized_file(
    component: str, bucket: int, root: Path = ROOT, *, precision: str = FP32
) -> Path:
    return root / "legalize" / f"{library_name(component, bucket, precision)}.json"


#: The search's report in ``tune_dir``, written into the temporary folder that replaces it whole.
TUNE_REPORT = "report.json"


def tune_dir(component: str, bucket: int, target: str, root: Path = ROOT) -> Path:
    """MetaSchedule database (only records that beat the rules) plus ``TUNE_REPORT``."""
    return root / "tune" / target / f"{component}-{bucket}"


def build_dir(root: Path = ROOT) -> Path:
    """Every library and its build record, one folder per target."""
    return root / "build"


def narrow_build_dir(
    component: str, bucket: int, target: str, precision: str, root: Path = ROOT
) -> Path:
    """A narrower precision's build is a folder: a target whose ISA cannot run it (no AVX-512
    for bf16) holds only the record saying so, and DVC needs the stage's output to exist."""
    return build_dir(root) / target / library_name(component, bucket, precision)


def library_file(
    component: str, bucket: int, target: str, root: Path = ROOT, *, precision: str = FP32
) -> Path:
    if precision != FP32:
        return narrow_build_dir(component, bucket, target, precision, root) / "library.so"
    return build_dir(root) / target / f"{component}-{bucket}.so"


def build_info_file(
    component: str, bucket: int, target: str, root: Path = ROOT, *, precision: str = FP32
) -> Path:
    if precision != FP32:
        return narrow_build_dir(component, bucket, target, precision, root) / "build.json"
    return build_dir(root) / target / f"{component}-{bucket}.json"


def build_time_file(
    component: str, bucket: int, target: str, root: Path = ROOT, *, precision: str = FP32
) -> Path:
    """Build wall time (DVC metrics, not cached): apart from the build info, which must stay
    byte-identical when the library is, so that the stages after it can be skipped."""
    return root / "build_time" / target / f"{library_name(component, bucket, precision)}.json"


def device_file(target: str, root: Path = ROOT) -> Path:
    """Where ``target``'s libraries run for validate and bench (``devices.resolve``)."""
    return root / "devices" / f"{target}.json"


def reference_file(component: str, bucket: int, root: Path = ROOT) -> Path:
    """Inputs of every validation length and kokoro's float64 and float32 outputs on them:
    computed once, shared by every target's validation (``eval.cases.reference_cases``)."""
    return root / "reference" / f"{component}-{bucket}.npz"


def validation_file(
    component: str, bucket: int, target: str, root: Path = ROOT, *, precision: str = FP32
) -> Path:
    return root / "validate" / target / f"{library_name(component, bucket, precision)}.json"


def packed_file(
    component: str, bucket: int, target: str, root: Path = ROOT, *, precision: str = FP32
) -> Path:
    """A library's weights in the layout it takes them (``kokoro_tvm.packed``), written where
    the library was validated, for the runtime to map."""
    return root / "packed" / target / f"{library_name(component, bucket, precision)}.bin"


def manifest_file(root: Path = ROOT) -> Path:
    return root / "manifest.json"


def bench_dir(root: Path = ROOT) -> Path:
    """Every library's bench metrics, one folder per target."""
    return root / "bench"


def bench_file(
    component: str, bucket: int, target: str, root: Path = ROOT, *, precision: str = FP32
) -> Path:
    """Per-library bench metrics (DVC ``metrics``, one flat dict)."""
    return bench_dir(root) / target / f"{library_name(component, bucket, precision)}.json"


def bench_plot_file(
    component: str, bucket: int, target: str, root: Path = ROOT, *, precision: str = FP32
) -> Path:
    """Per-library plot row (a one-element list: the shape ``dvc plots`` reads)."""
    return root / "bench_plots" / target / f"{library_name(component, bucket, precision)}.json"


def roofline_file(component: str, bucket: int, target: str, root: Path = ROOT) -> Path:
    """Per-library top kernels: time, GFLOP/s and share of the FMA peak (DVC ``plots``)."""
    return root / "roofline" / target / f"{component}-{bucket}.json"


def bench_summary_file(component: str, target: str, root: Path = ROOT) -> Path:
    """Every bucket of one component on one target: one line in the speedup plot."""
    return root / "bench_summary" / target / f"{component}.json"


def bench_e2e_file(root: Path = ROOT) -> Path:
    """End-to-end real-time factors of ``bench_e2e``: the runtime's own pick of target on this
    CPU (one entry per input length)."""
    return root / "bench_e2e.json"


def bench_cold_file(root: Path = ROOT) -> Path:
    """``bench_cold``'s metrics: whole processes that start, speak and exit, beside kokoro-onnx."""
    return root / "bench_cold.json"


def bench_cuts_file(root: Path = ROOT) -> Path:
    """``bench_cuts``'s metrics: what the runtime's cuts cost a listener."""
    return root / "bench_cuts.json"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_json(path: Path, what: str) -> Any:
    if not path.exists():
        raise ArtifactError(f"{path} is missing ({what}); run `dvc repro` to build it")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{path} is corrupted ({e}); delete it and run `dvc repro`") from e


def save_ir(path: Path, mod) -> None:
    """``mod`` as TVM's JSON, its source locations emptied (``without_source_locations``)."""
    import tvm

    write_text(path, without_source_locations(tvm.ir.save_json(mod)))


#: what a span says of where its node was written
_SPAN_FIELDS = ("line", "column", "end_line", "end_column")


def without_source_locations(text: str) -> str:
    """TVM JSON ``text`` with every span's file and lines emptied.

    Kernels written in TVMScript (the LSTM recurrence) keep spans naming the checkout's absolute
    path and their source lines: a clone in another folder, or an edit that moves a line, would
    change a module's bytes and rerun every stage after it for the same IR. The spans stay, so
    the graph keeps its shape."""
    graph = json.loads(text)
    for node in graph.get("nodes", []):
        kind = node.get("type")
        if kind == "ir.SourceName":
            node["data"] = ""
        elif kind in ("ir.Span", "ir.SequentialSpan"):
            node["data"].update(dict.fromkeys(_SPAN_FIELDS, 0))
    return json.dumps(graph, separators=(",", ":"))


def load_ir(path: Path):
    import tvm

    if not path.exists():
        raise ArtifactError(f"{path} is missing; run `dvc repro`")
    try:
        return tvm.ir.load_json(path.read_text(encoding="utf-8"))
    except Exception as e:
        raise ArtifactError(
            f"{path} is not a TVM IRModule ({type(e).__name__}); delete it and run `dvc repro`"
        ) from e


def save_weights(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with atomic_path(path, suffix=".npz") as tmp:
        with open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a path
            np.savez(f, **arrays)


def save_array(path: Path, array: np.ndarray) -> None:
    with atomic_path(path, suffix=".npy") as tmp:
        with open(tmp, "wb") as f:
            np.save(f, array, allow_pickle=False)


def load_array(path: Path) -> np.ndarray:
    if not path.exists():
        raise ArtifactError(f"{path} is missing; run `dvc repro`")
    return np.load(path, allow_pickle=False)


def export_library(ex, path: Path, fcompile=None) -> None:
    """``fcompile``: the cross linker of a target for another architecture (``devices.cross``)."""
    with atomic_path(path, suffix=".so") as tmp:
        if fcompile is None:
            ex.export_library(os.fspath(tmp))
        else:
            ex.export_library(os.fspath(tmp), fcompile=fcompile)
