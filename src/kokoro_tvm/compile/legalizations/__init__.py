"""Our own legalizations, one per file, for ``LegalizeOps(customize_legalize_map=...)``
(TVM's public hook): each replaces TOPI's lowering of one Relax op where TOPI's wastes the
machine (see each module), and falls back to TOPI's outside the cases it handles. The emitted
ops are ordinary Relax ops or TE computes that ``LegalizeOps`` and the schedule rules take as
any other. The vector-math ones (``exp``, ``tanh``, ``sigmoid``, ``softmax``, ``gelu_tanh``)
live in ``compile.vector_math``, which the LSTM lowering shares; their float64 forms (the
harmonic source's and the STFT's) in ``compile.vector_math64``.
"""

from __future__ import annotations

from ...spec import FP32, PRECISIONS
from .. import vector_math, vector_math64
from . import conv1d, conv1d_bf16, conv1d_transpose, instance_norm, power, sin

LEGALIZE_MAP = {
    **conv1d_transpose.LEGALIZATIONS,
    **sin.LEGALIZATIONS,
    **conv1d.LEGALIZATIONS,
    **power.LEGALIZATIONS,
    **instance_norm.LEGALIZATIONS,
    **vector_math.LEGALIZATIONS,
    **vector_math64.LEGALIZATIONS,
}


def legalize_map(precision: str = FP32) -> dict:
    """``LEGALIZE_MAP`` for a library of ``precision`` (``spec.PRECISIONS``): bf16 computes the
    convs ``bf16.method`` takes with bf16 products (``conv1d_bf16``), everything else as fp32."""
    if precision not in PRECISIONS:
        raise ValueError(
            f"unknown precision {precision!r}; valid precisions: {', '.join(PRECISIONS)}"
        )
    return LEGALIZE_MAP if precision == FP32 else {**LEGALIZE_MAP, **conv1d_bf16.LEGALIZATIONS}
