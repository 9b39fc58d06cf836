"""Bounded-length libraries (issue 17) on the tiny config: one library per component and bucket
runs every length up to the bucket, computing only that length, and equals kokoro at it.

Token components only so far (``model.bounded``). Each build takes seconds.
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from kokoro_tvm.compile.flow import compile_bounded
from kokoro_tvm.config import load_model_config
from kokoro_tvm.eval.metrics import rel_err
from kokoro_tvm.eval.reference import reference
from kokoro_tvm.model.inputs import example_inputs
from kokoro_tvm.model.kmodel import random_kmodel
from kokoro_tvm.runtime.library import bind_params

V3 = {"kind": "llvm", "mcpu": "x86-64-v3"}
BUCKET = 16


@pytest.fixture(scope="module")
def tiny():
    cfg = load_model_config("tiny")
    return cfg, random_kmodel(cfg, seed=0)


def _run(vm, params, component: str, inputs, n: int) -> list[np.ndarray]:
    args = [inputs[0][:, :n]] + ([inputs[2]] if component == "duration" else [])  # unpadded
    out = vm["main"](*[tvm.runtime.tensor(a.numpy()) for a in args], *params)
    return [o.numpy() for o in ([out] if hasattr(out, "numpy") else out)]


@pytest.mark.parametrize("component", ["text_encoder", "duration"])
def test_one_library_equals_kokoro_at_every_length(tiny, component):
    cfg, km = tiny
    lib = compile_bounded(component, BUCKET, km, cfg, V3)
    assert not lib.report.fallbacks  # every kernel got a rule, symbolic extents and all
    main = lib.legalized["main"]
    assert list(dict(main.attrs["tir_var_upper_bound"]).values()) == [BUCKET]  # the one length, bounded
    vm = lib.vm()
    params = bind_params(vm, lib.weights)
    for n in (BUCKET, BUCKET // 2 + 1, 1):
        inputs = example_inputs(component, BUCKET, cfg, length=n)
        got = _run(vm, params, component, inputs, n)
        ref = [r.numpy() for r in reference(component, km, inputs, n, cfg)]
        assert [g.shape for g in got] == [r.shape for r in ref]  # n long: nothing padded
        assert max(rel_err(r, g) for r, g in zip(ref, got)) <= 1e-4, n


def test_a_length_past_the_bound_is_refused_not_computed(tiny):
    """Memory is planned for the bound: TVM's VM refuses a longer input at allocation (the
    runtime must check lengths first, with an error that names the bucket)."""
    cfg, km = tiny
    lib = compile_bounded("text_encoder", BUCKET, km, cfg, V3)
    vm = lib.vm()
    params = bind_params(vm, lib.weights)
    with pytest.raises(Exception, match="storage allocation failure"):
        vm["main"](tvm.runtime.tensor(np.ones((1, BUCKET + 1), np.int64)), *params)
