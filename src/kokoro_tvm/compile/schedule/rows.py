"""Row statistics, then the row: each row's sums are computed inside the loop over the rows of
the one output that reads them, so the row is read from memory once and reread from cache.

Matches what ``legalizations/instance_norm.normalized`` makes, with the epilogue ``FuseOps``
merged into it (AdaIN's scale and shift, Snake): reductions whose spatial iterators are the
output's leading axes (plus, for a partial-sum block, one axis of ``PARTS`` sums), consumed
only by that output and by each other. The reduction rule would give each reduction a loop
nest of its own over every row, a pass over memory each.

Per row (the rows parallel): the partial sums as one vector loop per step of the row (their
``PARTS`` axis vectorized, the reduction axis outside it), the sums across them as short scalar
loops, then the output row as one vectorized loop (the tail of a width that is symbolic or does
not divide partitioned off, ``split_with_tail``).
"""

from __future__ import annotations

from tvm import s_tir, tirx

from ..legalizations.instance_norm import PARTS_BLOCK
from .analysis import CPU, RuleMismatch, extent_of, new_schedule, root_blocks, split_with_tail
from .common import PARALLEL_MIN, inline_all


def schedule(func: tirx.PrimFunc, cpu: CPU) -> s_tir.Schedule | None:
    sch = new_schedule(func)
    blocks = root_blocks(sch)
    if not blocks or not any(b.is_reduction for b in blocks):
        return None
    if not all(b.is_spatial or b.is_reduction for b in blocks):
        return None
    if not any(b.is_reduction and b.stmt.name_hint.endswith(PARTS_BLOCK) for b in blocks):
        return None  # not ``row_sum``'s construction: no inlining tried (it can crash TVM 0.27)
    # the sums, and the per-row values made of them (a mean, a scale): computed once per row
    # here, not inlined into every element that reads them
    keep = {b.stmt.name_hint for b in blocks if b.is_reduction or _per_row_value(b)}
    left = inline_all(sch, keep=keep)
    *stats, out = left
    if not stats or not out.is_spatial or _per_row_value(out):
        return None
    rows = len(out.kinds) - 1
    if rows < 1 or not _per_row(stats, out, rows):
        return None
    loops = list(sch.get_loops(out.rv))
    row = sch.fuse(*loops[:rows]) if rows > 1 else loops[0]
    for blk in reversed(stats):
        sch.compute_at(blk.rv, row, preserve_unit_loops=True)
    work = 1
    for ext in out.assumed_extents:
        work *= ext
    extent = extent_of(sch, row)
    if work >= PARALLEL_MIN and (extent is None or extent > 1):
        sch.parallel(row)  # before the reductions are decomposed, as TVM requires
    for blk in stats:
        if blk.is_reduction:
            _vectorize_parts(sch, blk, row)
    width = sch.get_loops(out.rv)[-1]
    if extent_of(sch, width) is None or extent_of(sch, width) % (2 * cpu.lanes):
        _, vec = split_with_tail(sch, width, [2 * cpu.lanes])
    else:
        _, vec = sch.split(width, [None, 2 * cpu.lanes])
    sch.vectorize(vec)
    return sch


def _per_row(stats, out, rows: int) -> bool:
    """Every statistic's spatial iterators are the output's row extents, and at most one more
    (a partial-sum axis of static extent), its reduction axes last; and the output reads a whole
    row of some buffer a statistic reads (the reuse this rule is for)."""
    row_extents = [str(iv.dom.extent) for iv in out.stmt.iter_vars[:rows]]
    for blk in stats:
        kinds = blk.kinds
        n_sp = len(kinds) - len(kinds.lstrip("S"))
        if blk.is_spatial:
            if not _per_row_value(blk) or n_sp != rows + 1:
                return False
        elif set(kinds[n_sp:]) != {"R"} or n_sp not in (rows, rows + 1):
            return False
        extents = [str(iv.dom.extent) for iv in blk.stmt.iter_vars[:rows]]
        if extents != row_extents:
            return False
        if n_sp == rows + 1 and blk.extents[rows] is None:
            return False
    read_by_out = {r.source.name for r in out.stmt.reads}
    return any(r.source.name in read_by_out for blk in stats for r in blk.stmt.reads)


def _per_row_value(blk) -> bool:
    """A spatial block of one value per row: its last axis of extent 1."""
    return blk.is_spatial and len(blk.extents) > 1 and blk.extents[-1] == 1


def _vectorize_parts(sch: s_tir.Schedule, blk, row) -> None:
    """A partial-sum block (an axis of sums beside the row): that axis innermost and vectorized,
    its initialization a vector store; a sum across the parts stays a short unrolled loop."""
    loops = list(sch.get_loops(blk.rv))
    pos = next(i for i, lp in enumerate(loops) if sch.get(lp).same_as(sch.get(row)))
    inner = loops[pos + 1 :]
    kinds = blk.kinds[-len(inner) :]  # compute_at keeps one loop per block iterator, in order
    spatial = [lp for lp, k in zip(inner, kinds) if k == "S" and extent_of(sch, lp) != 1]
    reduce = [lp for lp, k in zip(inner, kinds) if k == "R"]
    if not spatial:  # across the parts
        for lp in reduce:
            extent = extent_of(sch, lp)
            if extent is not None and extent <= 64:
                sch.unroll(lp)
        return
    if len(spatial) != 1 or extent_of(sch, spatial[0]) is None or not reduce:
        raise RuleMismatch("partial sums need one static axis of sums")
    sch.set_scope(blk.rv, 0, "local")  # registers, not a store and a load per step
    sch.reorder(*reduce, spatial[0])
    sch.vectorize(spatial[0])
    init = sch.decompose_reduction(blk.rv, reduce[0])
    sch.vectorize(sch.get_loops(init)[-1])
