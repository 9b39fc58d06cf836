"""Batched matmuls kept in their batch rank, so that what follows them fuses into their kernel.

``torch.matmul`` on 4-D tensors reaches ``torch.export`` decomposed as ``reshape -> bmm ->
reshape`` (ALBERT's attention: ``[1, 12, n, 64] @ [1, 12, 64, n]`` becomes a ``[12, n, 64]``
product reshaped back to ``[1, 12, n, n]``). In a bounded module a reshape stays a Relax op
(``symbolic.legalize_map``), which ``FuseOps`` does not fuse across: the attention mask's add then
ran as a kernel of its own, one more pass over the ``12 n^2`` scores (docs/measurements.md,
"4-D batch matmul").
Relax's ``matmul`` broadcasts over leading axes, so the reshapes can go: the product is taken in
the 4-D shape and the add becomes its epilogue.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from .symbolic import same_shape as _same

_MATMUL = tvm.ir.Op.get("relax.matmul")
_RESHAPE = tvm.ir.Op.get("relax.reshape")


def _shape(expr: relax.Expr) -> list | None:
    shape = getattr(expr.ty, "shape", None)
    return None if shape is None else list(shape)


@mutator
class _FoldReshapes(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, bindings: dict) -> None:
        super().__init__(mod)
        self.bindings = bindings

    def _unreshaped(self, expr: relax.Expr) -> relax.Expr | None:
        """The tensor that ``expr`` (a variable bound to a reshape) reshapes, or None."""
        value = self.bindings.get(expr) if isinstance(expr, relax.Var) else None
        if isinstance(value, relax.Call) and value.op.same_as(_RESHAPE):
            return value.args[0]
        return None

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        new = super().visit_call_(call)
        if not call.op.same_as(_RESHAPE) or not isinstance(call.args[0], relax.Var):
            return new
        product = self.bindings.get(call.args[0])
        if not (isinstance(product, relax.Call) and product.op.same_as(_MATMUL)):
            return new
        a3, b3 = product.args
        a, b = self._unreshaped(a3), self._unreshaped(b3)
        shapes = (
            [_shape(e) for e in (a, b, call, a3, b3, product)]
            if a is not None and b is not None
            else [None]
        )
        if any(s is None for s in shapes):
            return new
        sa, sb, out, sa3, sb3, sp = shapes
        # only the batch axes were merged: same matrices, same batch axes on all three
        if not (
            len(sa) == len(sb) == len(out) > len(sa3) == len(sb3) == len(sp) == 3
            and _same(sa[-2:], sa3[-2:])
            and _same(sb[-2:], sb3[-2:])
            and _same(out[-2:], sp[-2:])
            and _same(sa[:-2], sb[:-2])
            and _same(sa[:-2], out[:-2])
        ):
            return new
        return relax.op.matmul(
            self.visit_expr(a), self.visit_expr(b), out_dtype=product.attrs.out_dtype
        )


def fold_batch_matmul_reshapes(mod):
    """``reshape(matmul(reshape(a), reshape(b)))`` that only merged batch axes ->
    ``matmul(a, b)``."""
    func = mod["main"]
    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    out["main"] = _FoldReshapes(mod, relax.analysis.get_var2val(func)).visit_expr(func)
    return relax.transform.DeadCodeElimination()(out)
