"""Bounded-length libraries (issue 17) on the tiny config: one library per component and bucket
runs every length up to the bucket, computing only that length, and equals kokoro at it.

Each component exported with ``Shapes.BOUNDED`` (``compile.torch_export``). Each build takes
seconds; the pipeline test builds one tiny project (~2 min) with ``shapes.tokens: bounded`` through
the stage bodies.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import tvm
from runtime_project import RUNTIME_PARAMS, runtime_artifacts
from test_runtime import find_phonemes

from kokoro_tvm import artifacts
from kokoro_tvm.compile.flow import compile_component
from kokoro_tvm.config import load_model_config
from kokoro_tvm.eval.e2e import compare
from kokoro_tvm.eval.eager import as_float64, reference
from kokoro_tvm.eval.metrics import rel_err
from kokoro_tvm.model import lengths
from kokoro_tvm.model.checkpoint import build_kmodel
from kokoro_tvm.model.inputs import example_inputs
from kokoro_tvm.model.kmodel import random_kmodel
from kokoro_tvm.runtime import alignment, chunking
from kokoro_tvm.runtime.synthesizer import KokoroTVM
from kokoro_tvm.runtime.vm import bind_params
from kokoro_tvm.spec import Shapes

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
    lib = compile_component(component, BUCKET, km, cfg, V3, shapes=Shapes.BOUNDED)
    assert not lib.report.fallbacks  # every kernel got a rule, symbolic extents and all
    main = lib.legalized["main"]
    assert list(dict(main.attrs["tir_var_upper_bound"]).values()) == [
        BUCKET
    ]  # the one length, bounded
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
    runtime checks lengths first, with an error that names the bucket: see the pipeline test)."""
    cfg, km = tiny
    lib = compile_component("text_encoder", BUCKET, km, cfg, V3, shapes=Shapes.BOUNDED)
    vm = lib.vm()
    params = bind_params(vm, lib.weights)
    with pytest.raises(Exception, match="storage allocation failure"):
        vm["main"](tvm.runtime.tensor(np.ones((1, BUCKET + 1), np.int64)), *params)


# -- the decoder's rewrites, each against the upstream limitation it answers ---------------------


