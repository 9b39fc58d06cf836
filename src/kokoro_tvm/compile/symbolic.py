"""Modules with a symbolic length (bounded libraries, ``Shapes.BOUNDED``): what the compile flow
does differently for them, in one place. Every function here returns a static module unchanged, so
padded libraries are built exactly as before.

A bounded export's ``main`` carries ``tir_var_upper_bound`` (the importer records the ``Dim``'s
max), which sizes memory planning and the schedule's choices at the bucket.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx


def upper_bounds(mod) -> dict[str, int]:
    """``main``'s ``tir_var_upper_bound`` by variable name; ``{}`` for a static module."""
    main = next((f for gv, f in mod.functions.items() if gv.name_hint == "main"), None)
    attrs = (main.attrs or {}) if main is not None else {}
    return {str(k): int(v) for k, v in dict(attrs.get("tir_var_upper_bound", {})).items()}


def is_bounded(mod) -> bool:
    return bool(upper_bounds(mod))


def static_dim(dim) -> int | None:
    """A shape dimension's value when it is a constant (an ``IntImm`` or an int), None when it is
    symbolic."""
    return int(dim) if isinstance(dim, (int, tirx.IntImm)) else None


def same_shape(a: list, b: list) -> bool:
    """The two shapes are provably equal, dimension by dimension (symbolic ones included)."""
    analyzer = tvm.sym.Analyzer()
    return len(a) == len(b) and all(analyzer.can_prove_equal(x, y) for x, y in zip(a, b))


def _keep_reshape(bb, call):
    return call


def legalize_map(base: dict[str, Any], mod) -> dict[str, Any]:
    """``base``, and for a bounded module ``relax.reshape`` kept as an op: TVM 0.27 legalizes a
    reshape to a copy kernel, which ``RewriteDataflowReshape`` turns back into a view only when
    ``has_reshape_pattern`` proves it, and it cannot on a symbolic shape (every reshape a copy).
    ``reshapes_as_views`` lowers the kept op instead."""
    return {**base, "relax.reshape": _keep_reshape} if is_bounded(mod) else base


def reshapes_as_views(mod):
    """For a bounded module, before the schedule pass: reshapes become views, and so do the
    kernels that only reshape; then the module leaves dataflow form. Static modules: unchanged.

    ``tvm.compile`` runs ``RewriteDataflowReshape``, whose ``HasReshapePattern`` fails a check
    on a transpose over a symbolic extent instead of answering "no", and the build stops (the
    strided-conv legalization's ``[1, 22, 20 n + 1, 6] -> [1, 22, 6, 20 n + 1]``: "Check failed:
    (CanProveDivisible(info.padding_factor, divisor)) is false"). This does the same rewrite with
    that failure read as "not a reshape"; out of dataflow form, the pipeline's own run has
    nothing left to visit. A reshape becomes ``vm.builtin.reshape``, the call TVM's
    ``LowerRuntimeBuiltin`` emits for it, so the pipeline's ``LegalizeOps`` cannot copy it.
    """
    import tvm
    from tvm import relax, tirx
    from tvm.relax.expr_functor import PyExprMutator, mutator

    if not is_bounded(mod):
        return mod
    call_tir, reshape = tvm.ir.Op.get("relax.call_tir"), tvm.ir.Op.get("relax.reshape")
    reshapes = {
        gv.name_hint: _is_reshape(f)
        for gv, f in mod.functions.items()
        if isinstance(f, tirx.PrimFunc)
    }

    @mutator
    class Rewriter(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if isinstance(call.op, tvm.ir.Op) and call.op.same_as(reshape):
                return relax.op.call_pure_packed(
                    "vm.builtin.reshape", call.args[0], call.args[1], ty_args=call.ty
                )
            if not (
                isinstance(call.op, tvm.ir.Op)
                and call.op.same_as(call_tir)
                and reshapes.get(call.args[0].name_hint)
            ):
                return call
            prim = mod[call.args[0]]
            read = [
                a
                for a, p in zip(call.args[1].fields, prim.params)
                if isinstance(a.ty, relax.TensorType) and _reads(prim, p)
            ]
            if len(read) != 1 or str(read[0].ty.dtype) != str(call.ty.dtype):
                return call
            if not tvm.sym.Analyzer().can_prove_equal(
                _numel(read[0].ty.shape), _numel(call.ty.shape)
            ):
                return call
            return relax.op.call_pure_packed(
                "vm.builtin.reshape", read[0], _shape_expr(call.ty.shape), ty_args=call.ty
            )

    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            out[gv] = Rewriter(mod).visit_expr(func)
    return relax.transform.ToNonDataflow()(relax.transform.DeadCodeElimination()(out))


def _is_reshape(prim) -> bool:
    from tvm import relax

    try:
        return bool(relax.analysis.has_reshape_pattern(prim))
    except Exception:
        return False


def _reads(prim, param) -> bool:
    """Whether the PrimFunc's body reads the buffer parameter ``param``."""
    from tvm import tirx

    data = getattr(param, "data", param)
    return any(v.same_as(param) or v.same_as(data) for v in tirx.analysis.undefined_vars(prim.body))


def _dims(shape) -> list:
    return list(shape.values) if hasattr(shape, "values") else list(shape)


def _shape_expr(shape):
    from tvm import relax

    return shape if isinstance(shape, relax.ShapeExpr) else relax.ShapeExpr(_dims(shape))


def _numel(shape):
    out = 1
    for d in _dims(shape):
        out = out * d
    return out
