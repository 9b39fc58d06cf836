"""Every torch/TVM workaround the pipeline needs, in one place, each naming the upstream limit.

They are installed only through public hooks: ``from_exported_program(custom_convert_map=...)``
here, ``torch.library`` in ``lstm_op``. Model-side rewrites (``torch.where`` for boolean
IndexPut, explicit random draws) live in ``components`` because they are the model's graph.
"""

from __future__ import annotations

import math
from typing import Callable

from tvm import relax

# int64 bounds for clip: finite, and wide enough to never bind an index.
_INT_LO, _INT_HI = -(2**31), 2**31 - 1


def clamp_finite_for_ints(node, importer) -> relax.Expr:
    """TVM 0.27 imports ``clamp`` on int64 (from decomposed ``upsample_linear1d`` index math) as
    ``R.clip(x, -inf, hi)``; LegalizeOps then fails with "Cannot convert infinity to BigInt".
    For integer inputs with scalar bounds we emit finite bounds; everything else takes the
    stock converter."""
    args = importer.retrieve_args(node)
    x = args[0]
    lo = args[1] if len(args) > 1 else node.kwargs.get("min")
    hi = args[2] if len(args) > 2 else node.kwargs.get("max")
    dtype = str(x.ty.dtype)
    scalar = all(v is None or isinstance(v, (int, float)) for v in (lo, hi))
    if not (dtype.startswith("int") and scalar):
        return importer._clamp(node)
    lo = _INT_LO if lo is None or math.isinf(lo) else int(math.ceil(lo))
    hi = _INT_HI if hi is None or math.isinf(hi) else int(math.floor(hi))
    return importer.block_builder.emit(relax.op.clip(x, lo, hi))


def convert_map(lstm_strategy: str) -> dict[str, Callable]:
    """The ``custom_convert_map`` for ``from_exported_program``: our LSTM op plus the fixes above."""
    from .lstm_lowering import lstm_convert_map

    return {"clamp.default": clamp_finite_for_ints, **lstm_convert_map(lstm_strategy)}
