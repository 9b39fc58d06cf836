"""Deterministic example inputs of a component at a length inside its bucket (torch tensors).

Export traces with them (full bucket), and tests and benchmarks feed them to a library and to eager
kokoro alike.
"""

from __future__ import annotations

from typing import Any

import torch

from ..spec import lookup, past, unpadded


def example_inputs(
    component: str, bucket: int, cfg: dict[str, Any], length: int | None = None, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """Inputs with ``length`` valid positions (default: the full bucket), zero past them."""
    entry = lookup(component)
    axes = entry.length_axes(cfg)
    g = torch.Generator().manual_seed(seed)
    length = bucket if length is None else length
    out = []
    for spec in entry.signature(bucket, cfg):
        if spec.name == "input_ids":
            ids = torch.randint(1, cfg["n_token"], spec.shape, generator=g)
            ids[:, 0] = 0
            ids[:, length - 1] = 0
            ids[past(axes[spec.name], length)] = 0
            out.append(ids)
        elif spec.bounds is not None:  # the valid length
            out.append(torch.full(spec.shape, length, dtype=torch.int64))
        elif spec.name == "rand_ini":
            out.append(torch.rand(spec.shape, generator=g))
        else:
            x = torch.randn(spec.shape, generator=g)
            if spec.name in ("style", "ref_s"):
                x = x * 0.3
            elif spec.name in axes:
                x[past(axes[spec.name], length)] = 0
            out.append(x)
    return tuple(out)


def bounded_example_inputs(
    component: str, bucket: int, cfg: dict[str, Any], length: int
) -> tuple[torch.Tensor, ...]:
    """What a bounded library of ``component`` takes at ``length``: the padded example cut as
    the runtime cuts it (``spec.unpadded``)."""
    entry = lookup(component)
    named = dict(zip(entry.input_names, example_inputs(component, bucket, cfg, length=length)))
    cut = unpadded(named, entry.length_axes(cfg), length)
    # contiguous, as the runtime passes them: torch.export guards on a view's strides (the bucket)
    return tuple(x.contiguous() for x in cut.values())
