"""Register tiling for an "outer-product" reduction, shared by the conv and matmul rules.

Conv1d ``out[n, f, y] += data[n, c, y*s + r] * w[f, c, r]`` and matmul
``out[b, i, j] += a[b, i, k] * w[k, j]`` have the same shape of work: one operand is *streamed*
along the output's innermost axis (``y``/``j``: contiguous vector loads) and the other is a
*broadcast* that does not depend on it. A tile of ``rows x cols`` outputs, ``rows`` along an axis
that only the broadcast operand reads (``f``/``i``), keeps ``rows * cols/lanes`` accumulators in
vector registers while the reduction loops run *outside* the tile: every streamed vector is reused
``rows`` times and every broadcast scalar ``cols/lanes`` times.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx

from ..prepack import PREPROC
from .analysis import (
    CPU,
    SYMBOLIC_EXTENT,
    Block,
    RuleMismatch,
    assumed_extent,
    extent_of,
    linear_unit,
    split_with_tail,
    vars_in,
)
from .common import parallel_vectorize

#: Fewest static tiles a bounded kernel with one symbolic axis runs in parallel: with fewer (a
#: 128-channel conv is 4 tiles of 32 channels on AVX-512) the tiles of its symbolic length are the
#: parallel loop, so a 16-core CPU gets work for every core, not 4. Attention (two symbolic axes)
#: keeps its heads parallel: its query tiles, one parallel launch per head, were slower at 2
#: threads (docs/measurements.md, "Parallel length tiles").
MIN_PARALLEL_TILES = 16


@dataclass
class OuterProduct:
    """The roles of a reduction block's iterators (indices into its iter_vars)."""

    block: Block
    col: int  # streamed axis: innermost output axis, unit stride in the streamed operand
    row: int | None  # axis only the broadcast operand reads (reuse of streamed vectors)
    batch: list[int]  # other spatial axes
    reduce: list[int]
    streamed: int  # index into block.reads
    broadcast: int


def match(blk: Block) -> OuterProduct | None:
    """Recognise ``out[spatial...] += A[...] * B[...]`` with one operand streamed along ``col``."""
    stmt = blk.stmt
    kinds = blk.kinds
    n_sp = len(kinds) - len(kinds.lstrip("S"))
    if n_sp < 2 or kinds[n_sp:].strip("R") or not kinds[n_sp:] or len(stmt.writes) != 1:
        return None
    ivars = [iv.var for iv in stmt.iter_vars]
    write = [r.min for r in stmt.writes[0].region]
    if len(write) != n_sp or any(not e.same_as(v) for e, v in zip(write, ivars[:n_sp])):
        return None
    if len(stmt.reads) != 2:
        return None
    col_var = ivars[n_sp - 1]
    regions = [[r.min for r in rd.region] for rd in stmt.reads]
    uses = [set().union(*(vars_in(e) for e in reg)) for reg in regions]
    streamed = [
        i
        for i, reg in enumerate(regions)
        if col_var in vars_in(reg[-1])
        and all(col_var not in vars_in(e) for e in reg[:-1])
        and linear_unit(reg[-1], col_var)
    ]
    if len(streamed) != 1 or col_var in uses[1 - streamed[0]]:
        return None
    s, b = streamed[0], 1 - streamed[0]
    candidates = [i for i in range(n_sp - 1) if ivars[i] in uses[b] and ivars[i] not in uses[s]]
    if not candidates:  # depthwise: rows read different streamed rows; still independent FMAs
        candidates = [i for i in range(n_sp - 1) if ivars[i] in uses[b]]
    extents = blk.extents
    # a symbolic axis (a bounded length) is a long row axis, not a short one (an extent-1 batch)
    row = (
        max(candidates, key=lambda i: float("inf") if extents[i] is None else extents[i])
        if candidates
        else None
    )
    batch = [i for i in range(n_sp - 1) if i != row]
    return OuterProduct(blk, n_sp - 1, row, batch, list(range(n_sp, len(kinds))), s, b)


@dataclass(frozen=True)
class Tile:
    """``rows`` unrolled scalars x ``vectors`` vector registers of accumulators.

    ``along_rows`` swaps the roles: the vector lanes run along the row axis (weights packed so that
    rows are contiguous) and the unrolled scalars along the column axis. Used when the column
    extent is not a multiple of the lanes (a conv over 15361 frames), since a tail predicate on a
    vector lane scalarizes the whole kernel while one on an unrolled axis costs a branch.
    """

    rows: int
    vectors: int
    along_rows: bool = False