def _export_dyn(fn, x: torch.Tensor):
    """``fn`` exported with ``x``'s axis 2 a ``Dim``."""

    class M(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    n = torch.export.Dim("n", min=3, max=64)
    return torch.export.export(M(), (x,), dynamic_shapes=({2: n},))


def _samples(
    x,
):  # [1, C, n, 600] -> [1, C, 600 n], as SineGen's input (the length's only form here)
    return x.reshape(1, x.shape[1], -1)


@pytest.mark.parametrize(
    "stock,ours,shape",
    [
        (
            lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
            lambda x: lengths.upsample_nearest(x, 2),
            (1, 3, 8),
        ),
        (
            lambda x: F.interpolate(x, scale_factor=300, mode="linear"),
            lambda x: lengths.resample_linear(x, 300),
            (1, 3, 8),
        ),
        (
            lambda x: F.interpolate(_samples(x), scale_factor=1 / 300, mode="linear"),
            lambda x: lengths.resample_linear(_samples(x), 1 / 300),
            (1, 3, 8, 600),
        ),
    ],
    ids=["nearest_x2", "linear_x300", "linear_div300"],
)
def test_interpolate_on_a_symbolic_length_needs_the_written_out_form(stock, ours, shape):
    """TVM 0.27's importer cannot express ``F.interpolate``'s float size arithmetic on a symbolic
    length ("Unsupported function types", or a ``broadcast_to`` of a PrimValue); the written-out
    forms import, and equal it (in float64, as SineGen's source runs)."""
    from tvm.relax.frontend.torch import from_exported_program

    x = torch.randn(*shape, dtype=torch.float64)
    torch.testing.assert_close(ours(x), stock(x), rtol=0, atol=1e-12)
    with pytest.raises(
        (AssertionError, TypeError),
        match="Unsupported function types|broadcast_to requires the input",
    ):
        from_exported_program(_export_dyn(stock, x))
    from_exported_program(_export_dyn(ours, x))


def test_a_derived_length_input_does_not_survive_a_pt2_round_trip():
    """torch 2.13: an input of length ``600 n`` exports, but its ``.pt2`` cannot be decomposed
    after loading ("expected sympy.Symbol"); so a bounded decoder takes its noise as [1, n, 600,
    9]."""
    import io

    def round_trip(ep):
        buf = io.BytesIO()
        torch.export.save(ep, buf)
        buf.seek(0)
        return torch.export.load(buf).run_decompositions()

    class M(torch.nn.Module):
        def forward(self, en, noise):
            return en.sum(1, keepdim=True) + noise.reshape(1, -1, 600).sum(-1).unsqueeze(1)

    n = torch.export.Dim("n", min=3, max=64)
    derived = torch.export.export(
        M(),
        (torch.randn(1, 4, 8), torch.randn(1, 4800)),
        dynamic_shapes={"en": {2: n}, "noise": {1: 600 * n}},
    )
    with pytest.raises(AssertionError, match="expected sympy.Symbol"):
        round_trip(derived)
    split = torch.export.export(
        M(),
        (torch.randn(1, 4, 8), torch.randn(1, 8, 600)),
        dynamic_shapes={"en": {2: n}, "noise": {1: n}},
    )
    assert set(map(str, round_trip(split).range_constraints)) == {
        str(next(iter(split.range_constraints)))
    }


def test_instance_norm_legalizes_with_a_centred_variance():
    """TVM 0.27's TOPI ``instance_norm`` takes ``E[x^2] - E[x]^2`` in float32, which cancels on a
    long axis with an offset; ``legalizations`` (our legalize map) centres first, as torch does."""
    from tvm import relax

    from kokoro_tvm.compile.legalizations import LEGALIZE_MAP

    rng = np.random.default_rng(0)
    # a generator stage's width, 120m + 1: a partial last group of the norm's partial sums
    x = (40 + rng.standard_normal((1, 2, 120_001))).astype(np.float32)
    gamma, beta = np.ones(2, np.float32), np.zeros(2, np.float32)
    want = torch.nn.functional.instance_norm(torch.from_numpy(x).double(), eps=1e-5).numpy()
    bb = relax.BlockBuilder()
    args = [
        relax.Var(n, relax.TensorType(a.shape, "float32"))
        for n, a in (("x", x), ("g", gamma), ("b", beta))
    ]
    with bb.function("main", args):
        bb.emit_func_output(bb.emit(relax.op.nn.instance_norm(*args, channel_axis=1, axes=[2])))

    def error(custom):
        mod = relax.transform.LegalizeOps(customize_legalize_map=custom)(bb.get())
        vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
        got = vm["main"](*[tvm.runtime.tensor(a) for a in (x, gamma, beta)]).numpy()
        return float(np.abs(got - want).max())

    stock, ours = error(None), error(LEGALIZE_MAP)
    print(f"max abs error vs float64: stock {stock:.2e}, centred {ours:.2e}")
    assert stock > 1e-2 and ours < stock / 30


class ConvPost(torch.nn.Module):
    """kokoro's ``conv_post``: 128 -> 22 channels, kernel 7, over the generator's 120 n samples."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(128, 22, 7)

    def forward(self, x):  # x [1, 128, n, 120]: the width a symbolic 120 n, as the decoder has it
        return self.conv(F.pad(x.reshape(1, 128, -1), (3, 4)))


def test_a_bounded_conv_with_a_partial_channel_tile_is_computed_over_whole_ones():
    """``conv_post``'s 22 output channels are no whole channel tile, so its register tile took
    the width, 120 (n + 1) samples, where 16 lanes leave a tail: 14 % of the FMA peak on AVX-512.
    Legalized over 32 zero-padded filters (``legalizations/conv1d.CHANNEL_SPAN``) and cropped,
    it keeps its channels in the lanes like the other convs (now those of the Winograd kernel's
    channel tiles, ``compile/winograd.CHANNELS``), and equals torch at every length;
    a single output channel (the F0/N projections) is not padded 32-fold (``CHANNEL_PAD_MAX``)."""
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_tvm.compile.legalizations.conv1d import _tile_padded_channels
    from kokoro_tvm.compile.phases import build, legalize

    assert [_tile_padded_channels(c) for c in (1, 16, 22, 128, 1024)] == [1, 16, 32, 128, 1024]
    torch.manual_seed(0)
    module = ConvPost().eval()
    n = torch.export.Dim("n", min=1, max=64)
    ep = torch.export.export(module, (torch.randn(1, 128, 8, 120),), dynamic_shapes=({2: n},))
    mod, params = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    legal = legalize(mod)
    # 32 filters: the Winograd kernel's transformed weights [10 points, 128, 32]
    # (compile/winograd.py)
    convs = [f for gv, f in legal.functions.items() if "conv1d" in gv.name_hint]
    assert convs and all("(10, 128, 32)" in f.script() for f in convs)
    # the kernel takes any width: no copy of the input to a padded width first
    assert not [gv.name_hint for gv in legal.functions if "pad_to_tile" in gv.name_hint]
    ex, _, _ = build(legal, V3)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    bound = bind_params(vm, [p.numpy() for p in params["main"]])
    for frames in (1, 5, 64):
        x = torch.randn(1, 128, frames, 120)
        got = vm["main"](tvm.runtime.tensor(x.numpy()), *bound)
        got = (got if hasattr(got, "numpy") else got[0]).numpy()
        with torch.no_grad():
            want = module(x).numpy()
        assert got.shape == want.shape == (1, 22, 120 * frames + 1)
        assert rel_err(got, want) < 1e-5, frames  # F(4, 7) through the Winograd kernel: 7-9e-6 here


def test_instance_norm_stores_no_full_size_temporary():
    """The variance reads ``x`` and its mean in one reduction: once fused, the only full-size
    tensor the norm writes is its output (the Relax form also stored ``x - mean`` and its square).
    The importer's axes for ``InstanceNorm1d``, ``[0, 2]``, take that path too; the values stay
    torch's, in float64."""
    from tvm import relax

    from kokoro_tvm.compile.legalizations import LEGALIZE_MAP

    rng = np.random.default_rng(1)
    x = (3 + rng.standard_normal((1, 4, 5000))).astype(np.float32)
    gamma, beta = (
        rng.standard_normal(4).astype(np.float32),
        rng.standard_normal(4).astype(np.float32),
    )
    bb = relax.BlockBuilder()
    args = [
        relax.Var(n, relax.TensorType(a.shape, "float32"))
        for n, a in (("x", x), ("g", gamma), ("b", beta))
    ]
    with bb.function("main", args):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.instance_norm(*args, channel_axis=1, axes=[0, 2]))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps(customize_legalize_map=LEGALIZE_MAP)(bb.get())
    mod = tvm.transform.Sequential(
        [
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )(mod)
    full = [
        b.var
        for blk in mod["main"].body.blocks
        for b in blk.bindings
        if [int(d) for d in b.var.ty.shape] == list(x.shape)
    ]
    assert len(full) == 1, mod["main"]
    got = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())["main"](
        *[tvm.runtime.tensor(a) for a in (x, gamma, beta)]
    ).numpy()
    want = torch.nn.functional.instance_norm(
        torch.from_numpy(x).double(),
        weight=torch.from_numpy(gamma).double(),
        bias=torch.from_numpy(beta).double(),
        eps=1e-5,
    ).numpy()
    np.testing.assert_allclose(got, want, atol=2e-5)


