"""The whole compile flow in one process, for tests and benchmarks (the pipeline runs each step
as its own cached DVC stage instead)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model.components import component_weights
from ..spec import Shapes
from .importer import Signature, to_relax
from .phases import build, legalize
from .torch_export import export


@dataclass
class Compiled:
    executable: Any  # tvm.relax.VMExecutable
    signature: Signature
    report: Any  # schedule.ScheduleReport
    legalized: Any  # the IRModule that was built
    build_s: float
    weights: list[np.ndarray]  # raw weights in signature order

    def vm(self):
        import tvm
        from tvm import relax

        return relax.VirtualMachine(self.executable, tvm.cpu())


def compile_component(
    component: str,
    bucket: int,
    km,
    cfg: dict[str, Any],
    target: dict[str, Any],
    lstm_strategy: str = "loop",
    shapes: Shapes = Shapes.PADDED,
    precision: str = "fp32",
) -> Compiled:
    """export -> relax -> legalize -> build of one component at one bucket. A bounded library
    (``Shapes.BOUNDED``) takes the loop LSTM strategy, the only one with a symbolic length;
    ``precision`` is ``legalize``'s."""
    if shapes is Shapes.BOUNDED and lstm_strategy != "loop":
        raise ValueError(
            "a bounded library needs lstm_strategy 'loop' (unroll needs a static length)"
        )
    ep = export(component, bucket, km, cfg, shapes)
    mod, sig = to_relax(ep, component, bucket, cfg, lstm_strategy)
    legal = legalize(mod, precision=precision)
    ex, seconds, report = build(legal, target)
    weights = component_weights(component, km)  # the same parameters for both shapes
    return Compiled(ex, sig, report, legal, seconds, [weights[n].numpy() for n in sig.params])
