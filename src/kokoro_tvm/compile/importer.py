"""Import an exported component into Relax with its parameters as function inputs.

Weights are never baked into a library: one weights file per component serves every bucket and
target, and the ``Signature`` records which weight each argument is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..spec import input_specs
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
        return {"component": self.component, "bucket": self.bucket, "inputs": self.inputs,
                "params": self.params, "outputs": self.outputs, "info": self.info}


def to_relax(ep, component: str, bucket: int, cfg: dict[str, Any], lstm_strategy: str):
    """Import to Relax with parameters as inputs. Returns the IRModule and its ``Signature``."""
    import tvm

    mod, params = import_params_as_inputs(ep, lstm_strategy)
    outputs = [{"shape": [int(d) for d in ty.shape], "dtype": str(ty.dtype)}
               for ty in _output_types(mod["main"])]
    inputs = [s.as_dict() for s in input_specs(component, bucket, cfg)]
    sig = Signature(component, bucket, inputs, params, outputs,
                    {"lstm_strategy": lstm_strategy, "ir_lines": len(mod.script().splitlines())})
    return tvm.ir.IRModule(mod.functions), sig


def import_params_as_inputs(ep, lstm_strategy: str):
    """The Relax module of ``ep`` (decomposed here) and its parameters' FQNs in argument order."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    # Decompose here (not inside the importer) so the signature we map weights by is the one
    # the importer sees: decomposition can lift or drop constants.
    ep = ep.run_decompositions()
    mod = from_exported_program(ep, keep_params_as_input=True, unwrap_unit_return_tuple=False,
                                custom_convert_map=convert_map(lstm_strategy), run_ep_decomposition=False)
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
