"""The bf16 conv kernels (``compile/bf16*.py``): bf16 pairs rounded as the hardware rounds them,
FFTs that are numpy's, and convs whose error against float64 is bf16 rounding's, not more; the
float32 tile of Winograd's kernel-11 convs, in bf16, is the negative control."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from kokoro_tvm.compile import bf16, bf16_fft, bf16_winograd, winograd

BF16_TARGET = {"kind": "llvm", "mcpu": "x86-64-v4", "mattr": ["+avx512bf16"]}


def _build(func, target):
    return tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target)


def _runs_bf16() -> bool:
    from host import runs_here

    return runs_here(BF16_TARGET)


def _conv64(x: np.ndarray, w: np.ndarray, dilation: int, pad: int) -> np.ndarray:
    """``y[o, t] = sum_{c, k} w[o, c, k] xpad[c, t + d k]`` in float64, ``x [C, L]``."""
    length = x.shape[1]
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad)))
    return sum(
        w[:, :, k].astype(np.float64) @ xp[:, k * dilation : k * dilation + length]
        for k in range(w.shape[2])
    )


def _rms(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.sqrt(((got - want) ** 2).mean() / (want**2).mean()))


def _case(channels_in: int, channels_out: int, taps: int, seed: int):
    rng = np.random.default_rng(seed)
    w = (
        rng.standard_normal((channels_out, channels_in, taps)) / np.sqrt(channels_in * taps)
    ).astype(np.float32)
    return rng, w


def _direct_bf16_rms(x: np.ndarray, w: np.ndarray, dilation: int, pad: int) -> float:
    """What rounding the input and the weights to bf16 alone costs a direct conv."""
    import ml_dtypes

    def rounded(a):
        return a.astype(ml_dtypes.bfloat16).astype(np.float64)

    want = _conv64(x, w, dilation, pad)
    return _rms(_conv64(rounded(x), rounded(w), dilation, pad), want)


def test_pairs_round_to_nearest_even_as_bf16():
    """``pairs`` (TIR) and ``pack_pairs`` (numpy, the weights) give the bits ml_dtypes' bf16
    gives: round to nearest, ties to even, the first value in the low half."""
    import ml_dtypes
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script.builder import ir as T

    rng = np.random.default_rng(0)
    ties = np.array([0x3F808000, 0x3F818000, 0xBF808000, 0x3F80FFFF, 0x00008000], np.uint32)
    lo = np.concatenate([rng.standard_normal(1019).astype(np.float32), ties.view(np.float32)])
    hi = np.concatenate([rng.standard_normal(1019).astype(np.float32) * 1e3, -lo[-5:]])
    bits = lambda v: v.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)
    want = bits(lo) | (bits(hi) << 16)
    assert np.array_equal(bf16.pack_pairs(lo, hi), want)

    n = len(lo)
    with IRBuilder() as ib:
        with T.prim_func():
            a = T.match_buffer(T.arg("a", T.handle()), (n,), "float32")
            b = T.match_buffer(T.arg("b", T.handle()), (n,), "float32")
            out = T.match_buffer(T.arg("out", T.handle()), (n,), "uint32")
            with T.vectorized(0, n) as i:
                T.buffer_store(out, bf16.pairs(a[i], b[i]), [i])
    lib = _build(ib.get(), {"kind": "llvm"})
    got = tvm.runtime.tensor(np.zeros(n, np.uint32))
    lib["main"](tvm.runtime.tensor(lo), tvm.runtime.tensor(hi), got)
    assert np.array_equal(got.numpy(), want)


@pytest.mark.parametrize("n", [4, 32, 64])
def test_the_fft_generator_is_numpys_fft(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 3))
    scale, bind = (lambda v, k: v * k), (lambda z: z)
    spectrum = bf16_fft.rfft(list(x), scale, bind)
    want = np.fft.rfft(x, axis=0)
    assert np.allclose([s[0] for s in spectrum], want.real, atol=1e-12)
    assert np.allclose([s[1] for s in spectrum[1:-1]], want.imag[1:-1], atol=1e-12)
    back = bf16_fft.irfft([(v.real, v.imag) for v in want], n, scale, bind, n - 3)
    assert np.allclose(back, x[: n - 3], atol=1e-12)


GENERATOR = "p_decoder_generator_resblocks_0_convs1_0_weight"


def test_only_the_generators_convs_are_computed_in_bf16():
    assert bf16.method(7, 256, 256, weight=GENERATOR) == "fft"
    assert bf16.method(11, 128, 128, weight=GENERATOR) == "fft"
    assert bf16.method(3, 256, 256, weight=GENERATOR) == "fft"
    # the F0/N blocks' kernel-3 convs have the generator's shapes: pitch errors in bf16
    assert bf16.method(3, 256, 256, weight="p_predictor_f0_2_conv1_weight") is None
    assert bf16.method(3, 256, 256) is None  # a weight of unknown provenance
    assert bf16.method(5, 128, 128, weight=GENERATOR) is None  # no bf16 kernel of that size
    # conv_post: narrow, and it feeds exp and sin; also padded to whole channel tiles
    assert bf16.method(7, 128, 22, weight="p_decoder_generator_conv_post_weight") is None
    assert bf16.method(7, 128, 32, weight="p_decoder_generator_conv_post_weight") is None
    # the decoder body: too many transformed weights (and not the generator)
    assert bf16.method(3, 1090, 1024, weight="p_decoder_decode_0_conv1_weight") is None
    assert bf16.method(3, 128, 128, groups=2, weight=GENERATOR) is None
    assert bf16.method(3, 128, 128, stride=2, weight=GENERATOR) is None


def _runner(func, packed: np.ndarray, channels_out: int):
    """The kernel ``func`` built once, as ``x [C, L] -> y [O, L]`` on the weights ``packed``."""
    lib = _build(func, BF16_TARGET)
    assert "vdpbf16ps" in lib.mod.inspect_source("asm")  # the helper was inlined, no call left
    if not _runs_bf16():
        pytest.skip("this CPU has no AVX512_BF16: the kernel is built, not run")

    def run(x: np.ndarray) -> np.ndarray:
        y = tvm.runtime.tensor(np.zeros((1, channels_out, x.shape[1]), np.float32))
        lib["main"](tvm.runtime.tensor(x[None]), tvm.runtime.tensor(packed), y)
        return y.numpy()[0]

    return run


#: Widths shorter than the kernel's reach, within one block, and over blocks with a partial last
#: block: the bounds-checked copies and stores of the edge blocks, and the inner blocks' unchecked
#: ones (the FFT kernel's transposed reads and writes). ``_spans_blocks`` checks the last.
WIDTHS = (2, 9, 150, 517, 20000)


def _spans_blocks(channels_in: int, taps: int, dilation: int) -> None:
    """The widest width covers two of the FFT kernel's blocks and part of a third."""
    span = dilation * (bf16_fft.POINTS - taps + 1) * bf16_fft.block_tiles(channels_in, dilation)
    assert 2 * span < max(WIDTHS) and max(WIDTHS) % span, (span, max(WIDTHS))


