"""Schedule steps several rules share: inline what can be inlined, and give a spatial block one
parallel, vectorized loop nest."""

from __future__ import annotations

from tvm import s_tir

from ..hand_written import largest_divisor
from .analysis import CPU, SYMBOLIC_EXTENT, Block, extent_of, root_blocks, split_with_tail

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


def parallel_vectorize(sch: s_tir.Schedule, block, cpu: CPU, loops: list | None = None) -> None:
    """Parallelize the outer loops of a spatial block and vectorize its innermost axis.

    Vectorizes only the innermost loop, and only by a lane count dividing it: a fused index with a
    modulo gathers, and a predicate inside a vector loop scalarizes it. A symbolic innermost
    extent (bounded-length exports) is split by 2 vectors with a tail that the build partitions
    off (``split_with_tail``); symbolic extents count as ``SYMBOLIC_EXTENT`` for the parallel
    threshold.
    """
    loops = list(sch.get_loops(block)) if loops is None else loops
    if not loops:
        return
    extents = [extent_of(sch, lp) for lp in loops]
    total = 1
    for e in extents:
        total *= SYMBOLIC_EXTENT if e is None else e
    last = loops[-1]
    if extents[-1] is None:
        # a conditional block (pad) keeps its tail predicate inside the vector loop: partitioning
        # its loop on the tail and on the pad's bounds check together did not terminate
        # (LoopPartition on the pad to a whole number of conv tiles, TVM 0.27)
        stmt = sch.get(block)
        conditional = "if_then_else" in stmt.body.script()
        if conditional:
            last, vec = sch.split(last, [None, 2 * cpu.lanes])
        else:
            last, vec = split_with_tail(sch, last, [2 * cpu.lanes])
        sch.vectorize(vec)
        lanes = 2 * cpu.lanes
        extents[-1] = SYMBOLIC_EXTENT
    else:
        lanes = largest_divisor(
            extents[-1], [cpu.lanes * 4, cpu.lanes * 2, cpu.lanes, cpu.lanes // 2]
        )
        if lanes > 1 and lanes >= cpu.lanes // 2:
            last, vec = sch.split(last, [None, lanes])
            sch.vectorize(vec)
    if total < PARALLEL_MIN:
        return
    outer = loops[:-1] + (
        [last] if len(loops) == 1 or (extents[-1] // max(lanes, 1) > 1 and len(loops) == 1) else []
    )
    if not outer:
        outer = [last]
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    fused_extent = extent_of(sch, fused)
    if fused_extent is None or fused_extent > 1:
        sch.parallel(fused)
    elif len(loops) > 1:
        sch.parallel(last)
