"""The generator's convs through Winograd's F(m, r) (``compile/winograd.py``): exact in float64,
within float32 rounding of torch at every length, and only where the shape is one it handles."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm

from kokoro_tvm.compile import winograd
from kokoro_tvm.runtime.vm import bind_params

V3 = {"kind": "llvm", "mcpu": "x86-64-v3"}


@pytest.mark.parametrize("m, r", sorted(winograd.POINTS))
def test_the_transforms_compute_the_correlation_exactly_in_float64(m, r):
    at, g, bt = winograd.matrices(m, r)
    rng = np.random.default_rng(0)
    d, w = rng.standard_normal(m + r - 1), rng.standard_normal(r)
    want = np.array([w @ d[i : i + r] for i in range(m)])
    assert (
        np.abs(at @ ((g @ w) * (bt @ d)) - want).max() < 1e-7 * np.abs(want).max()
    )  # B^T: an inverse


def _legalized(channels: int, out_channels: int, taps: int, dilation: int, bound: int = 512):
    """A ``Conv1d`` exported with a symbolic width up to ``bound`` (the bounded decoder's form),
    legalized: ``(module, legalized IRModule, its weights)``."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_tvm.compile.phases import legalize

    torch.manual_seed(taps * 10 + dilation)
    module = torch.nn.Conv1d(
        channels, out_channels, taps, padding=dilation * (taps - 1) // 2, dilation=dilation
    ).eval()
    n = torch.export.Dim("n", min=2, max=bound)
    ep = torch.export.export(module, (torch.randn(1, channels, 64),), dynamic_shapes=({2: n},))
    mod, params = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    return module, legalize(mod), [p.numpy() for p in params["main"]]


def _kernels(mod) -> list[str]:
    return [
        gv.name_hint
        for gv in mod.functions
        if gv.name_hint.startswith(("winograd", "conv1d", "fused_conv1d"))
    ]


@pytest.mark.parametrize(
    "channels, taps, dilation", [(32, 3, 1), (32, 7, 3), (48, 11, 5), (128, 11, 1), (128, 7, 3)]
)
def test_a_generator_conv_takes_the_winograd_kernel_and_equals_torch_at_every_width(
    channels, taps, dilation
):
    """Each kernel size the generator has, dilated as its ``convs1`` are, at widths shorter than
    the kernel's reach, within one block, and across blocks with a partial last block (at 128
    channels a block spans 144 samples: the unchecked copy and stores of the inner blocks). The
    error bound is float32 rounding through the transforms (measured 8e-6 to 1.3e-4 of the largest
    output at 128-256 channels), an order below what a wrong transform gives (a sign flipped in
    one ``B^T`` entry: ~1e-1)."""
    from tvm import relax

    from kokoro_tvm.compile.phases import build

    module, legal, params = _legalized(channels, 32, taps, dilation)
    names = _kernels(legal)
    assert [n for n in names if n.startswith("winograd")] and not [
        n for n in names if "conv1d" in n and not n.startswith("winograd")
    ], names
    lifted = legal["main_transform_params"].script()
    assert "matmul" in lifted and "matmul" not in legal["main"].script()  # G g at load time only
    ex, _, report = build(legal, V3)
    assert "prescheduled" in report.functions.values()
    vm = relax.VirtualMachine(ex, tvm.cpu())
    bound = bind_params(vm, params)
    for width in (2, 9, 150, 512):
        x = torch.randn(1, channels, width)
        got = vm["main"](tvm.runtime.tensor(x.numpy()), *bound)
        got = (got if hasattr(got, "numpy") else got[0]).numpy()
        with torch.no_grad():
            want = module.double()(x.double()).numpy()
            module.float()
        assert got.shape == want.shape
        assert np.abs(got - want).max() < 3e-4 * np.abs(want).max(), width


@pytest.mark.parametrize(
    "channels, out_channels, taps",
    [
        (
            512,
            512,
            3,
        ),  # the decoder body's width: its transformed weights would take 2.7x the memory
        (128, 128, 5),  # no F(m, 5) in OUTPUTS
        (128, 1, 7),  # one filter (the F0/N projections): no whole CHANNELS tile, not padded to one
    ],
)
def test_convs_outside_the_winograd_shapes_stay_direct(channels, out_channels, taps):
    _, legal, _ = _legalized(channels, out_channels, taps, 1)
    names = _kernels(legal)
    assert names and not [n for n in names if n.startswith("winograd")], names
    assert winograd.tile_outputs(7, 128, 128, groups=2) is None


def test_the_build_makes_the_kernel_again_for_its_targets_registers():
    """Legalize makes the kernel for AVX2 (6 x 16 accumulators); the build makes it again for its
    target (``compile/retarget.py``): 6 x 32 on AVX-512, where 6 x 16 are only 6 registers, and
    AVX2's on NEON. Each output's sum keeps its order, so the results are the same to the bit
    (checked where this CPU runs AVX-512)."""
    from host import runs_here
    from tvm import relax

    from kokoro_tvm.compile.phases import build, make_target
    from kokoro_tvm.compile.retarget import retarget

    v4 = {"kind": "llvm", "mcpu": "x86-64-v4"}
    neon = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}
    _module, legal, params = _legalized(64, 64, 7, 3)

    def tiles(target) -> set[str]:
        mod = retarget(legal, make_target(target))
        return {
            size
            for gv, f in mod.functions.items()
            if gv.name_hint.startswith("winograd")
            for size in ("(6, 16)", "(6, 32)")
            if size in f.script()
        }

    assert tiles(V3) == {"(6, 16)"} and tiles(v4) == {"(6, 32)"} and tiles(neon) == {"(6, 16)"}
    if not runs_here(v4):
        pytest.skip("this CPU runs no AVX-512: the layouts are checked, not the results")
    x = torch.randn(1, 64, 333).numpy()
    outs = []
    for target in (V3, v4):
        ex, _, _ = build(legal, target)
        vm = relax.VirtualMachine(ex, tvm.cpu())
        got = vm["main"](tvm.runtime.tensor(x), *bind_params(vm, params))
        outs.append((got if hasattr(got, "numpy") else got[0]).numpy())
    assert np.array_equal(outs[0], outs[1])