@pytest.mark.parametrize("taps, dilation", [(7, 1), (11, 3), (7, 5)])
def test_an_fft_conv_loses_what_rounding_its_operands_to_bf16_loses(taps, dilation):
    """Overlap-save FFTs with bf16 products: within 2x of a direct conv on bf16-rounded inputs and
    weights (measured ~1x), at every width; a wrong twiddle or pair order gives ~1."""
    channels_in, channels_out = 48, 64
    rng, w = _case(channels_in, channels_out, taps, taps + dilation)
    pad = dilation * (taps - 1) // 2
    _spans_blocks(channels_in, taps, dilation)
    func = bf16_fft.kernel(channels_in, channels_out, taps, dilation, pad)
    xs = [rng.standard_normal((channels_in, width)).astype(np.float32) for width in WIDTHS]
    run = _runner(func, bf16_fft.pack_weights(w), channels_out)
    for x in xs:
        got = run(x)
        want = _conv64(x, w, dilation, pad)
        assert _rms(got, want) < 2 * _direct_bf16_rms(x, w, dilation, pad), x.shape


def _winograd_rms(m: int, taps: int, dilation: int, widths=WIDTHS) -> tuple[float, float]:
    """The bf16 Winograd kernel's largest relative RMS error over ``widths`` and a direct bf16
    conv's on the same data."""
    channels_in, channels_out = 48, 64
    rng, w = _case(channels_in, channels_out, taps, taps + dilation)
    pad = dilation * (taps - 1) // 2
    func = bf16_winograd.kernel(channels_in, channels_out, taps, dilation, pad, m)
    run = _runner(func, bf16_winograd.pack_weights(w, m), channels_out)
    worst = direct = 0.0
    for width in widths:
        x = rng.standard_normal((channels_in, width)).astype(np.float32)
        worst = max(worst, _rms(run(x), _conv64(x, w, dilation, pad)))
        direct = max(direct, _direct_bf16_rms(x, w, dilation, pad))
    return worst, direct


#: What F(6, 3)'s 8 points may amplify a direct bf16 conv's error by (measured ~4.5x).
WINOGRAD_AMPLIFICATION = 8


@pytest.mark.parametrize("dilation", [1, 3])
def test_a_winograd_conv_in_bf16_stays_near_bf16_rounding(dilation):
    m, taps = bf16_winograd.TILE
    worst, direct = _winograd_rms(m, taps, dilation)
    assert worst < WINOGRAD_AMPLIFICATION * direct, (worst, direct)


