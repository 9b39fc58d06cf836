"""conv1d / conv_transpose1d in NCW layout with their fused producers (pad, dilate, weight flip)
and epilogues (bias, residual adds, activations).

The anchor is the one reduction ``out[n, f, y] += data[n, c, y*s + r*d] * w[f, c, r]`` (legalized
conv_transpose1d is the same over a zero-dilated, padded input and a flipped kernel). Producers
stay separate parallel stages (the pad writes each input element once; inlining its bounds
check into the innermost loop would cost a select per FMA); the epilogue chain is inlined into
one block computed per register tile straight from the accumulators.
"""

from __future__ import annotations

import tvm
from tvm import s_tir, tirx

from .analysis import (
    CPU,
    SYMBOLIC_EXTENT,
    Block,
    RuleMismatch,
    assumed_extent,
    new_schedule,
    root_blocks,
    single_reduction,
    vars_in,
)
from .common import parallel_vectorize
from .tile import OuterProduct, Tile, match, pick_tile, tile_reduction

#: Output width from which a conv keeps its output channels in the vector lanes (weights packed,
#: ``Tile.along_rows``) on a 16-register CPU, with ``LONG_TILE``. ``pick_tile``'s score counts
#: loads, not where they come from. On the decoder's long convs, 5 samples x 2 vectors of channels
#: ran faster than its choice, and below ``LONG_WIDTH`` its choice was ahead
#: (docs/measurements.md, "Long conv tile").
LONG_WIDTH = 256
LONG_TILE = Tile(rows=5, vectors=2, along_rows=True)
#: The same for a symbolic width on AVX-512 (32 channels, 12 of 32 registers): bounded decoder
#: convs ran faster than with ``LONG_TILE`` at every shape measured (docs/measurements.md,
#: "AVX-512 conv tile").
LONG_TILE_AVX512 = Tile(rows=6, vectors=2, along_rows=True)
#: Register tiles along a symbolic length per parallel block (``length_block``).
LENGTH_BLOCK = 8
#: ``length_block`` blocks a conv only when its input, at the length's bound, is at least this
#: many times the size of its weights: the length a call brings is often a small part of the bound.
LENGTH_BLOCK_INPUT_OVER_WEIGHTS = 4.0


def _is_conditional(blk: Block) -> bool:
    """A producer with a bounds check (pad, dilate): inlining it would put a select on every FMA."""
    return "if_then_else" in blk.stmt.body.script() or "T.where" in blk.stmt.script()


def split_around(blocks: list[Block], anchor: Block) -> tuple[list[Block], list[Block]]:
    i = next(k for k, b in enumerate(blocks) if b.stmt.same_as(anchor.stmt))
    return blocks[:i], blocks[i + 1 :]


def prepare(sch: s_tir.Schedule, anchor_name: str) -> tuple[Block, list[Block], list[Block]] | None:
    """Inline what should be inlined around the anchor; return (anchor, producers, consumers).

    Producers feeding other producers are inlined into them (dilate into pad), producers without
    a condition (plain copies, reshapes) into the anchor; consumers are inlined down the chain so
    that one epilogue block remains.
    """

    def current():
        blocks = root_blocks(sch)
        anchor = next(b for b in blocks if b.stmt.name_hint == anchor_name)
        return (anchor, *split_around(blocks, anchor))

    progressed = True
    while progressed:  # block handles go stale after each inline: re-read every round
        progressed = False
        anchor, producers, _ = current()
        for blk in producers:
            feeds_anchor = any(sch.get(c).same_as(anchor.stmt) for c in sch.get_consumers(blk.rv))
            if feeds_anchor and _is_conditional(blk):
                continue
            try:
                sch.compute_inline(blk.rv)
            except s_tir.ScheduleError:
                continue
            progressed = True
            break
    anchor, producers, consumers = current()
    for blk in consumers[:-1]:
        try:
            sch.compute_inline(blk.rv)
        except s_tir.ScheduleError:
            pass
    return current()


