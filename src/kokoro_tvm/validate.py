"""Compare every built library with eager kokoro on the same weights and inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from . import components
from .library import load_component
from .metrics import log_mel_snr, rel_err
from .reference import reference

TEXT_REL_ERR = 1e-4  # durations, d, t_en over the valid region
AUDIO_SNR_DB = 40.0  # log-mel SNR of the decoder's audio


def full_length_parity(root: Path, km, cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per library: its metric at full bucket length, and whether it passes."""
    manifest = json.loads((root / "manifest.json").read_text())
    rows = []
    for entry in manifest["libraries"]:
        comp, bucket, target = entry["component"], entry["bucket"], entry["target"]
        lib = load_component(root, manifest, comp, bucket, target)
        inputs = components.example_inputs(comp, bucket, cfg, seed=bucket)
        got = lib(*[x.numpy() for x in inputs])
        ref = [r.numpy() for r in reference(comp, km, inputs, bucket, cfg)]
        row: dict[str, Any] = {"component": comp, "bucket": bucket, "target": target}
        if comp == "decoder":
            row["log_mel_snr_db"] = log_mel_snr(ref[0], got[0])
            row["finite"] = bool(np.isfinite(got[0]).all())
            row["ok"] = row["finite"] and row["log_mel_snr_db"] >= AUDIO_SNR_DB
        else:
            row["rel_err"] = max(rel_err(r, g) for r, g in zip(ref, got))
            row["ok"] = row["rel_err"] <= TEXT_REL_ERR
        rows.append(row)
    return rows