def test_float32s_largest_winograd_tile_fails_in_bf16():
    """Negative control: F(4, 11), float32's tile for kernel 11, computed by the same kernel in
    bf16 loses ~30 % of the output (its points' powers amplify the rounding)."""
    worst, direct = _winograd_rms(winograd.OUTPUTS[11], 11, 1, widths=(517,))
    assert worst > 10 * WINOGRAD_AMPLIFICATION * direct, (worst, direct)


def _exported_conv(
    channels_in: int,
    channels_out: int,
    taps: int,
    dilation: int,
    bound: int,
    at: str = "decoder.generator.resblocks.0.convs1.0",
    residual: bool | str = False,
    snake: bool = False,
    norm: bool | str = False,
):
    """A ``Conv1d`` at the module path ``at`` (which names its weight parameter on export)
    exported with a symbolic width up to ``bound`` (the bounded decoder's form) and imported:
    ``(module, Relax module, its weights)``; with ``residual``, the module adds its input to the
    conv's output (a resblock's second conv), with ``"broadcast"`` its first sample of each
    channel; with ``snake``, the conv reads ``x + sin(x)^2`` (a Snake's shape, as in the
    generator); with ``norm``, an affine ``InstanceNorm1d`` reads the conv's output (AdaIN's, after
    a resblock pair's first conv), with ``"and_conv"`` the module returns the conv's output
    too."""
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    torch.manual_seed(taps * 10 + dilation)
    module = torch.nn.Conv1d(
        channels_in, channels_out, taps, padding=dilation * (taps - 1) // 2, dilation=dilation
    ).eval()
    normed = torch.nn.InstanceNorm1d(channels_out, affine=True).eval()
    with torch.no_grad():
        normed.weight.uniform_(0.5, 1.5)
        normed.bias.uniform_(-0.5, 0.5)

    class At(torch.nn.Module):
        def __init__(self):
            super().__init__()
            parent = self
            for name in at.split(".")[:-1]:
                parent.add_module(name, torch.nn.Module())
                parent = getattr(parent, name)
            parent.add_module(at.split(".")[-1], module)
            if norm:
                self.normed = normed

        def forward(self, x):
            y = self.get_submodule(at)(x + torch.sin(x) ** 2 if snake else x)
            if norm:
                return (self.normed(y), y) if norm == "and_conv" else self.normed(y)
            if residual == "broadcast":
                return y + x[:, :, :1]
            return y + x if residual else y

    n = torch.export.Dim("n", min=2, max=bound)
    ep = torch.export.export(At(), (torch.randn(1, channels_in, 64),), dynamic_shapes=({2: n},))
    mod, params = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    whole = residual or norm
    return (At().eval() if whole else module), mod, [p.numpy() for p in params["main"]]


def _kernel_names(mod) -> list[str]:
    return [gv.name_hint for gv in mod.functions if "conv1d" in gv.name_hint]


def _library(legal, params):
    """``legal`` built for ``BF16_TARGET`` with ``params`` bound: ``x -> y`` in numpy."""
    from tvm import relax

    from kokoro_tvm.compile.phases import build
    from kokoro_tvm.runtime.vm import bind_params

    ex, _, _ = build(legal, BF16_TARGET)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    bound = bind_params(vm, params)

    def run(x: np.ndarray) -> np.ndarray:
        got = vm["main"](tvm.runtime.tensor(x), *bound)
        return (got if hasattr(got, "numpy") else got[0]).numpy()

    return run


@pytest.mark.parametrize("taps, dilation, residual", [(7, 1, False), (11, 5, True), (3, 3, False)])
def test_a_bf16_library_computes_a_generator_conv_with_bf16_products(taps, dilation, residual):
    """``legalize(..., precision="bf16")``: the conv takes the bf16 FFT kernel, with its bias (and
    a residual add) as the kernel's epilogue, its weights' bf16 spectra are computed at load
    time, and the built library's output is within a direct bf16 conv's rounding of float64 at
    every width."""
    import torch

    from kokoro_tvm.compile.phases import legalize

    module, mod, params = _exported_conv(64, 64, taps, dilation, max(WIDTHS), residual=residual)
    legal = legalize(mod, precision="bf16")
    names = _kernel_names(legal)
    epilogue = "_bias_res" if residual else "_bias"
    assert [n for n in names if n.startswith("bf16_fft") and n.endswith(epilogue)], names
    assert not [n for n in names if n.startswith("winograd") or n.startswith("fused_conv1d")]
    lifted = legal["main_transform_params"].script()
    assert "bf16_pairs" not in legal["main"].script() and "weights" in lifted
    run = _library(legal, params)  # built on any CPU
    if not _runs_bf16():
        pytest.skip("this CPU has no AVX512_BF16: the library is built, not run")
    for width in WIDTHS:
        x = torch.randn(1, 64, width)
        got = run(x.numpy())
        with torch.no_grad():
            want = module.double()(x.double()).numpy()
            module.float()
        assert got.shape == want.shape
        assert _rms(got, want) < 5e-3, width  # a direct bf16 conv: ~2.3e-3


