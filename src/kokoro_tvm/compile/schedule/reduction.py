"""Reductions that are not outer products: norm statistics, softmax, sums, ``Q @ K^T``.

Every reduction block is parallelized over its spatial axes (rows of a norm, heads x queries of
attention); spatial blocks around it are inlined where possible and otherwise run as their own
parallel vectorized loops.

A reduction over the contiguous inner axis of its input (the masked instance-norm / AdaIN
statistics ``sum(x * mask, -1)``, ``sum((x - mean)^2 * mask, -1)``) is vectorized with an
rfactor: the axis is split into ``[T / F, F]`` (``F`` = 4, 2 or 1 vectors of lanes) and the ``F``
partial sums become a spatial axis of a per-row ``local`` accumulator (``F / lanes`` vector
registers, independent add chains, vectorized over the whole row), summed across lanes at the end.
An extent that does not divide (the generator's 120m+1 samples) splits by 4 vectors with a
predicated last group, and its partial sums keep their own loop nest (see ``_vectorize_rf_tail``);
other reductions keep a scalar loop (unrolled when short). The summation order changes (lanes-way
partial sums), which is within float32 rounding.
"""

from __future__ import annotations

from tvm import s_tir, tirx

from .analysis import (
    CPU,
    SYMBOLIC_EXTENT,
    RuleMismatch,
    extent_of,
    linear_unit,
    new_schedule,
    root_blocks,
    split_with_tail,
    vars_in,
)
from .common import PARALLEL_MIN, inline_all, parallel_vectorize


def schedule(func: tirx.PrimFunc, cpu: CPU) -> s_tir.Schedule | None:
    sch = new_schedule(func)
    blocks = root_blocks(sch)
    if (
        not blocks
        or not any(b.is_reduction for b in blocks)
        or not all(b.is_spatial or b.is_reduction for b in blocks)
    ):
        return None
    reductions = {b.stmt.name_hint for b in blocks if b.is_reduction}
    for blk in inline_all(sch, keep=reductions):
        if blk.is_spatial:
            parallel_vectorize(sch, blk.rv, cpu)
            continue
        loops = list(sch.get_loops(blk.rv))
        kinds = blk.kinds
        n_sp = len(kinds) - len(kinds.lstrip("S"))
        if len(loops) != len(kinds) or n_sp == 0 or set(kinds[n_sp:]) != {"R"}:
            raise RuleMismatch("reduction rule needs spatial iters before reduce iters")
        rf = _rfactor(sch, blk, loops[-1], cpu)
        if rf is not None:
            loops = list(sch.get_loops(blk.rv))
        outer = sch.fuse(*loops[:n_sp]) if n_sp > 1 else loops[0]
        work = 1
        for ext in blk.extents:
            work *= SYMBOLIC_EXTENT if ext is None else ext
        outer_extent = extent_of(sch, outer)
        if work >= PARALLEL_MIN and (outer_extent is None or outer_extent > 1):
            sch.parallel(outer)
        if rf is not None:
            if blk.extents[-1] is None or blk.extents[-1] % lanes_of(sch, rf):
                _vectorize_rf_tail(sch, rf, n_sp, work >= PARALLEL_MIN)
            else:
                _vectorize_rf(sch, rf, outer)
            continue
        if len(loops) - n_sp > 0:
            inner = loops[n_sp:]
            # unroll a short innermost reduction (taps of a small kernel)
            if (extent_of(sch, inner[-1]) or SYMBOLIC_EXTENT) <= 16:
                sch.unroll(inner[-1])
    return sch


def _reads_contiguous_along(blk, var) -> bool:
    """Every buffer the block reads that depends on ``var`` is indexed by ``var`` (+ terms without
    it) in its last dimension only: consecutive iterations load consecutive elements."""
    found = False
    for rd in blk.stmt.reads:
        region = [r.min for r in rd.region]
        if not any(var in vars_in(e) for e in region):
            continue
        if any(var in vars_in(e) for e in region[:-1]) or not linear_unit(region[-1], var):
            return False
        found = True
    return found


def _rfactor(sch: s_tir.Schedule, blk, inner, cpu: CPU):
    """rfactor the innermost reduction loop into ``cpu.lanes`` partial sums (see module doc);
    returns the rf block, or None when the reduction does not qualify."""
    kinds = blk.kinds
    extent = blk.extents[-1]
    # up to 4 vectors of partial sums: independent add chains hide the FP add latency
    factor = next(
        (
            f * cpu.lanes
            for f in (4, 2, 1)
            if extent and extent % (f * cpu.lanes) == 0 and extent >= 2 * f * cpu.lanes
        ),
        None,
    )
    if factor is None and (extent is None or extent >= 16 * cpu.lanes):
        factor = (
            4 * cpu.lanes
        )  # tail: the split's predicate (symbolic: partitioned off, see split_with_tail)
    if kinds[-1] != "R" or factor is None:
        return None
    if len(blk.stmt.writes) != 1 or not _reads_contiguous_along(blk, blk.stmt.iter_vars[-1].var):
        return None
    _, r_i = split_with_tail(sch, inner, [factor])
    return sch.rfactor(r_i, factor_axis=len(blk.stmt.writes[0].region))


def _vectorize_rf(sch: s_tir.Schedule, rf, outer) -> None:
    """Per row (under ``outer``): a ``local`` vector of partial sums, vectorized FMAs."""
    sch.compute_at(rf, outer)
    sch.set_scope(rf, 0, "local")
    rf_loops = list(sch.get_loops(rf))
    pos = next(i for i, lp in enumerate(rf_loops) if sch.get(lp).same_as(sch.get(outer)))
    # compute_at lays the loops out in block-iter order: the factor (lanes) iter comes first
    lanes, *reduce = rf_loops[pos + 1 :]
    if not reduce or int(sch.get(lanes).extent) != lanes_of(sch, rf):
        raise RuleMismatch("unexpected rfactor loop nest")
    sch.reorder(*reduce, lanes)  # lanes innermost
    sch.vectorize(lanes)
    init = sch.decompose_reduction(rf, reduce[0])
    sch.vectorize(sch.get_loops(init)[-1])


def _vectorize_rf_tail(sch: s_tir.Schedule, rf, n_sp: int, parallel: bool) -> None:
    """The partial sums of a reduction whose extent misses the factor: the split's predicate
    guards the last vector group. ``compute_at`` would drop that predicate (TVM 0.27 regenerates
    the loops over the full split domain and reads past the row), so the rf block keeps its own
    root loop nest: spatial axes fused and parallel, the factor axis (innermost) vectorized,
    partial sums in a small global buffer."""
    loops = list(sch.get_loops(rf))
    outer = sch.fuse(*loops[:n_sp]) if n_sp > 1 else loops[0]
    if parallel and (extent_of(sch, outer) or SYMBOLIC_EXTENT) > 1:
        sch.parallel(outer)
    sch.vectorize(loops[-1])
    init = sch.decompose_reduction(rf, loops[n_sp])
    sch.vectorize(sch.get_loops(init)[-1])


def lanes_of(sch: s_tir.Schedule, rf) -> int:
    """Extent of the rf block's factor iter (its last write index)."""
    stmt = sch.get(rf)
    var = stmt.writes[0].region[-1].min
    return int(next(iv.dom.extent for iv in stmt.iter_vars if iv.var.same_as(var)))
