"""Fingerprints of the padded (static) IR of the tiny components, stage by stage.

Compile support for bounded (symbolic-length) libraries lives in code that padded builds run too
(LSTM lowering, slice converter, legalizations, weight packing, every schedule rule), and must be
a no-op on a static module. This prints sha256s of the padded IR after import (``relax``), after
``legalize`` and after the schedule pass (``scheduled``, per target), for the tiny config at the
test buckets and both LSTM strategies. Run it on two commits and compare:

    PYTHONPATH=src python benchmarks/once/padded_ir.py before.json   # on the old commit
    PYTHONPATH=src python benchmarks/once/padded_ir.py after.json    # on the new one
    diff before.json after.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

#: (component, bucket) at the tiny test buckets (conftest.TINY_PARAMS), both LSTM strategies
CASES = [("duration", 8), ("text_encoder", 8), ("decoder", 12)]
STRATEGIES = ("loop", "unroll")
TARGETS = {"x86_64_v3": {"kind": "llvm", "mcpu": "x86-64-v3"}, "generic": {"kind": "llvm"}}


def _sha(mod) -> str:
    import tvm

    return hashlib.sha256(tvm.ir.save_json(mod).encode()).hexdigest()


def fingerprints(cases=CASES, strategies=STRATEGIES, targets=TARGETS) -> dict[str, str]:
    """``{"<component>-<bucket>/<strategy>/<step>": sha256}``; the export is shared by
    strategies."""
    from kokoro_tvm.compile import schedule
    from kokoro_tvm.compile.importer import to_relax
    from kokoro_tvm.compile.phases import legalize, make_target
    from kokoro_tvm.compile.torch_export import export
    from kokoro_tvm.config import load_model_config
    from kokoro_tvm.model.kmodel import random_kmodel

    cfg = load_model_config("tiny")
    km = random_kmodel(cfg, seed=0)
    out = {}
    for component, bucket in cases:
        ep = export(component, bucket, km, cfg)
        for strategy in strategies:
            key = f"{component}-{bucket}/{strategy}"
            mod, sig = to_relax(ep, component, bucket, cfg, strategy)
            out[f"{key}/relax"] = _sha(mod)
            out[f"{key}/signature"] = hashlib.sha256(
                json.dumps(sig.as_dict(), sort_keys=True).encode()
            ).hexdigest()
            legal = legalize(mod)
            out[f"{key}/legalize"] = _sha(legal)
            for name, spec in targets.items():
                scheduled, _ = schedule.apply(legal, make_target(spec))
                out[f"{key}/scheduled/{name}"] = _sha(scheduled)
    return out


if __name__ == "__main__":
    fp = fingerprints()
    text = json.dumps(fp, indent=1, sort_keys=True) + "\n"
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text)
    print(text)
