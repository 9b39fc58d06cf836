"""The build phase: every kernel scheduled for the target, then ``tvm.compile``."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import tvm

from . import metaschedule, prepack, retarget, schedule, storage_plan, symbolic, tvm_fixes


@tvm.transform.module_pass(opt_level=0, name="ReshapesAsViews")
class ReshapesAsViews:
    """Bounded modules: reshapes, and kernels that only reshape, become views
    (``symbolic.reshapes_as_views``)."""

    def transform_module(self, mod, _ctx):
        return symbolic.reshapes_as_views(mod)


@tvm.transform.module_pass(opt_level=0, name="RetargetHandWritten")
class RetargetHandWritten:
    """Winograd's conv kernels made again for the target's vector registers (``retarget``)."""

    def __init__(self, target) -> None:
        self.target = target

    def transform_module(self, mod, _ctx):
        return retarget.retarget(mod, self.target)


@tvm.transform.module_pass(opt_level=0, name="ApplyTuningDatabase")
class ApplyTuningDatabase:
    """Kernels with a record in the tune stage's database take the tuned schedule
    (``metaschedule.apply``), marked so that the rules leave them alone."""

    def __init__(self, target, tune_db: Path | None) -> None:
        self.target, self.tune_db = target, tune_db

    def transform_module(self, mod, _ctx):
        mod, tuned = metaschedule.apply(mod, self.target, self.tune_db)
        return schedule.mark_tuned(mod, tuned)


@tvm.transform.module_pass(opt_level=0, name="PrepackWeights")
class PrepackWeights:
    """Weight layout copies the rules marked, out of every call and into the load-time transform
    (``prepack``)."""

    def transform_module(self, mod, _ctx):
        return prepack.prepack(mod)


@tvm.transform.module_pass(opt_level=0, name="FlatTransformParams")
class FlatTransformParams:
    """A weight transform entry that takes each weight as its own argument
    (``tvm_fixes.with_flat_transform_params``)."""

    def transform_module(self, mod, _ctx):
        return tvm_fixes.with_flat_transform_params(mod)


def phase(target, tune_db: Path | None = None) -> tvm.transform.Sequential:
    """The build passes in order, for ``target`` (a ``tvm.target.Target``; None only to name
    them). ``ScheduleRules`` gives every kernel not tuned the first rule that applies
    (``schedule``)."""
    return tvm.transform.Sequential(
        [
            ReshapesAsViews(),
            RetargetHandWritten(target),
            ApplyTuningDatabase(target, tune_db),
            schedule.ScheduleRules(target),
            PrepackWeights(),
            FlatTransformParams(),
        ],
        name="build",
    )


def memory_planning_passes() -> list:
    """TVM's default Relax pipeline from dataflow to planned storages, in its order: what
    ``storage_plan.share_storage`` follows (``relax_pipeline``) and what its measurements and
    tests plan with."""
    from tvm.relax import transform

    return [
        transform.RewriteDataflowReshape(),
        transform.ToNonDataflow(),
        transform.RemovePurityChecking(),
        transform.CallTIRRewrite(),
        transform.StaticPlanBlockMemory(),
    ]


def relax_pipeline():
    """What ``tvm.compile`` runs on the Relax functions after the build phase: TVM's default
    pipeline (``relax.pipeline.default_build_pipeline``, its passes written out here so that
    ``ShareStorageAcrossDtypes`` (``storage_plan``) can follow ``StaticPlanBlockMemory``), then
    ``MarkNoAlias`` on every kernel and ``SortShapeFuncStores`` (``tvm_fixes``)."""
    from tvm.relax import backend, transform

    return tvm.transform.Sequential(
        [
            backend.DispatchSampling(),
            backend.DispatchSortScan(),
            transform.LegalizeOps(),
            *memory_planning_passes(),
            storage_plan.share_storage(),
            transform.RewriteCUDAGraph(),
            transform.LowerAllocTensor(),
            transform.KillAfterLastUse(),
            transform.LowerRuntimeBuiltin(),
            transform.ComputePrimValue(),
            transform.VMShapeLower(),
            transform.AttachGlobalSymbol(),
            tvm_fixes.mark_noalias(),
            tvm_fixes.sorted_shape_stores(),
        ]
    )


@functools.cache
def tir_pipeline() -> str:
    """The name of the TIR lowering ``tvm.compile`` is asked for: TVM's default for CPUs
    (``s_tir``), then ``OrderMinMaxOperands`` (``tvm_fixes.ordered_min_max``). Registered with
    TVM (``register_tir_pipeline``) on the first call."""
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
    return tvm.target.Target(dict(spec))