def schedule_anchor(
    sch: s_tir.Schedule,
    cpu: CPU,
    op: OuterProduct,
    producers: list[Block],
    consumers: list[Block],
    is_conv: bool = False,
) -> None:
    # symbolic extents (bounded-length exports) are sized at their upper bound: the tile a padded
    # library of the bucket gets; the rule splits symbolic axes with partitioned tails
    extents = op.block.assumed_extents
    symbolic_rows = op.row is not None and op.block.extents[op.row] is None
    can_pack_rows = op.row is not None and not symbolic_rows and _plain_row_index(op)
    tile = (
        conv_tile(cpu, extents[op.row] if op.row is not None else 1, extents[op.col], can_pack_rows)
        if is_conv
        else None
    )
    long_tile = LONG_TILE_AVX512 if cpu.lanes == 16 else LONG_TILE
    if (
        is_conv
        and tile is None
        and op.block.extents[op.col] is None
        and can_pack_rows
        and extents[op.row] % (long_tile.vectors * cpu.lanes) == 0
    ):
        # a symbolic width left unpadded (frame-rate convs): keep the vector lanes on the static
        # channels, so the width's tail only predicates unrolled columns (with the lanes along a
        # tailed width, a short n runs the whole conv in the scalar tail)
        tile = long_tile
    tile = tile or pick_tile(
        cpu,
        extents[op.row] if op.row is not None else 1,
        extents[op.col],
        can_pack_rows=can_pack_rows,
    )
    if tile is None:
        raise RuleMismatch(f"no register tile divides the extents {extents}")
    padded = op.row is not None and symbolic_rows and op.block.extents[op.col] is None
    if padded:
        op, producers, consumers = pad_to_tiles(sch, op, tile, cpu)
    epilogue = consumers[0].rv if len(consumers) == 1 else None
    tile_reduction(sch, op, cpu, epilogue, tile, length_block(cpu, op, tile) if is_conv else 1)
    for blk in producers:
        parallel_vectorize(sch, blk.rv, cpu)
    if padded:
        pack_streamed_panels(sch, op, tile, cpu)
    if epilogue is None:
        for blk in consumers:
            parallel_vectorize(sch, blk.rv, cpu)


def pad_to_tiles(
    sch: s_tir.Schedule, op: OuterProduct, tile: Tile, cpu: CPU
) -> tuple[OuterProduct, list[Block], list[Block]]:
    """Attention's ``n x n`` scores (both tiled axes symbolic): compute whole register tiles over
    inputs padded with zeros, and crop in the epilogue.

    With a tail predicate on both axes TVM 0.27's ``CompactBufferAllocation`` cannot bound the
    accumulators to one tile: they stay an ``n x n`` buffer that LLVM keeps in memory, not in
    registers (docs/measurements.md, "Attention scores over whole tiles"). ``pad_einsum`` moves
    the predicates to the padding copies (``n x 64`` each) and the crop."""
    name = op.block.stmt.name_hint
    padding = [1] * len(op.block.stmt.iter_vars)
    padding[op.row] = tile.rows
    padding[op.col] = tile.vectors * cpu.lanes
    sch.pad_einsum(op.block.rv, padding)
    anchor, producers, consumers = prepare(sch, name)
    padded = match(anchor)
    if padded is None or (padded.row, padded.col) != (op.row, op.col):
        raise RuleMismatch(f"{name}: padding to whole tiles changed the reduction's roles")
    return padded, producers, consumers


