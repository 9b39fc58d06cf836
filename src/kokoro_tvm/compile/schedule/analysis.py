"""What the rules need to know about a target and a PrimFunc, read from structure only.

Rules dispatch on block iteration kinds and buffer access patterns, never on function or block
names: fusion names functions after the ops it merged, which says nothing reliable about loops.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx
from tvm.target import codegen


class RuleMismatch(Exception):
    """A rule found, part-way through, that the function is not of its kind (a shape its tiles do
    not cover, an index that is not a plain axis). The dispatcher then tries the next rule on a
    fresh schedule; any other exception is a bug in the rule and surfaces."""


def new_schedule(func: tirx.PrimFunc) -> s_tir.Schedule:
    """A fresh schedule of one PrimFunc, as every rule starts from."""
    return s_tir.Schedule(tvm.IRModule({"main": func}))


@dataclass(frozen=True)
class CPU:
    """Vector width and register budget of an LLVM CPU target."""

    lanes: int  # float32 lanes per vector register
    registers: int  # architectural vector registers (the register tile must fit)

    @staticmethod
    def of(target: tvm.target.Target) -> CPU:
        # ``llvm_get_vector_width`` answers 512 for every x86 CPU in TVM 0.27; features do not lie.
        with target:
            has = lambda feature: bool(codegen.target_has_features(feature, target))
            if has("avx512f"):
                return CPU(lanes=16, registers=32)
            if has("avx"):
                return CPU(lanes=8, registers=16)
            if has("neon") or has("sve"):
                return CPU(lanes=4, registers=32)
        return CPU(lanes=4, registers=16)  # SSE2 baseline of a plain {"kind": "llvm"}


@dataclass
class Block:
    """One child block of the root: its handle and how it iterates."""

    rv: s_tir.schedule.SBlockRV
    stmt: s_tir.SBlock

    @property
    def kinds(self) -> str:
        return "".join({0: "S", 2: "R"}.get(int(iv.iter_type), "O") for iv in self.stmt.iter_vars)

    @property
    def extents(self) -> list[int | None]:
        return [_int(iv.dom.extent) for iv in self.stmt.iter_vars]

    @property
    def assumed_extents(self) -> list[int]:
        """Extents with symbolic ones sized at the assumed bounds (``assume_bounds``)."""
        return [assumed_extent(iv.dom.extent) for iv in self.stmt.iter_vars]

    @property
    def is_spatial(self) -> bool:
        return set(self.kinds) <= {"S"}

    @property
    def is_reduction(self) -> bool:
        return "R" in self.kinds and set(self.kinds) <= {"S", "R"}


def _int(expr) -> int | None:
    return int(expr) if isinstance(expr, tirx.IntImm) else None


def extent_of(sch: s_tir.Schedule, loop) -> int | None:
    """A loop's extent as an int, or None when it is symbolic (a bounded-length export)."""
    return _int(sch.get(loop).extent)


#: Symbolic extents are unknown when the rules run; a rule sizes its choices (parallel or not,
#: tile scores) as if such an axis were this long, unless ``assume_bounds`` gave the length's
#: upper bound (``schedule.apply`` passes ``main``'s ``tir_var_upper_bound``): then the choice
#: is the one a padded library of that bucket gets, and tails make it valid below the bound.
SYMBOLIC_EXTENT = 1 << 12

_BOUNDS: dict[str, int] = {}


@contextmanager
def assume_bounds(bounds: dict[str, int]):
    """Size symbolic extents at these upper bounds (by variable name) while scheduling."""
    saved = dict(_BOUNDS)
    _BOUNDS.clear()
    _BOUNDS.update(bounds)
    try:
        yield
    finally:
        _BOUNDS.clear()
        _BOUNDS.update(saved)


