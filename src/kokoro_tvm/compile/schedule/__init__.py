"""CPU schedule pass: rule-based (no tuning) schedules for every PrimFunc of a legalized module.

The legalize phase leaves naive loop nests (one scalar loop per tensor axis); ``tvm.compile``
on those runs many times slower than PyTorch eager. ``apply`` gives each PrimFunc the first rule
that matches its structure:

========== ==============================================================================
rule       structure it matches
========== ==============================================================================
rows       sums per row (written as partial sums) read by one output over those rows:
           each row's sums inside the output's row loop (the instance norm and its epilogue)
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

from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

import tvm
from tvm import s_tir, tirx

from ..symbolic import upper_bounds
from . import conv, generic, injective, matmul, reduction, rows
from .analysis import CPU, RuleMismatch, assume_bounds, is_scheduled

__all__ = [
    "RULES",
    "ScheduleReport",
    "ScheduleRules",
    "apply",
    "mark_tuned",
    "report_of",
    "unmarked",
]

#: Tried in order; the first that returns a schedule owns the function. A rule takes the
#: PrimFunc and the CPU and returns its schedule, or None where it does not apply.
RULES = {
    "rows": rows.schedule,
    "conv": conv.schedule,
    "matmul": matmul.schedule,
    "reduction": reduction.schedule,
    "injective": injective.schedule,
    "generic": generic.schedule,
}
FALLBACK = "generic"
#: PrimFunc attributes that carry what scheduled a kernel (a rule's name, "tuned",
#: "prescheduled", "none") and the last rule that gave up on it part-way, down the build to
#: ``report_of``: the passes hand their findings on in the module, not beside it. ``unmarked``
#: drops them before ``tvm.compile``: they say nothing to the codegen, but extra objects move
#: where TVM's others lie, and the lowering of the hand-written attention kernel orders an
#: integer ``min``'s operands by address (the duration library's bytes changed with them).
RULE_ATTR = "kokoro.schedule_rule"
ERROR_ATTR = "kokoro.schedule_error"


@dataclass
class ScheduleReport:
    """Which rule scheduled each PrimFunc; JSON-serializable via ``as_dict``."""

    target: str
    functions: dict[str, str] = field(default_factory=dict)  # PrimFunc name -> rule
    fallbacks: list[str] = field(default_factory=list)  # got ``generic`` or nothing
    errors: dict[str, str] = field(default_factory=dict)  # rules that gave up part-way

    def as_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for rule in self.functions.values():
            counts[rule] = counts.get(rule, 0) + 1
        return {**asdict(self), "counts": counts}


@tvm.transform.module_pass(opt_level=0, name="ScheduleRules")
class ScheduleRules:
    """Every kernel not tuned gets the first rule that applies; the kernel keeps the rule's name
    (``RULE_ATTR``) for the report."""

    def __init__(self, target: tvm.target.Target | None) -> None:
        self.target = target

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        cpu = CPU.of(self.target)
        updates = {}
        with assume_bounds(upper_bounds(mod)):  # symbolic extents: choices made at the bucket
            for gv, func in mod.functions.items():
                if isinstance(func, tirx.PrimFunc) and RULE_ATTR not in (func.attrs or {}):
                    updates[gv] = _schedule_func(func, cpu)
        out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
        for gv, func in updates.items():
            out[gv] = func
        return out


def mark_tuned(mod: tvm.IRModule, names: Collection[str]) -> tvm.IRModule:
    """``mod`` with the PrimFuncs named marked as scheduled by a tuning record: the rules leave
    them alone."""
    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if gv.name_hint in names and isinstance(func, tirx.PrimFunc):
            out[gv] = func.with_attr(RULE_ATTR, "tuned")
    return out


def report_of(mod: tvm.IRModule, target: tvm.target.Target) -> ScheduleReport:
    """What scheduled each kernel of a module ``ScheduleRules`` ran on."""
    report = ScheduleReport(target=str(target))
    for gv, func in mod.functions.items():
        attrs = (func.attrs or {}) if isinstance(func, tirx.PrimFunc) else {}
        if RULE_ATTR not in attrs:
            continue
        name, rule = gv.name_hint, str(attrs[RULE_ATTR])
        report.functions[name] = rule
        if rule in (FALLBACK, "none"):
            report.fallbacks.append(name)
        if ERROR_ATTR in attrs:
            report.errors[name] = str(attrs[ERROR_ATTR])
    return report


def unmarked(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` without the marks ``ScheduleRules`` and ``mark_tuned`` left (read them first with
    ``report_of``)."""
    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            for key in (RULE_ATTR, ERROR_ATTR):
                if key in (func.attrs or {}):
                    func = func.without_attr(key)
            out[gv] = func
    return out


def apply(
    mod: tvm.IRModule, target: tvm.target.Target | dict, tuned: Collection[str] = ()
) -> tuple[tvm.IRModule, ScheduleReport]:
    """Schedule every PrimFunc of ``mod`` for ``target``; Relax functions are kept as they are,
    and so are the PrimFuncs named in ``tuned`` (a MetaSchedule record already scheduled them).
    The module comes back without the marks, as ``build`` compiles it: they shift where TVM's
    objects sit, and one lowering orders operands by address."""
    if isinstance(target, dict):
        target = tvm.target.Target(target)
    marked = ScheduleRules(target)(mark_tuned(mod, tuned))
    return unmarked(marked), report_of(marked, target)


def _schedule_func(func: tirx.PrimFunc, cpu: CPU) -> tirx.PrimFunc:
    """``func`` scheduled by the first rule that applies, marked with that rule's name."""
    if is_scheduled(func):
        return func.with_attr(RULE_ATTR, "prescheduled")
    error = None
    for rule, fn in RULES.items():
        try:
            sch = fn(func, cpu)
        except (RuleMismatch, s_tir.ScheduleError) as err:
            # a rule that matched but could not finish; the next rule starts from ``func`` again
            error = f"{rule}: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
            continue
        if sch is not None:
            return _marked(sch.mod["main"], rule, error)
    return _marked(func, "none", error)


def _marked(func: tirx.PrimFunc, rule: str, error: str | None) -> tirx.PrimFunc:
    func = func.with_attr(RULE_ATTR, rule)
    return func if error is None else func.with_attr(ERROR_ATTR, error)
