"""What the hand-written TIR kernels (the LSTM recurrence, the fused attention) share with the
rest of the pipeline, outside the schedule package: the stages that make those kernels (relax,
legalize) import this module, and importing ``compile.schedule`` would make every schedule rule
a dependency of theirs (``pipeline/code.py`` fingerprints what a stage can import)."""

from __future__ import annotations

#: PrimFunc attribute of a hand-written kernel (no blocks for the roofline to count): its FLOPs
#: as an expression of its own size variables, which ``eval.roofline`` evaluates at a call's shapes.
FLOPS = "kokoro_tvm.flops"


def largest_divisor(n: int, options) -> int:
    """The first of ``options`` (largest first) that divides ``n`` and is at most ``n``; else 1."""
    return next((k for k in options if k <= n and n % k == 0), 1)
