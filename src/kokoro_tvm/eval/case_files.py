"""Validation cases (``cases``) as one ``.npz``'s flat arrays, and back: what the ``reference``
stage writes once per component and bucket, and every target's validation and bench read."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import lookup, valid
from .cases import Case

#: what a case holds besides its inputs
OUTPUTS = ("r64", "r32", "f0", "length")


def case_length(key: int | str, case: Case) -> int:
    """A case's valid length: its key, or for a named case (``lang_a``) its ``length``."""
    return key if isinstance(key, int) else int(case["length"][0])


def cases_to_arrays(
    component: str, cases: dict[int | str, Case], cfg: dict[str, Any]
) -> dict[str, np.ndarray]:
    """Flat arrays for one ``.npz``: inputs cut to their valid length (a decoder bucket's zero
    padding would be most of the file), outputs as they are. Cases are keyed by their length,
    or by a name (a language's sentence) with the length inside."""
    entry = lookup(component)
    axes = entry.length_axes(cfg)
    out = {}
    for n, case in cases.items():
        if "__" in str(n):
            raise ValueError(f"case key {n!r}: '__' separates the array names")
        for name, x in zip(entry.input_names, case["inputs"]):
            if name in axes:
                x = x[valid(axes[name], case_length(n, case))]
            out[f"{n}__in__{name}"] = x
        for key in OUTPUTS:
            for i, x in enumerate(case.get(key, [])):
                out[f"{n}__{key}__{i}"] = x
    return out


def cases_from_arrays(
    component: str, bucket: int, arrays: dict[str, np.ndarray], cfg: dict[str, Any]
) -> dict[int | str, Case]:
    """``cases_to_arrays`` undone: inputs zero-padded back to the bucket's signature. Lengths'
    cases come first, ascending, then the named ones."""
    specs = lookup(component).signature(bucket, cfg)
    cases: dict[int | str, Case] = {}
    keys = {k.split("__", 1)[0] for k in arrays}
    lengths = sorted(int(k) for k in keys if k.isdigit())
    for n in [*lengths, *sorted(k for k in keys if not k.isdigit())]:
        case: Case = {"inputs": []}
        for spec in specs:
            x = arrays[f"{n}__in__{spec.name}"]
            case["inputs"].append(
                np.pad(x, [(0, want - have) for have, want in zip(x.shape, spec.shape)])
            )
        for key in OUTPUTS:
            parts = sorted(
                (int(k.rsplit("__", 1)[1]), k) for k in arrays if k.startswith(f"{n}__{key}__")
            )
            if parts:
                case[key] = [arrays[k] for _, k in parts]
        cases[n] = case
    return cases
