"""The importer workarounds of ``compile.convert_map``: each shows the TVM 0.27 limitation it
works around (the stock import fails, with its message), then that the workaround imports,
builds and computes what torch computes. Small modules, seconds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_tvm.compile.convert_map import slice_in_bounds

N = torch.export.Dim("n", min=2, max=64)


class EdgePad(nn.Module):
    """Replicate padding written with an edge slice, as a bounded CustomSTFT would."""

    def forward(self, x):
        return torch.cat([x[..., :1].expand(1, 4, 10), x, x[..., -1:].expand(1, 4, 3)], dim=-1)


class Positions(nn.Module):
    """ALBERT's ``position_ids[:, :n]`` of a 512-long buffer."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("pos", torch.arange(512).unsqueeze(0))
        self.emb = nn.Embedding(512, 8)

    def forward(self, ids):
        return self.emb(self.pos[:, : ids.shape[1]]) + ids.unsqueeze(-1)


def _import(module: nn.Module, x: torch.Tensor, convert_map):
    axis = x.dim() - 1
    ep = torch.export.export(module.eval(), (x,), dynamic_shapes=({axis: N},))
    mod = from_exported_program(ep, keep_params_as_input=True, custom_convert_map=convert_map)
    mod, params = relax.frontend.detach_params(mod)
    relax.transform.LiftTransformParams()(relax.transform.LegalizeOps()(mod))  # where (b) fails
    return mod, [p.numpy() for p in params.get("main", [])]


@pytest.mark.parametrize(
    "module, x, upstream",
    [
        (
            EdgePad(),
            torch.randn(1, 4, 16),
            "broadcast_to expects the input tensor shape is broadcastable",
        ),
        (
            Positions(),
            torch.randn(1, 16),
            "Cannot find the FInferType attribute registered to op: prim.if_then_else",
        ),
    ],
    ids=["edge-slice", "position-ids"],
)
def test_symbolic_slices_import_in_bounds(module, x, upstream):
    with pytest.raises(Exception, match=upstream):  # TVM 0.27's stock slice converter
        _import(module, x, None)
    mod, params = _import(module, x, {"slice.Tensor": slice_in_bounds})
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    for n in (64, 17, 2):  # one module for every length in the Dim's range
        xn = torch.randn(*x.shape[:-1], n)
        got = vm["main"](tvm.runtime.tensor(xn.numpy()), *[tvm.runtime.tensor(p) for p in params])
        got = got[0] if not hasattr(got, "numpy") else got
        with torch.no_grad():
            np.testing.assert_allclose(got.numpy(), module(xn).numpy(), rtol=1e-6, atol=1e-6)


def test_static_slices_keep_the_stock_import():
    """Static slices (every padded export) take TVM's own converter: the same module."""
    ep = torch.export.export(EdgePad().eval(), (torch.randn(1, 4, 16),))
    stock = from_exported_program(ep)
    ours = from_exported_program(ep, custom_convert_map={"slice.Tensor": slice_in_bounds})
    tvm.ir.assert_structural_equal(stock, ours)
