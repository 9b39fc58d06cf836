"""ALBERT's attention as one kernel: ``softmax(Q K^T [+ mask]) V``, scores kept in L1.

``torch.export`` decomposes ``scaled_dot_product_attention`` into a matmul for the scores, the
mask's add, a softmax, PyTorch's "safe softmax" guard (a row whose scores are all ``-inf`` gives
zeros, not NaN: ``equal``, ``max``, ``where``) and a second matmul. Legalized, that is four kernels
per layer, each a pass over the ``heads x n x n`` scores in memory (12 MB per layer at 512 tokens),
the exp polynomial computed twice per score by the softmax's sum and normalization, and the
guard's own pass. ``FuseAttention`` replaces the chain by one ``call_tir`` to ``attention_kernel``:
per head and block of ``ROWS`` query rows, it computes the block's scores into a row buffer,
takes each row's softmax in place (exp once), and multiplies by ``V``, so the scores never leave
L1 (docs/measurements.md, "Fused attention kernel").

The rewrite only matches the exact decomposition (the guard included, which the kernel keeps:
an all ``-inf`` row gives zeros) on float32 ``[1, H, n, D]`` operands whose ``D`` is a whole number
of ``COLS``; anything else is left to the schedule rules.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.script import tirx as T

from . import vector_math
from .hand_written import FLOPS
from .symbolic import same_shape as _same
from .symbolic import static_dim as _static
from .symbolic import upper_bounds

#: Query rows per task: ``ROWS x COLS`` accumulators are 12 AVX2 registers (6 AVX-512), with a
#: broadcast and two loads per step, within AVX2's 16.
ROWS = 6
#: Score columns (and output columns of ``P V``) per register tile: two AVX2 vectors, one AVX-512.
COLS = 16

_OPS = {
    name: tvm.ir.Op.get(f"relax.{name}")
    for name in (
        "matmul",
        "add",
        "nn.softmax",
        "where",
        "full_like",
        "equal",
        "logical_not",
        "astype",
        "max",
        "broadcast_to",
    )
}


def attention_kernel(heads: int, dim: int, max_len: int, masked: bool) -> tirx.PrimFunc:
    """TIR kernel ``(q [1,H,n,D], kt [1,H,D,n], v [1,H,n,D][, mask [1,1,n,n]]) -> o [1,H,n,D]``
    for any ``n <= max_len``.

    One parallel task per head and block of ``ROWS`` query rows (the last block's missing rows
    repeat row ``n - 1``: the same values written twice, no tail code). Scores: ``ROWS x COLS``
    accumulators over ``D``, the last partial block of columns too (its keys from a zero-padded
    copy: no vector loads past ``n``). Each row's softmax in place: max, ``e = exp(s - max)`` with
    its sum, ``e / sum`` (PyTorch's order); a row whose max is ``-inf`` becomes zeros (the
    safe-softmax guard). Then ``P V`` with ``ROWS x COLS`` accumulators per ``COLS`` output columns.
    """
    if dim % COLS:
        raise ValueError(
            f"attention_kernel needs a head size that is a multiple of {COLS}, got {dim}"
        )
    width = -(-max_len // COLS) * COLS
    neg_inf = T.float32("-inf")

    @T.macro
    def product(acc, a, a_row0, a_last, b, b_col0, depth):
        """``acc[r, c] = sum_k a[min(a_row0 + r, a_last), k] * b[k, b_col0 + c]``: the register tile
        of both products (``Q K^T`` and ``P V``)."""
        for r in T.unroll(ROWS):
            for c in T.vectorized(COLS):
                acc[r, c] = T.float32(0)
        for k in range(depth):
            for r in T.unroll(ROWS):
                for c in T.vectorized(COLS):
                    acc[r, c] = acc[r, c] + a[T.min(a_row0 + r, a_last), k] * b[k, b_col0 + c]

    @T.macro
    def body(q, kt, v, mask, o, n):
        blocks = (n + ROWS - 1) // ROWS
        for task in T.parallel(heads * blocks):
            s = T.alloc_buffer((ROWS, width), "float32", scope="local")
            acc = T.alloc_buffer((ROWS, COLS), "float32", scope="local")
            tail = T.alloc_buffer((dim, COLS), "float32", scope="local")
            red = T.alloc_buffer((COLS,), "float32", scope="local")
            mx = T.alloc_buffer((ROWS,), "float32", scope="local")
            total = T.alloc_buffer((ROWS,), "float32", scope="local")
            h = task // blocks
            r0 = task % blocks * ROWS
            main = n // COLS * COLS
            # head h of each operand as a matrix
            q_h = T.decl_buffer((n, dim), "float32", data=q.data, elem_offset=h * n * dim)
            kt_h = T.decl_buffer((dim, n), "float32", data=kt.data, elem_offset=h * dim * n)
            v_h = T.decl_buffer((n, dim), "float32", data=v.data, elem_offset=h * n * dim)
            for jb in range(n // COLS):
                product(acc, q_h, r0, n - 1, kt_h, jb * COLS, dim)
                for r in T.unroll(ROWS):
                    for c in T.vectorized(COLS):
                        if masked:
                            s[r, jb * COLS + c] = (
                                acc[r, c] + mask[0, 0, T.min(r0 + r, n - 1), jb * COLS + c]
                            )
                        else:
                            s[r, jb * COLS + c] = acc[r, c]
            if main < n:
                # the last partial block of columns from a zero-padded copy of its keys: the same
                # vector tile, no load past row n of kt (its copy, 4 KB, costs less than scalar
                # FMAs)
                for k, c in T.grid(dim, COLS):
                    tail[k, c] = T.if_then_else(
                        main + c < n, kt_h[k, T.min(main + c, n - 1)], T.float32(0)
                    )
                product(acc, q_h, r0, n - 1, tail, 0, dim)
                for r in T.unroll(ROWS):
                    for c in range(n - main):
                        if masked:
                            s[r, main + c] = acc[r, c] + mask[0, 0, T.min(r0 + r, n - 1), main + c]
                        else:
                            s[r, main + c] = acc[r, c]
            for r in range(ROWS):
                for c in T.vectorized(COLS):
                    red[c] = neg_inf
                for jb in range(n // COLS):
                    for c in T.vectorized(COLS):
                        red[c] = T.max(red[c], s[r, jb * COLS + c])
                mx[r] = neg_inf
                for c in range(COLS):
                    mx[r] = T.max(mx[r], red[c])
                for j in range(main, n):
                    mx[r] = T.max(mx[r], s[r, j])
                for c in T.vectorized(COLS):
                    red[c] = T.float32(0)
                for jb in range(n // COLS):
                    for c in T.vectorized(COLS):
                        s[r, jb * COLS + c] = vector_math.exp(s[r, jb * COLS + c] - mx[r])
                        red[c] = red[c] + s[r, jb * COLS + c]
                total[r] = T.float32(0)
                for c in range(COLS):
                    total[r] = total[r] + red[c]
                for j in range(main, n):
                    s[r, j] = vector_math.exp(s[r, j] - mx[r])
                    total[r] = total[r] + s[r, j]
                for jb in range(n // COLS):
                    for c in T.vectorized(COLS):
                        s[r, jb * COLS + c] = T.Select(
                            mx[r] == neg_inf, T.float32(0), s[r, jb * COLS + c] / total[r]
                        )
                for j in range(main, n):
                    s[r, j] = T.Select(mx[r] == neg_inf, T.float32(0), s[r, j] / total[r])
            for cb in range(dim // COLS):
                product(acc, s, 0, ROWS - 1, v_h, cb * COLS, n)
                for r in T.unroll(ROWS):
                    for c in T.vectorized(COLS):
                        o[0, h, T.min(r0 + r, n - 1), cb * COLS + c] = acc[r, c]

    if masked:

        @T.prim_func(private=True)
        def attention(
            var_q: T.handle, var_kt: T.handle, var_v: T.handle, var_mask: T.handle, var_o: T.handle
        ):
            n = T.int64()
            T.func_attr({"tirx.noalias": True, FLOPS: 4 * heads * dim * n * n})
            q = T.match_buffer(var_q, (1, heads, n, dim), "float32")
            kt = T.match_buffer(var_kt, (1, heads, dim, n), "float32")
            v = T.match_buffer(var_v, (1, heads, n, dim), "float32")
            mask = T.match_buffer(var_mask, (1, 1, n, n), "float32")
            o = T.match_buffer(var_o, (1, heads, n, dim), "float32")
            body(q, kt, v, mask, o, n)

        return attention

    @T.prim_func(private=True)
    def attention_unmasked(var_q: T.handle, var_kt: T.handle, var_v: T.handle, var_o: T.handle):
        n = T.int64()
        T.func_attr({"tirx.noalias": True, FLOPS: 4 * heads * dim * n * n})
        q = T.match_buffer(var_q, (1, heads, n, dim), "float32")
        kt = T.match_buffer(var_kt, (1, heads, dim, n), "float32")
        v = T.match_buffer(var_v, (1, heads, n, dim), "float32")
        o = T.match_buffer(var_o, (1, heads, n, dim), "float32")
        body(q, kt, v, None, o, n)

    return attention_unmasked


def _scalar(expr: relax.Expr) -> float | None:
    """The value of a scalar constant, or None."""
    if not isinstance(expr, tvm.ir.expr.Constant):
        return None
    data = expr.value.numpy()
    return float(data) if data.size == 1 else None


@mutator
class _FuseAttention(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, bindings: dict, bounds: dict[str, int]) -> None:
        super().__init__(mod)
        self.bindings = bindings
        self.bounds = bounds
        self.kernels: dict[tuple, relax.GlobalVar] = {}

    def _call(self, expr: relax.Expr, op: str) -> relax.Call | None:
        """The call of ``op`` that ``expr`` (a variable) is bound to, or None."""
        value = self.bindings.get(expr) if isinstance(expr, relax.Var) else None
        return value if isinstance(value, relax.Call) and value.op.same_as(_OPS[op]) else None

    def _unbroadcast(self, expr: relax.Expr) -> relax.Expr:
        """``expr`` without the identity ``broadcast_to`` that torch's matmul decomposition adds."""
        while (call := self._call(expr, "broadcast_to")) is not None:
            inner = call.args[0]
            if not _same(list(getattr(inner.ty, "shape", None) or []), list(call.ty.shape)):
                break
            expr = inner
        return expr

    def _is_guard(self, cond: relax.Expr, scores: relax.Expr) -> bool:
        """``cond`` is safe softmax's "every score of the row is -inf":
        ``not(bool(max(int8(not(scores == -inf)), -1, keepdims)))``."""
        chain, expr = [], cond
        for op in ("logical_not", "astype", "max", "astype", "logical_not", "equal"):
            call = self._call(expr, op)
            if call is None:
                return False
            chain.append(call)
            expr = call.args[0]
        row_max, eq = chain[2], chain[5]
        if not (eq.args[0].same_as(scores) and _scalar(eq.args[1]) == -math.inf):
            return False
        axes = [int(a) for a in row_max.attrs.axis] if row_max.attrs.axis is not None else []
        ndim = len(scores.ty.shape)
        return bool(row_max.attrs.keepdims) and [a % ndim for a in axes] == [ndim - 1]

    def _match(self, probs: relax.Expr):
        """``(q, kt, mask or None)`` when ``probs`` is the guarded softmax of
        ``q @ kt [+ mask]``."""
        where = self._call(self._unbroadcast(probs), "where")
        if where is None:
            return None
        cond, zeros, soft = where.args
        softmax = self._call(soft, "nn.softmax")
        fill = self._call(zeros, "full_like")
        if softmax is None or fill is None or _scalar(fill.args[1]) != 0.0:
            return None
        scores = softmax.args[0]
        if int(softmax.attrs.axis) % len(scores.ty.shape) != len(
            scores.ty.shape
        ) - 1 or not self._is_guard(cond, scores):
            return None
        add = self._call(scores, "add")
        product = self._call(scores if add is None else add.args[0], "matmul")
        if product is None:
            return None
        return (
            self._unbroadcast(product.args[0]),
            self._unbroadcast(product.args[1]),
            None if add is None else add.args[1],
        )

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        new = super().visit_call_(call)
        if not call.op.same_as(_OPS["matmul"]):
            return new
        found = self._match(call.args[0])
        if found is None:
            return new
        q, kt, mask = found
        v = self._unbroadcast(call.args[1])
        shapes = [list(getattr(e.ty, "shape", None) or []) for e in (q, kt, v, call)]
        dtypes = {str(e.ty.dtype) for e in (q, kt, v, call) + ((mask,) if mask is not None else ())}
        if dtypes != {"float32"} or any(len(s) != 4 for s in shapes):
            return new
        (_, heads, n, dim), ks, vs, os_ = shapes
        heads, dim = _static(heads), _static(dim)
        if (
            heads is None
            or dim is None
            or dim % COLS
            or _static(shapes[0][0]) != 1
            or not (
                _same(ks, [1, heads, dim, n])
                and _same(vs, [1, heads, n, dim])
                and _same(os_, [1, heads, n, dim])
            )
        ):
            return new
        if mask is not None and not _same(
            list(getattr(mask.ty, "shape", None) or []), [1, 1, n, n]
        ):
            return new
        max_len = _static(n) if _static(n) is not None else self.bounds.get(str(n))
        if max_len is None:
            return new  # no bound on the length: the row buffer could not be sized
        key = (heads, dim, max_len, mask is not None)
        if key not in self.kernels:
            name = f"attention_h{heads}_d{dim}_n{max_len}" + ("_masked" if mask is not None else "")
            self.kernels[key] = self.builder_.add_func(attention_kernel(*key), name)
        args = [self.visit_expr(e) for e in (q, kt, v) + ((mask,) if mask is not None else ())]
        return relax.call_tir(self.kernels[key], args, relax.TensorType(call.ty.shape, "float32"))


def fuse_attention(mod):
    """``softmax(q @ kt [+ mask])`` with PyTorch's safe-softmax guard, times ``v`` -> one kernel."""
    func = mod["main"]
    mutator_ = _FuseAttention(mod, relax.analysis.get_var2val(func), upper_bounds(mod))
    func = mutator_.visit_expr(func)
    out = mutator_.builder_.get()
    out["main"] = func
    return relax.transform.DeadCodeElimination()(out)
