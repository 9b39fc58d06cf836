"""Validation helpers for ``model.onnx_checkpoint``: a float twin of a quantized graph, and
determinism.

Why: checking a recovered checkpoint against the int8 graph itself mixes two errors (activation
quantization, which eager fp32 kokoro does not do, and any mapping error). The *float twin* is the
same graph with each integer op replaced by its float op on the de-quantized weight; eager kokoro
with the recovered weights must match it to float rounding, so a wrong layout, gate order, weight
norm or module assignment shows up as a large difference, and nothing else does.

kokoro's ``SineGen`` draws random phases and noise; kokoro-onnx's int8 graph has neither (its
rewrite dropped them). ``zero_random_nodes`` and ``zero_noise`` make both sides deterministic.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from kokoro_tvm.model import onnx_checkpoint as ow
from kokoro_tvm.model.onnx_checkpoint import (
    graph as ow_graph,
)
from kokoro_tvm.model.onnx_checkpoint import (
    names as ow_names,
)
from kokoro_tvm.model.onnx_checkpoint import (
    nodes as ow_nodes,
)
from kokoro_tvm.model.onnx_checkpoint import (
    quantization as ow_quantization,
)
from kokoro_tvm.model.onnx_checkpoint import (
    target as ow_target,
)


def _chain_to_scale_mul(
    g: ow_graph.Graph, node: onnx.NodeProto
) -> tuple[list[onnx.NodeProto], onnx.NodeProto]:
    """The nodes between an integer op and its output-scale Mul (inclusive of the Mul)."""
    _, mul = ow_quantization.integer_op_scale(g, node)
    chain, t = [], node.output[0]
    while True:
        c = g.only_consumer(t)
        chain.append(c)
        if c is mul:
            return chain, mul
        t = c.output[0]


def float_twin(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with MatMulInteger/ConvInteger/DynamicQuantizeLSTM/quantized Gather in float.

    Tensor names downstream of each replaced op are kept, so intermediates can be compared by name.
    """
    g = ow_graph.Graph(model)
    replace: dict[int, onnx.NodeProto] = {}  # index of the integer op -> its float replacement
    drop: set[int] = set()
    new_inits: list[onnx.TensorProto] = []
    index = {id(n): i for i, n in enumerate(g.nodes)}

    def add_init(name: str, arr: np.ndarray) -> str:
        new_inits.append(numpy_helper.from_array(np.ascontiguousarray(arr, np.float32), name))
        return name

    def float_input(q_name: str) -> str:
        dq = g.producer[q_name]
        assert dq.op_type == "DynamicQuantizeLinear", dq.op_type
        return dq.input[0]

    for i, n in enumerate(g.nodes):
        if n.op_type == "MatMulInteger":
            scale, _ = ow_quantization.integer_op_scale(g, n)
            zp = g.const(n.input[3]) if len(n.input) > 3 else None
            W = ow.dequantize(g.consts[n.input[1]], scale, zp, axis=1)
            chain, mul = _chain_to_scale_mul(g, n)
            w = add_init(f"{n.name}__twin_W", W)
            replace[i] = helper.make_node(
                "MatMul", [float_input(n.input[0]), w], [mul.output[0]], name=n.name + "__twin"
            )
            drop.update(index[id(c)] for c in chain)
        elif n.op_type == "ConvInteger":
            read = ow_nodes.read_node(g, n)
            _, tensors, _ = read
            chain, mul = _chain_to_scale_mul(g, n)
            ins = [float_input(n.input[0]), add_init(f"{n.name}__twin_W", tensors["weight"])]
            if any(c.op_type == "Add" for c in chain):  # bias inside the replaced chain (older ORT)
                if "bias" not in tensors:
                    raise ValueError(f"{n.name}: bias Add whose float bias cannot be traced")
                ins.append(add_init(f"{n.name}__twin_B", tensors["bias"]))
            # else a float bias Add follows the chain (ORT 1.31) and stays in the graph
            replace[i] = helper.make_node("Conv", ins, [mul.output[0]], name=n.name + "__twin")
            replace[i].attribute.extend(n.attribute)
            drop.update(index[id(c)] for c in chain)
        elif n.op_type == "DynamicQuantizeLSTM":
            inp = list(n.input) + [""] * 12

            def deq(q_name: str, s_name: str, z_name: str) -> np.ndarray:
                q = g.consts[q_name]
                s = np.asarray(g.consts[s_name], np.float32).reshape(q.shape[0], 1, -1)
                z = None if not z_name else np.asarray(g.consts[z_name]).reshape(q.shape[0], 1, -1)
                return ow.dequantize(q, s, z, axis=0).transpose(0, 2, 1)  # -> [D, 4H, in]

            w = add_init(f"{n.name}__twin_W", deq(inp[1], inp[8], inp[9]))
            r = add_init(f"{n.name}__twin_R", deq(inp[2], inp[10], inp[11]))
            node = helper.make_node(
                "LSTM", [inp[0], w, r] + inp[3:8], list(n.output), name=n.name + "__twin"
            )
            node.attribute.extend(n.attribute)
            while node.input and not node.input[-1]:
                node.input.pop()
            replace[i] = node
        elif (
            n.op_type == "Gather"
            and n.input[0] in g.consts
            and g.consts[n.input[0]].dtype != np.float32
        ):
            read = ow_nodes.read_node(g, n)
            if read is None:
                continue
            dq = ow_quantization.dequantize_after(
                g, n.output[0]
            )  # may sit after a Transpose: keep that, in float
            w = add_init(f"{n.name}__twin_W", read[1]["weight"])
            replace[i] = helper.make_node(
                "Gather", [w, n.input[1]], list(n.output), name=n.name + "__twin"
            )
            replace[i].attribute.extend(n.attribute)
            replace[index[id(dq)]] = helper.make_node(
                "Identity", [dq.input[0]], list(dq.output), name=dq.name + "__twin"
            )

    nodes = []
    for i, n in enumerate(g.nodes):
        if i in replace:
            nodes.append(replace[i])
        elif i not in drop:
            nodes.append(n)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(new_inits)
    del out.graph.value_info[:]  # some tensors change type (int8 -> float); let the runtime infer
    return prune(out)


