"""Running a compile phase with TVM's own pass infrastructure: a phase is a
``tvm.transform.Sequential`` of module passes (``phase_legalize``, ``phase_build``), and the IR
dumps ``$KOKORO_TVM_DUMP_IR`` names come from a pass instrument, so a dump never changes what is
built. What a pass finds for a later one travels in the module (PrimFunc attributes), not beside
it; ``phases`` shows both phases in order and runs them.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

import tvm

DUMP_ENV, DUMP_DIR_ENV = "KOKORO_TVM_DUMP_IR", "KOKORO_TVM_DUMP_DIR"


def names(phase: tvm.transform.Sequential) -> list[str]:
    """The names of a phase's passes, in order."""
    return [p.info.name for p in phase.passes]


@tvm.instrument.pass_instrument
class DumpAfter:
    """Writes the module after each of a phase's own passes ``wanted`` names (or all) to
    ``<root>/<phase>-<NN>-<pass>.py``, NN the pass's place in the phase. Passes that a pass
    runs inside itself are not the phase's and are not dumped."""

    def __init__(self, phase: tvm.transform.Sequential, wanted: set[str], root: Path) -> None:
        self.phase, self.order = phase.info.name, names(phase)
        self.wanted, self.root = wanted, root
        self.depth, self.base = 0, None

    def run_before_pass(self, _mod, info) -> None:
        self.depth += 1
        if info.name == self.phase and self.base is None:
            self.base = self.depth

    def run_after_pass(self, mod, info) -> None:
        own = self.base is not None and self.depth == self.base + 1
        if own and info.name in self.order and ("all" in self.wanted or info.name in self.wanted):
            self.root.mkdir(parents=True, exist_ok=True)
            stem = f"{self.phase}-{self.order.index(info.name):02d}-{info.name}"
            (self.root / f"{stem}.py").write_text(mod.script(), encoding="utf-8")
        if info.name == self.phase and self.depth == self.base:
            self.base = None
        self.depth -= 1


def run(phase: tvm.transform.Sequential, mod, known: Collection[str], label: str = ""):
    """Apply ``phase`` to ``mod``, dumping the module after the passes ``$KOKORO_TVM_DUMP_IR``
    names. ``known``: the pass names of every phase of the flow (one ``dvc repro`` runs both
    phases under one setting); a name none of them has is refused."""
    wanted = {n.strip() for n in os.environ.get(DUMP_ENV, "").split(",") if n.strip()}
    unknown = wanted - set(known) - {"all"}
    if unknown:
        raise ValueError(f"{DUMP_ENV} names no pass {sorted(unknown)}; passes are {sorted(known)}")
    if not wanted:
        return phase(mod)
    root = Path(os.environ.get(DUMP_DIR_ENV) or Path("ir-dump") / (label or "module"))
    outer = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(
        opt_level=outer.opt_level,
        required_pass=list(outer.required_pass),
        disabled_pass=list(outer.disabled_pass),
        instruments=[*outer.instruments, DumpAfter(phase, wanted, root)],
        config=dict(outer.config),
    ):
        return phase(mod)