def assumed_extent(expr) -> int:
    """An extent as an int: itself when static, else evaluated at the assumed bounds (or
    ``SYMBOLIC_EXTENT`` when they do not determine it)."""
    if isinstance(expr, int):
        return expr
    if isinstance(expr, tirx.IntImm):
        return int(expr)
    if _BOUNDS:
        import tvm.sym

        free = tirx.analysis.undefined_vars(expr)
        if all(v.name in _BOUNDS for v in free):
            ana = tvm.sym.Analyzer()
            for v in free:
                ana.bind(v, tirx.IntImm(str(getattr(v.ty, "dtype", "int64")), _BOUNDS[v.name]))
            value = ana.simplify(expr)
            if isinstance(value, tirx.IntImm):
                return int(value)
    return SYMBOLIC_EXTENT


def split_with_tail(sch: s_tir.Schedule, loop, factors: list[int]):
    """``split`` a loop whose extent may not divide by ``prod(factors)`` (a symbolic length):
    the split adds the predicate ``outer * prod + inner < extent``, and a predicate inside a
    vectorized loop makes TVM scalarize it. ``pragma_loop_partition_hint`` on the outer loop has
    the build's ``LoopPartition`` cut the last, partial, iteration off: the main loop runs
    unpredicated (vectorized), only the tail is predicated."""
    extent = sch.get(loop).extent
    span = 1
    for f in factors:
        span *= f
    import tvm.sym

    symbolic = _int(extent) is None and not tvm.sym.Analyzer().can_prove(
        tirx.floormod(extent, span) == 0
    )
    loops = sch.split(loop, [None, *factors])
    if symbolic:  # static tails keep their previous schedule (padded libraries unchanged)
        sch.annotate(loops[0], "pragma_loop_partition_hint", 1)
    return loops


def single_reduction(blocks: list[Block]) -> Block | None:
    """The one reduction block among ``blocks`` (the anchor a conv or matmul tile is built
    around), or None when there is none or more than one."""
    reductions = [b for b in blocks if not b.is_spatial]
    if len(reductions) != 1 or not reductions[0].is_reduction:
        return None
    return reductions[0]


def linear_unit(expr, var) -> bool:
    """``expr`` is ``var + (terms without var)``: consecutive iterations read consecutive
    elements."""
    import tvm.sym

    coeffs = tvm.sym.detect_linear_equation(expr, [var])
    return len(coeffs) == 2 and isinstance(coeffs[0], tirx.IntImm) and int(coeffs[0]) == 1


def root_blocks(sch: s_tir.Schedule) -> list[Block] | None:
    """Child blocks of the root block in program order, or None when there is no root block."""
    try:
        root = sch.get_sblock("root")
    except Exception:  # hand-written TIR without blocks
        return None
    return [Block(rv, sch.get(rv)) for rv in sch.get_child_blocks(root)]


def _walk(stmt, visit) -> None:
    """Pre-order walk over TIR statements (TVM 0.27 has no Python stmt visitor)."""
    visit(stmt)
    for attr in ("seq", "body", "then_case", "else_case", "block", "init"):
        child = getattr(stmt, attr, None)
        if child is None:
            continue
        for c in child if attr == "seq" else [child]:
            if isinstance(c, (tirx.Stmt, s_tir.SBlock)):
                _walk(c, visit)


def is_scheduled(func: tirx.PrimFunc) -> bool:
    """True if the function already carries a schedule: a parallel/vectorized loop, or no blocks.

    Hand-written kernels such as the LSTM recurrence come with their own loop structure; a rule
    must not reorder them.
    """
    kinds: set = set()
    _walk(func.body, lambda n: kinds.add(n.kind) if isinstance(n, tirx.For) else None)
    if kinds & {tirx.ForKind.PARALLEL, tirx.ForKind.VECTORIZED}:
        return True
    return root_blocks(new_schedule(func)) is None


def vars_in(expr) -> set:
    """Free variables of an index expression."""
    return set(tirx.analysis.undefined_vars(expr))
