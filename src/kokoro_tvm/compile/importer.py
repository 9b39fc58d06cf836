"""Import an exported component into Relax with its parameters as function inputs.

Weights are never baked into a library: one weights file per component serves every bucket and
target, and the ``Signature`` records which weight each argument is.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..spec import Shapes, lookup
from .convert_map import convert_map


@dataclass
class Signature:
    """What a compiled ``main`` takes and returns; stored next to every IR and library."""

    component: str
    bucket: int
    inputs: list[dict[str, Any]]
    params: list[str]  # weight names (state-dict FQNs), in argument order after the inputs
    outputs: list[dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "component": self.component,
            "bucket": self.bucket,
            "inputs": self.inputs,
            "params": self.params,
            "outputs": self.outputs,
            "info": self.info,
        }


def to_relax(ep, component: str, bucket: int, cfg: dict[str, Any], lstm_strategy: str):
    """Import to Relax with parameters as inputs. Returns the IRModule and its ``Signature``.

    The signature's inputs are the padded ones (``Component.signature``) either way: callers keep
    one convention, and for a bounded export (a symbolic length, ``compile.torch_export``) the
    runtime cuts them to the valid length (``Component.length_axes``); its ``info`` then says
    ``shapes: bounded`` and its output shapes name the length (e.g. ``[1, 64, "n"]``).
    """
    import tvm

    from .symbolic import upper_bounds

    mod, params = import_params_as_inputs(ep, lstm_strategy)
    outputs = [
        {"shape": [_dim(d) for d in ty.shape], "dtype": str(ty.dtype)}
        for ty in _output_types(mod["main"])
    ]
    entry = lookup(component)
    inputs = [s.as_dict() for s in entry.signature(bucket, cfg)]
    info = {"lstm_strategy": lstm_strategy, "ir_lines": len(mod.script().splitlines())}
    if upper_bounds(mod):  # padded signatures stay as they were (their libraries are not rebuilt)
        info["shapes"] = Shapes.BOUNDED.value
        info["length_axes"] = {k: list(v) for k, v in entry.length_axes(cfg).items()}
    return tvm.ir.IRModule(mod.functions), Signature(
        component, bucket, inputs, params, outputs, info
    )


def _dim(d) -> int | str:
    """A static extent as an int; a symbolic one as text (``n * 600``): the variable keeps the
    name of its ``torch.export.Dim`` (``compile.torch_export``) through the import."""
    import tvm

    if isinstance(d, tvm.tirx.IntImm):
        return int(d)
    return re.sub(r"T\.int64\((\d+)\)", r"\1", str(d))


def import_params_as_inputs(ep, lstm_strategy: str):
    """The Relax module of ``ep`` (decomposed here) and its parameters' FQNs in argument order."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    # Decompose here (not inside the importer) so the signature we map weights by is the one
    # the importer sees: decomposition can lift or drop constants.
    ep = ep.run_decompositions()
    mod = from_exported_program(
        ep,
        keep_params_as_input=True,
        unwrap_unit_return_tuple=False,
        custom_convert_map=convert_map(lstm_strategy),
        run_ep_decomposition=False,
    )
    # The importer binds buffers and constants (small: STFT bases, position ids) into the module
    # and keeps only parameters as inputs, in ``named_parameters`` order; we record their FQNs.
    mod, _ = relax.frontend.detach_params(mod)
    by_arg = {s.arg.name: s.target for s in ep.graph_signature.input_specs}
    n_inputs = int(mod["main"].attrs["num_input"])  # str(v): Var.name raises in TVM 0.27
    params = [by_arg[str(v)] for v in mod["main"].params[n_inputs:]]
    if params != [name for name, _ in ep.named_parameters()]:
        raise RuntimeError("relax parameter order differs from the exported program's parameters")
    return mod, params


def _output_types(func) -> list:
    from tvm import relax

    ty = func.ret_ty
    return list(ty.fields) if isinstance(ty, relax.TupleType) else [ty]


def load_export(path: Path):
    """A ``.pt2`` as ``torch.export.load`` reads it, without the FutureWarning torch 2.13 raises on
    every load (``isinstance(treespec, LeafSpec)`` is deprecated: its own unpickling of the call
    spec's pytree, nothing this project does)."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
            category=FutureWarning,
        )
        import torch

        return torch.export.load(path)
