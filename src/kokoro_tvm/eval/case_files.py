"""Validation cases (``cases``) as one ``.npz``'s flat arrays, and back: what the ``reference``
stage writes once per component and bucket, and every target's validation and bench read."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import lookup, valid
from .cases import Case


def cases_to_arrays(
    component: str, cases: dict[int, Case], cfg: dict[str, Any]
) -> dict[str, np.ndarray]:
    """Flat arrays for one ``.npz``: inputs cut to their valid length (a decoder bucket's zero
    padding would be most of the file), outputs as they are."""
    entry = lookup(component)
    axes = entry.length_axes(cfg)
    out = {}
    for n, case in cases.items():
        for name, x in zip(entry.input_names, case["inputs"]):
            if name in axes:
                x = x[valid(axes[name], n)]
            out[f"{n}__in__{name}"] = x
        for key in ("r64", "r32", "f0"):
            for i, x in enumerate(case.get(key, [])):
                out[f"{n}__{key}__{i}"] = x
    return out


def cases_from_arrays(
    component: str, bucket: int, arrays: dict[str, np.ndarray], cfg: dict[str, Any]
) -> dict[int, Case]:
    """``cases_to_arrays`` undone: inputs zero-padded back to the bucket's signature."""
    specs = lookup(component).signature(bucket, cfg)
    cases: dict[int, Case] = {}
    for n in sorted({int(k.split("__", 1)[0]) for k in arrays}):
        case: Case = {"inputs": []}
        for spec in specs:
            x = arrays[f"{n}__in__{spec.name}"]
            case["inputs"].append(
                np.pad(x, [(0, want - have) for have, want in zip(x.shape, spec.shape)])
            )
        for key in ("r64", "r32", "f0"):
            parts = sorted(
                (int(k.rsplit("__", 1)[1]), k) for k in arrays if k.startswith(f"{n}__{key}__")
            )
            if parts:
                case[key] = [arrays[k] for _, k in parts]
        cases[n] = case
    return cases
