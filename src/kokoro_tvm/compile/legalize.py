"""Lower Relax ops to TIR and fuse: what the schedule pass later acts on."""

from __future__ import annotations


def legalize(mod):
    """The legalize pipeline, one named pass per step.

    ``LegalizeOps`` uses our legalizations (``legalize_ops.LEGALIZE_MAP``: polyphase
    conv1d_transpose, ...) over TVM's. ``LiftTransformParams`` then moves everything that depends
    on parameters only (``nn.Linear`` weight transposes, LSTM ``b_ih + b_hh``, conv_transpose
    kernel rearrangement, linear weight packing) out of ``main`` into ``main_transform_params``,
    which a loader runs once (``runtime.library.bind_params``): ``main`` then takes the
    *transformed* parameters. ``EliminateCommonSubexpr`` runs first so that a weight used in
    several places (ALBERT shares one layer's weights across its 12 repeats) is transformed
    once: without it each use was lifted on its own, and the duration library held and streamed
    12 copies of ALBERT.
    """
    import tvm
    from tvm import relax

    from . import symbolic
    from .legalize_ops import LEGALIZE_MAP
    from .weight_packing import pack_linear_weights

    if "num_input" not in (mod["main"].attrs or {}):
        raise ValueError("legalize needs main's 'num_input' attr (import with keep_params_as_input "
                         "and detach_params) to tell inputs from parameters")
    seq = tvm.transform.Sequential([
        relax.transform.DecomposeOpsForInference(),
        pack_linear_weights,
        relax.transform.EliminateCommonSubexpr(),
        relax.transform.LegalizeOps(customize_legalize_map=symbolic.legalize_map(LEGALIZE_MAP, mod)),
        relax.transform.LiftTransformParams(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(),
    ])
    return seq(mod)
