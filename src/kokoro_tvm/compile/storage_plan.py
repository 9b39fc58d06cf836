"""One storage for tensors of any dtype whose lifetimes do not overlap.

TVM 0.27's ``StaticPlanBlockMemory`` reuses a storage only for tensors of the storage's own dtype
(its free pool is keyed by scope and dtype). The decoder's harmonic source and inverse STFT are
float64 while everything between them is float32, so their storages (a few tensors of
``frames x 600 x 9`` samples) stayed allocated beside the generator's float32 tensors for the
whole call: about a fifth of a long call's memory, and of the page faults of its first call.

``share_storage`` runs after that pass, on its output: it reads each planned tensor's lifetime
(from its ``alloc_tensor`` to the last use of it or of any value that may alias it) and its size
at its dims' upper bounds, then assigns the tensors to storages again, any dtype with any:
largest first, each into the first storage holding no tensor whose lifetime overlaps its own.
Storages it cannot read whole (a symbolic size, an offset, another scope or device, a use other
than a plain ``alloc_tensor`` binding) stay as they were, and so does a function with control
flow or a dataflow block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import tvm
from tvm import relax


@dataclass
class _Tensor:
    binding: int  # where its alloc_tensor is bound
    nbytes: int  # at the largest shape its symbolic dims allow
    dtype: str
    last_use: int = -1


class _Plan(NamedTuple):
    replaced: set[int]  # binding indices of the alloc_storage calls it replaces
    storage_of: dict[int, int]  # alloc_tensor binding index -> new storage number
    sizes: list[int]  # bytes of each new storage
    dtypes: list[str]  # each new storage's dtype hint, its largest tensor's (the VM allocates
    # bytes: lowering makes every hint uint8)


def _op(name: str) -> tvm.ir.Op:
    return tvm.ir.Op.get(name)


def _call_of(value, op: tvm.ir.Op) -> relax.Call | None:
    return value if isinstance(value, relax.Call) and value.op.same_as(op) else None


def _const_int(expr) -> int | None:
    if isinstance(expr, relax.ShapeExpr) and len(expr.values) == 1:
        v = expr.values[0]
        return int(v) if isinstance(v, tvm.tirx.IntImm) else None
    return int(expr) if isinstance(expr, tvm.tirx.IntImm) else None


def _upper_bytes(call: relax.Call, bounds: tvm.sym.Analyzer, storage_bytes: int) -> int:
    """A tensor's bytes at the largest shape its symbolic dims reach within their bounds; its
    storage's (which TVM sized to hold it) where a dim has no finite bound."""
    shape = call.args[2]
    if not isinstance(shape, relax.ShapeExpr):
        return storage_bytes
    dtype = tvm.runtime.DataType(str(call.args[3].value))
    n = (dtype.bits * dtype.lanes + 7) // 8
    for dim in shape.values:
        bound = bounds.const_int_bound(dim)
        if bound.max_value >= bound.POS_INF:
            return storage_bytes
        n *= bound.max_value
    return min(n, storage_bytes)


def _plan(bindings: list, body, bounds: tvm.sym.Analyzer) -> _Plan | None:
    """The new assignment of planned tensors to storages, or None where it saves nothing."""
    alloc_storage = _op("relax.memory.alloc_storage")
    alloc_tensor = _op("relax.memory.alloc_tensor")
    storages: dict[relax.Var, tuple[int, int]] = {}  # var -> (its binding, its bytes)
    refused: set[relax.Var] = set()
    tensors: dict[int, _Tensor] = {}
    on: dict[int, relax.Var] = {}  # tensor -> its storage
    roots: dict[relax.Var, frozenset[int]] = {}  # var -> the planned tensors it may alias

    def use(expr, at: int) -> frozenset[int]:
        found: set[int] = set()
        for var in relax.analysis.free_vars(expr):
            found |= roots.get(var, frozenset())
        for t in found:
            tensors[t].last_use = max(tensors[t].last_use, at)
        return frozenset(found)

    for i, b in enumerate(bindings):
        value = b.value
        call = _call_of(value, alloc_storage) if isinstance(b, relax.VarBinding) else None
        if call is not None:
            size, device, scope = _const_int(call.args[0]), _const_int(call.args[1]), call.args[2]
            if size is not None and device == 0 and str(scope.value) == "global":
                storages[b.var] = (i, size)
            continue
        call = _call_of(value, alloc_tensor) if isinstance(b, relax.VarBinding) else None
        if call is not None and call.args[0] in storages:
            storage = call.args[0]
            if _const_int(call.args[1]) != 0:  # an offset: leave this storage as it is
                refused.add(storage)
            nbytes = _upper_bytes(call, bounds, storages[storage][1])
            tensors[i] = _Tensor(i, nbytes, str(call.args[3].value))
            on[i] = storage
            roots[b.var] = frozenset([i])
            continue
        refused.update(v for v in relax.analysis.free_vars(value) if v in storages)
        # conservatively, a binding may alias every planned tensor its value names
        roots[b.var] = use(value, i)
    use(body, len(bindings))  # what the function returns lives to its end
    refused.update(v for v in relax.analysis.free_vars(body) if v in storages)
    for t in [t for t, storage in on.items() if storage in refused]:
        del tensors[t]
    replaced = {i: size for var, (i, size) in storages.items() if var not in refused}
    if len(replaced) < 2:
        return None
    # Largest first, each into the first storage none of whose tensors it overlaps: a storage is
    # never smaller than a tensor that comes after it, so none grows, and the largest tensors
    # take as many storages as overlap at once (the "greedy by size" of TFLite's planner).
    sizes: list[int] = []
    dtypes: list[str] = []
    spans: list[list[tuple[int, int]]] = []  # the (first, last) bindings of each one's tensors
    assign: dict[int, int] = {}
    for t in sorted(tensors.values(), key=lambda t: (-t.nbytes, t.binding)):
        n = next(
            (
                n
                for n, taken in enumerate(spans)
                if all(t.last_use < a or e < t.binding for a, e in taken)
            ),
            None,
        )
        if n is None:
            n = len(sizes)
            sizes.append(t.nbytes)
            dtypes.append(t.dtype)
            spans.append([])
        spans[n].append((t.binding, t.last_use))
        assign[t.binding] = n
    if sum(sizes) >= sum(replaced.values()):
        return None
    return _Plan(set(replaced), assign, sizes, dtypes)


