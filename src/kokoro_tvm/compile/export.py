"""``torch.export`` of one component at one static bucket, without parameter values."""

from __future__ import annotations

from typing import Any

import torch

from ..model.inputs import example_inputs
from ..model.components import build_component


def export(component: str, bucket: int, km, cfg: dict[str, Any]) -> torch.export.ExportedProgram:
    """The component traced at full bucket length (every length is a runtime input)."""
    module = build_component(component, km)
    args = example_inputs(component, bucket, cfg)
    with torch.no_grad():
        return torch.export.export(module, args, strict=False)


def without_parameter_values(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Replace every parameter by a zero-stride placeholder of the same shape and dtype, in place.

    Libraries take weights as inputs (``weights`` stores them once per component), so the graph
    is all a ``.pt2`` needs to carry; otherwise each decoder bucket would cache and push 250 MB of
    identical weights. Buffers (STFT bases, position ids) stay: the importer binds them.
    """
    import warnings

    names = {name for name, _ in ep.named_parameters()}
    for name in names:
        value = ep.state_dict[name]
        ep.state_dict[name] = torch.nn.Parameter(
            torch.zeros((), dtype=value.dtype).expand(value.shape), requires_grad=False)
    warnings.filterwarnings("ignore", message="No complete tensor found in the group")  # zero strides
    return ep
