"""The compile flow after the import, as two lists of pass objects: read the order here.

    relax stage     torch.export (``torch_export`` over ``model.components``) ->
                    from_exported_program with our converters (``convert_map``,
                    ``lstm_lowering``) -> detach_params (``importer``)
    legalize stage  ``LEGALIZE``: lower Relax to TIR and fuse, for every target alike
    build stage     ``BUILD``: schedule every kernel for the target, then ``tvm.compile``
                    (``codegen``: TVM's default Relax pipeline and TIR lowering, each followed
                    by the passes that make its output the same bytes in every process)

``python -m kokoro_tvm.compile.phases`` prints the flow, one pass a line. A phase applies its
passes in order, exactly as a ``tvm.transform.Sequential`` of them would, and can dump the
module after any of them:

    KOKORO_TVM_DUMP_IR=LegalizeOps,ScheduleRules dvc repro -f build_tokens@duration-64-x86_64_v3
    KOKORO_TVM_DUMP_IR=all python -m kokoro_tvm.pipeline.legalize decoder 512

writes ``<phase>-<NN>-<pass>.py`` (TVMScript) under ``$KOKORO_TVM_DUMP_DIR`` (default
``ir-dump/<component>-<bucket>`` or ``ir-dump``). A dump never changes what is built.

A pass is a function ``(module, Context) -> module`` (``passes``); the ``Context`` carries the
target, the tuning database and what earlier passes found (the tuned kernels, the schedule
report). Each phase's passes are their own module (``phase_legalize``, ``phase_build``); running
either phase goes through here (``legalize``, ``build``), where every pass name is known, so a
dump naming a pass of no phase is refused in either stage.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .legalizations import legalize_map
from .passes import DUMP_DIR_ENV, DUMP_ENV, Context, Pass, Phase, run, tvm_relax
from .phase_build import BUILD, make_target, relax_pipeline, tir_pipeline
from .phase_legalize import LEGALIZE

PHASES = (LEGALIZE, BUILD)

__all__ = [
    "BUILD",
    "DUMP_DIR_ENV",
    "DUMP_ENV",
    "LEGALIZE",
    "PHASES",
    "Context",
    "Pass",
    "Phase",
    "build",
    "describe",
    "legalize",
    "make_target",
    "relax_pipeline",
    "run",
    "tir_pipeline",
    "tvm_relax",
]


def legalize(mod, label: str = "", precision: str = "fp32"):
    """Run ``LEGALIZE`` on an imported module; ``precision`` "bf16" computes the generator's convs
    with bf16 products (``compile/bf16.py``; the build then needs a target with
    ``bf16.FEATURES``)."""
    legalize_map(precision)  # an unknown precision fails here, before any pass runs
    if "num_input" not in (mod["main"].attrs or {}):
        raise ValueError(
            "legalize needs main's 'num_input' attr (import with keep_params_as_input "
            "and detach_params) to tell inputs from parameters"
        )
    return run(LEGALIZE, mod, Context(label=label, precision=precision), PHASES)


def build(mod, target_spec: dict[str, Any], tune_db: Path | None = None, label: str = ""):
    """``BUILD`` on a legalized module, then ``tvm.compile``.

    PrimFuncs with a record in the ``tune_db`` database (``metaschedule.tune``: only records that
    beat the rules are there) take the tuned schedule; the schedule rules do the rest.
    Returns the executable, the build seconds (schedule pass included) and the ``ScheduleReport``
    (which rule each PrimFunc got, ``tuned`` included, and which fell back to the generic one).
    """
    import tvm

    ctx = Context(target=make_target(target_spec), tune_db=tune_db, label=label)
    t0 = time.perf_counter()
    mod = run(BUILD, mod, ctx, PHASES)
    ex = tvm.compile(
        mod, target=ctx.target, relax_pipeline=relax_pipeline(), tir_pipeline=tir_pipeline()
    )
    return ex, time.perf_counter() - t0, ctx.report


def describe() -> str:
    """One line per pass, in order, with its phase and what it does."""
    lines = [f"{'relax':<9} torch.export -> from_exported_program -> detach_params"]
    for phase in PHASES:
        lines += [f"{phase.name:<9} {p.name:<26} {p.doc}" for p in phase.passes]
    lines.append(
        f"{'build':<9} {'tvm.compile':<26} TVM's default Relax pipeline, MarkNoAlias, "
        "SortShapeFuncStores; TVM's TIR lowering, OrderMinMaxOperands."
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe())
