"""The legalize phase: Relax lowered to TIR and fused, the same for every target."""

from __future__ import annotations

from . import attention, batch_matmul, symbolic
from .legalizations import legalize_map
from .passes import Context, Pass, Phase, tvm_relax


def _fold_batch_matmul_reshapes(mod, _ctx: Context):
    """``reshape(matmul(reshape(a), reshape(b)))`` that only merged batch axes -> ``matmul(a, b)``
    (``batch_matmul``): the attention mask's add becomes the matmul's epilogue."""
    return batch_matmul.fold_batch_matmul_reshapes(mod)


def _fuse_attention(mod, _ctx: Context):
    """``softmax(q @ kt [+ mask])`` with PyTorch's safe-softmax guard, times ``v`` -> one
    hand-written kernel (``attention``)."""
    return attention.fuse_attention(mod)


def _legalize_ops(mod, ctx: Context):
    """TVM's LegalizeOps with our legalizations (``legalizations``, those of the context's
    precision) and, for bounded modules, reshapes kept as Relax reshapes
    (``symbolic.legalize_map``)."""
    from tvm import relax

    return relax.transform.LegalizeOps(
        customize_legalize_map=symbolic.legalize_map(legalize_map(ctx.precision), mod)
    )(mod)


#: ``LegalizeOps`` uses our legalizations (``legalizations.LEGALIZE_MAP``: polyphase
#: conv1d_transpose, ...) over TVM's. ``LiftTransformParams`` then moves everything that depends
#: on parameters only (``nn.Linear`` weight transposes, LSTM ``b_ih + b_hh``, conv_transpose kernel
#: rearrangement, the LSTM's ``w_hh`` packing) out of ``main`` into ``main_transform_params``,
#: which a loader runs once (``runtime.vm.bind_params``): ``main`` then takes the *transformed*
#: parameters. ``EliminateCommonSubexpr`` runs before it so that a weight used in several places
#: (ALBERT shares one layer's weights across its 12 repeats) is transformed once: without it each
#: use was lifted on its own, and the duration library held and streamed 12 copies of ALBERT.
LEGALIZE = Phase(
    "legalize",
    (
        tvm_relax(
            "DecomposeOpsForInference",
            "batch/layer norms and other composite ops into their primitive ops.",
        ),
        Pass.of("FoldBatchMatmulReshapes", _fold_batch_matmul_reshapes),
        Pass.of("FuseAttention", _fuse_attention),
        tvm_relax(
            "EliminateCommonSubexpr",
            "one binding per distinct expression (a shared weight is transformed once).",
        ),
        Pass.of("LegalizeOps", _legalize_ops),
        tvm_relax(
            "LiftTransformParams",
            "parameter-only work into main_transform_params, run once at load.",
        ),
        tvm_relax(
            "AnnotateTIROpPattern",
            "each PrimFunc's fusion pattern (elementwise, injective, reduction, ...).",
        ),
        tvm_relax("FoldConstant", "evaluate what depends on constants only."),
        tvm_relax("FuseOps", "group fusible calls by their patterns."),
        tvm_relax("FuseTIR", "each group into one PrimFunc."),
        tvm_relax("DeadCodeElimination", "drop unused bindings and functions."),
    ),
)