def prune(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop nodes and initializers nothing reaches the graph outputs through.

    Iterates to a fixed point: exporters may list a node after a Loop/If whose body reads it.
    """
    g = model.graph
    needed = {o.name for o in g.output}
    keep: set[int] = set()
    changed = True
    while changed:
        changed = False
        for i, n in enumerate(g.node):
            if i in keep or not any(o in needed for o in n.output if o):
                continue
            keep.add(i)
            changed = True
            needed.update(x for x in n.input if x)
            for a in n.attribute:  # subgraphs (If/Loop) read outer names
                if a.type == onnx.AttributeProto.GRAPH:
                    needed.update(_outer_names(a.g))
    nodes = [n for i, n in enumerate(g.node) if i in keep]
    del g.node[:]
    g.node.extend(nodes)
    inits = [t for t in g.initializer if t.name in needed]
    del g.initializer[:]
    g.initializer.extend(inits)
    return model


def _outer_names(sub: onnx.GraphProto) -> set[str]:
    names = set()
    for n in sub.node:
        names.update(i for i in n.input if i)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                names.update(_outer_names(a.g))
    return names


def zero_random_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Replace RandomNormal[Like]/RandomUniform[Like] by zeros of the same shape."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = []
    for n in out.graph.node:
        if n.op_type in ("RandomNormalLike", "RandomUniformLike"):
            dtype = {a.name: helper.get_attribute_value(a) for a in n.attribute}.get(
                "dtype", TensorProto.FLOAT
            )
            shape = n.output[0] + "__shape"
            nodes.append(helper.make_node("Shape", [n.input[0]], [shape]))
            nodes.append(
                helper.make_node(
                    "ConstantOfShape",
                    [shape],
                    [n.output[0]],
                    value=helper.make_tensor("z", dtype, [1], [0]),
                )
            )
        elif n.op_type in ("RandomNormal", "RandomUniform"):
            a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
            zeros = np.zeros(
                a["shape"], helper.tensor_dtype_to_np_dtype(a.get("dtype", TensorProto.FLOAT))
            )
            nodes.append(
                helper.make_node(
                    "Constant", [], [n.output[0]], value=numpy_helper.from_array(zeros)
                )
            )
        else:
            nodes.append(n)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def expose(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """``model`` with extra graph outputs (float tensors of any shape) for the given names."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    have = {o.name for o in out.graph.output}
    for n in names:
        if n not in have:
            out.graph.output.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, None))
    return out


def module_tensors(
    model: onnx.ModelProto, cfg: dict[str, Any], modules: list[str]
) -> dict[str, tuple[str, str]]:
    """(input, output) tensor names of each listed conv/linear module that is called once.

    Found by node scope like the converter does. The input is the float one in a float twin
    (in a quantized graph it is the 8-bit tensor); the output includes a Linear's bias Add.
    """
    target = ow_target.Target.build(cfg)
    g = ow_graph.Graph(model)
    found: dict[str, list[tuple[str, str]]] = {}
    for n in g.nodes:
        read = ow_nodes.read_node(g, n)
        if read is None:
            continue
        kind = read[0]
        cands = [
            m
            for m in ow_names.resolve(ow_names.scope(n.name), target.modules)
            if ow_nodes.accepts(target.modules[m], kind) and ow_nodes.fits(target, m, read[1])
        ]
        if len(cands) != 1 or cands[0] not in modules:
            continue
        out = n.output[0]
        if n.op_type in ("MatMulInteger", "ConvInteger"):
            out = ow_quantization.integer_op_scale(g, n)[1].output[0]
        bias = ow_quantization.bias_after(g, out)
        if (
            bias is not None and bias[1].op_type == "Add"
        ):  # Linear as MatMul + Add; ORT 1.31's ConvInteger
            out = bias[1].output[0]
        found.setdefault(cands[0], []).append((n.input[0], out))
    return {m: v[0] for m, v in found.items() if len(v) == 1}


def module_outputs(
    model: onnx.ModelProto, cfg: dict[str, Any], modules: list[str]
) -> dict[str, str]:
    """Output tensor name of each listed conv/linear module (called once), found by node scope."""
    return {m: io[1] for m, io in module_tensors(model, cfg, modules).items()}


@contextlib.contextmanager
def zero_noise() -> Iterator[None]:
    """Within the block, kokoro's SineGen gets zero random phases and zero noise (like the
    graph)."""
    rand, randn_like = torch.rand, torch.randn_like
    torch.rand = lambda *a, **k: torch.zeros(
        *a, **{x: y for x, y in k.items() if x in ("dtype", "device")}
    )
    torch.randn_like = lambda x, *a, **k: torch.zeros_like(x)
    try:
        yield
    finally:
        torch.rand, torch.randn_like = rand, randn_like


def capture(km: torch.nn.Module, modules: list[str]) -> tuple[dict[str, torch.Tensor], list]:
    """Forward hooks recording the (last) output of each named submodule of ``km``."""
    got: dict[str, torch.Tensor] = {}
    handles = []
    named = dict(km.named_modules())
    for m in modules:
        handles.append(
            named[m].register_forward_hook(
                lambda mod, inp, out, m=m: got.__setitem__(m, out.detach().clone())
            )
        )
    return got, handles
