"""Phase ``legalize``: lower Relax to TIR and fuse (target independent); what the schedule
phase later acts on."""

from __future__ import annotations

from . import attention, batch_matmul, passes, symbolic  # noqa: F401  (they register their passes)
from .legalizations import LEGALIZE_MAP

#: The phase, in order. ``LegalizeOps`` uses our legalizations (``legalizations.LEGALIZE_MAP``:
#: polyphase conv1d_transpose, ...) over TVM's. ``LiftTransformParams`` then moves everything that
#: depends on parameters only (``nn.Linear`` weight transposes, LSTM ``b_ih + b_hh``,
#: conv_transpose kernel rearrangement, the LSTM's ``w_hh`` packing) out of ``main`` into
#: ``main_transform_params``, which a loader runs once (``runtime.vm.bind_params``): ``main``
#: then takes the *transformed* parameters. ``EliminateCommonSubexpr`` runs before it so that a
#: weight used in several places (ALBERT shares one layer's weights across its 12 repeats) is
#: transformed once: without it each use was lifted on its own, and the duration library held
#: and streamed 12 copies of ALBERT.
PASSES = [
    "DecomposeOpsForInference",
    "FoldBatchMatmulReshapes",
    "FuseAttention",
    "EliminateCommonSubexpr",
    "LegalizeOps",
    "LiftTransformParams",
    "AnnotateTIROpPattern",
    "FoldConstant",
    "FuseOps",
    "FuseTIR",
    "DeadCodeElimination",
]


def _relax(name: str, doc: str) -> None:
    def factory():
        from tvm import relax

        return getattr(relax.transform, name)()

    passes.register_tvm("legalize", factory, doc, name=name)


for _name, _doc in [
    (
        "DecomposeOpsForInference",
        "TVM: batch/layer norms and other composite ops into their primitive ops.",
    ),
    (
        "EliminateCommonSubexpr",
        "TVM: one binding per distinct expression (a shared weight is transformed once).",
    ),
    (
        "LiftTransformParams",
        "TVM: parameter-only work into main_transform_params, run once at load.",
    ),
    (
        "AnnotateTIROpPattern",
        "TVM: each PrimFunc's fusion pattern (elementwise, injective, reduction, ...).",
    ),
    ("FoldConstant", "TVM: evaluate what depends on constants only."),
    ("FuseOps", "TVM: group fusible calls by their patterns."),
    ("FuseTIR", "TVM: each group into one PrimFunc."),
    ("DeadCodeElimination", "TVM: drop unused bindings and functions."),
]:
    _relax(_name, _doc)


@passes.register("legalize", "LegalizeOps")
def _legalize_ops(mod, _ctx: passes.Context):
    """TVM's LegalizeOps with our legalizations (``legalizations``) and, for bounded modules,
    reshapes kept as Relax reshapes (``symbolic.legalize_map``)."""
    from tvm import relax

    return relax.transform.LegalizeOps(
        customize_legalize_map=symbolic.legalize_map(LEGALIZE_MAP, mod)
    )(mod)


def legalize(mod, label: str = ""):
    """Run the legalize phase (``PASSES``) on an imported module."""
    if "num_input" not in (mod["main"].attrs or {}):
        raise ValueError(
            "legalize needs main's 'num_input' attr (import with keep_params_as_input "
            "and detach_params) to tell inputs from parameters"
        )
    return passes.run("legalize", PASSES, mod, passes.Context(label=label))
