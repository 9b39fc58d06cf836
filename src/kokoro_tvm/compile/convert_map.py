"""Every torch/TVM workaround the pipeline needs, in one place, each naming the upstream limit.

They are installed only through public hooks: ``from_exported_program(custom_convert_map=...)``
here, ``torch.library`` in ``lstm_op``. Model-side rewrites (``torch.where`` for boolean
IndexPut, explicit random draws) live in ``components`` because they are the model's graph.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

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
    lo = _INT_LO if lo is None or math.isinf(lo) else math.ceil(lo)
    hi = _INT_HI if hi is None or math.isinf(hi) else math.floor(hi)
    return importer.block_builder.emit(relax.op.clip(x, lo, hi))


def slice_in_bounds(node, importer) -> relax.Expr:
    """``aten.slice`` whose bounds or input length are symbolic (bounded-length exports), emitted
    in bounds when torch's own shape analysis says it is.

    TVM 0.27 imports every slice as ``strided_slice`` without ``assume_inbound``, so the output
    extent of a symbolic slice is clipped: ``x[..., :1]`` of an n-long signal gets ``min(1, n)``,
    and expanding it fails ("broadcast_to expects the input tensor shape is broadcastable");
    ALBERT's ``position_ids[:, :n]`` of a 512 buffer gets ``min(max(if_then_else(n < 0, n + 512,
    n), 0), 512)``, which ``LiftTransformParams`` cannot re-infer ("Cannot find the FInferType
    attribute registered to op: prim.if_then_else"). When torch's output size is exactly
    ``end - start`` (negative and open bounds taken against the length), that is the slice,
    with ``assume_inbound=True``; static slices and anything else take the stock converter.
    """
    import sympy
    import torch
    from tvm import tirx

    x_node = node.args[0]
    dim, start, end, step = [*node.args[1:], *(0, None, None, 1)[len(node.args) - 1 :]]
    x_val, out_val = x_node.meta.get("val"), node.meta.get("val")
    if step != 1 or x_val is None or out_val is None:
        return importer._slice(node)
    dim %= x_val.dim()
    x = importer.env[x_node]
    length = importer.shape_of(x)[dim]
    if not any(isinstance(v, torch.fx.Node) for v in (start, end)) and isinstance(
        length, tirx.IntImm
    ):
        return importer._slice(node)

    def torch_expr(v) -> sympy.Expr:
        return sympy.sympify(v.node.expr) if isinstance(v, torch.SymInt) else sympy.Integer(int(v))

    def bound(v, default: int):
        """(torch's sympy expression, the Relax PrimExpr) of one slice bound, normalised."""
        if isinstance(v, torch.fx.Node):
            return torch_expr(v.meta["val"]), importer.env[v]
        v = default if v is None else int(v)
        if v >= sys.maxsize:  # open end
            return torch_expr(x_val.shape[dim]), length
        if v < 0:
            return torch_expr(x_val.shape[dim]) + v, length + v
        return sympy.Integer(v), v

    (b_torch, b_relax), (e_torch, e_relax) = bound(start, 0), bound(end, sys.maxsize)
    if sympy.simplify(torch_expr(out_val.shape[dim]) - (e_torch - b_torch)) != 0:
        return importer._slice(node)
    return importer.block_builder.emit(
        relax.op.strided_slice(x, [dim], [b_relax], [e_relax], [1], assume_inbound=True)
    )


def convert_map(lstm_strategy: str) -> dict[str, Callable]:
    """The ``custom_convert_map`` for ``from_exported_program``: our LSTM op plus the fixes
    above."""
    from .lstm_lowering import lstm_convert_map

    return {
        "clamp.default": clamp_finite_for_ints,
        "slice.Tensor": slice_in_bounds,
        **lstm_convert_map(lstm_strategy),
    }
