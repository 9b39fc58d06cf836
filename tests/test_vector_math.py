"""``compile.vector_math``: exp, tanh and sigmoid from vector arithmetic, and their legalizations.

Two behaviours matter: the kernels stay vectorized (no per-lane libm call, which is what TVM's
own lowering of ``tir.exp`` gives: the negative control), and the values stay within a few ulp
of the exact function on every x86 level this CPU runs (float64 numpy as the reference; a
truncated polynomial, the accuracy negative control, misses the bound).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

tvm = pytest.importorskip("tvm")
import tvm.s_tir as s_tir  # noqa: E402
from host import asm_of, runs_here  # noqa: E402
from tvm import te, tirx  # noqa: E402

from kokoro_tvm.compile import vector_math  # noqa: E402

TARGETS = {
    "sse2": {"kind": "llvm"},  # no FMA: LLVM keeps a*b+c unfused
    "x86-64-v3": {"kind": "llvm", "mcpu": "x86-64-v3"},
    "x86-64-v4": {"kind": "llvm", "mcpu": "x86-64-v4"},
}
# relative error bounds, as ``vector_math``'s docstring states them (float32 eps = 1.19e-7); the
# measured maxima print with ``pytest tests/test_vector_math.py -k accuracy -s``
BOUNDS = {"exp": 2.4e-7, "tanh": 4e-7, "sigmoid": 3e-7}
REFERENCE = {"exp": np.exp, "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v))}
FUNCS = {"exp": vector_math.exp, "tanh": vector_math.tanh, "sigmoid": vector_math.sigmoid}


def _kernel(fn, n: int, spec):
    x = te.placeholder((n,), "float32", name="x")
    y = te.compute((n,), lambda i: fn(x[i]), name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    (loop,) = sch.get_loops(sch.get_sblock("y"))
    _, lanes = sch.split(loop, [None, 16])
    sch.vectorize(lanes)
    return tvm.compile(sch.mod, target=tvm.target.Target(spec))


def _grid() -> np.ndarray:
    wide = np.linspace(-90, 90, 1 << 20, dtype=np.float32)
    near0 = np.linspace(-1, 1, 1 << 18, dtype=np.float32)
    tiny = np.float32(
        [0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 0.25, -0.25, np.nextafter(np.float32(0.25), 0)]
    )
    return np.concatenate([wide, near0, tiny])


def _rel_err(name: str, fn, spec, xs: np.ndarray) -> float:
    lib = _kernel(fn, xs.size, spec)
    out = tvm.runtime.tensor(np.zeros_like(xs))
    lib(tvm.runtime.tensor(xs), out)
    got, want = out.numpy().astype(np.float64), REFERENCE[name](xs.astype(np.float64))
    keep = {
        "exp": (xs >= vector_math.EXP_LO) & (xs <= vector_math.EXP_HI),
        "sigmoid": xs >= -80,
    }.get(name)
    keep = np.ones(xs.shape, bool) if keep is None else keep
    assert np.isfinite(got).all()
    return float((np.abs(got - want)[keep] / np.maximum(np.abs(want[keep]), 1e-37)).max())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", FUNCS)
def test_accuracy_within_a_few_ulp(name, target):
    spec = TARGETS[target]
    if not runs_here(spec):
        pytest.skip(f"this CPU does not run {target}")
    err = _rel_err(name, FUNCS[name], spec, _grid())
    print(f"{name} on {target}: max relative error {err:.3g} (bound {BOUNDS[name]:g})")
    assert err <= BOUNDS[name]


def test_a_truncated_polynomial_misses_the_bound(monkeypatch):
    """Negative control: exp with its Taylor series cut at degree 4 is ~1e-4 off."""
    monkeypatch.setattr(vector_math, "_EXP_COEFS", vector_math._EXP_COEFS[:5])
    assert _rel_err("exp", vector_math.exp, TARGETS["sse2"], _grid()) > 10 * BOUNDS["exp"]


def _asm(fn, spec) -> str:
    return asm_of(_kernel(fn, 1024, spec))


@pytest.mark.parametrize("name", FUNCS)
def test_kernels_call_no_libm(name):
    """TVM lowers ``tir.exp`` (and tanh/sigmoid through it) to one ``expf`` call per lane."""
    spec = TARGETS["x86-64-v3"]
    assert "expf" not in _asm(FUNCS[name], spec)
    assert "expf" in _asm(getattr(tirx, name), spec)  # the negative control: TVM's own lowering


def test_legalized_ops_match_torch_and_stay_vectorized():
    """softmax, GELU (tanh), sigmoid and exp through Relax: LegalizeOps with the project's map
    (``legalize``) equals torch, and no kernel of the built library calls libm's expf."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_tvm.compile.phases import build, legalize

    class Ops(torch.nn.Module):
        def forward(self, x, m):
            att = torch.softmax(x @ x.transpose(-1, -2) + m, dim=-1)
            return (
                att,
                torch.nn.functional.gelu(x, approximate="tanh"),
                torch.sigmoid(x),
                torch.exp(x),
            )

    torch.manual_seed(0)
    x, m = torch.randn(2, 24, 16), torch.zeros(2, 1, 24)
    m[..., 20:] = -1e4  # masked keys, as an attention mask adds them
    ep = torch.export.export(Ops().eval(), (x, m))
    mod, _ = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    ex, _, _ = build(legalize(mod), TARGETS["x86-64-v3"])
    assert "expf" not in asm_of(ex)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy()), tvm.runtime.tensor(m.numpy()))
    want = Ops()(x.double(), m.double())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-6, atol=1e-7)