def test_an_fft_convs_epilogue_rounds_as_the_separate_adds():
    """The bias and residual adds folded into the FFT kernel (``conv_epilogue``) give the outputs
    the same library gives with them as kernels of their own, bit for bit, at every width (each
    block's edge included); without the fold the adds are separate kernels (the control)."""
    from unittest import mock

    from kokoro_tvm.compile import conv_epilogue
    from kokoro_tvm.compile.phases import legalize

    _spans_blocks(64, 11, 3)
    _, mod, params = _exported_conv(64, 64, 11, 3, 20000, residual=True)
    folded = legalize(mod, precision="bf16")
    with mock.patch.object(conv_epilogue, "fold", lambda m, bf16: m):
        apart = legalize(mod, precision="bf16")
    adds = [gv.name_hint for gv in apart.functions if "add" in gv.name_hint]
    assert adds and not [gv for gv in folded.functions if "add" in gv.name_hint], adds
    _, broadcast, _ = _exported_conv(64, 64, 11, 3, 6000, residual="broadcast")
    names = [gv.name_hint for gv in legalize(broadcast, precision="bf16").functions]
    assert [n for n in names if n.endswith("_bias")], names  # the broadcast add stays outside
    assert not [n for n in names if n.endswith("_res")], names
    if not _runs_bf16():
        pytest.skip("this CPU has no AVX512_BF16: the libraries are built, not run")
    one, other = _library(folded, params), _library(apart, params)
    rng = np.random.default_rng(3)
    for width in WIDTHS:
        x = rng.standard_normal((1, 64, width)).astype(np.float32)
        assert np.array_equal(one(x), other(x)), width


def test_precision_fp32_is_the_default_and_bf16_needs_its_isa():
    """fp32 legalizes as a call without ``precision`` does (no bf16 kernel); a kernel-3 conv of the
    F0/N predictor stays float32 Winograd in bf16 (the generator's of the same shape does not); an
    unknown precision is refused naming the valid ones; a bf16 library for a target without
    AVX512_BF16 is refused naming the feature and the fix, before LLVM would fail in instruction
    selection."""
    from kokoro_tvm.compile.phases import build, legalize

    _, mod, _ = _exported_conv(64, 64, 7, 1, 512)
    fp32 = legalize(mod, precision="fp32")
    assert fp32.script(show_meta=True) == legalize(mod).script(show_meta=True)
    assert not [n for n in _kernel_names(fp32) if n.startswith("bf16")]
    _, short, _ = _exported_conv(64, 64, 3, 1, 512, at="predictor.F0.2.conv1")
    names = _kernel_names(legalize(short, precision="bf16"))
    assert [n for n in names if n.startswith("winograd")] and not [n for n in names if "bf16" in n]
    _, generator, _ = _exported_conv(64, 64, 3, 1, 512)
    names = _kernel_names(legalize(generator, precision="bf16"))
    assert [n for n in names if n.startswith("bf16_fft")], names
    with pytest.raises(ValueError, match="valid precisions: fp32, bf16"):
        legalize(mod, precision="fp16")
    with pytest.raises(ValueError, match=r"lacks avx512bf16.*mattr"):
        build(legalize(mod, precision="bf16"), {"kind": "llvm", "mcpu": "x86-64-v4"})


def test_a_bins_second_weight_pair_is_made_exactly_from_its_first():
    """The FFT kernel keeps one bf16 pair per bin, ``(p, q)``, and makes ``(-q, p)`` in registers
    (``bf16_fft._rotated``): the same bits as rounding ``-q`` and ``p`` to bf16 would give, zeros,
    signs and rounding ties included; swapping the halves alone (the control) is not."""
    from tvm import te

    rng = np.random.default_rng(7)
    re = rng.standard_normal(4096).astype(np.float32)
    im = rng.standard_normal(4096).astype(np.float32)
    im[:64] = 0.0
    re[64:128] = -0.0
    im[128:192] = np.float32(1.0) + np.float32(2.0**-8)  # a tie: rounds to even
    x = te.placeholder((4096,), "uint32", name="x")
    rotated = te.compute((4096,), lambda i: bf16_fft._rotated(x[i]), name="rotated")
    swapped = te.compute((4096,), lambda i: (x[i] << 16) | (x[i] >> 16), name="swapped")
    got = []
    for out in (rotated, swapped):
        f = _build(te.create_prim_func([x, out]), {"kind": "llvm"})
        y = tvm.runtime.tensor(np.zeros(4096, np.uint32))
        f["main"](tvm.runtime.tensor(bf16.pack_pairs(re, im)), y)
        got.append(y.numpy())
    want = bf16.pack_pairs(-im, re)
    assert np.array_equal(got[0], want)
    assert not np.array_equal(got[1], want)


