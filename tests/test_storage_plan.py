"""``storage_plan.share_storage``: storages shared across dtypes where lifetimes allow, the
library's outputs unchanged, and TVM's default Relax pipeline still run whole."""

from __future__ import annotations

import inspect
import re

import numpy as np
import torch

from kokoro_tvm.compile import phase_build, storage_plan
from kokoro_tvm.compile.phases import build, legalize

TARGET = {"kind": "llvm", "mcpu": "x86-64-v3"}
BOUND = 256


def _stage(t):
    """Normalised by its own mean: a reduction and a second read, so that ``t`` is stored."""
    return torch.sin(t * t.mean(dim=-1, keepdim=True)) + t


class _Float64Middle(torch.nn.Module):
    """float32 in and out with a float64 stretch between, as the decoder's harmonic source: the
    float64 tensors die before the last float32 ones are made."""

    def forward(self, x):
        a = _stage(x)
        c = _stage(_stage(a.double() * 0.5))  # float64
        d = _stage(c.float())
        return _stage(_stage(d)) * d  # d lives on past the next two tensors


def _module():
    n = torch.export.Dim("n", min=4, max=BOUND)
    ep = torch.export.export(
        _Float64Middle().eval(), (torch.randn(1, 8, 32),), dynamic_shapes=({2: n},)
    )
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    mod, _ = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    return legalize(mod)


def _planned(mod, share: bool) -> list[tuple[int, str, set[str]]]:
    """main's storages after memory planning, with or without the pass: each one's bytes, its
    dtype hint and the dtypes of the tensors made in it."""
    import tvm
    from tvm import relax

    passes = phase_build.memory_planning_passes()
    out = tvm.transform.Sequential(passes + ([storage_plan.share_storage()] if share else []))(mod)
    relax.analysis.well_formed(out)  # raises where it is not
    storages: dict = {}
    for block in out["main"].body.blocks:
        for b in block.bindings:
            op = getattr(b.value, "op", None)
            name = getattr(op, "name", "")
            if name == "relax.memory.alloc_storage":
                size = int(b.value.args[0].values[0])
                storages[b.var] = (size, str(b.value.args[3].value), set())
            elif name == "relax.memory.alloc_tensor":
                storages[b.value.args[0]][2].add(str(b.value.args[3].value))
    return list(storages.values())


def test_float64_and_float32_tensors_share_storage_where_their_lifetimes_allow():
    mod = _module()
    before, after = _planned(mod, share=False), _planned(mod, share=True)
    # TVM plans one pool per dtype: each storage holds one dtype, the float64 stretch its own
    assert all(made == {hint} for _, hint, made in before)
    assert {hint for _, hint, _ in before} == {"float32", "float64"}
    assert any(made == {"float32", "float64"} for _, _, made in after)
    assert sum(b for b, _, _ in after) < sum(b for b, _, _ in before)
    assert len(after) < len(before)


def test_the_shared_plan_computes_what_tvms_own_does():
    """The same module built with TVM's own Relax pipeline and with ours (the pass included)
    gives the same bits at lengths up to the bound; a plan that put overlapping tensors in one
    storage would not (the negative control below)."""
    import tvm
    from tvm import relax

    mod = _module()
    ours, _, _ = build(mod, TARGET)
    target = phase_build.make_target(TARGET)
    theirs = tvm.compile(
        phase_build.phase(target)(mod),
        target=target,
        relax_pipeline=relax.get_pipeline("default"),
        tir_pipeline=phase_build.tir_pipeline(),
    )
    rng = np.random.default_rng(0)
    for n in (4, 33, BOUND):
        x = rng.standard_normal((1, 8, n)).astype("float32")
        a, b = (
            relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))[0].numpy()
            for ex in (ours, theirs)
        )
        np.testing.assert_array_equal(a, b)
        expected = _Float64Middle()(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(a, expected, rtol=1e-5, atol=1e-5)


def test_a_plan_ignoring_lifetimes_changes_the_outputs(monkeypatch):
    """Negative control: with every tensor given one storage, the built module computes
    something else; the lifetimes the pass reads are what keeps the outputs right."""
    import tvm
    from tvm import relax

    real = storage_plan._plan

    def one_storage(bindings, body, bounds):
        planned = real(bindings, body, bounds)
        if planned is None:  # a function with nothing to share
            return None
        return planned._replace(
            storage_of=dict.fromkeys(planned.storage_of, 0),
            sizes=[max(planned.sizes)],
            dtypes=planned.dtypes[:1],
        )

    monkeypatch.setattr(storage_plan, "_plan", one_storage)
    ex, _, _ = build(_module(), TARGET)
    x = np.random.default_rng(0).standard_normal((1, 8, 64)).astype("float32")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x))[0].numpy()
    expected = _Float64Middle()(torch.from_numpy(x)).numpy()
    assert not np.allclose(got, expected, rtol=1e-3, atol=1e-3)


def test_tvms_default_relax_pipeline_is_run_whole():
    """``relax_pipeline`` writes out TVM's default pipeline to put the pass after
    ``StaticPlanBlockMemory``: every pass TVM's lists, in its order (read from TVM's source, so
    an upgrade that changes the list fails here)."""
    from tvm.relax import pipeline

    source = inspect.getsource(pipeline.default_build_pipeline)
    calls = re.findall(r"(?:backend|transform)\.([A-Z]\w*)\(", source)
    theirs = [name for name in calls if name != "Sequential"]
    ours = [p.info.name for p in phase_build.relax_pipeline().passes]
    shared = ours.index("ShareStorageAcrossDtypes")
    assert theirs and ours[shared - 1] == "StaticPlanBlockMemory"
    assert ours[: len(theirs) + 1] == [
        *theirs[:shared],
        "ShareStorageAcrossDtypes",
        *theirs[shared:],
    ]
