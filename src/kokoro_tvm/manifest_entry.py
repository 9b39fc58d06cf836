"""One library's manifest entry, and the check that it is the bytes its validation ran: shared by
the ``manifest`` stage that writes entries and the runtime that loads them (and by ``validate``
and ``bench``, which load a library straight from its build outputs before any manifest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .artifacts import ArtifactError
from .spec import FP32, Shapes

#: a ``speeds`` entry's fields and their JSON types: a narrower library timed against float32 on
#: one CPU kind (``bench_narrow``), which the runtime's ``auto`` precision reads
SPEED_FIELDS: dict[str, type | tuple[type, ...]] = {
    "component": str,
    "bucket": int,
    "target": str,
    "precision": str,
    "cpu": str,
    "cpu_kind": str,
    f"speedup_vs_{FP32}": (int, float),
}


def library_entry(
    component: str,
    bucket: int,
    target: str,
    path: str,
    sha256: str,
    signature: dict[str, Any],
    **more: Any,
) -> dict[str, Any]:
    """What the runtime needs to load and call one library: where it is, its bytes, and its
    signature; a bounded library also says so and which axis of each input is its length."""
    return {
        "component": component,
        "bucket": bucket,
        "target": target,
        "path": path,
        "sha256": sha256,
        "inputs": signature["inputs"],
        "outputs": signature["outputs"],
        "params": signature["params"],
        **bounded_fields(signature),
        **more,
    }


def bounded_fields(signature: dict[str, Any]) -> dict[str, Any]:
    """The fields that tell a bounded library's entry from a padded one's (none for padded, whose
    entries predate them)."""
    info = signature.get("info", {})
    if info.get("shapes") != Shapes.BOUNDED.value:
        return {}
    return {"shapes": Shapes.BOUNDED.value, "length_axes": info["length_axes"]}


def validation_entry(check: dict[str, Any]) -> dict[str, Any]:
    """What a library's entry keeps of its validation metrics (the ``validate`` stage's file):
    the bytes it ran (``*_sha256``), its worst errors, the lengths it checked, and where (none
    of which a library no device validated has: its digests then match nothing)."""
    entry = {k: v for k, v in check.items() if k.startswith("worst_") or k.endswith("_sha256")}
    entry |= {
        "lengths": sorted(int(n) for n in check.get("lengths", [])),
        "device": check.get("device"),
        "emulated": check.get("emulated"),
    }
    if check.get("languages"):  # per language code (``lang_a`` -> ``a``), its verdict
        entry["languages"] = {
            k.removeprefix("lang_"): r["ok"] for k, r in check["languages"].items()
        }
    return entry


def check_validated(
    validation: dict[str, Any],
    library_sha256: str,
    weights_sha256: str,
    path: Path | str,
    weights_key: str = "weights_sha256",
) -> None:
    """Refuse a library whose validation ran other bytes, of the library or of its weights
    (``weights_key``: the raw weights validation transformed, or ``packed_sha256``, the file
    it wrote of them in the library's layout)."""
    ran = (validation.get("library_sha256"), validation.get(weights_key))
    if ran != (library_sha256, weights_sha256):
        raise ArtifactError(
            f"{path} (or its weights) is not what was built and validated (tampered, or a stage "
            "was skipped); run `dvc repro` to rebuild and revalidate it"
        )
