"""Spatial-only functions: inline chains, then one parallel, vectorized loop nest per output.

Also the loop-nest helper every other rule uses for its spatial producer/epilogue stages.
"""

from __future__ import annotations

from tvm import s_tir

from .analysis import CPU, Block, root_blocks

#: Below this many elements a parallel launch costs more than it saves.
PARALLEL_MIN = 1 << 14


def inline_all(sch: s_tir.Schedule, keep: set[str] = frozenset()) -> list[Block]:
    """Inline every block that can be inlined (producers forward, then consumers backward).

    Returns the blocks left. ``keep`` names blocks not to touch (a rule's anchor block).
    """
    while True:
        progressed = False
        for blk in root_blocks(sch) or []:
            if blk.stmt.name_hint in keep:
                continue
            for inline in (sch.compute_inline, sch.reverse_compute_inline):
                try:
                    inline(blk.rv)
                except s_tir.ScheduleError:
                    continue
                progressed = True
                break
            if progressed:
                break
        if not progressed:
            return root_blocks(sch) or []


def _largest_divisor(n: int, options: list[int]) -> int:
    return next((k for k in options if k <= n and n % k == 0), 1)


def parallel_vectorize(sch: s_tir.Schedule, block, cpu: CPU, loops: list | None = None) -> None:
    """Parallelize the outer loops of a spatial block and vectorize its innermost axis.

    Vectorizes only the innermost loop, and only by a lane count dividing it: a fused index with a
    modulo gathers, and a predicate inside a vector loop scalarizes it.
    """
    loops = list(sch.get_loops(block)) if loops is None else loops
    if not loops:
        return
    extents = [int(sch.get(lp).extent) for lp in loops]
    total = 1
    for e in extents:
        total *= e
    last = loops[-1]
    lanes = _largest_divisor(extents[-1], [cpu.lanes * 4, cpu.lanes * 2, cpu.lanes, cpu.lanes // 2])
    if lanes > 1 and lanes >= cpu.lanes // 2:
        last, vec = sch.split(last, [None, lanes])
        sch.vectorize(vec)
    if total < PARALLEL_MIN:
        return
    outer = loops[:-1] + ([last] if len(loops) == 1 or extents[-1] // max(lanes, 1) > 1 and len(loops) == 1 else [])
    if not outer:
        outer = [last]
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if int(sch.get(fused).extent) > 1:
        sch.parallel(fused)
    elif len(loops) > 1:
        sch.parallel(last)


def schedule(sch: s_tir.Schedule, cpu: CPU) -> bool:
    blocks = root_blocks(sch)
    if not blocks or not all(b.is_spatial for b in blocks):
        return False
    for blk in inline_all(sch):
        parallel_vectorize(sch, blk.rv, cpu)
    return True
