"""``compile.vector_math64``: float64 sin, cos, exp, tanh and atan2 from vector arithmetic, and
their legalizations.

What matters: the kernels call no libm (TVM's own lowering of a float64 ``tir.sin`` is one ``sin``
call per lane: the negative control), the values stay within the module's stated bounds of
numpy's libm on every x86 level this CPU runs, with and without FMA (a truncated series, the
accuracy negative control, misses them), and ``atan2`` gives IEEE's signs at zeros, which the
STFT's phases of silent bins depend on.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

tvm = pytest.importorskip("tvm")
import tvm.s_tir as s_tir  # noqa: E402
from host import asm_of, runs_here  # noqa: E402
from tvm import te, tirx  # noqa: E402

from kokoro_tvm.compile import vector_math64  # noqa: E402

TARGETS = {
    "sse2": {"kind": "llvm"},  # no FMA: LLVM keeps a*b+c unfused
    "x86-64-v3": {"kind": "llvm", "mcpu": "x86-64-v3"},
    "x86-64-v4": {"kind": "llvm", "mcpu": "x86-64-v4"},
}
FUNCS = {
    "sin": (vector_math64.sin, np.sin),
    "cos": (vector_math64.cos, np.cos),
    "exp": (vector_math64.exp, np.exp),
    "tanh": (vector_math64.tanh, np.tanh),
    "atan2": (vector_math64.atan2, np.arctan2),
}
#: (bound, relative?): the module docstring's
BOUNDS = {
    "sin": (6e-16, False),
    "cos": (6e-16, False),
    "exp": (4e-16, True),
    "tanh": (1e-15, True),
    "atan2": (6e-16, False),
}
LIBM = ("sin", "cos", "exp", "atan2", "tanh")


def _kernel(fn, n: int, arity: int, spec):
    xs = [te.placeholder((n,), "float64", name=f"x{i}") for i in range(arity)]
    y = te.compute((n,), lambda i: fn(*(x[i] for x in xs)), name="y")
    sch = s_tir.Schedule(te.create_prim_func([*xs, y]))
    (loop,) = sch.get_loops(sch.get_sblock("y"))
    _, lanes = sch.split(loop, [None, 8])
    sch.vectorize(lanes)
    return tvm.compile(sch.mod, target=tvm.target.Target(spec))


def _run(lib, *xs: np.ndarray) -> np.ndarray:
    out = tvm.runtime.tensor(np.zeros_like(xs[0]))
    lib(*(tvm.runtime.tensor(x) for x in xs), out)
    return out.numpy()


def _inputs(name: str) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    n = 1 << 19
    if name in ("sin", "cos"):  # the source's phases reach ~1e6 rad; pi multiples and zeros
        edges = np.concatenate([np.arange(-50, 51) * np.pi, [0.0, -0.0, 1e-300, np.pi / 2]])
        return (np.concatenate([rng.uniform(-2e6, 2e6, n), rng.uniform(-10, 10, n), edges]),)
    if name == "exp":
        return (np.concatenate([rng.uniform(-708, 709, n), rng.uniform(-1, 1, n)]),)
    if name == "tanh":
        edge = vector_math64.TANH_SMALL
        edges = [0.0, -0.0, 1e-300, -1e-20, edge, -edge, np.nextafter(edge, 0), 800.0, -800.0]
        return (np.concatenate([rng.uniform(-30, 30, n), rng.uniform(-0.5, 0.5, n), edges]),)
    scale = lambda: rng.standard_normal(n) * np.exp(rng.uniform(-40, 5, n))
    return scale(), scale()


def _error(name: str, got: np.ndarray, xs: tuple[np.ndarray, ...]) -> float:
    want = FUNCS[name][1](*xs)
    err = np.abs(got - want)
    if BOUNDS[name][1]:
        err = err / np.maximum(np.abs(want), 1e-300)
    return float(err.max())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", FUNCS)
def test_accuracy_within_the_stated_bounds(name, target):
    spec = TARGETS[target]
    if not runs_here(spec):
        pytest.skip(f"this CPU does not run {target}")
    xs = _inputs(name)
    got = _run(_kernel(FUNCS[name][0], xs[0].size, len(xs), spec), *xs)
    assert np.isfinite(got).all()
    err = _error(name, got, xs)
    print(f"{name} on {target}: max error {err:.3g} (bound {BOUNDS[name][0]:g})")
    assert err <= BOUNDS[name][0]


def test_atan2_gives_ieee_signs_at_zeros_and_on_the_axes():
    """Every pair of {+-0, +-1, +-1e-300}: the same value and sign bit as libm (atan2(+0, -0) is
    +pi, atan2(-0, -1) is -pi: a silent bin's phase)."""
    values = np.array([0.0, -0.0, 1.0, -1.0, 1e-300, -1e-300])
    y, x = (a.ravel() for a in np.meshgrid(values, values))
    got = _run(_kernel(vector_math64.atan2, y.size, 2, TARGETS["sse2"]), y, x)
    want = np.arctan2(y, x)
    np.testing.assert_allclose(got, want, rtol=0, atol=5e-16)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_a_truncated_series_misses_the_bound(monkeypatch):
    """Negative control: sin with its Taylor series cut after r^9 is ~1e-7 off near pi/2."""
    monkeypatch.setattr(vector_math64, "_SIN_COEFS", vector_math64._SIN_COEFS[:4])
    xs = _inputs("sin")
    got = _run(_kernel(vector_math64.sin, xs[0].size, 1, TARGETS["sse2"]), *xs)
    assert _error("sin", got, xs) > 1000 * BOUNDS["sin"][0]


def _calls(asm: str) -> set[str]:
    return {c.split("@")[0] for c in re.findall(r"call\w*\s+(\S+)", asm)}


@pytest.mark.parametrize("name", FUNCS)
def test_kernels_call_no_libm(name):
    """TVM lowers a float64 ``tir.sin`` (``cos``, ``exp``, ``atan2``; ``tanh`` through ``exp``)
    to one libm call per lane: the negative control."""
    spec = TARGETS["x86-64-v3"]
    arity = 2 if name == "atan2" else 1
    assert not _calls(_kernel(FUNCS[name][0], 1024, arity, spec).mod.inspect_source("asm")) & set(
        LIBM
    )
    libm = _calls(_kernel(getattr(tirx, name), 1024, arity, spec).mod.inspect_source("asm"))
    assert libm & set(LIBM), libm


def test_legalized_float64_ops_match_torch_and_call_no_libm():
    """The harmonic source's and the STFT's ops in float64 through Relax: LegalizeOps with the
    project's map equals torch, and the built library calls no libm transcendental."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_tvm.compile.phases import build, legalize

    class Ops(torch.nn.Module):
        def forward(self, phase, mix, re_, im):
            return (
                torch.sin(phase),
                torch.cos(phase),
                torch.tanh(mix),
                torch.exp(mix),
                torch.atan2(im, re_),
            )

    g = torch.Generator().manual_seed(0)
    phase = torch.rand(1, 9, 4000, generator=g, dtype=torch.float64) * 1e5
    mix = torch.randn(1, 1, 4000, generator=g, dtype=torch.float64) * 3
    re_, im = (torch.randn(1, 9, 500, generator=g, dtype=torch.float64) for _ in range(2))
    im[0, 0, :10] = 0.0  # a silent bin's +0 imaginary part against negative real parts
    re_[0, 0, :10] = -1.0
    args = (phase, mix, re_, im)
    ep = torch.export.export(Ops().eval(), args)
    mod, _ = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    ex, _, _ = build(legalize(mod), TARGETS["x86-64-v3"])
    assert not _calls(asm_of(ex)) & set(LIBM)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    got = vm["main"](*(tvm.runtime.tensor(a.numpy()) for a in args))
    for g_, w in zip(got, Ops()(*args)):
        np.testing.assert_allclose(g_.numpy(), w.numpy(), rtol=1e-15, atol=6e-16)
    assert (got[4].numpy()[0, 0, :10] == np.pi).all()