def pack_streamed_panels(sch: s_tir.Schedule, op: OuterProduct, tile: Tile, cpu: CPU) -> None:
    """Write the padded copy of attention's streamed operand (``K^T``, ``[.., 64, n]``) in panels
    of one column tile, ``[.., n / span, 64, span]``: the copy is made anyway, and a tile's
    reduction then reads one contiguous panel (4 KB on AVX2) instead of 64 rows ``4 n`` bytes
    apart, which at n = 512 (2 KB) fall into two of L1's 64 sets and miss on every tile
    (docs/measurements.md, "Attention Kᵀ panels")."""
    source = op.block.stmt.reads[op.streamed].source
    (copy,) = [
        b
        for b in root_blocks(sch) or []
        if b.stmt.writes and b.stmt.writes[0].source.same_as(source)
    ]
    span = tile.vectors * cpu.lanes
    # [.., k, n] -> [.., n / span, k, span]: a head's panels follow each other, as its tiles do
    sch.transform_layout(
        copy.rv,
        ("write", 0),
        tvm.tirx.IndexMap.from_func(
            lambda *idx: (*idx[:-2], idx[-1] // span, idx[-2], idx[-1] % span),
            ndim=len(source.shape),
        ),
    )


def conv_tile(cpu: CPU, channels: int, width: int, can_pack_rows: bool) -> Tile | None:
    """``LONG_TILE`` for a long conv on a 16-register (AVX2) CPU, else None (``pick_tile`` decides).

    Measured only there: AVX-512 keeps ``pick_tile``'s choice until someone measures it."""
    span = LONG_TILE.vectors * cpu.lanes
    if channels is None:
        return None
    if width is None:  # a symbolic width (bounded-length export) is scored as long
        width = SYMBOLIC_EXTENT
    if cpu.registers == 16 and can_pack_rows and width >= LONG_WIDTH and channels % span == 0:
        return LONG_TILE
    return None


def length_block(cpu: CPU, op: OuterProduct, tile: Tile) -> int:
    """``LENGTH_BLOCK`` for a conv over a symbolic length with its channels in the vector lanes on
    x86 (AVX2's 16 registers, AVX-512's 16 lanes), else 1 (NEON: not measured).

    There a tile holds 16 output channels, so a 128-channel conv has 8 channel tiles. With the
    channel tiles outermost each of them streams the whole input again (128 rows, each a page
    or more apart, too many streams for the prefetchers), and the generator's convs ran far below
    the FMA peak. Blocks of the length outermost fetch a block's input columns once for every
    channel tile, and each channel tile's weights once per block. On AVX-512
    (``LONG_TILE_AVX512``: 32 channels, 4 tiles of a 128-channel conv) the generator's convs
    gain too.

    Blocks trade the input's re-streaming for the weights' re-reading (once per block), so only a
    conv whose input outweighs its weights (``LENGTH_BLOCK_INPUT_OVER_WEIGHTS``) is blocked: the
    generator's small convs gain, while blocking the convs whose weights are as large as their
    input (the text encoder's 512-channel ones, the decoder body's 1024-channel ones at short
    lengths) slows them (docs/measurements.md, "Conv length blocks", and "AVX-512 conv tile")."""
    if (
        (cpu.registers == 16 or cpu.lanes == 16)
        and tile.along_rows
        and op.row is not None
        and op.block.extents[op.col] is None
        and op.block.extents[op.row] is not None
        and _elements(op, op.streamed)
        >= LENGTH_BLOCK_INPUT_OVER_WEIGHTS * _elements(op, op.broadcast)
    ):
        return LENGTH_BLOCK
    return 1


def _elements(op: OuterProduct, operand: int) -> int:
    """Elements of the buffer a reduction operand reads, with symbolic extents at their bound."""
    n = 1
    for extent in op.block.stmt.reads[operand].source.shape:
        n *= assumed_extent(extent)
    return n


def _plain_row_index(op: OuterProduct) -> bool:
    var = op.block.stmt.iter_vars[op.row].var
    region = op.block.stmt.reads[op.broadcast].region
    return sum(1 for r in region if r.min.same_as(var)) == 1 and all(
        r.min.same_as(var) or var not in vars_in(r.min) for r in region
    )


def schedule(func: tirx.PrimFunc, cpu: CPU) -> s_tir.Schedule | None:
    sch = new_schedule(func)
    anchor = single_reduction(root_blocks(sch) or [])
    if (
        anchor is None
        or anchor.kinds[:3] != "SSS"
        or len(anchor.kinds) < 4
        or "S" in anchor.kinds[3:]
    ):
        return None
    op = match(anchor)
    if op is None or op.row != 1 or op.col != 2:  # NCW: rows = output channels, cols = width
        return None
    return sch if schedule_matched(sch, cpu, anchor.stmt.name_hint, is_conv=True) else None


def schedule_matched(
    sch: s_tir.Schedule, cpu: CPU, anchor_name: str, is_conv: bool = False
) -> bool:
    """Prepare the anchor's producers/consumers, re-match it, and tile it (shared with matmul)."""
    anchor, producers, consumers = prepare(sch, anchor_name)
    op = match(anchor)
    if op is None:
        return False
    schedule_anchor(sch, cpu, op, producers, consumers, is_conv)
    return True