@pytest.mark.parametrize("blocks, dilation, fill", [(1, 3, 2), (3, 3, 2), (2, 1, 5)])
def test_few_odd_blocks_split_their_channels_into_two_tasks_of_the_same_bits(
    blocks, dilation, fill
):
    """Fewer blocks than ``SPLIT_BELOW``, odd in number or (without dilation) with a last block
    under half full, which computes only the tiles its outputs need, run as two tasks per block,
    half of the output channels each: the same bits as one task per block, and every output
    written (the output starts as NaN, so a half or a tile that no task computed would show).
    The last block holds ``1 / fill`` of a block's outputs."""
    channels_in, channels_out, taps = 48, 64, 11
    _, w = _case(channels_in, channels_out, taps, 7)
    pad = dilation * (taps - 1) // 2
    span = dilation * (bf16_fft.POINTS - taps + 1) * bf16_fft.block_tiles(channels_in, dilation)
    width = (blocks - 1) * span + span // fill
    assert -(-width // span) == blocks < bf16_fft.SPLIT_BELOW
    x = np.random.default_rng(blocks).standard_normal((1, channels_in, width)).astype(np.float32)
    outputs = []
    for split_below in (bf16_fft.SPLIT_BELOW, 0):
        func = bf16_fft.kernel(
            channels_in, channels_out, taps, dilation, pad, split_below=split_below
        )
        lib = _build(func, BF16_TARGET)
        if not _runs_bf16():
            pytest.skip("this CPU has no AVX512_BF16: the kernel is built, not run")
        y = tvm.runtime.tensor(np.full((1, channels_out, width), np.nan, np.float32))
        lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(bf16_fft.pack_weights(w)), y)
        outputs.append(y.numpy())
    split, whole = outputs
    assert not np.isnan(split).any()
    assert np.array_equal(split, whole)


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to bf16 (nearest, ties to even) by ml_dtypes, as ``uint16`` bits."""
    import ml_dtypes

    return x.astype(ml_dtypes.bfloat16).view(np.uint16)


@pytest.mark.parametrize("taps, dilation", [(11, 1), (7, 3), (3, 5)])
def test_an_fft_conv_on_bf16_inputs_equals_it_on_their_float32_values(taps, dilation):
    """``input_bf16``: the kernel reads bf16 inputs and widens them as it transposes them (the
    edge blocks as they copy them): the same bits as the float32 kernel on the same values, at
    every width (edge and inner blocks). Negative control: the float32 values unrounded differ."""
    channels_in, channels_out = 48, 64
    rng, w = _case(channels_in, channels_out, taps, taps + dilation)
    pad = dilation * (taps - 1) // 2
    packed = bf16_fft.pack_weights(w)
    wide = _runner(bf16_fft.kernel(channels_in, channels_out, taps, dilation, pad), packed, 64)
    narrow = _build(
        bf16_fft.kernel(channels_in, channels_out, taps, dilation, pad, input_bf16=1), BF16_TARGET
    )
    for width in WIDTHS:
        x = rng.standard_normal((channels_in, width)).astype(np.float32)
        bits = _bf16_bits(x)
        y = tvm.runtime.tensor(np.zeros((1, channels_out, width), np.float32))
        narrow["main"](tvm.runtime.tensor(bits[None]), tvm.runtime.tensor(packed), y)
        values = (bits.astype(np.uint32) << 16).view(np.float32)
        assert np.array_equal(y.numpy()[0], wide(values)), width
        assert not np.array_equal(y.numpy()[0], wide(x)), width


def test_the_kernel_before_an_fft_conv_writes_its_input_in_bf16():
    """The conv's input is rounded to bf16 before the FFT kernel (``bf16.rounded_bits``), and
    ``FuseOps`` puts the rounding into the kernel that computes the input, which then writes
    uint16: half the bytes of the generator's largest writes. Without an op before the conv (the
    control) the rounding is a kernel of its own. The library stays within a direct bf16 conv's
    rounding of float64."""
    import torch

    from kokoro_tvm.compile.phases import legalize

    def rounding(legal) -> list:
        return [
            (gv.name_hint, f) for gv, f in legal.functions.items() if "bf16_bits" in gv.name_hint
        ]

    module, mod, params = _exported_conv(64, 64, 7, 1, max(WIDTHS), snake=True)
    legal = legalize(mod, precision="bf16")
    ((name, func),) = rounding(legal)
    assert name.startswith("fused_") and "sin" in name, name
    signature = next(line for line in func.script().splitlines() if "def main" in line)
    assert signature.endswith('"uint16")):'), signature  # its output, the conv's input
    _, plain, _ = _exported_conv(64, 64, 7, 1, 512)
    assert [n for n, _ in rounding(legalize(plain, precision="bf16"))] == ["bf16_bits"]
    run = _library(legal, params)
    if not _runs_bf16():
        pytest.skip("this CPU has no AVX512_BF16: the library is built, not run")
    for width in WIDTHS:
        x = torch.randn(1, 64, width)
        with torch.no_grad():
            want = module.double()((x + torch.sin(x) ** 2).double()).numpy()
            module.float()
        assert _rms(run(x.numpy()), want) < 5e-3, width


AMX_TARGET = {
    "kind": "llvm",
    "mcpu": "x86-64-v4",
    "mattr": ["+avx512bf16", "+amx-tile", "+amx-bf16"],
}


def _runs_amx() -> bool:
    from host import runs_here

    return runs_here(AMX_TARGET)


@pytest.mark.parametrize("channels, taps, dilation", [(64, 11, 1), (64, 3, 5), (256, 7, 1)])
def test_a_target_with_amx_runs_the_fft_convs_gemms_on_amx_tiles(channels, taps, dilation):
    """The build makes the bf16 FFT kernels again for a target with AMX-BF16, their GEMMs on AMX
    tiles (``bf16_amx``; the control: AVX512_BF16's target keeps ``vdpbf16ps``), from the same
    legalized module and weights; at 256 channels two product tiles side by side. Where this CPU
    has AMX: the same outputs as the ``vdpbf16ps`` kernels within float32 rounding of their sums,
    and within a direct bf16 conv's rounding of float64, at every width (edge and inner
    blocks)."""
    import torch
    from tvm import relax

    from kokoro_tvm.compile.phases import build, legalize, make_target
    from kokoro_tvm.compile.retarget import retarget
    from kokoro_tvm.runtime.amx import permit_where_present
    from kokoro_tvm.runtime.vm import bind_params

    module, mod, params = _exported_conv(
        channels, channels, taps, dilation, max(WIDTHS), residual=True
    )
    legal = legalize(mod, precision="bf16")

    def tdp(target) -> bool:
        made = retarget(legal, make_target(target))
        return any(
            "tdpbf16ps" in f.script() for gv, f in made.functions.items() if "fft" in gv.name_hint
        )

    assert tdp(AMX_TARGET) and not tdp(BF16_TARGET)
    if not _runs_amx():
        pytest.skip("this CPU has no AMX-BF16: the kernels are made, not run")
    assert permit_where_present()
    runs = []
    for target in (AMX_TARGET, BF16_TARGET):
        ex, _, _ = build(legal, target)
        vm = relax.VirtualMachine(ex, tvm.cpu())
        runs.append((vm, bind_params(vm, params)))
    for width in WIDTHS:
        x = torch.randn(1, channels, width)
        amx, avx = (
            (lambda got: (got if hasattr(got, "numpy") else got[0]).numpy())(
                vm["main"](tvm.runtime.tensor(x.numpy()), *bound)
            )
            for vm, bound in runs
        )
        with torch.no_grad():
            want = module.double()(x.double()).numpy()
            module.float()
        assert np.abs(amx - avx).max() < 1e-5 * np.abs(avx).max(), width
        assert _rms(amx, want) < 5e-3, width


def test_a_process_runs_amx_kernels_only_once_the_runtime_asked_linux_for_the_tiles(tmp_path):
    """Linux grants a process AMX tile state only on request: an AMX library loaded by TVM alone
    dies with SIGILL at its first tile (the control); loaded through the runtime
    (``tvm_runtime.load_module``, which asks first on a CPU with AMX) it runs."""
    import signal
    import subprocess
    import sys

    from kokoro_tvm.compile.phases import build, legalize

    if not _runs_amx():
        pytest.skip("this CPU has no AMX-BF16")
    _, mod, params = _exported_conv(64, 64, 7, 1, 4096)
    ex, _, _ = build(legalize(mod, precision="bf16"), AMX_TARGET)
    lib = tmp_path / "amx.so"
    ex.export_library(str(lib))
    np.savez(tmp_path / "params.npz", *params)
    script = """
