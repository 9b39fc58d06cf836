"""One CPU's results file (``docs/results/<cpu id>.json``): what it must hold, read back with the
file and the key at fault named, so a page is never rendered from half a record.

The record keeps the pipeline's own metric names (``speedup_vs_eager``, ``log_mel_snr_db``,
``tvm_of_peak``...), so a reader can follow any number back to the stage that wrote it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import KokoroTVMError

SCHEMA = 1

CPU_KEYS = ("model_name", "family", "model", "arch", "isa", "cores", "id", "label")
E2E_LENGTH_KEYS = (
    "phonemes",
    "audio_s",
    "tvm_s",
    "eager_s",
    "speedup_vs_eager",
    "log_mel_snr_db",
    "f32_log_mel_snr_db",
)
#: A library timed on this CPU: its medians, its ratio to eager, and the roofline view.
BENCH_KEYS = ("tvm_ms", "eager_ms", "speedup_vs_eager", "gflop", "tvm_gflops", "peak_gflops")
#: What a validated library's every length holds: the audio metric or the token one, each with
#: float32 kokoro's own distance to float64 kokoro beside it.
FIDELITY_PAIRS = (("log_mel_snr_db", "f32_log_mel_snr_db"), ("rel_err", "f32_rel_err"))


class RecordError(KokoroTVMError, ValueError):
    """A results file or metric lacks what the results page shows."""


def require(doc: Any, keys: tuple[str, ...], where: str) -> None:
    """Every key of ``keys`` is in ``doc`` (a dict), else a ``RecordError`` naming ``where``."""
    if not isinstance(doc, dict):
        raise RecordError(f"{where}: expected an object, got {type(doc).__name__}")
    missing = [k for k in keys if doc.get(k) in (None, "", [])]
    if missing:
        raise RecordError(f"{where}: missing {', '.join(missing)}")


def fidelity_metric(lengths: dict[str, Any], where: str) -> tuple[str, str]:
    """``("log_mel_snr_db", "f32_log_mel_snr_db")`` or ``("rel_err", "f32_rel_err")``: the pair
    every length of a validation holds."""
    if not lengths:
        raise RecordError(f"{where}: a validated library with no lengths")
    for pair in FIDELITY_PAIRS:
        if all(isinstance(r, dict) and set(pair) <= r.keys() for r in lengths.values()):
            return pair
    raise RecordError(
        f"{where}: its lengths hold neither {' nor '.join(' and '.join(p) for p in FIDELITY_PAIRS)}"
    )


def check(record: Any, where: str) -> dict[str, Any]:
    """``record`` if it holds everything the page shows; else a ``RecordError``."""
    require(record, ("schema", "cpu", "measured", "toolchain", "e2e", "libraries"), where)
    if record["schema"] != SCHEMA:
        raise RecordError(
            f"{where}: schema {record['schema']!r}, this generator reads {SCHEMA}; "
            "collect it again on its CPU (`make results`)"
        )
    require(record["cpu"], CPU_KEYS, f"{where}: cpu")
    e2e = record["e2e"]
    require(e2e, ("target", "threads", "lengths", "total"), f"{where}: e2e")
    for i, row in enumerate(e2e["lengths"]):
        require(row, E2E_LENGTH_KEYS, f"{where}: e2e.lengths[{i}]")
    require(e2e["total"], ("speedup_vs_eager",), f"{where}: e2e.total")
    for lib in record["libraries"]:
        name = f"{where}: library {lib.get('library')}-{lib.get('target')}"
        require(lib, ("library", "component", "bucket", "target", "device"), name)
        if lib.get("validated"):
            require(lib, ("validation",), name)
            fidelity_metric(lib["validation"].get("lengths") or {}, f"{name} validation")
        if lib.get("bench") and lib["device"] == "host":
            require(lib["bench"], BENCH_KEYS, f"{name} bench")
    return record


def load(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise RecordError(f"{path}: unreadable results file ({e})") from e
    return check(record, str(path))


def load_all(folder: Path) -> list[dict[str, Any]]:
    """Every CPU's record in ``folder``, in file-name order (a stable page)."""
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise RecordError(
            f"{folder}: no results files; run `make results` "
            "on a machine whose `dvc repro` finished"
        )
    return [load(p) for p in paths]
