"""Reductions that are not outer products: norm statistics, softmax, sums, ``Q @ K^T``.

Every reduction block is parallelized over its spatial axes (rows of a norm, heads x queries of
attention); spatial blocks around it are inlined where possible and otherwise run as their own
parallel vectorized loops. The reduction loop itself stays scalar: vectorizing it needs an
rfactor, and these reductions are a small share of Kokoro's time.
"""

from __future__ import annotations

from tvm import s_tir

from .analysis import CPU, root_blocks
from .injective import PARALLEL_MIN, inline_all, parallel_vectorize


def schedule(sch: s_tir.Schedule, cpu: CPU) -> bool:
    blocks = root_blocks(sch)
    if not blocks or not any(b.is_reduction for b in blocks) or not all(b.is_spatial or b.is_reduction for b in blocks):
        return False
    reductions = {b.stmt.name_hint for b in blocks if b.is_reduction}
    for blk in inline_all(sch, keep=reductions):
        if blk.is_spatial:
            parallel_vectorize(sch, blk.rv, cpu)
            continue
        loops = list(sch.get_loops(blk.rv))
        kinds = blk.kinds
        n_sp = len(kinds) - len(kinds.lstrip("S"))
        if len(loops) != len(kinds) or n_sp == 0 or set(kinds[n_sp:]) != {"R"}:
            raise ValueError("reduction rule needs spatial iters before reduce iters")
        outer = sch.fuse(*loops[:n_sp]) if n_sp > 1 else loops[0]
        work = 1
        for ext in blk.extents:
            work *= ext or 1
        if work >= PARALLEL_MIN and int(sch.get(outer).extent) > 1:
            sch.parallel(outer)
        if len(loops) - n_sp > 0:
            inner = loops[n_sp:]
            # unroll a short innermost reduction (taps of a small kernel)
            if int(sch.get(inner[-1]).extent) <= 16:
                sch.unroll(inner[-1])
    return True
