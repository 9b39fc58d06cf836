"""The ONNX graph as the converter reads it: constants, producers, consumers."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Union

import numpy as np
import onnx
from onnx import numpy_helper

from ...errors import KokoroTVMError

OnnxSource = Union[str, Path, bytes, bytearray, memoryview, "onnx.ModelProto"]


class OnnxCheckpointError(KokoroTVMError, RuntimeError):
    """The ONNX graph is not a Kokoro export matching the config, or the registry copy is bad."""


class Graph:
    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.nodes = list(g.node)
        self.consts: dict[str, np.ndarray] = {
            t.name: numpy_helper.to_array(t) for t in g.initializer
        }
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


def attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def load_model(src: OnnxSource) -> onnx.ModelProto:
    if isinstance(src, onnx.ModelProto):
        return src
    try:
        if isinstance(src, (bytes, bytearray, memoryview)):
            return onnx.load_model_from_string(bytes(src))
        return onnx.load(str(src))
    except Exception as e:  # protobuf DecodeError, missing file, bad external data
        what = "bytes" if isinstance(src, (bytes, bytearray, memoryview)) else str(src)
        raise OnnxCheckpointError(
            f"{what} is not a readable ONNX model ({type(e).__name__}: {e})"
        ) from e
