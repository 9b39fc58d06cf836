"""dense / matmul / batch_matmul whose weight is streamed along the output's inner axis.

``out[b.., i, j] += a[b.., i, k] * w[b.., k, j]`` (the layout Relax gives ``nn.Linear`` after its
``permute_dims``): the same register tile as conv, rows along ``i``. With ``i`` of extent 1 (one
token, a style vector) it degenerates to a vectorized GEMV, which is memory bound anyway.
"""

from __future__ import annotations

from tvm import s_tir

from .analysis import CPU, root_blocks
from .conv import _anchor, schedule_matched
from .tile import match


def schedule(sch: s_tir.Schedule, cpu: CPU) -> bool:
    anchor = _anchor(root_blocks(sch) or [])
    if anchor is None or match(anchor) is None:
        return False
    return schedule_matched(sch, cpu, anchor.stmt.name_hint)
