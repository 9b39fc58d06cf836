"""``torch.export`` of one component at one bucket, without parameter values: the one export path.

``Shapes.PADDED``: traced at the full bucket, the valid length a runtime input. ``Shapes.BOUNDED``:
the length a ``torch.export.Dim`` from the registry entry's ``min_export_length`` to the bucket,
on each input's length axis (``Component.export_dims``), so the library takes unpadded inputs of
any length up to its bucket (TVM plans memory for that bound from ``tir_var_upper_bound``).
Both trace the same component code (``model.components``), over their length policy.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..model.components import build_component
from ..model.inputs import bounded_example_inputs, example_inputs
from ..spec import Shapes, lookup


def export(
    component: str, bucket: int, km, cfg: dict[str, Any], shapes: Shapes = Shapes.PADDED
) -> torch.export.ExportedProgram:
    """``component`` of ``km`` traced for a ``shapes`` library of ``bucket``."""
    entry = lookup(component)
    module = build_component(component, km, shapes)
    if shapes is Shapes.PADDED:
        args, dynamic = example_inputs(component, bucket, cfg), None
    elif shapes is Shapes.BOUNDED:
        # the example is at neither bound (a bound as example specialises it)
        lo = entry.min_export_length
        args = bounded_example_inputs(component, bucket, cfg, max(lo + 1, bucket // 2))
        dynamic = entry.export_dims(torch.export.Dim("n", min=lo, max=bucket))
    else:
        raise TypeError(f"shapes must be a spec.Shapes, not {shapes!r}")
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


def without_source_locations(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Drop the Python stack trace torch.export records on every node, in place.

    The traces name the checkout's absolute path and the model code's line numbers: a clone in
    another folder, or a comment that moves a line, would change the ``.pt2``'s bytes and rerun
    every stage after export for an identical graph. The importer reads no trace."""
    for module in ep.graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                node.meta.pop("stack_trace", None)
    return ep