def test_convs_of_one_shape_share_one_kernel():
    """A ResBlock's convs repeat one shape: legalizing makes its kernel once and calls it from
    each (``hand_written.find_made``), while a conv of another dilation gets its own. Each call
    still computes its own conv (checked against torch)."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_tvm.compile.phases import build, legalize

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        *(torch.nn.Conv1d(32, 32, 3, padding=d, dilation=d) for d in (1, 1, 3))
    ).eval()
    x = torch.randn(1, 32, 100)
    ep = torch.export.export(module, (x,))
    mod, params = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    legal = legalize(mod)
    kernels = [n for n in _kernels(legal) if n.startswith("winograd")]
    assert len(kernels) == 2, kernels
    assert legal["main"].script().count("winograd_conv1d_32x32_k3_d1") == 2
    ex, _, _ = build(legal, V3)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    got = vm["main"](
        tvm.runtime.tensor(x.numpy()), *bind_params(vm, [p.numpy() for p in params["main"]])
    )
    got = (got if hasattr(got, "numpy") else got[0]).numpy()
    with torch.no_grad():
        want = module.double()(x.double()).numpy()
    assert np.abs(got - want).max() < 3e-4 * np.abs(want).max()


class _Stage(torch.nn.Module):
    """The generator's stage in small: three resblocks of two dilated conv pairs, each pair's
    output added to its input, summed and averaged (as kokoro's ``Generator`` sums
    ``resblocks[i * 3 + j](x, s)``); ``leaky_relu`` stands in for AdaIN and Snake."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.blocks = torch.nn.ModuleList(
            torch.nn.ModuleList(
                torch.nn.ModuleList(
                    torch.nn.Conv1d(channels, channels, taps, padding=d * (taps // 2), dilation=d)
                    for d in (dilation, 1)
                )
                for dilation in (1, 3)
            )
            for taps in (3, 7, 11)
        )

    def forward(self, x):
        xs = None
        for block in self.blocks:
            h = x
            for c1, c2 in block:
                h = c2(torch.nn.functional.leaky_relu(c1(torch.nn.functional.leaky_relu(h)))) + h
            xs = h if xs is None else xs + h
        return xs / 3


def _stage(bound: int = 20000):
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    module = _Stage().eval()
    n = torch.export.Dim("n", min=2, max=bound)
    ep = torch.export.export(module, (torch.randn(1, 32, 64),), dynamic_shapes=({2: n},))
    mod, params = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    return module, mod, [p.numpy() for p in params["main"]]


def _most_live(legal) -> int:
    """The most tensors of the stage's symbolic width live at once in ``main``: from the call that
    makes one to its last use (views and tuple items own no storage)."""
    from tvm import relax

    bindings = [b for block in legal["main"].body.blocks for b in block.bindings]
    last: dict = {}
    for i, b in enumerate(bindings):
        relax.analysis.post_order_visit(
            b.value, lambda e, i=i: last.__setitem__(e, i) if isinstance(e, relax.Var) else None
        )
    live, most = set(), 0
    for i, b in enumerate(bindings):
        shape = getattr(b.var.ty, "shape", None)
        op = getattr(getattr(b.value, "op", None), "name", "")
        if shape is not None and op != "relax.reshape" and isinstance(b.value, relax.Call):
            if not isinstance(shape[-1], tvm.tirx.IntImm) and len(shape) == 3:
                live.add(b.var)
        most = max(most, len(live))
        live = {v for v in live if last.get(v, len(bindings)) > i}
    return most


def test_a_convs_bias_and_residual_are_added_by_its_kernel_as_it_stores():
    """``conv_epilogue``: each conv's bias, and a pair's residual, are added by the Winograd
    kernel as it stores (``_bias``, ``_bias_res``), so only the resblocks' sum is an add kernel,
    and the three resblocks' outputs are not all kept for one elementwise kernel at the end: five
    stage-sized tensors live at the peak, where the adds apart kept seven (the control). The
    outputs are those of the adds apart, bit for bit, at every width (blocks' edges included), and
    torch's within float32 rounding."""
    from unittest import mock

    from tvm import relax

    from kokoro_tvm.compile import conv_epilogue
    from kokoro_tvm.compile.phases import build, legalize

    module, mod, params = _stage()
    folded = legalize(mod)
    with mock.patch.object(conv_epilogue, "fold", lambda m, bf16: m):
        apart = legalize(mod)
    names = _kernels(folded)
    assert [n for n in names if n.endswith("_bias_res")], names
    adds = [gv.name_hint for gv in folded.functions if "add" in gv.name_hint]
    assert adds == ["fused_add_add_divide"], adds  # the resblocks' sum alone
    assert len([gv for gv in apart.functions if "add" in gv.name_hint]) > 1
    assert (_most_live(folded), _most_live(apart)) == (5, 7)
    runs = []
    for legal in (folded, apart):
        ex, _, _ = build(legal, V3)
        vm = relax.VirtualMachine(ex, tvm.cpu())
        runs.append((vm, bind_params(vm, params)))
    rng = np.random.default_rng(4)
    for width in (2, 9, 150, 517, 20000):
        x = rng.standard_normal((1, 32, width)).astype(np.float32)
        one, other = (
            (lambda got: (got if hasattr(got, "numpy") else got[0]).numpy())(
                vm["main"](tvm.runtime.tensor(x), *bound)
            )
            for vm, bound in runs
        )
        assert np.array_equal(one, other), width
        with torch.no_grad():
            want = module.double()(torch.from_numpy(x).double()).numpy()
        assert np.abs(one - want).max() < 3e-4 * np.abs(want).max(), width