# -- the pipeline: shapes = bounded -------------------------------------------------------------


@pytest.fixture(scope="module")
def bounded_project(tmp_path_factory):
    """The runtime tests' project (tokens [6, 12], frames [16, 32], bounded as params.yaml ships),
    each library validated by the validate stage at the lengths padded ones are validated at."""
    assert RUNTIME_PARAMS["shapes"] == {"tokens": "bounded", "frames": "bounded"}
    return runtime_artifacts(tmp_path_factory)


def test_pipeline_builds_validates_and_runs_bounded_libraries(bounded_project):
    tts = KokoroTVM.from_manifest(bounded_project)
    assert {e.shapes for e in tts.manifest.libraries} == {Shapes.BOUNDED}
    for e in tts.manifest.libraries:  # every kernel got a rule, symbolic extents and all
        info = artifacts.read_json(
            artifacts.build_info_file(
                e.component, e.bucket, e.target, bounded_project, precision=e.precision
            ),
            "build info",
        )
        assert info["schedule"]["fallbacks"] == [], (e.path, info["schedule"])
    m = RUNTIME_PARAMS["model"]
    km = build_kmodel(load_model_config(m["config"]), m["checkpoint"], m["seed"])
    ps = find_phonemes(km, 17, 31)  # one chunk, in the 32-frame bucket, which it does not fill
    row = compare(tts, km, as_float64(km), ps)
    assert row["chunks"] == 1 and row["frame_buckets"] == [32] and not row["at_bucket"], row
    assert row["finite"] and row["durations_equal"] and row["ok"], (
        row
    )  # kokoro's audio under float64

    t = len(ps) + 2
    lib = tts.libraries.get("duration", 6 if t <= 6 else 12)
    ids = np.zeros((1, lib.bucket), np.int64)
    ids[0, :t] = chunking.token_ids(ps, km.vocab)
    style = np.zeros((1, 128), np.float32)
    dur, d = lib(ids, np.array([t]), style)
    assert dur.shape == (1, t) and d.shape[1] == t  # computed for the valid tokens only
    past = lib.bucket + 1
    with pytest.raises(
        ValueError,
        match=f"bucket {lib.bucket}: length {past} is outside 3..{lib.bucket}; pick a bucket",
    ):
        lib(ids, np.array([past]), style)