def _bounded(func: relax.Function) -> tvm.sym.Analyzer:
    """An analyzer that knows the ``tir_var_lower_bound`` and ``tir_var_upper_bound`` of each
    symbolic variable the parameters define (as TVM's planner, which bounds only those)."""
    attrs = func.attrs or {}
    lower, upper = (
        {str(k): int(v) for k, v in dict(attrs.get(key, {})).items()}
        for key in ("tir_var_lower_bound", "tir_var_upper_bound")
    )
    analyzer = tvm.sym.Analyzer()
    signature = {
        var.name: var
        for p in func.params
        for var in relax.analysis.definable_tir_vars_in_type(p.ty)
    }
    for var in signature.values():
        if var.name in upper:
            lo, hi = lower.get(var.name, 0), upper[var.name]
            analyzer.bind(
                var, tvm.ir.Range(tvm.tirx.IntImm("int64", lo), tvm.tirx.IntImm("int64", hi + 1))
            )
    return analyzer


def _rewrite(func: relax.Function) -> relax.Function:
    body = func.body
    if not isinstance(body, relax.SeqExpr) or any(
        isinstance(blk, relax.DataflowBlock)
        or any(isinstance(b.value, (relax.If, relax.SeqExpr)) for b in blk.bindings)
        for blk in body.blocks
    ):
        return func
    bindings = [b for blk in body.blocks for b in blk.bindings]
    planned = _plan(bindings, body.body, _bounded(func))
    if planned is None:
        return func
    storage_ty = bindings[min(planned.replaced)].var.ty
    bb = relax.BlockBuilder()  # gives each new call its type
    alloc_tensor = _op("relax.memory.alloc_tensor")
    new_vars: list[relax.Var | None] = [None] * len(planned.sizes)
    out = []
    for i, b in enumerate(bindings):
        if i in planned.replaced:
            continue
        if i in planned.storage_of:
            n = planned.storage_of[i]
            if new_vars[n] is None:
                new_vars[n] = relax.Var(f"shared_storage{n}", storage_ty)
                size = relax.ShapeExpr([tvm.tirx.IntImm("int64", planned.sizes[n])])
                storage = relax.op.memory.alloc_storage(size, 0, "global", planned.dtypes[n])
                out.append(relax.VarBinding(new_vars[n], bb.normalize(storage)))
            call = b.value
            value = bb.normalize(
                relax.Call(
                    alloc_tensor, [new_vars[n], *call.args[1:]], call.attrs, call.ty_args, call.span
                )
            )
            out.append(relax.VarBinding(b.var, value))
            continue
        out.append(b)
    new_body = relax.SeqExpr([relax.BindingBlock(out)], body.body)
    return bb.normalize(
        relax.Function(func.params, new_body, func.ret_ty, func.is_pure, func.attrs, func.span)
    )


def share_storage():
    """The module pass (see the module's docstring): every Relax function, after
    ``StaticPlanBlockMemory``."""

    @tvm.transform.module_pass(opt_level=0, name="ShareStorageAcrossDtypes")
    def _pass(mod, _ctx):
        out = mod.clone()
        for gv, f in mod.functions.items():
            if isinstance(f, relax.Function):
                out.update_func(gv, _rewrite(f))
        return out

    return _pass