import sys
import numpy as np
import tvm
from tvm import relax
from kokoro_tvm.runtime import tvm_runtime
from kokoro_tvm.runtime.vm import bind_params
load = tvm.runtime.load_module if sys.argv[2] == "tvm" else tvm_runtime.load_module
lib = load(sys.argv[1])
vm = relax.VirtualMachine(lib, tvm.cpu())
saved = np.load(sys.argv[3])
params = [saved[f"arr_{i}"] for i in range(len(saved.files))]
out = vm["main"](tvm.runtime.tensor(np.ones((1, 64, 1000), np.float32)), *bind_params(vm, params))
print("ran")
"""
    codes = {}
    for how in ("tvm", "runtime"):
        done = subprocess.run(
            [sys.executable, "-c", script, str(lib), how, str(tmp_path / "params.npz")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        codes[how] = (done.returncode, "ran" in done.stdout)
    assert codes == {"tvm": (-signal.SIGILL, False), "runtime": (0, True)}, codes


@pytest.mark.parametrize("taps, dilation", [(11, 1), (3, 5)])
def test_an_fft_conv_with_bf16_outputs_stores_its_float32_outputs_rounded(taps, dilation):
    """``output_bf16``: each output, bias added, is stored rounded to bf16 (nearest, ties to even,
    as ml_dtypes rounds), the float32 kernel's outputs bit for bit once rounded, at every width
    (the inner blocks' narrowing transposes and the edge blocks' stores). Negative control: the
    float32 outputs truncated to their high half differ."""
    channels_in, channels_out = 64, 64
    rng, w = _case(channels_in, channels_out, taps, 7 * taps + dilation)
    pad = dilation * (taps - 1) // 2
    packed = bf16_fft.pack_weights(w)
    bias = rng.standard_normal((1, channels_out, 1)).astype(np.float32)
    args = (channels_in, channels_out, taps, dilation, pad)
    wide, narrow = (
        _build(bf16_fft.kernel(*args, bias=1, output_bf16=out), BF16_TARGET) for out in (0, 1)
    )
    if not _runs_bf16():
        pytest.skip("this CPU has no AVX512_BF16: the kernels are built, not run")
    for width in WIDTHS:
        x = tvm.runtime.tensor(rng.standard_normal((1, channels_in, width)).astype(np.float32))
        ys = [
            tvm.runtime.tensor(np.zeros((1, channels_out, width), dtype))
            for dtype in (np.float32, np.uint16)
        ]
        for lib, y in zip((wide, narrow), ys):
            lib["main"](x, tvm.runtime.tensor(packed), tvm.runtime.tensor(bias), y)
        full, bits = ys[0].numpy(), ys[1].numpy()
        assert np.array_equal(bits, _bf16_bits(full)), width
        assert not np.array_equal(bits, (full.view(np.uint32) >> 16).astype(np.uint16)), width


def test_an_fft_conv_that_only_a_norm_reads_hands_it_bf16():
    """In a bf16 library, a generator conv whose output an instance norm alone reads (a resblock
    pair's first conv, read by AdaIN) stores it in bf16 (``uint16``, half the bytes live at the
    decoder's memory peak), and the norm's kernel reads it widened: the library then stays within
    a bf16 conv's rounding of the float64 module with the conv's output rounded to bf16, inner
    and edge blocks. Control: where the module also returns the conv's output, it stays float32."""
    import ml_dtypes
    import torch

    from kokoro_tvm.compile.phases import legalize

    module, mod, params = _exported_conv(64, 64, 3, 5, max(WIDTHS), norm=True)
    legal = legalize(mod, precision="bf16")
    names = _kernel_names(legal)
    assert [n for n in names if n.startswith("bf16_fft") and n.endswith("_bias_to_bf16")], names
    (norm,) = [f for gv, f in legal.functions.items() if "normalized" in gv.name_hint]
    assert '"uint16")' in next(line for line in norm.script().splitlines() if "def main" in line)
    _, both, _ = _exported_conv(64, 64, 3, 5, 512, norm="and_conv")
    names = _kernel_names(legalize(both, precision="bf16"))
    assert [n for n in names if n.endswith("_bias")] and not [n for n in names if "to_bf16" in n]
    run = _library(legal, params)
    if not _runs_bf16():
        pytest.skip("this CPU has no AVX512_BF16: the library is built, not run")
    conv = module.get_submodule("decoder.generator.resblocks.0.convs1.0")
    for width in WIDTHS[1:]:  # a norm of 2 samples divides by their difference: any rounding
        x = torch.randn(1, 64, width)  # of the conv is amplified (rms 0.03 there)
        with torch.no_grad():
            y = conv.double()(x.double()).float().numpy().astype(ml_dtypes.bfloat16)
            rounded = module.normed.double()(torch.from_numpy(y.astype(np.float64))).numpy()
            module.float()
        assert _rms(run(x.numpy()), rounded) < 5e-3, width


def _conv_then_norm(same_shape: bool):
    """A Relax ``main(x, w, b, gamma, beta)`` (``w`` named as a generator conv's weight): the conv
    plus its bias, reshaped (to its own shape, as the importer gives an instance norm's input,
    or, without ``same_shape``, to another), then an instance norm over time."""
    from tvm import relax

    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 64, n], "float32"))
    w = relax.Var(GENERATOR, relax.TensorType([64, 64, 3], "float32"))
    b, gamma, beta = (
        relax.Var(name, relax.TensorType(shape, "float32"))
        for name, shape in (("b", [1, 64, 1]), ("gamma", [64]), ("beta", [64]))
    )
    with bb.function("main", [x, w, b, gamma, beta], attrs={"num_input": 1}):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.op.nn.conv1d(x, w, padding=[1, 1]), b))
            shape = [1, 64, n] if same_shape else [1, 32, 2 * n]
            y = bb.emit(relax.op.reshape(y, shape))
            g, h = (
                g if same_shape else relax.op.strided_slice(g, [0], [0], [32])
                for g in (gamma, beta)
            )
            out = bb.emit_output(relax.op.nn.instance_norm(y, g, h, 1, [0, 2]))
        bb.emit_func_output(out)
    return bb.get()


