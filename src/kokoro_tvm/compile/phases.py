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
    KOKORO_TVM_DUMP_IR=all python stages/legalize.py decoder 512

writes ``<phase>-<NN>-<pass>.py`` (TVMScript) under ``$KOKORO_TVM_DUMP_DIR`` (default
``ir-dump/<component>-<bucket>`` or ``ir-dump``). A dump never changes what is built.

A pass is a function ``(module, Context) -> module`` (``passes``); the ``Context`` carries the
target, the tuning database and what earlier passes found (the tuned kernels, the schedule
report). Each phase is its own module (``phase_legalize``, ``phase_build``) and each stage imports
only its own, so an edit to a schedule rule reruns build, never legalize.
"""

from __future__ import annotations

from .passes import DUMP_DIR_ENV, DUMP_ENV, Context, Pass, Phase, run, tvm_relax
from .phase_build import BUILD, build, make_target, relax_pipeline, tir_pipeline
from .phase_legalize import LEGALIZE, legalize

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