def test_the_runtime_passes_bounded_libraries_valid_length_inputs(bounded_project, monkeypatch):
    """No bucket-sized host buffer for a bounded library (issue 27, lean host path): every input
    along a length axis reaches the library at the valid length; a bucket-sized call gives the
    same outputs, and a length-axis extent that is neither is refused."""
    from kokoro_tvm.runtime.component import CompiledComponent

    tts = KokoroTVM.from_manifest(bounded_project)
    seen = []
    args = CompiledComponent.device_args
    monkeypatch.setattr(
        CompiledComponent,
        "device_args",
        lambda self, *x: seen.append((self, [np.shape(a) for a in x])) or args(self, *x),
    )
    m = RUNTIME_PARAMS["model"]
    km = build_kmodel(load_model_config(m["config"]), m["checkpoint"], m["seed"])
    res = tts.synthesize(
        find_phonemes(km, 17, 31), "random", seed=0
    )  # one chunk: 12 tokens max, 17-31 frames
    (part,) = res.parts
    chunk, drawn = part.chunk, part.decoded
    assert len(seen) == 3  # duration, text encoder, decoder
    for lib, shapes in seen:
        axes, n = (
            lib.entry.length_axes,
            chunk.n_tokens if lib.entry.component != "decoder" else chunk.n_frames,
        )
        names = [s.name for s in lib.entry.inputs]
        for name, (axis, scale) in axes.items():
            assert shapes[names.index(name)][axis] == scale * n, (lib.entry.component, name)
    assert chunk.n_frames < drawn.frame_bucket  # so a bucket-sized decoder input would have shown
    monkeypatch.setattr(CompiledComponent, "device_args", args)
    dec = tts.libraries.get("decoder", drawn.frame_bucket)
    spf = tts.libraries.samples_per_frame
    m, fb = chunk.n_frames, drawn.frame_bucket
    en, asr = (
        alignment.expand(x, chunk.durations)
        for x in (
            chunk.d,
            tts.libraries.get("text_encoder", chunk.token_bucket)(
                np.pad(chunk.input_ids[None], ((0, 0), (0, chunk.token_bucket - chunk.n_tokens))),
                np.array([chunk.n_tokens]),
            )[0],
        )
    )
    valid = dec(en, asr, np.array([m]), chunk.style, drawn.rand_ini, drawn.noise)[0]
    pad = lambda x, axis, k: np.pad(
        x, [(0, k - x.shape[axis]) if i == axis else (0, 0) for i in range(x.ndim)]
    )
    bucket = dec(
        pad(en, 2, fb),
        pad(asr, 2, fb),
        np.array([m]),
        chunk.style,
        drawn.rand_ini,
        pad(drawn.noise, 1, fb * spf),
    )[0]
    np.testing.assert_array_equal(valid, bucket)
    np.testing.assert_allclose(valid.reshape(-1), drawn.audio, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"input 'en' must have shape .* or "):
        dec(en[..., :-1], asr, np.array([m]), chunk.style, drawn.rand_ini, drawn.noise)
