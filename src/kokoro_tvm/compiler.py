"""The compile flow, one function per DVC stage: export -> relax -> legalize -> build.

Each function takes in-memory objects and returns them; ``artifacts`` handles files. Weights are
never baked into a library: the relax stage keeps parameters as function inputs, so one weights
file per component serves every bucket and target.
"""

from __future__ import annotations

import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

import torch

from . import components
from .patches import convert_map


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


def export(component: str, bucket: int, km, cfg: dict[str, Any]) -> torch.export.ExportedProgram:
    """``torch.export`` of one component at one static bucket (full-length example inputs)."""
    module = components.build_component(component, km)
    args = components.example_inputs(component, bucket, cfg)
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


def component_weights(component: str, km) -> dict[str, torch.Tensor]:
    """Every parameter of a component by FQN: what a library takes after its inputs."""
    module = components.build_component(component, km)
    return {k: v.detach().contiguous() for k, v in module.named_parameters()}


def to_relax(ep: torch.export.ExportedProgram, component: str, bucket: int, cfg: dict[str, Any],
             lstm_strategy: str):
    """Import to Relax with parameters as inputs.

    Returns the IRModule and its ``Signature``.
    """
    import tvm
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
    outputs = [{"shape": [int(d) for d in ty.shape], "dtype": str(ty.dtype)}
               for ty in _output_types(mod["main"])]
    inputs = [s.as_dict() for s in components.input_specs(component, bucket, cfg)]
    sig = Signature(component, bucket, inputs, params, outputs,
                    {"lstm_strategy": lstm_strategy, "ir_lines": len(mod.script().splitlines())})
    return tvm.ir.IRModule(mod.functions), sig


def _output_types(func) -> list:
    from tvm import relax

    ty = func.ret_ty
    return list(ty.fields) if isinstance(ty, relax.TupleType) else [ty]


def legalize(mod):
    """Lower Relax ops to TIR and fuse; what a schedule pass will later act on.

    ``LegalizeOps`` uses our legalizations (``legalize_ops.LEGALIZE_MAP``: polyphase
    conv1d_transpose) over TVM's. ``LiftTransformParams`` then moves everything that depends on
    parameters only (``nn.Linear`` weight transposes, LSTM ``b_ih + b_hh``, weight-norm,
    conv_transpose kernel rearrangement) out of ``main`` into ``main_transform_params``, which a
    loader runs once (``bind_params``): ``main`` then takes the *transformed* parameters.
    ``EliminateCommonSubexpr`` runs first so that a weight used in several places (ALBERT shares
    one layer's weights across its 12 repeats) is transformed once: without it each use was
    lifted on its own, and the duration library held and streamed 12 copies of ALBERT.
    ``weight_packing`` first stores linear weights in column panels (also a lifted transform).
    """
    import tvm
    from tvm import relax

    from .legalize_ops import LEGALIZE_MAP
    from .weight_packing import pack_linear_weights

    if "num_input" not in (mod["main"].attrs or {}):
        raise ValueError("legalize needs main's 'num_input' attr (import with keep_params_as_input "
                         "and detach_params) to tell inputs from parameters")
    seq = tvm.transform.Sequential([
        relax.transform.DecomposeOpsForInference(),
        pack_linear_weights,
        relax.transform.EliminateCommonSubexpr(),
        relax.transform.LegalizeOps(customize_legalize_map=LEGALIZE_MAP),
        relax.transform.LiftTransformParams(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
    ])
    return seq(mod)


def bind_params(vm, weights) -> list:
    """Arguments after the inputs for ``vm["main"]`` from raw weights in ``Signature.params``
    order (runs ``main_transform_params`` once when the library has it)."""
    from .legalize_ops import bind_params as _bind

    return _bind(vm, weights)


def make_target(spec: dict[str, Any]):
    import tvm

    return tvm.target.Target(dict(spec))


def build(mod, target_spec: dict[str, Any], tune_db: Path | None = None):
    """Schedule every kernel for the CPU target, then ``tvm.compile``.

    PrimFuncs with a record in the ``tune_db`` database (``tune.tune``: only records that beat
    the rules are there) take the tuned schedule; the schedule pass does the rest.
    Returns the executable, the build seconds (schedule pass included) and the ``ScheduleReport``
    (which rule each PrimFunc got, ``tuned`` included, and which fell back to the generic one).
    """
    import tvm

    from . import schedule, tune

    target = make_target(target_spec)
    t0 = time.perf_counter()
    mod, tuned = tune.apply(mod, target, tune_db)
    mod, report = schedule.apply(mod, target, tuned)
    ex = tvm.compile(mod, target=target)
    return ex, time.perf_counter() - t0, report
