"""The build phase: every kernel scheduled for the target, then ``tvm.compile``."""

from __future__ import annotations

import functools
from typing import Any

from . import metaschedule, prepack, retarget, schedule, symbolic, tvm_fixes
from .passes import Context, Pass, Phase


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