def test_an_fft_conv_hands_a_norm_bf16_through_the_importers_reshape():
    """The importer reshapes an instance norm's input to its own shape (the real decoder's
    graph): the conv still stores bf16 for the norm. Control: a reshape that changes the shape
    (a norm over other rows) keeps the conv's float32 output."""
    from kokoro_tvm.compile.phases import legalize

    names = _kernel_names(legalize(_conv_then_norm(same_shape=True), precision="bf16"))
    assert [n for n in names if n.endswith("_bias_to_bf16")], names
    names = _kernel_names(legalize(_conv_then_norm(same_shape=False), precision="bf16"))
    assert [n for n in names if n.endswith("_bias")] and not [n for n in names if "to_bf16" in n]


@pytest.mark.parametrize("taps, dilation", [(7, 1), (3, 5)])
def test_an_fft_conv_written_over_its_residual_gives_the_same_bits(taps, dilation):
    """``inplace``: the kernel writes ``(conv + b) + r`` over ``r`` (no output argument), the
    out-of-place kernel's bits at every width (edge blocks included). Negative control: ``r``
    before the call differs from it after."""
    channels = 64
    rng, w = _case(channels, channels, taps, 5 * taps + dilation)
    pad = dilation * (taps - 1) // 2
    packed = tvm.runtime.tensor(bf16_fft.pack_weights(w))
    bias = tvm.runtime.tensor(rng.standard_normal((1, channels, 1)).astype(np.float32))
    args = (channels, channels, taps, dilation, pad)
    apart, over = (
        _build(bf16_fft.kernel(*args, bias=1, residual=1, inplace=i), BF16_TARGET) for i in (0, 1)
    )
    if not _runs_bf16():
        pytest.skip("this CPU has no AVX512_BF16: the kernels are built, not run")
    for width in WIDTHS:
        x = tvm.runtime.tensor(rng.standard_normal((1, channels, width)).astype(np.float32))
        r = rng.standard_normal((1, channels, width)).astype(np.float32)
        y = tvm.runtime.tensor(np.zeros_like(r))
        apart["main"](x, packed, bias, tvm.runtime.tensor(r), y)
        written = tvm.runtime.tensor(r)
        over["main"](x, packed, bias, written)
        assert np.array_equal(written.numpy(), y.numpy()), width
        assert not np.array_equal(written.numpy(), r), width


