"""CPU schedule pass: rule-based (no tuning) schedules for every PrimFunc of a legalized module.

``phases.LEGALIZE`` leaves naive loop nests (one scalar loop per tensor axis); ``tvm.compile``
on those runs many times slower than PyTorch eager. ``apply`` gives each PrimFunc the first rule
that matches its structure:

========== ==============================================================================
rule       structure it matches
========== ==============================================================================
conv       one reduction ``[n, f, y | r...]`` streaming a row of the data along ``y``
           (conv1d, conv_transpose1d, with producers such as pad and fused epilogues)
matmul     one reduction ``[..., i, j | k]`` streaming ``B[.., k, j]`` (dense, matmul, LSTM
           input projections)
reduction  reductions that keep the inner axis of their input (norm statistics, softmax,
           sums; vectorized by an rfactor when the axis divides by the lanes), and
           reductions that read a transposed operand (``Q @ K^T``)
injective  only spatial blocks (elementwise, broadcast, transpose, concat, take, ...)
generic    anything else: parallel + vectorize the outer spatial loops of every block
========== ==============================================================================

Strided conv1d and conv_transpose1d reach this pass as stride-1 convs (``legalizations``), so the
conv rule tiles them; a conv whose channels and width both miss the lane count arrives with its
width padded to a multiple of the widest tile (``legalizations``), so no vector lane is predicated.

Functions that already carry a schedule (hand-written TIR such as ``kokoro_lstm_*``) are left
alone. ``ScheduleReport`` says which rule each function got and lists the ones that fell back
to ``generic`` (or stayed unscheduled), so slow paths are visible in build info.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

import tvm
from tvm import s_tir, tirx

from ..symbolic import upper_bounds
from . import conv, generic, injective, matmul, reduction
from .analysis import CPU, assume_bounds, is_scheduled

__all__ = ["RULES", "ScheduleReport", "apply"]

log = logging.getLogger(__name__)

#: Tried in order; the first that returns True owns the function.
RULES = {
    "conv": conv.schedule,
    "matmul": matmul.schedule,
    "reduction": reduction.schedule,
    "injective": injective.schedule,
}
FALLBACK = "generic"


@dataclass
class ScheduleReport:
    """Which rule scheduled each PrimFunc; JSON-serializable via ``as_dict``."""

    target: str
    functions: dict[str, str] = field(default_factory=dict)  # PrimFunc name -> rule
    fallbacks: list[str] = field(default_factory=list)  # got ``generic`` or nothing
    errors: dict[str, str] = field(default_factory=dict)  # rule failures on the way

    def as_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for rule in self.functions.values():
            counts[rule] = counts.get(rule, 0) + 1
        return {**asdict(self), "counts": counts}


def apply(
    mod: tvm.IRModule, target: tvm.target.Target | dict, tuned: Collection[str] = ()
) -> tuple[tvm.IRModule, ScheduleReport]:
    """Schedule every PrimFunc of ``mod`` for ``target``; Relax functions are kept as they are,
    and so are the PrimFuncs named in ``tuned`` (a MetaSchedule record already scheduled them)."""
    if isinstance(target, dict):
        target = tvm.target.Target(target)
    cpu = CPU.of(target)
    report = ScheduleReport(target=str(target))
    updates = {}
    with assume_bounds(upper_bounds(mod)):  # symbolic extents: choices made at the bucket
        for gv, func in mod.functions.items():
            if not isinstance(func, tirx.PrimFunc):
                continue
            name = gv.name_hint
            if name in tuned:
                report.functions[name] = "tuned"
                continue
            scheduled, rule = _schedule_func(func, cpu, name, report)
            report.functions[name] = rule
            if rule in (FALLBACK, "none"):
                report.fallbacks.append(name)
            if scheduled is not None:
                updates[gv] = scheduled
    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gv, func in updates.items():
        out[gv] = func
    return out, report


def _schedule_func(
    func: tirx.PrimFunc, cpu: CPU, name: str, report: ScheduleReport
) -> tuple[tirx.PrimFunc | None, str]:
    if is_scheduled(func):
        return None, "prescheduled"
    rules = dict(RULES, **{FALLBACK: generic.schedule})
    for rule, fn in rules.items():
        sch = s_tir.Schedule(tvm.IRModule({"main": func}))
        try:
            if fn(sch, cpu):
                return sch.mod["main"], rule
        except Exception as err:
            # A rule that matched but could not finish; the next rule gets a fresh schedule.
            report.errors[name] = (
                f"{rule}: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
            )
            log.debug("rule %s failed on %s: %s", rule, name, err)
    return None, "none"
