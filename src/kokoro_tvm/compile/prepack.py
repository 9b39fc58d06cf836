"""Weights packed once, when a library loads, instead of inside a kernel on every call.

A conv whose register tile runs its vector lanes along the output channels (``Tile.along_rows``)
reads its weight as contiguous per-tile runs: the rule copies the weight into that layout with a
``cache_read`` + ``transform_layout`` stage inside the kernel (``schedule.tile.tile_reduction``).
The copy depends on the weight only, yet it ran on every call, and took a large share of a wide
conv's time at short lengths (docs/measurements.md, "Prepacked conv weights").

The rule marks that stage as MetaSchedule marks its own layout rewrites (``PREPROC``). TVM's
``SplitLayoutRewritePreproc`` moves each marked stage into a kernel of its own, called on the
weight before the conv, and ``LiftTransformParams`` moves those calls, parameter-only, into the
weight transform that the runtime runs once per library load (``runtime.vm.bind_params``).
The legalize phase lifted its own parameter work already, so the transform becomes the two in a
row: legalize's, then the packing.
"""

from __future__ import annotations

#: The block annotation MetaSchedule's ``RewriteLayout`` puts on a weight layout rewrite, and which
#: ``SplitLayoutRewritePreproc`` splits out.
PREPROC = "meta_schedule.layout_rewrite_preproc"
TRANSFORM = "main_transform_params"


def _marked(func) -> bool:
    return PREPROC in func.script()


def _has_root_block(func) -> bool:
    from tvm import s_tir

    return isinstance(func.body, s_tir.SBlockRealize)


def prepack(mod):
    """``mod`` with every ``PREPROC`` stage of its kernels moved into ``TRANSFORM``."""
    import tvm
    from tvm import relax, tirx

    prims = {gv: f for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)}
    if not any(_marked(f) for f in prims.values()) or "num_input" not in (mod["main"].attrs or {}):
        return mod
    names = {gv.name_hint: gv for gv in mod.get_global_vars()}
    # TVM 0.27's SplitLayoutRewritePreproc requires a root block in every PrimFunc of the module; a
    # hand-written kernel (the LSTM recurrence) has none and no marked stage: it sits the pass out.
    # The weight transforms sit out the lifting, which would make a transform of each of them.
    aside = {
        gv: f
        for gv, f in mod.functions.items()
        if (gv in prims and not _has_root_block(f)) or gv.name_hint.startswith(TRANSFORM)
    }
    work = tvm.IRModule(
        {gv: f for gv, f in mod.functions.items() if gv not in aside}, attrs=mod.attrs
    )
    work = relax.transform.SplitLayoutRewritePreproc()(work)
    # one packing per weight, however many kernels read it (ALBERT's 12 layers share theirs)
    work = relax.transform.EliminateCommonSubexpr()(relax.transform.ConvertToDataflow()(work))
    # LiftTransformParams lifts from dataflow blocks only, and main has none by now; back out of
    # them afterwards, so that tvm.compile's FuseOps does not fuse the scheduled kernels again
    work = relax.transform.LiftTransformParams()(relax.transform.ConvertToDataflow()(work))
    work = relax.transform.ToNonDataflow()(work)
    packing = work[TRANSFORM]
    out = tvm.IRModule(
        {gv: f for gv, f in work.functions.items() if gv.name_hint != TRANSFORM}, attrs=mod.attrs
    )
    present = {gv.name_hint for gv in out.get_global_vars()}
    for gv, f in mod.functions.items():
        # what sat out, and the kernels only the legalize transform calls (the lifting drops
        # them as unused); the flat entry is remade from the new transform (FlatTransformParams)
        if gv.name_hint not in present and not gv.name_hint.startswith(TRANSFORM):
            out[gv] = f
    bb = relax.BlockBuilder(out)
    packing_gv = bb.add_func(packing.without_attr("global_symbol"), "main_transform_params_packing")
    if TRANSFORM in names:
        legalized = mod[names[TRANSFORM]]
        legalized_gv = bb.add_func(
            legalized.without_attr("global_symbol"), "main_transform_params_legalized"
        )
        (raw,) = [relax.Var("params", p.ty) for p in legalized.params]
        with bb.function(TRANSFORM, [raw], attrs={"num_input": 0, "global_symbol": TRANSFORM}):
            mid = bb.emit(relax.Call(legalized_gv, [raw]))
            bb.emit_func_output(bb.emit(relax.Call(packing_gv, [mid])))
    else:
        (raw,) = [relax.Var("params", p.ty) for p in packing.params]
        with bb.function(TRANSFORM, [raw], attrs={"num_input": 0, "global_symbol": TRANSFORM}):
            bb.emit_func_output(bb.emit(relax.Call(packing_gv, [raw])))
    # the kernels as they were before the split are called by nothing now
    return relax.transform.DeadCodeElimination()(bb.get())