def registers_needed(tile: Tile) -> int:
    """Vector registers a tile's inner loop holds: accumulators, the streamed vectors every row
    reuses, and one broadcast."""
    return tile.rows * tile.vectors + tile.vectors + 1


def pick_tile(cpu: CPU, rows_extent: int, cols_extent: int, can_pack_rows: bool) -> Tile | None:
    """The register tile with the most FMAs per load that fits the register file.

    A tile holds ``rows * vectors`` accumulators, the ``vectors`` streamed vectors every row
    reuses, and one broadcast: all of them must fit the registers, or LLVM spills in the inner
    loop (``registers_needed``). With a flat 4 registers left for loads, AVX2's 16 allowed 3 x 4,
    17 registers, which spilled and ran at about half the speed of 6 x 2 or 2 x 4
    (docs/measurements.md, "Register tiles fit the register file"). The vector axis must divide
    by ``vectors * lanes`` (no lane predicate); the unrolled axis may have a tail.
    """

    def best(
        vec_extent: int, unrolled_extent: int, along_rows: bool, tail: bool = False
    ) -> Tile | None:
        found = None
        for vectors in (4, 3, 2, 1):
            if vec_extent % (vectors * cpu.lanes) if not tail else vec_extent < vectors * cpu.lanes:
                continue
            fits = (cpu.registers - registers_needed(Tile(0, vectors))) // vectors
            for rows in range(max(1, min(fits, unrolled_extent)), 0, -1):
                tile = Tile(rows, vectors, along_rows)
                if found is None or _score(tile, unrolled_extent) > _score(found, unrolled_extent):
                    found = tile
        return found

    if cols_extent is None or rows_extent is None:
        return _pick_symbolic(best, rows_extent, cols_extent, can_pack_rows)
    tile = best(cols_extent, rows_extent, False)
    if tile is None and can_pack_rows:
        tile = best(rows_extent, cols_extent, True)
    if tile is None:
        # neither axis divides (conv_post: 22 channels x 120m+1 samples): vectors along the
        # columns with a tail; ``tvm.compile`` partitions the tail loop off (LoopPartition), so
        # only the last tile of a row runs predicated
        tile = best(cols_extent, rows_extent, False, tail=True)
    return tile


def _pick_symbolic(
    best, rows_extent: int | None, cols_extent: int | None, can_pack_rows: bool
) -> Tile | None:
    """A symbolic extent (bounded-length export) is scored as ``SYMBOLIC_EXTENT`` long and may only
    be the unrolled axis or a tailed vector axis: the vector axis is a static one that divides
    when there is one (columns, else rows when the weights can be packed), else the symbolic
    columns with a tail (``split_with_tail`` partitions it off)."""
    rows = SYMBOLIC_EXTENT if rows_extent is None else rows_extent
    cols = SYMBOLIC_EXTENT if cols_extent is None else cols_extent
    tile = best(cols, rows, False) if cols_extent is not None else None
    if tile is None and can_pack_rows and rows_extent is not None:
        tile = best(rows, cols, True)
    if tile is None:
        tile = best(cols, rows, False, tail=True)
    return tile


