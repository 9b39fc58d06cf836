"""The legalize phase: Relax lowered to TIR and fused, the same for every target."""

from __future__ import annotations

import tvm
from tvm import relax

from ..spec import FP32
from . import attention, batch_matmul, conv_epilogue, symbolic
from .legalizations import legalize_map


@tvm.transform.module_pass(opt_level=0, name="FoldBatchMatmulReshapes")
class FoldBatchMatmulReshapes:
    """``reshape(matmul(reshape(a), reshape(b)))`` that only merged batch axes -> ``matmul(a, b)``
    (``batch_matmul``): the attention mask's add becomes the matmul's epilogue."""

    def transform_module(self, mod, _ctx):
        return batch_matmul.fold_batch_matmul_reshapes(mod)


@tvm.transform.module_pass(opt_level=0, name="FuseAttention")
class FuseAttention:
    """``softmax(q @ kt [+ mask])`` with PyTorch's safe-softmax guard, times ``v`` -> one
    hand-written kernel (``attention``)."""

    def transform_module(self, mod, _ctx):
        return attention.fuse_attention(mod)


@tvm.transform.module_pass(opt_level=0, name="FoldConvEpilogues")
class FoldConvEpilogues:
    """A conv's bias and residual adds into its hand-written kernel's call (``conv_epilogue``:
    Winograd's, and in a bf16 library the FFT kernel's)."""

    def __init__(self, precision: str) -> None:
        self.precision = precision

    def transform_module(self, mod, _ctx):
        return conv_epilogue.fold(mod, bf16=self.precision != FP32)


@tvm.transform.module_pass(opt_level=0, name="LegalizeOps")
class LegalizeOps:
    """TVM's LegalizeOps with our legalizations (``legalizations``, those of the precision) and,
    for bounded modules, reshapes kept as Relax reshapes (``symbolic.legalize_map``)."""

    def __init__(self, precision: str) -> None:
        self.legalizations = legalize_map(precision)  # an unknown precision fails here

    def transform_module(self, mod, _ctx):
        return relax.transform.LegalizeOps(
            customize_legalize_map=symbolic.legalize_map(self.legalizations, mod)
        )(mod)


#: What TVM's own passes here do, by the name TVM gives each, for ``phases.describe`` (a TVM pass
#: object has no docstring).
TVM_PASSES = {
    "DecomposeOps": "(DecomposeOpsForInference) batch/layer norms and other composite ops into "
    "primitive ops.",
    "EliminateCommonSubexpr": "one binding per distinct expression (a shared weight is "
    "transformed once).",
    "LiftTransformParams": "parameter-only work into main_transform_params, run once at load.",
    "AnnotateTIROpPattern": "each PrimFunc's fusion pattern (elementwise, injective, ...).",
    "FoldConstant": "evaluate what depends on constants only.",
    "FuseOps": "group fusible calls by their patterns.",
    "FuseTIR": "each group into one PrimFunc.",
    "DeadCodeElimination": "drop unused bindings and functions.",
}


def phase(precision: str = "fp32") -> tvm.transform.Sequential:
    """The legalize passes in order; ``precision`` picks the convs' legalizations.

    ``LegalizeOps`` uses our legalizations (``legalizations.LEGALIZE_MAP``: polyphase
    conv1d_transpose, ...) over TVM's. ``LiftTransformParams`` then moves everything that depends
    on parameters only (``nn.Linear`` weight transposes, LSTM ``b_ih + b_hh``, conv_transpose
    kernel rearrangement, the LSTM's ``w_hh`` packing) out of ``main`` into
    ``main_transform_params``, which a loader runs once (``runtime.vm.bind_params``): ``main``
    then takes the *transformed* parameters. ``EliminateCommonSubexpr`` runs before it so that a
    weight used in several places (ALBERT shares one layer's weights across its 12 repeats) is
    transformed once: without it each use was lifted on its own, and the duration library held
    and streamed 12 copies of ALBERT.
    """
    t = relax.transform
    return tvm.transform.Sequential(
        [
            t.DecomposeOpsForInference(),
            FoldBatchMatmulReshapes(),
            FuseAttention(),
            t.EliminateCommonSubexpr(),
            FoldConvEpilogues(precision),
            LegalizeOps(precision),
            t.LiftTransformParams(),
            t.AnnotateTIROpPattern(),
            t.FoldConstant(),
            t.FuseOps(),
            t.FuseTIR(),
            t.DeadCodeElimination(),
        ],
        name="legalize",
    )