def _two_pairs():
    """Two generator convs with residuals, as a resblock's pairs: ``a = conv0(x) + x``, ``b =
    conv1(a) + a``, returning ``b + x``: ``x`` is read after the first add, ``a`` is not after the
    second."""
    from tvm import relax

    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 64, n], "float32"))
    ws = [
        relax.Var(
            f"p_decoder_generator_resblocks_0_convs2_{i}_weight",
            relax.TensorType([64, 64, 3], "float32"),
        )
        for i in range(2)
    ]
    bs = [relax.Var(f"b{i}", relax.TensorType([1, 64, 1], "float32")) for i in range(2)]
    with bb.function("main", [x, *ws, *bs], attrs={"num_input": 1}):
        with bb.dataflow():
            h = x
            for w, b in zip(ws, bs):
                conv = bb.emit(relax.op.add(relax.op.nn.conv1d(h, w, padding=[1, 1]), b))
                h = bb.emit(relax.op.add(conv, h))
            out = bb.emit_output(relax.op.add(h, x))
        bb.emit_func_output(out)
    return bb.get()


def test_an_fft_conv_writes_over_a_residual_only_where_nothing_reads_it_later():
    """The second pair's kernel writes over its residual (the first pair's output, read by
    nothing after), the first pair's does not (its residual, the input, is read again); the
    library gives the bits of the same module with every kernel out of place (the control)."""
    from unittest import mock

    from kokoro_tvm.compile import conv_epilogue
    from kokoro_tvm.compile.phases import legalize

    legal = legalize(_two_pairs(), precision="bf16")
    calls = [line for line in legal["main"].script().splitlines() if "bf16_fft_conv1d" in line]
    assert len(calls) == 2 and "call_tir_inplace" not in calls[0], calls
    assert "call_tir_inplace" in calls[1] and "_res_inplace" in calls[1], calls
    with mock.patch.object(conv_epilogue._Chains, "_last_use", lambda *a: False):
        apart = legalize(_two_pairs(), precision="bf16")
    assert "call_tir_inplace" not in apart["main"].script()
    if not _runs_bf16():
        pytest.skip("this CPU has no AVX512_BF16: the libraries are built, not run")
    rng = np.random.default_rng(11)
    params = [rng.standard_normal((64, 64, 3)).astype(np.float32) / 14 for _ in range(2)]
    params += [rng.standard_normal((1, 64, 1)).astype(np.float32) for _ in range(2)]
    one, other = _library(legal, params), _library(apart, params)
    for width in WIDTHS:
        x = rng.standard_normal((1, 64, width)).astype(np.float32)
        assert np.array_equal(one(x), other(x)), width
