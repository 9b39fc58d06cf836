"""Pack the weights of linear layers into column panels, once, at load time.

``nn.Linear`` reaches Relax as ``matmul(x, permute_dims(W))``: a ``[K, N]`` weight that the
matmul rule streams along ``N``. Each register tile reads a ``K x span`` panel of it, one short
run per row, ``4N`` bytes apart (8 KB for ALBERT's FFN: a new page every other step), so the
matmuls ran at a third of the CPU's peak. Stored as ``[N / span, K, span]`` the panel is one
contiguous run, and the same rule runs about twice as fast (ALBERT's linears at 64 tokens:
``python benchmarks/kernels.py --ops``). The packing only touches parameters, so
``LiftTransformParams`` moves it into ``main_transform_params``, run once when a library loads.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from . import passes

#: Panel width: 4 AVX2 vectors or 2 AVX-512 vectors, the column span of the matmul rule's tile
#: on either target, so packing needs no target (legalize runs once for every target).
SPAN = 32

_MATMUL = tvm.ir.Op.get("relax.matmul")


def _static_shape(expr: relax.Expr) -> list[int] | None:
    shape = getattr(expr.ty, "shape", None)
    if shape is None:
        return None
    dims = list(shape)
    return [int(d) for d in dims] if all(isinstance(d, tvm.tirx.IntImm) for d in dims) else None


def _shape(expr: relax.Expr) -> list | None:
    """Static dims as ints, symbolic ones as PrimExprs; None without a known shape."""
    shape = getattr(expr.ty, "shape", None)
    if shape is None:
        return None
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in shape]


def _is_one(d) -> bool:
    return isinstance(d, int) and d == 1


@mutator
class _PackLinear(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, param_only: set[relax.Var]):
        super().__init__(mod)
        self.param_only = param_only

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # noqa: D102
        new = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.same_as(_MATMUL)):
            return new
        x, w = call.args
        # the activation's row count may be symbolic (a bounded-length export); the rest is static
        xs, ws, out = _shape(x), _static_shape(w), _shape(call)
        if (not isinstance(w, relax.Var) or w not in self.param_only or None in (xs, ws, out)
                or len(ws) < 2 or len(xs) < 2 or any(not _is_one(d) for d in ws[:-2] + xs[:-2])
                or not isinstance(xs[-1], int) or ws[-1] % SPAN or ws[-1] == SPAN):
            return new  # only one [M, K] x [K, N] product (batch axes of 1) by a parameter
        m, k, n = xs[-2], ws[-2], ws[-1]
        bb = self.builder_
        nx, nw = new.args
        # W[k, j] -> Wp[j // SPAN, k, j % SPAN]: depends on parameters only, hence lifted
        wp = bb.emit(relax.op.permute_dims(relax.op.reshape(nw, (k, n // SPAN, SPAN)), [1, 0, 2]))
        y = bb.emit(relax.op.matmul(relax.op.reshape(nx, (1, m, k)), wp))  # [N / SPAN, M, SPAN]
        return relax.op.reshape(relax.op.permute_dims(y, [1, 0, 2]), out)


@tvm.transform.module_pass(opt_level=0, name="PackLinearWeights")
def pack_linear_weights(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
    """Rewrite ``main``'s matmuls by parameter-only ``[K, N]`` weights (N a multiple of ``SPAN``)
    to read the weight packed as ``[N / SPAN, K, SPAN]``. "Parameter-only" is what
    ``LiftTransformParams`` will lift: computable from the parameters after ``num_input``."""
    func = mod["main"]
    param_only = set(relax.analysis.computable_at_compile_time(func))
    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    out["main"] = _PackLinear(mod, param_only).visit_expr(func)
    return out



@passes.register("legalize", "PackLinearWeights")
def _pack_linear_weights(mod, _ctx: passes.Context):
    """Linear weights packed as ``[N / SPAN, K, SPAN]`` for the matmul rule's register tile."""
    return pack_linear_weights(mod)
