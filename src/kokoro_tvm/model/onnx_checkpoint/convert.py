"""The conversion: the node pass and the name pass, cross-checked, into kokoro's checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .graph import Graph, OnnxCheckpointError, OnnxSource, load_model
from .names import looks_like_kokoro_param, param_key, resolve, scope
from .nodes import Finding, accepts, fits, leaf_names, read_node
from .target import SUBMODULES, Target


@dataclass
class ConversionReport:
    """What the conversion found; kept for logs and tests."""

    from_nodes: int = 0
    quantized: int = 0
    from_names: int = 0
    filled: list[str] = field(default_factory=list)
    unresolved_nodes: list[str] = field(default_factory=list)


def collect(
    g: Graph, target: Target, report: ConversionReport
) -> dict[str, tuple[np.ndarray, str]]:
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
    findings: list[Finding] = []
    for n in g.nodes:
        read = read_node(g, n)
        if read is None:
            continue
        kind, tensors, quantized = read
        cands = [
            m for m in resolve(scope(n.name), target.modules) if accepts(target.modules[m], kind)
        ]
        findings.append(Finding(n.name, kind, tensors, cands, quantized))
    claimed: set[str] = set()
    for f in sorted(findings, key=lambda f: len(f.candidates) != 1):
        cands = [m for m in f.candidates if fits(target, m, f.tensors)]
        if len(cands) > 1:
            cands = [m for m in cands if m not in claimed] or cands
        if len(cands) != 1:
            if f.candidates:  # a kokoro module was meant but shapes or uniqueness fail
                report.unresolved_nodes.append(
                    f"{f.node} -> {f.candidates[:3]}{'...' if len(f.candidates) > 3 else ''}"
                    f" { ({k: v.shape for k, v in f.tensors.items()}) }"
                )
            continue
        m = cands[0]
        claimed.add(m)
        for leaf, v in leaf_names(target.modules[m], f.tensors).items():
            put(f"{m}.{leaf}", v, f"node {f.node}", f.quantized and leaf.startswith("weight"))
        report.from_nodes += 1
        report.quantized += f.quantized

    # Name pass: float constants named like parameters. Matrix weights only through nodes, since
    # an optimizer may keep a weight's name on its transpose.
    unexpected = []
    for name, v in g.consts.items():
        base = name.removesuffix("_quantized")
        key = param_key(base, target.shapes)
        if key is None:
            if looks_like_kokoro_param(base):
                unexpected.append(f"{name} {tuple(v.shape)}")
            continue
        if v.dtype != np.float32 or base != name:
            continue
        mod_name, _, leaf = key.rpartition(".")
        mod = target.modules.get(mod_name)
        if leaf == "weight" and isinstance(
            mod, (nn.Linear, nn.Conv1d, nn.ConvTranspose1d, nn.Embedding)
        ):
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
        raise OnnxCheckpointError(
            f"ONNX graph gives different values for {len(conflicts)} parameters: "
            f"{conflicts[:3]}; is it a Kokoro export?"
        )
    if unexpected:
        raise OnnxCheckpointError(
            f"ONNX graph has {len(unexpected)} Kokoro-named tensors the config does not "
            f"have: {unexpected[:4]}{'...' if len(unexpected) > 4 else ''}; "
            "was it exported with a different config?"
        )
    return found


def fill_absent(
    target: Target, found: dict[str, tuple[np.ndarray, str]], report: ConversionReport
) -> None:
    """Parameters the graph cannot hold, with the values that make kokoro compute the same thing."""
    from kokoro.istftnet import AdaIN1d

    for key, shape in target.shapes.items():
        if key in found:
            continue
        mod_name, _, leaf = key.rpartition(".")
        parent = target.modules.get(mod_name.rpartition(".")[0])
        if isinstance(target.modules.get(mod_name), nn.InstanceNorm1d) and isinstance(
            parent, AdaIN1d
        ):
            # kokoro sets affine=True only for the old exporter; trained values are 1 and 0.
            found[key] = (np.full(shape, 1.0 if leaf == "weight" else 0.0, np.float32), "filled")
            report.filled.append(key)
        elif key.startswith("bert.pooler."):
            found[key] = (
                np.zeros(shape, np.float32),
                "filled",
            )  # unused by kokoro, absent from exports
            report.filled.append(key)


def split_weight_norm(W: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
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


def state_dict_from_onnx(
    src: OnnxSource, cfg: dict[str, Any], report: ConversionReport | None = None
) -> dict[str, dict[str, torch.Tensor]]:
    """kokoro's checkpoint dict recovered from a Kokoro ONNX export.

    Exact (bit for bit in the effective weights) for an fp32 export of ``KModelForONNX``;
    de-quantized, so within half a quantization step, for an int8 one. ``src`` is a path, the
    model bytes, or an ``onnx.ModelProto``; ``cfg`` the Kokoro config dict the graph was exported
    with. Raises ``OnnxCheckpointError`` naming the missing/unexpected/mismatched tensors when the
    graph is not a Kokoro export or does not match ``cfg``.
    """
    report = report if report is not None else ConversionReport()
    target = Target.build(cfg)
    model = load_model(src)
    if not model.graph.node:  # protobuf parses many byte strings as an empty model
        raise OnnxCheckpointError("not a readable ONNX model: the graph has no nodes")
    g = Graph(model)
    found = collect(g, target, report)
    fill_absent(target, found, report)

    missing = [k for k in target.shapes if k not in found]
    bad_shape = [
        f"{k} {tuple(found[k][0].shape)} != {target.shapes[k]}"
        for k in target.shapes
        if k in found and tuple(found[k][0].shape) != target.shapes[k]
    ]
    if missing or bad_shape:
        parts = []
        if missing:
            parts.append(
                f"{len(missing)} of {len(target.shapes)} parameters missing "
                f"({missing[:4]}{'...' if len(missing) > 4 else ''})"
            )
        if bad_shape:
            parts.append(
                f"{len(bad_shape)} with other shapes "
                f"({bad_shape[:3]}{'...' if len(bad_shape) > 3 else ''})"
            )
        if report.unresolved_nodes:
            parts.append(
                f"{len(report.unresolved_nodes)} weight nodes matched no module "
                f"({report.unresolved_nodes[:2]})"
            )
        raise OnnxCheckpointError(
            "ONNX graph does not match the Kokoro config: " + "; ".join(parts)
        )

    out: dict[str, dict[str, torch.Tensor]] = {s: {} for s in SUBMODULES}
    flat: dict[str, torch.Tensor] = {}
    for key, (value, _) in found.items():
        mod_name, _, leaf = key.rpartition(".")
        t = torch.from_numpy(np.array(value, dtype=np.float32))  # own, writable copy
        if leaf == "weight" and mod_name in target.wn_dims:
            g_, v_ = split_weight_norm(t, target.wn_dims[mod_name])
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
