"""Findings: the tensors each weight-bearing node holds, in torch layout."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from torch import nn

from .graph import Graph, OnnxCheckpointError, attrs
from .quantization import (
    bias_after,
    dequantize,
    dequantize_after,
    integer_op_scale,
    trace_const_back,
)
from .target import Target

LSTM_GATES = (0, 2, 3, 1)  # ONNX blocks i,o,f,c -> torch i,f,g(c),o


@dataclass
class Finding:
    node: str
    kind: type
    tensors: dict[str, np.ndarray]  # leaf name -> torch-layout float32 array
    candidates: list[str] = field(default_factory=list)
    quantized: bool = False


def lstm_tensors(
    W: np.ndarray, R: np.ndarray, B: np.ndarray | None, hidden: int
) -> dict[str, np.ndarray]:
    """ONNX LSTM W [D,4H,in], R [D,4H,H], B [D,8H] -> torch weight_ih_l0[_reverse] etc."""

    def reorder(m: np.ndarray) -> np.ndarray:
        blocks = np.split(m, 4, axis=0)
        return np.concatenate([blocks[j] for j in LSTM_GATES], axis=0)

    out = {}
    for d in range(W.shape[0]):
        sfx = "_reverse" if d == 1 else ""
        out[f"weight_ih_l0{sfx}"] = reorder(W[d])
        out[f"weight_hh_l0{sfx}"] = reorder(R[d])
        b = np.zeros(8 * hidden, np.float32) if B is None else B[d]
        out[f"bias_ih_l0{sfx}"] = reorder(b[: 4 * hidden])
        out[f"bias_hh_l0{sfx}"] = reorder(b[4 * hidden :])
    return out


def read_node(g: Graph, n: onnx.NodeProto) -> tuple[type, dict[str, np.ndarray], bool] | None:
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
        scale, mul = integer_op_scale(g, n)
        t = {"weight": dequantize(Wq, scale, zp, axis=0)}
        add = g.only_consumer(n.output[0])
        if add is not None and add.op_type == "Add":  # bias quantized at run time (older ORT)
            other = add.input[1] if add.input[0] == n.output[0] else add.input[0]
            b = trace_const_back(g, other, ("Reshape", "Cast", "Floor", "Round", "Div"))
            if b is not None and b.dtype == np.float32:
                t["bias"] = b
        elif (found := bias_after(g, mul.output[0])) is not None:  # float bias after (ORT 1.31)
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
            a = attrs(n)
            if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                return None
            t = {"weight": B if a.get("transB", 0) else B.T}
            if len(n.input) > 2 and c(n.input[2]) is not None:
                t["bias"] = c(n.input[2]).astype(np.float32).reshape(-1)
        else:
            t = {"weight": B.T}
            if (found := bias_after(g, n.output[0])) is not None:
                t["bias"] = found[0]
        return nn.Linear, t, False
    if op == "MatMulInteger":
        Bq = c(n.input[1])
        if Bq is None or Bq.ndim != 2:
            return None
        zp = c(n.input[3]) if len(n.input) > 3 else None
        scale, mul = integer_op_scale(g, n)
        t = {"weight": dequantize(Bq, scale, zp, axis=1).T}
        if (found := bias_after(g, mul.output[0])) is not None:
            t["bias"] = found[0]
        return nn.Linear, t, True
    if op in ("LSTM", "DynamicQuantizeLSTM"):
        W, R = c(n.input[1]), c(n.input[2])
        if W is None or R is None:
            return None
        B = c(n.input[3]) if len(n.input) > 3 else None
        hidden = int(attrs(n)["hidden_size"])
        if op == "DynamicQuantizeLSTM":  # W [D,in,4H], R [D,H,4H], scales [D] or [D,4H]

            def deq(q, s_name, z_name):
                s = c(s_name)
                z = c(z_name) if z_name else None
                s = np.asarray(s, np.float32).reshape(q.shape[0], 1, -1)
                z = None if z is None else np.asarray(z).reshape(q.shape[0], 1, -1)
                return dequantize(q, s, z, axis=0).transpose(0, 2, 1)

            inp = list(n.input) + [""] * 12
            W, R = deq(W, inp[8], inp[9]), deq(R, inp[10], inp[11])
        return (
            nn.LSTM,
            lstm_tensors(
                W.astype(np.float32),
                R.astype(np.float32),
                None if B is None else B.astype(np.float32),
                hidden,
            ),
            op != "LSTM",
        )
    if op == "Gather":
        W = c(n.input[0])
        if W is None or W.ndim != 2 or c(n.input[1]) is not None:
            return None
        if W.dtype == np.float32:
            return nn.Embedding, {"weight": W}, False
        dq = dequantize_after(g, n.output[0])
        if dq is None:
            return None
        axis = int(attrs(dq).get("axis", 1))
        scale, zp = c(dq.input[1]), c(dq.input[2]) if len(dq.input) > 2 else None
        if scale is None or np.asarray(scale).size != 1:
            raise OnnxCheckpointError(
                f"embedding {n.name!r}: only per-tensor quantization is supported "
                f"(scale shape {None if scale is None else np.shape(scale)}, axis {axis})"
            )
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


def accepts(mod: nn.Module, kind: type) -> bool:
    from kokoro.modules import LayerNorm as KLayerNorm

    if kind is nn.LayerNorm:
        return isinstance(mod, (nn.LayerNorm, KLayerNorm))
    return type(mod) is kind or (kind is nn.InstanceNorm1d and isinstance(mod, nn.InstanceNorm1d))


def leaf_names(mod: nn.Module, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Map generic leaves to the module's names (kokoro's LayerNorm calls them gamma/beta)."""
    from kokoro.modules import LayerNorm as KLayerNorm

    if isinstance(mod, KLayerNorm):
        return {{"weight": "gamma", "bias": "beta"}[k]: v for k, v in tensors.items()}
    return tensors


def fits(target: Target, mod_name: str, tensors: dict[str, np.ndarray]) -> bool:
    mod = target.modules[mod_name]
    for leaf, v in leaf_names(mod, tensors).items():
        shape = target.shapes.get(f"{mod_name}.{leaf}")
        if shape is None or tuple(v.shape) != shape:
            return False
    return True
