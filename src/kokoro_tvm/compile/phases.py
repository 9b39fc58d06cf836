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

A pass is a function ``(module, Context) -> module``; the ``Context`` carries the target, the
tuning database and what earlier passes found (the tuned kernels, the schedule report). Both the
legalize and the build stage import this module, so the code fingerprint of each covers the
other phase's passes too: an edit to either phase reruns both stages (a legalize stage whose own
passes did not change writes the same module again).
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import (
    attention,
    batch_matmul,
    metaschedule,
    prepack,
    retarget,
    schedule,
    symbolic,
    tvm_fixes,
)
from .legalizations import LEGALIZE_MAP

DUMP_ENV, DUMP_DIR_ENV = "KOKORO_TVM_DUMP_IR", "KOKORO_TVM_DUMP_DIR"


@dataclass
class Context:
    """What the passes of one run share."""

    target: Any = None  # tvm.target.Target (build phase)
    tune_db: Path | None = None
    label: str = ""  # component-bucket[-target], names the dump directory
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


# -- legalize: Relax -> TIR, fused (target independent) ------------------------------------------


def _fold_batch_matmul_reshapes(mod, _ctx: Context):
    """``reshape(matmul(reshape(a), reshape(b)))`` that only merged batch axes -> ``matmul(a, b)``
    (``batch_matmul``): the attention mask's add becomes the matmul's epilogue."""
    return batch_matmul.fold_batch_matmul_reshapes(mod)


def _fuse_attention(mod, _ctx: Context):
    """``softmax(q @ kt [+ mask])`` with PyTorch's safe-softmax guard, times ``v`` -> one
    hand-written kernel (``attention``)."""
    return attention.fuse_attention(mod)


def _legalize_ops(mod, _ctx: Context):
    """TVM's LegalizeOps with our legalizations (``legalizations``) and, for bounded modules,
    reshapes kept as Relax reshapes (``symbolic.legalize_map``)."""
    from tvm import relax

    return relax.transform.LegalizeOps(
        customize_legalize_map=symbolic.legalize_map(LEGALIZE_MAP, mod)
    )(mod)


#: ``LegalizeOps`` uses our legalizations (``legalizations.LEGALIZE_MAP``: polyphase
#: conv1d_transpose, ...) over TVM's. ``LiftTransformParams`` then moves everything that depends
#: on parameters only (``nn.Linear`` weight transposes, LSTM ``b_ih + b_hh``, conv_transpose kernel
#: rearrangement, the LSTM's ``w_hh`` packing) out of ``main`` into ``main_transform_params``,
#: which a loader runs once (``runtime.vm.bind_params``): ``main`` then takes the *transformed*
#: parameters. ``EliminateCommonSubexpr`` runs before it so that a weight used in several places
#: (ALBERT shares one layer's weights across its 12 repeats) is transformed once: without it each
#: use was lifted on its own, and the duration library held and streamed 12 copies of ALBERT.
LEGALIZE = Phase(
    "legalize",
    (
        tvm_relax(
            "DecomposeOpsForInference",
            "batch/layer norms and other composite ops into their primitive ops.",
        ),
        Pass.of("FoldBatchMatmulReshapes", _fold_batch_matmul_reshapes),
        Pass.of("FuseAttention", _fuse_attention),
        tvm_relax(
            "EliminateCommonSubexpr",
            "one binding per distinct expression (a shared weight is transformed once).",
        ),
        Pass.of("LegalizeOps", _legalize_ops),
        tvm_relax(
            "LiftTransformParams",
            "parameter-only work into main_transform_params, run once at load.",
        ),
        tvm_relax(
            "AnnotateTIROpPattern",
            "each PrimFunc's fusion pattern (elementwise, injective, reduction, ...).",
        ),
        tvm_relax("FoldConstant", "evaluate what depends on constants only."),
        tvm_relax("FuseOps", "group fusible calls by their patterns."),
        tvm_relax("FuseTIR", "each group into one PrimFunc."),
        tvm_relax("DeadCodeElimination", "drop unused bindings and functions."),
    ),
)


def legalize(mod, label: str = ""):
    """Run ``LEGALIZE`` on an imported module."""
    if "num_input" not in (mod["main"].attrs or {}):
        raise ValueError(
            "legalize needs main's 'num_input' attr (import with keep_params_as_input "
            "and detach_params) to tell inputs from parameters"
        )
    return run(LEGALIZE, mod, Context(label=label))


# -- build: schedule for the target, then codegen ------------------------------------------------


