"""What a compile phase is made of: passes (``(module, Context) -> module``), the ``Context``
they share, and running a phase's passes in order with IR dumps after those
``$KOKORO_TVM_DUMP_IR`` names. The phases themselves are ``phase_legalize`` and ``phase_build``;
``phases`` shows both in order and runs them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DUMP_ENV, DUMP_DIR_ENV = "KOKORO_TVM_DUMP_IR", "KOKORO_TVM_DUMP_DIR"


@dataclass
class Context:
    """What the passes of one run share."""

    target: Any = None  # tvm.target.Target (build phase)
    tune_db: Path | None = None
    label: str = ""  # component-bucket[-target], names the dump directory
    precision: str = "fp32"  # the convs' products (compile/bf16.py): "fp32" or "bf16"
    tuned: set[str] = field(default_factory=set)  # kernels the tuning database scheduled
    report: Any = None  # schedule.ScheduleReport, once ScheduleRules ran


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Any, Context], Any]
    doc: str

    @staticmethod
    def of(name: str, run: Callable[[Any, Context], Any]) -> Pass:
        """A pass whose description is the first paragraph of ``run``'s docstring."""
        return Pass(name, run, re.sub(r"\s+", " ", (run.__doc__ or "").strip().split("\n\n")[0]))


@dataclass(frozen=True)
class Phase:
    name: str
    passes: tuple[Pass, ...]


def tvm_relax(name: str, doc: str) -> Pass:
    """One of TVM's own Relax module passes, ``relax.transform.<name>()``, by its TVM name."""

    def run(mod, _ctx: Context):
        from tvm import relax

        return getattr(relax.transform, name)()(mod)

    return Pass(name, run, f"TVM: {doc}")


def run(phase: Phase, mod, ctx: Context, every: tuple[Phase, ...] = ()):
    """Apply ``phase``'s passes in order, dumping the module after those ``$KOKORO_TVM_DUMP_IR``
    names. ``every``: all the phases of the flow (``phases.PHASES``), one run of which may name
    passes of another: a name none of them has is refused."""
    wanted = _dump_names()
    _check_dump_names(wanted, (phase, *every))
    for i, p in enumerate(phase.passes):
        mod = p.run(mod, ctx)
        if "all" in wanted or p.name in wanted:
            _dump(mod, ctx, f"{phase.name}-{i:02d}-{p.name}")
    return mod


def _check_dump_names(wanted: set[str], every: tuple[Phase, ...]) -> None:
    """Refuse a name no phase has."""
    names = {p.name for ph in every for p in ph.passes}
    unknown = wanted - names - {"all"}
    if unknown:
        raise ValueError(f"{DUMP_ENV} names no pass {sorted(unknown)}; passes are {sorted(names)}")


def _dump_names() -> set[str]:
    return {n.strip() for n in os.environ.get(DUMP_ENV, "").split(",") if n.strip()}


def _dump(mod, ctx: Context, stem: str) -> None:
    root = Path(os.environ.get(DUMP_DIR_ENV) or Path("ir-dump") / (ctx.label or "module"))
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{stem}.py").write_text(mod.script(), encoding="utf-8")
