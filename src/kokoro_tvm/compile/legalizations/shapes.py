"""Shape helpers the legalizations share: static or symbolic extents, and the vector-lane spans a
conv's width is padded to."""

from __future__ import annotations

#: Output widths are padded up to a multiple of this many samples (4 vectors of 16 lanes, the
#: widest register tile) when the channels cannot carry the vector lanes instead.
WIDTH_SPAN = 64


def lane_span(width: int) -> int:
    """The multiple a padded conv output width is rounded up to: the widest register tile for
    long rows, one vector for short ones (where rounding to 64 would waste more than it saves)."""
    return WIDTH_SPAN if width >= 8 * WIDTH_SPAN else 16


def is_int(v) -> bool:
    from tvm import tirx

    return isinstance(v, (int, tirx.IntImm))


def const_offset(expr) -> int | None:
    """``expr`` simplified to an integer constant, or None (e.g. it still depends on a length)."""
    import tvm.sym
    from tvm import tirx

    v = tvm.sym.Analyzer().simplify(expr)
    return int(v) if isinstance(v, tirx.IntImm) else None
