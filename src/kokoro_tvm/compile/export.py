"""``torch.export`` of one component at one bucket, without parameter values: the one export path.

``shapes="padded"``: traced at the full bucket, the valid length a runtime input. ``"bounded"``:
the length a ``torch.export.Dim`` in ``MIN_LENGTH..bucket``, so the library takes unpadded inputs
of any length up to its bucket (TVM plans memory for that bound from ``tir_var_upper_bound``).
Both trace the same component code (``model.components``), over their length policy.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..model.components import build_component
from ..model.inputs import bounded_example_inputs, example_inputs

#: Shortest input a bounded library takes, per component (the ``Dim``'s min; the decoder's
#: instance norms need 2 frames, and kokoro's shortest utterance has 3 tokens of >= 1 frame).
MIN_LENGTH = {"text_encoder": 1, "duration": 1, "decoder": 3}


def export(
    component: str, bucket: int, km, cfg: dict[str, Any], shapes: str = "padded"
) -> torch.export.ExportedProgram:
    """``component`` of ``km`` traced for a ``shapes`` library of ``bucket``."""
    module = build_component(component, km, shapes)
    if shapes == "padded":
        args, dynamic = example_inputs(component, bucket, cfg), None
    elif shapes == "bounded":
        # the example is at neither bound (a bound as example specialises it)
        args = bounded_example_inputs(
            component, bucket, cfg, max(MIN_LENGTH[component] + 1, bucket // 2)
        )
        n = torch.export.Dim("n", min=MIN_LENGTH[component], max=bucket)
        dynamic = {
            "text_encoder": ({1: n},),
            "duration": ({1: n}, None),
            "decoder": ({2: n}, {2: n}, None, None, {1: n}),
        }[component]
    else:
        raise ValueError(f"unknown shapes {shapes!r}; choose padded or bounded")
    with torch.no_grad():
        return torch.export.export(module, args, dynamic_shapes=dynamic, strict=False)


def without_parameter_values(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Replace every parameter by a zero-stride placeholder of the same shape and dtype, in place.

    Libraries take weights as inputs (``weights`` stores them once per component), so the graph
    is all a ``.pt2`` needs to carry; otherwise each decoder bucket would cache and push its own
    copy of the same weights. Buffers (STFT bases, position ids) stay: the importer binds them.
    """
    names = {name for name, _ in ep.named_parameters()}
    for name in names:
        value = ep.state_dict[name]
        ep.state_dict[name] = torch.nn.Parameter(
            torch.zeros((), dtype=value.dtype).expand(value.shape), requires_grad=False
        )
    warnings.filterwarnings(
        "ignore", message="No complete tensor found in the group"
    )  # zero strides
    return ep
