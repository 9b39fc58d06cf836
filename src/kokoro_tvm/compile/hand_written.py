"""What the hand-written TIR kernels (the LSTM recurrence, the fused attention, Winograd's convs)
share with the rest of the pipeline, outside the schedule package: the stages that make those
kernels (relax, legalize) import this module, and importing ``compile.schedule`` would make every
schedule rule a dependency of theirs (``pipeline/code.py`` fingerprints what a stage can import)."""

from __future__ import annotations

#: PrimFunc attribute of a hand-written kernel (no blocks for the roofline to count): its FLOPs
#: as an expression of its own size variables, which ``eval.roofline`` evaluates at a call's shapes.
FLOPS = "kokoro_tvm.flops"
#: PrimFunc attributes of a hand-written kernel whose register tile depends on the target: the
#: name of its maker (``compile/retarget.py``) and the sizes it was made with. The legalize stage
#: runs once for every target and makes it for AVX2; the build makes it again for its target's
#: vector registers (same signature, same results).
MAKER = "kokoro_tvm.maker"
MAKER_ARGS = "kokoro_tvm.maker_args"
#: ``(lanes, registers)`` the legalize stage makes retargetable kernels for (AVX2).
MADE_FOR = (8, 16)


def made_by(func, maker: str, **sizes: int):
    """``func`` marked as made by ``maker`` from ``sizes`` (``MAKER``, ``MAKER_ARGS``)."""
    return func.with_attr(MAKER, maker).with_attr(MAKER_ARGS, sizes)


def maker_of(func) -> tuple[str, dict[str, int]] | None:
    """``(maker, sizes)`` of a kernel ``made_by`` marked, None for any other function."""
    attrs = getattr(func, "attrs", None)
    if attrs is None or MAKER not in attrs:
        return None
    return str(attrs[MAKER]), {str(k): int(v) for k, v in attrs[MAKER_ARGS].items()}


def find_made(mod, maker: str, **sizes: int):
    """The GlobalVar of the kernel in ``mod`` that ``maker`` made from ``sizes``, or None.

    Legalizing reuses it for every call of one shape: ``BlockBuilder.add_func`` deduplicates by
    structural equality, and two identical kernels are unequal there when an attribute (``FLOPS``)
    refers to a size variable, since tvm-ffi compares a function's attributes before the
    buffers that define the variable (the decoder had 55 Winograd kernels for 19 shapes)."""
    return next(
        (gv for gv, func in mod.functions.items() if maker_of(func) == (maker, sizes)), None
    )


def largest_divisor(n: int, options) -> int:
    """The first of ``options`` (largest first) that divides ``n`` and is at most ``n``; else 1."""
    return next((k for k in options if k <= n and n % k == 0), 1)
