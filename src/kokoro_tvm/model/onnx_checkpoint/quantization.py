"""De-quantization: the scales, zero points and float biases around an integer op."""

from __future__ import annotations

import numpy as np
import onnx

from .graph import Graph, OnnxCheckpointError


def dequantize(
    q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int
) -> np.ndarray:
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
            raise OnnxCheckpointError(
                f"quantization parameters of shape {v.shape} do not fit a weight of shape {q.shape}"
            ) from None
        return v

    return ((q.astype(np.int32) - along(zp)).astype(np.float32) * along(scale)).astype(np.float32)


def integer_op_scale(g: Graph, node: onnx.NodeProto) -> tuple[np.ndarray, onnx.NodeProto]:
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
    raise OnnxCheckpointError(
        f"cannot find the weight scale of {node.op_type} node {node.name!r}: "
        "expected onnxruntime's dynamic-quantization pattern"
    )


def trace_const_back(g: Graph, name: str, through: tuple[str, ...]) -> np.ndarray | None:
    """The float constant a tensor was computed from via ``through`` ops (first input each step)."""
    for _ in range(8):
        if name in g.consts:
            return g.consts[name]
        p = g.producer.get(name)
        if p is None or p.op_type not in through:
            return None
        name = p.input[0]
    return None


def dequantize_after(g: Graph, out: str) -> onnx.NodeProto | None:
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


def bias_after(g: Graph, out: str) -> tuple[np.ndarray, onnx.NodeProto] | None:
    """A float bias added right after a matmul/conv, and the node adding it.

    ``Add(out, const)``, ``Add(out, Reshape(const))`` (ORT's ConvInteger), or FastGelu's bias.
    """
    for c in g.consumers.get(out, []):
        if c.op_type == "Add":
            other = c.input[1] if c.input[0] == out else c.input[0]
            v = trace_const_back(g, other, ("Reshape", "Unsqueeze"))
            if v is not None and v.dtype == np.float32 and v.size == max(v.shape, default=1):
                return v.reshape(-1), c
        if c.op_type in ("FastGelu", "BiasGelu") and len(c.input) > 1 and c.input[0] == out:
            v = g.const(c.input[1])
            if v is not None:
                return v.reshape(-1), c
    return None