def _reshapes_as_views(mod, _ctx: Context):
    """Bounded modules: reshapes, and kernels that only reshape, become views
    (``symbolic.reshapes_as_views``)."""
    return symbolic.reshapes_as_views(mod)


def _retarget_hand_written(mod, ctx: Context):
    """Winograd's conv kernels made again for the target's vector registers (``retarget``)."""
    return retarget.retarget(mod, ctx.target)


def _apply_tuning_database(mod, ctx: Context):
    """Kernels with a record in the tune stage's database take the tuned schedule
    (``metaschedule.apply``)."""
    mod, ctx.tuned = metaschedule.apply(mod, ctx.target, ctx.tune_db)
    return mod


def _schedule_rules(mod, ctx: Context):
    """Every kernel not tuned gets the first rule that applies (``schedule.apply``); the report
    says which."""
    mod, ctx.report = schedule.apply(mod, ctx.target, ctx.tuned)
    return mod


def _prepack_weights(mod, _ctx: Context):
    """Weight layout copies the rules marked, out of every call and into the load-time transform
    (``prepack``)."""
    return prepack.prepack(mod)


def _flat_transform_params(mod, _ctx: Context):
    """A weight transform entry that takes each weight as its own argument
    (``tvm_fixes.with_flat_transform_params``)."""
    return tvm_fixes.with_flat_transform_params(mod)


BUILD = Phase(
    "build",
    (
        Pass.of("ReshapesAsViews", _reshapes_as_views),
        Pass.of("RetargetHandWritten", _retarget_hand_written),
        Pass.of("ApplyTuningDatabase", _apply_tuning_database),
        Pass.of("ScheduleRules", _schedule_rules),
        Pass.of("PrepackWeights", _prepack_weights),
        Pass.of("FlatTransformParams", _flat_transform_params),
    ),
)


def relax_pipeline():
    """What ``tvm.compile`` runs on the Relax functions after ``BUILD``: TVM's default pipeline,
    then ``MarkNoAlias`` on every kernel and ``SortShapeFuncStores`` (``tvm_fixes``)."""
    import tvm
    from tvm import relax

    return tvm.transform.Sequential(
        [relax.get_pipeline("default"), tvm_fixes.mark_noalias(), tvm_fixes.sorted_shape_stores()]
    )


@functools.cache
def tir_pipeline() -> str:
    """The name of the TIR lowering ``tvm.compile`` is asked for: TVM's default for CPUs
    (``s_tir``), then ``OrderMinMaxOperands`` (``tvm_fixes.ordered_min_max``). Registered with
    TVM (``register_tir_pipeline``) on the first call."""
    import tvm

    name = "kokoro_tvm"

    def make():
        lower, finalize_host, finalize_device = tvm.tirx.get_tir_pipeline("s_tir")
        return (
            tvm.transform.Sequential([lower, tvm_fixes.ordered_min_max()], name=name),
            finalize_host,
            finalize_device,
        )

    tvm.tirx.compilation_pipeline.register_tir_pipeline(name, make)
    return name


def make_target(spec: dict[str, Any]):
    import tvm

    return tvm.target.Target(dict(spec))


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
    mod = run(BUILD, mod, ctx)
    ex = tvm.compile(
        mod, target=ctx.target, relax_pipeline=relax_pipeline(), tir_pipeline=tir_pipeline()
    )
    return ex, time.perf_counter() - t0, ctx.report


# -- running a phase, with dumps -----------------------------------------------------------------

PHASES = (LEGALIZE, BUILD)


def run(phase: Phase, mod, ctx: Context):
    """Apply ``phase``'s passes in order, dumping the module after those ``$KOKORO_TVM_DUMP_IR``
    names."""
    wanted = _dump_names()
    names = {p.name for ph in PHASES for p in ph.passes}
    unknown = wanted - names - {"all"}
    if unknown:
        raise ValueError(f"{DUMP_ENV} names no pass {sorted(unknown)}; passes are {sorted(names)}")
    for i, p in enumerate(phase.passes):
        mod = p.run(mod, ctx)
        if "all" in wanted or p.name in wanted:
            _dump(mod, ctx, f"{phase.name}-{i:02d}-{p.name}")
    return mod


def _dump_names() -> set[str]:
    return {n.strip() for n in os.environ.get(DUMP_ENV, "").split(",") if n.strip()}


def _dump(mod, ctx: Context, stem: str) -> None:
    root = Path(os.environ.get(DUMP_DIR_ENV) or Path("ir-dump") / (ctx.label or "module"))
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{stem}.py").write_text(mod.script(), encoding="utf-8")


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
