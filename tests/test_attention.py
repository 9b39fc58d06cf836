"""ALBERT's attention as one kernel (``compile/attention.py``): what the rewrite matches, and the
kernel's numbers against PyTorch's ``scaled_dot_product_attention`` in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from host import runs_here

from kokoro_tvm.compile.attention import ROWS, attention_kernel
from kokoro_tvm.compile.importer import import_params_as_inputs
from kokoro_tvm.compile.phases import build, legalize

V3 = {"kind": "llvm", "mcpu": "x86-64-v3"}
HEADS, DIM = 4, 32


class Attention(torch.nn.Module):
    """ALBERT's call: ``q, k, v`` ``[1, H, n, D]``, an additive ``[1, 1, n, n]`` mask or none."""

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class ManualSoftmax(torch.nn.Module):
    """The same product with a plain softmax (no safe-softmax guard): not the decomposition the
    kernel reproduces (an all ``-inf`` row gives NaN here, zeros there)."""

    def forward(self, q, k, v, mask):
        return torch.softmax(q @ k.transpose(-1, -2) / DIM**0.5 + mask, dim=-1) @ v


def _legalized(module: torch.nn.Module, masked: bool):
    n = torch.export.Dim("n", min=2, max=200)
    example = [torch.randn(1, HEADS, 16, DIM) for _ in range(3)] + (
        [torch.zeros(1, 1, 16, 16)] if masked else []
    )
    shapes = [{2: n}] * 3 + ([{2: n, 3: n}] if masked else [])
    ep = torch.export.export(module.eval(), tuple(example), dynamic_shapes=tuple(shapes))
    mod, _ = import_params_as_inputs(ep, "loop")
    return legalize(mod)


def _kernels(mod) -> list[str]:
    return sorted(gv.name_hint for gv in mod.functions)


def _inputs(length: int, masked: bool, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((1, HEADS, length, DIM)).astype(np.float32) for _ in range(3)]
    if masked:
        mask = np.where(rng.random((1, 1, length, length)) < 0.3, -np.inf, 0.0).astype(np.float32)
        mask[0, 0, min(1, length - 1), :] = -np.inf  # a row with nothing to attend to
        arrays.append(mask)
    return arrays


def _sdpa64(arrays: list[np.ndarray]) -> np.ndarray:
    q, k, v, *mask = (torch.from_numpy(a).double() for a in arrays)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[0] if mask else None).numpy()


@pytest.mark.parametrize("masked", [True, False])
def test_albert_attention_is_one_kernel(masked):
    """The decomposed SDPA (scores, mask add, softmax, safe-softmax guard, ``P V``) becomes one
    ``attention`` kernel: no softmax, no scores buffer. Its numbers equal PyTorch's in float64 to
    float32 rounding, at lengths on and off the row and column blocks, the guard's all ``-inf``
    row included (zeros, as PyTorch gives)."""
    import tvm
    from tvm import relax

    legal = _legalized(Attention(), masked)
    names = _kernels(legal)
    assert [n for n in names if n.startswith("attention_")] == [
        f"attention_h{HEADS}_d{DIM}_n200" + ("_masked" if masked else "")
    ], names
    assert not [n for n in names if "softmax" in n or "matmul" in n], names
    if not runs_here(V3):
        return
    ex, _, report = build(legal, V3)
    assert not report.fallbacks
    vm = relax.VirtualMachine(ex, tvm.cpu())
    for length in (2, ROWS + 1, 16, 37, 200):
        arrays = _inputs(length, masked, seed=length)
        out = vm["main"](*[tvm.runtime.tensor(a) for a in arrays])
        out = (out[0] if not hasattr(out, "numpy") else out).numpy()
        ref = _sdpa64(arrays)
        assert np.isfinite(out).all()
        np.testing.assert_allclose(out, ref, rtol=0, atol=2e-5 * max(1.0, np.abs(ref).max()))


def test_a_softmax_without_the_guard_is_left_to_the_rules():
    """Negative control: the same product with a plain softmax keeps its scores and softmax kernels
    (the kernel's guard would turn its NaN rows into zeros)."""
    names = _kernels(_legalized(ManualSoftmax(), masked=True))
    assert not [n for n in names if n.startswith("attention_")], names
    assert [n for n in names if "softmax" in n], names


def test_attention_kernel_sizes_its_row_buffer_from_the_bound():
    """The kernel's per-task scores buffer holds ``ROWS`` rows of the longest length, whole blocks
    of columns; its FLOPs are declared for the roofline as ``4 H D n^2``."""
    from kokoro_tvm.compile.attention import COLS, FLOPS

    func = attention_kernel(HEADS, DIM, 200, masked=False)
    rows = [line.strip() for line in func.script().splitlines() if line.strip().startswith("s = ")]
    assert rows == [f"s = T.alloc_local(({ROWS}, {-(-200 // COLS) * COLS}))"], rows
    assert str(func.attrs[FLOPS]).endswith("n * n") and f"{4 * HEADS * DIM}" in str(
        func.attrs[FLOPS]
    )
    with pytest.raises(ValueError, match="multiple of"):
        attention_kernel(HEADS, COLS + 1, 200, masked=False)
