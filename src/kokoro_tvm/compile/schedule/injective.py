"""Spatial-only functions: inline chains, then one parallel, vectorized loop nest per output."""

from __future__ import annotations

from tvm import s_tir, tirx

from .analysis import CPU, new_schedule, root_blocks
from .common import inline_all, parallel_vectorize


def schedule(func: tirx.PrimFunc, cpu: CPU) -> s_tir.Schedule | None:
    sch = new_schedule(func)
    blocks = root_blocks(sch)
    if not blocks or not all(b.is_spatial for b in blocks):
        return None
    for blk in inline_all(sch):
        parallel_vectorize(sch, blk.rv, cpu)
    return sch
