"""The compile flow after the import, as two sequences of TVM passes: read the order here.

    relax stage     torch.export (``torch_export`` over ``model.components``) ->
                    from_exported_program with our converters (``convert_map``,
                    ``lstm_lowering``) -> detach_params (``importer``)
    legalize stage  ``phase_legalize.phase``: lower Relax to TIR and fuse, for every target
    build stage     ``phase_build.phase``: schedule every kernel for the target, then
                    ``tvm.compile``
                    (``codegen``: TVM's default Relax pipeline and TIR lowering, each followed
                    by the passes that make its output the same bytes in every process)

``python -m kokoro_tvm.compile.phases`` prints the flow, one pass a line. A phase is a
``tvm.transform.Sequential`` that applies its passes in order, and can dump the
module after any of them:

    KOKORO_TVM_DUMP_IR=LegalizeOps,ScheduleRules dvc repro -f build_tokens@duration-64-x86_64_v3
    KOKORO_TVM_DUMP_IR=all python -m kokoro_tvm.pipeline.legalize decoder 512

writes ``<phase>-<NN>-<pass>.py`` (TVMScript) under ``$KOKORO_TVM_DUMP_DIR`` (default
``ir-dump/<component>-<bucket>`` or ``ir-dump``). A dump never changes what is built.

A phase is a ``tvm.transform.Sequential`` of TVM module passes, built for its options (the
precision, the target and tuning database) in its own module (``phase_legalize``,
``phase_build``); what one pass finds for a later one (the kernels a tuning record scheduled, the
rule each kernel got) travels in the module as PrimFunc attributes. Running either phase goes
through here (``legalize``, ``build``), where every pass name is known, so a dump naming a pass
of no phase is refused in either stage.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

from . import phase_build, phase_legalize, schedule
from .passes import DUMP_DIR_ENV, DUMP_ENV, names, run
from .phase_build import make_target, relax_pipeline, tir_pipeline

__all__ = [
    "DUMP_DIR_ENV",
    "DUMP_ENV",
    "build",
    "describe",
    "legalize",
    "make_target",
    "pass_names",
    "relax_pipeline",
    "tir_pipeline",
]


@functools.cache
def pass_names() -> dict[str, tuple[str, ...]]:
    """Each phase's pass names, in order: ``{"legalize": (...), "build": (...)}``."""
    return {p.info.name: tuple(names(p)) for p in (phase_legalize.phase(), phase_build.phase(None))}


def _known() -> set[str]:
    return {n for phase in pass_names().values() for n in phase}


def legalize(mod, label: str = "", precision: str = "fp32"):
    """Run the legalize phase on an imported module; ``precision`` "bf16" computes the
    generator's convs with bf16 products (``compile/bf16.py``; the build then needs a target with
    ``bf16.FEATURES``)."""
    phase = phase_legalize.phase(precision)  # an unknown precision fails here, before any pass
    if "num_input" not in (mod["main"].attrs or {}):
        raise ValueError(
            "legalize needs main's 'num_input' attr (import with keep_params_as_input "
            "and detach_params) to tell inputs from parameters"
        )
    return run(phase, mod, _known(), label)


def build(mod, target_spec: dict[str, Any], tune_db: Path | None = None, label: str = ""):
    """The build phase on a legalized module, then ``tvm.compile``.

    PrimFuncs with a record in the ``tune_db`` database (``metaschedule.tune``: only records that
    beat the rules are there) take the tuned schedule; the schedule rules do the rest.
    Returns the executable, the build seconds (schedule pass included) and the ``ScheduleReport``
    (which rule each PrimFunc got, ``tuned`` included, and which fell back to the generic one).
    """
    import tvm

    target = make_target(target_spec)
    t0 = time.perf_counter()
    mod = run(phase_build.phase(target, tune_db), mod, _known(), label)
    report = schedule.report_of(mod, target)
    ex = tvm.compile(
        schedule.unmarked(mod),
        target=target,
        relax_pipeline=relax_pipeline(),
        tir_pipeline=tir_pipeline(),
    )
    return ex, time.perf_counter() - t0, report


def describe() -> str:
    """One line per pass, in order, with its phase and what it does."""
    lines = [f"{'relax':<9} torch.export -> from_exported_program -> detach_params"]
    for phase in (phase_legalize.phase(), phase_build.phase(None)):
        for name in names(phase):
            lines.append(f"{phase.info.name:<9} {name:<26} {_doc(name)}")
    lines.append(
        f"{'build':<9} {'tvm.compile':<26} TVM's default Relax pipeline (with "
        "ShareStorageAcrossDtypes), MarkNoAlias, SortShapeFuncStores; TVM's TIR lowering, "
        "OrderMinMaxOperands."
    )
    return "\n".join(lines)


def _doc(name: str) -> str:
    """A pass's description: TVM's from ``phase_legalize.TVM_PASSES``, ours from the first
    paragraph of its class's docstring."""
    if name in phase_legalize.TVM_PASSES:
        return f"TVM: {phase_legalize.TVM_PASSES[name]}"
    owners = (phase_legalize, phase_build, schedule)
    cls = next(getattr(m, name) for m in owners if hasattr(m, name))
    return " ".join((cls.__doc__ or "").split("\n\n")[0].split())


if __name__ == "__main__":
    print(describe())
