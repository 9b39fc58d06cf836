"""Fallback for structures no rule recognises: parallel outer spatial loops, vectorize innermost.

Correct for any block-structured PrimFunc; fast only by luck. Functions that end here are listed
in ``ScheduleReport.fallbacks`` so they get a real rule.
"""

from __future__ import annotations

from tvm import s_tir, tirx

from .analysis import CPU, extent_of, new_schedule, root_blocks
from .common import PARALLEL_MIN, inline_all, parallel_vectorize


def schedule(func: tirx.PrimFunc, cpu: CPU) -> s_tir.Schedule | None:
    sch = new_schedule(func)
    blocks = root_blocks(sch)
    if not blocks:
        return None
    for blk in inline_all(sch):
        loops = list(sch.get_loops(blk.rv))
        kinds = blk.kinds
        if blk.is_spatial:
            parallel_vectorize(sch, blk.rv, cpu)
            continue
        # leading spatial loops (block iters bound 1:1 to loops before any reduction loop)
        n_outer = len(kinds) - len(kinds.lstrip("S")) if len(loops) == len(kinds) else 0
        if n_outer:
            outer = sch.fuse(*loops[:n_outer]) if n_outer > 1 else loops[0]
            extent = extent_of(sch, outer)
            if extent is None or extent * max(1, _inner_work(blk)) >= PARALLEL_MIN:
                sch.parallel(outer)
    return sch


def _inner_work(blk) -> int:
    out = 1
    for kind, ext in zip(blk.kinds, blk.extents):
        if kind != "S" and ext:
            out *= ext
    return out
