"""The CPU schedule pass: every rule on a small real op, numbers equal to torch, honest report."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kokoro_tvm import compiler, schedule

V3 = {"kind": "llvm", "mcpu": "x86-64-v3"}
GENERIC = {"kind": "llvm"}


def _import(module: torch.nn.Module, *inputs: torch.Tensor):
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    ep = torch.export.export(module.eval(), inputs)
    mod = from_exported_program(ep, keep_params_as_input=True)
    mod, params = relax.frontend.detach_params(mod)
    return compiler.legalize(mod), [p.numpy() for p in params.get("main", [])]


def _run(module: torch.nn.Module, inputs: tuple, target=V3):
    """Legalize, schedule, build; return (tvm output, torch output, report)."""
    import tvm
    from tvm import relax

    torch.manual_seed(0)
    legal, params = _import(module, *inputs)
    ex, _, report = compiler.build(legal, target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(x.numpy()) for x in inputs], *[tvm.runtime.tensor(p) for p in params])
    out = out[0] if not hasattr(out, "numpy") else out
    with torch.no_grad():
        ref = module(*inputs)
    return out.numpy(), ref.numpy(), report


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


class ConvLeaky(torch.nn.Module):
    def __init__(self, cin=16, cout=24, k=5):
        super().__init__()
        self.conv = torch.nn.Conv1d(cin, cout, k, padding=k // 2)

    def forward(self, x):
        return F.leaky_relu(self.conv(x), 0.1)


class ConvT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose1d(16, 8, 20, stride=10, padding=5)

    def forward(self, x):
        return self.up(x) + 1.0


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(40, 48)

    def forward(self, x):
        return torch.tanh(self.fc(x))


class Norm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.InstanceNorm1d(12, affine=True)

    def forward(self, x):
        return self.norm(x)


class Elementwise(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(x) * x.transpose(1, 2).transpose(1, 2) + 0.5


CASES = [
    # (module, input shape, rule that must schedule the heaviest function)
    (ConvLeaky(), (1, 16, 37), "conv"),  # 37 frames: the unrolled tail path (along_rows tile)
    (ConvLeaky(16, 24, 3), (1, 16, 64), "conv"),
    (ConvT(), (1, 16, 9), "conv"),
    (Linear(), (1, 7, 40), "matmul"),
    (Norm(), (1, 12, 50), "reduction"),
    (Elementwise(), (1, 8, 64), "injective"),
]


@pytest.mark.parametrize("module,shape,rule", CASES, ids=[type(c[0]).__name__ + str(c[1][-1]) for c in CASES])
@pytest.mark.parametrize("target", [V3, GENERIC], ids=["x86-64-v3", "generic"])
def test_rule_matches_torch(module, shape, rule, target):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    got, ref, report = _run(module, (x,), target)
    assert _rel(got, ref) <= 1e-5
    assert rule in report.functions.values(), report.functions
    assert report.as_dict()["counts"].get(rule, 0) >= 1


def test_report_is_json_and_lists_fallbacks():
    import json

    import tvm
    from tvm.script import tirx as T

    @T.prim_func(private=True, s_tir=True)
    def scan(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32")):
        # a prefix sum reads its own output: no rule's structure, so the generic fallback
        for i in range(64):
            with T.sblock("scan"):
                vi = T.axis.opaque(64, i)
                b[vi] = T.if_then_else(vi == 0, a[vi], b[vi - 1] + a[vi])

    mod = tvm.IRModule({"scan": scan.with_attr("global_symbol", "scan")})
    out, report = schedule.apply(mod, V3)
    doc = json.loads(json.dumps(report.as_dict()))
    assert doc["fallbacks"] == ["scan"] and doc["functions"]["scan"] in ("generic", "none")
    tvm.compile(out, target=tvm.target.Target(V3))  # still builds


def test_prescheduled_lstm_left_alone():
    import tvm

    from kokoro_tvm.relax_lstm import _recurrence_kernel

    func = _recurrence_kernel(1, 4, 8)
    mod = tvm.IRModule({"kokoro_lstm_b1_t4_h8": func})
    out, report = schedule.apply(mod, V3)
    assert report.functions == {"kokoro_lstm_b1_t4_h8": "prescheduled"}
    assert out["kokoro_lstm_b1_t4_h8"].same_as(func)


@pytest.mark.parametrize("component,bucket", [("text_encoder", 8), ("duration", 8), ("decoder", 12)])
def test_tiny_component_matches_eager(component, bucket):
    import tvm
    from tvm import relax

    from kokoro_tvm import components
    from kokoro_tvm.config import load_model_config
    from kokoro_tvm.metrics import rel_err
    from kokoro_tvm.model import build_kmodel
    from kokoro_tvm.reference import reference

    cfg = load_model_config("tiny")
    km = build_kmodel(cfg, "random", seed=0)
    ep = compiler.export(component, bucket, km, cfg)
    mod, sig = compiler.to_relax(ep, component, bucket, cfg, "loop")
    ex, _, report = compiler.build(compiler.legalize(mod), V3)
    assert report.fallbacks == [], report.fallbacks
    weights = compiler.component_weights(component, km)
    inputs = components.example_inputs(component, bucket, cfg, seed=1)
    args = [tvm.runtime.tensor(x.numpy()) for x in inputs] + [tvm.runtime.tensor(weights[n].numpy()) for n in sig.params]
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](*args)
    got = [out[i].numpy() for i in range(len(out))]
    ref = [r.numpy() for r in reference(component, km, inputs, bucket, cfg)]
    assert max(rel_err(r, g) for r, g in zip(ref, got)) <= 1e-4
