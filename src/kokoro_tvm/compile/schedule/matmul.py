"""dense / matmul / batch_matmul whose weight is streamed along the output's inner axis.

``out[b.., i, j] += a[b.., i, k] * w[b.., k, j]`` (the layout Relax gives ``nn.Linear`` after its
``permute_dims``): the same register tile as conv, rows along ``i``. With ``i`` of extent 1 (one
token, a style vector) it degenerates to a vectorized GEMV, which is memory bound anyway.
"""

from __future__ import annotations

from tvm import s_tir, tirx

from .analysis import CPU, new_schedule, root_blocks, single_reduction
from .conv import schedule_matched
from .tile import match


def schedule(func: tirx.PrimFunc, cpu: CPU) -> s_tir.Schedule | None:
    sch = new_schedule(func)
    anchor = single_reduction(root_blocks(sch) or [])
    if anchor is None or match(anchor) is None:
        return None
    return sch if schedule_matched(sch, cpu, anchor.stmt.name_hint) else None