def _score(tile: Tile, unrolled_extent: int) -> float:
    # FMAs per load (rows*vectors FMAs need `vectors` loads + `rows` broadcasts), times the share
    # of the unrolled axis that is real work rather than a predicated-off tail
    tiles = -(-unrolled_extent // tile.rows)
    return (
        tile.rows
        * tile.vectors
        / (tile.rows + tile.vectors)
        * unrolled_extent
        / (tiles * tile.rows)
    )


def tile_reduction(
    sch: s_tir.Schedule, op: OuterProduct, cpu: CPU, epilogue, tile: Tile, length_block: int = 1
) -> None:
    """Register-tile ``op.block``; ``epilogue`` (a block or None) is computed per tile from the
    accumulators, which live in ``local`` scope.

    ``length_block`` > 1 (a ``Tile.along_rows`` conv over a symbolic length, ``conv.length_block``):
    blocks of that many tiles along the length run outermost, in parallel, and every channel tile
    inside each block, so a block's input columns are fetched once for all channel tiles."""
    blk = op.block.rv
    loops = list(sch.get_loops(blk))
    span = tile.vectors * cpu.lanes
    vec_axis, unr_axis = (op.row, op.col) if tile.along_rows else (op.col, op.row)
    if tile.along_rows:
        # weights [f, c, r] -> [f // span, c, r, f % span]: the tile's weights are one contiguous
        # run
        packed = sch.cache_read(blk, op.broadcast, "global")
        ndim = len(sch.get(packed).iter_vars)
        row_pos = _row_position(op)
        sch.transform_layout(packed, ("write", 0), _pack_map(ndim, row_pos, span))
        if _is_argument(sch, op.block.stmt.reads[op.broadcast].source):
            # a weight: packed once at load rather than on every call (compile.prepack)
            sch.annotate(packed, PREPROC, True)
    elif is_weight_panel(sch, op, span):
        # a linear's weight [k, n] -> [n // span, k, span]: one contiguous panel per column tile
        packed = sch.cache_read(blk, op.streamed, "global")
        sch.transform_layout(
            packed,
            ("write", 0),
            tvm.tirx.IndexMap.from_func(
                lambda k, n: (n // span, k, n % span),
                index_dtype=str(op.block.stmt.reads[op.streamed].source.shape[0].ty),
            ),
        )
        sch.annotate(packed, PREPROC, True)
    else:
        packed = None
    # a symbolic axis keeps its tile loop out of the parallel fuse (a fused index hides the tail
    # from LoopPartition, and the cropping epilogue of a padded-to-tile conv cannot be computed
    # at a fused loop); split_with_tail adds the partition hint only where a tail is possible
    symbolic = [extent_of(sch, lp) is None for lp in loops]
    v_o, v_i, v_l = split_with_tail(sch, loops[vec_axis], [tile.vectors, cpu.lanes])
    blocked = length_block > 1
    if blocked and not (
        tile.along_rows and unr_axis is not None and symbolic[unr_axis] and not symbolic[vec_axis]
    ):
        raise RuleMismatch("length blocks need a packed-rows tile over a symbolic length")
    if blocked:
        u_b, u_o, u_i = split_with_tail(sch, loops[unr_axis], [length_block, tile.rows])
    elif unr_axis is not None:
        u_o, u_i = split_with_tail(sch, loops[unr_axis], [tile.rows])
    else:
        u_o = u_i = None
    batch = [loops[i] for i in op.batch]
    red = [loops[i] for i in op.reduce]
    outer = batch + ([u_o] if u_o is not None else []) + [v_o]
    if any(
        symbolic[i] for i in op.batch
    ):  # (a symbolic reduction runs whole: no tail, no predicate)
        raise RuleMismatch("symbolic batch extent")
    # the tile loops over symbolic axes (both, for attention's n x n): kept out of the parallel fuse
    tails = [
        lp
        for lp, sym in (
            (u_o, unr_axis is not None and symbolic[unr_axis]),
            (v_o, symbolic[vec_axis]),
        )
        if sym
    ]
    if blocked:
        outer = [*batch, u_b, v_o, u_o]
    elif tails:
        outer = [lp for lp in outer if not any(lp.same_as(t) for t in tails)] + tails
    elif tile.along_rows or op.row is None or _cols_outer(op, tile, cpu):
        outer = batch + [v_o] + ([u_o] if u_o is not None else [])
    inner = ([u_i] if u_i is not None else []) + [v_i, v_l]
    sch.reorder(*outer, *red, *inner)
    if (
        blocked
    ):  # the length's blocks in parallel (many, for any core count); the tail block cut off
        sch.parallel(u_b)
        fused = u_o
    elif not tails:
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        sch.parallel(fused)
    else:
        # static tiles in parallel, the symbolic tile loops serial inside them (LoopPartition cuts
        # the last, partial, tile off only while its index is not fused with another loop, and a
        # loop carrying the partition hint cannot be fused); with too few static tiles for a
        # many-core CPU (MIN_PARALLEL_TILES), the outer symbolic loop itself runs in parallel
        static = outer[: -len(tails)]
        par = (sch.fuse(*static) if len(static) > 1 else static[0]) if static else None
        tiles = (extent_of(sch, par) or 0) if par is not None else 0
        if tiles >= MIN_PARALLEL_TILES or (len(tails) > 1 and tiles > 1):
            sch.parallel(par)
        else:
            sch.parallel(tails[0])
        fused = tails[-1]
    if epilogue is None:
        acc = sch.cache_write(blk, 0, "local")
        sch.reverse_compute_at(acc, fused)
        epilogue = acc
    else:
        sch.set_scope(blk, 0, "local")
        sch.reverse_compute_at(epilogue, fused)
    if tile.along_rows:
        # accumulators [.., f, y] -> [.., y, f]: the vector lanes (f) must be the contiguous axis
        nd = len(op.block.stmt.writes[0].region)
        perm = list(range(nd))
        perm[op.row], perm[op.col] = op.col, op.row
        sch.transform_layout(
            blk,
            ("write", 0),
            tvm.tirx.IndexMap.from_func(lambda *idx: tuple(idx[p] for p in perm), ndim=nd),
        )
    for lp in inner[:-1]:
        sch.unroll(lp)
    sch.vectorize(v_l)
    init = sch.decompose_reduction(blk, red[0])
    init_loops = sch.get_loops(init)[-len(inner) :]
    for lp in init_loops[:-1]:
        sch.unroll(lp)
    sch.vectorize(init_loops[-1])
    ep_all = list(sch.get_loops(epilogue))
    at = next(i for i, lp in enumerate(ep_all) if sch.get(lp).same_as(sch.get(fused)))
    ep_loops = ep_all[at + 1 :]
    if ep_loops and not tile.along_rows and (extent_of(sch, ep_loops[-1]) or 1) % cpu.lanes == 0:
        _, ev = sch.split(ep_loops[-1], [None, cpu.lanes])
        sch.vectorize(ev)
    if packed is not None:
        parallel_vectorize(sch, packed, cpu)


def is_weight_panel(sch: s_tir.Schedule, op: OuterProduct, span: int) -> bool:
    """The streamed operand is a linear layer's weight, ``w[k, n]`` read at ``[reduce, col]``, that
    the kernel is given with static extents and whole tiles of columns: ``tile_reduction`` packs it
    ``[n / span, k, span]`` at its tile's span, once at load (``compile.prepack``), so a tile's
    reduction reads one contiguous panel. Activations (attention's ``V``, a conv's input) are 3-D
    or more, or symbolic: a copy of those would run on every call."""
    read = op.block.stmt.reads[op.streamed]
    shape = read.source.shape
    if (
        len(shape) != 2
        or not all(isinstance(d, tirx.IntImm) for d in shape)
        or int(shape[1]) % span
    ):
        return False
    ivars = [iv.var for iv in op.block.stmt.iter_vars]
    k_index, n_index = (r.min for r in read.region)
    if not n_index.same_as(ivars[op.col]) or not any(k_index.same_as(ivars[i]) for i in op.reduce):
        return False
    return _is_argument(sch, read.source)


def _is_argument(sch: s_tir.Schedule, buffer) -> bool:
    """``buffer`` is one the kernel is given (a weight it can be handed packed), not one it
    computes."""
    func = sch.mod["main"]
    return any(
        getattr(p.ty, "shape", None) is not None and p.name == buffer.name for p in func.params
    )


def _row_position(op: OuterProduct) -> int:
    """Which index of the broadcast operand is the row iterator."""
    var = op.block.stmt.iter_vars[op.row].var
    region = op.block.stmt.reads[op.broadcast].region
    hits = [i for i, r in enumerate(region) if r.min.same_as(var)]
    if len(hits) != 1:
        raise RuleMismatch("row axis is not a plain index of the weight")
    return hits[0]


def _pack_map(ndim: int, pos: int, span: int):
    def index_map(*idx):
        rest = [e for i, e in enumerate(idx) if i != pos]
        return (idx[pos] // span, *rest, idx[pos] % span)

    return tvm.tirx.IndexMap.from_func(index_map, ndim=ndim)


#: Largest streamed panel (reduction extent x tile columns x 4 bytes) that column-tile-outermost
#: order keeps in L2 while it walks the row tiles: half of a 512 KB L2, the smallest the project
#: targets (docs/measurements.md, "Loop order by operand size").
PANEL_BYTES = 256 * 1024


def _cols_outer(op: OuterProduct, tile: Tile, cpu: CPU) -> bool:
    """Walk column tiles outermost when that moves fewer bytes and the column panel stays cached.

    Rows outermost re-streams the whole streamed operand once per row tile (its broadcast tile
    stays in cache); columns outermost re-reads the broadcast operand once per column tile (the
    streamed panel stays in cache). A linear layer over 64 tokens with a 768x768 weight re-reads
    2.4 MB of weights per row tile one way, 200 KB of activations per column tile the other;
    a decoder conv is the opposite (its input is long, its weights per output channel small).
    """

    def nbytes(i: int) -> int:
        n = 4
        for d in op.block.stmt.reads[i].source.shape:
            n *= assumed_extent(d)
        return n

    ext = op.block.extents
    span = tile.vectors * cpu.lanes
    depth = 1
    for i in op.reduce:
        depth *= ext[i] or 1
    if depth * span * 4 > PANEL_BYTES:
        return False
    row_tiles = -(-(ext[op.row] or 1) // tile.rows)
    col_tiles = (ext[op.col] or 1) // span
    streamed, broadcast = nbytes(op.streamed), nbytes(op.broadcast)
    return col_tiles * broadcast + streamed < row_tiles * streamed + broadcast
