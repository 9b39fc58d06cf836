"""Bounded against padded libraries of one component and bucket: time against n, and parity.

    python benchmarks/once/bounded.py text_encoder|duration|decoder 64 [--config kokoro-82m]
        [--out bounded.json]

Builds the padded library (``flow.compile_component``: masked graph, runs the whole bucket) and
the bounded one (``flow.compile_component(..., shapes=Shapes.BOUNDED)``: kokoro's graph at the
input's length) from the same weights (``artifacts/weights`` when built, else random), checks
each at every n against kokoro itself (``eval.eager``: max relative error per output; the
decoder, whose harmonic source runs in float64, against float64 kokoro by log-mel SNR), then times
both interleaved (``timing.time_interleaved``) at n = B, B/2, B/4 and the smallest length;
``--top N`` adds each library's N slowest kernels at n = B with their schedule rule
(``kernels.py``'s VM instrument). Issue 17's criteria:
bounded at B/4 <= 0.3x its own time at B, and within 10% of padded at B.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("component", choices=["text_encoder", "duration", "decoder"])
    ap.add_argument("bucket", type=int)
    ap.add_argument("--config", default="kokoro-82m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--mcpu", default="x86-64-v3")
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--top", type=int, default=0, help="also print each library's slowest kernels at n = B"
    )
    a = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(a.threads)

    import torch
    import tvm

    from kokoro_tvm import artifacts
    from kokoro_tvm.compile.flow import compile_component
    from kokoro_tvm.config import load_model_config
    from kokoro_tvm.eval.eager import as_float64, load_kokoro, reference
    from kokoro_tvm.eval.metrics import log_mel_snr
    from kokoro_tvm.eval.timing import time_interleaved
    from kokoro_tvm.model.inputs import bounded_example_inputs, example_inputs
    from kokoro_tvm.model.kmodel import random_kmodel
    from kokoro_tvm.runtime.vm import bind_params
    from kokoro_tvm.spec import Shapes, lookup

    torch.set_num_threads(a.threads)
    if a.config == "kokoro-82m" and artifacts.kokoro_checkpoint_file().exists():
        cfg, km = load_kokoro(artifacts.kokoro_checkpoint_file(), artifacts.model_config_file())
        weights = "trained (artifacts/weights)"
    else:
        cfg = load_model_config(a.config)
        km, weights = random_kmodel(cfg, seed=0), "random"
    target = {"kind": "llvm", "mcpu": a.mcpu}
    comp, B = a.component, a.bucket
    libs = {
        "padded": compile_component(comp, B, km, cfg, target),
        "bounded": compile_component(comp, B, km, cfg, target, shapes=Shapes.BOUNDED),
    }
    vms = {k: c.vm() for k, c in libs.items()}
    params = {k: bind_params(vms[k], libs[k].weights) for k in libs}
    print(
        f"{comp}-{B} ({a.config}, {weights} weights), build s: "
        + ", ".join(
            f"{k} {c.build_s:.1f} (fallbacks {c.report.fallbacks})" for k, c in libs.items()
        )
    )

    def call(kind: str, inputs, n: int):
        t = tvm.runtime.tensor
        args = (
            inputs if kind == "padded" else bounded_example_inputs(comp, B, cfg, n)
        )  # the same values, cut
        out = vms[kind]["main"](*[t(x.numpy()) for x in args], *params[kind])
        return [out] if hasattr(out, "numpy") else list(out)

    def valid(g: np.ndarray, n: int) -> np.ndarray:
        """The first n positions: the text encoder's last axis, the duration outputs' axis 1."""
        return g[..., :n] if comp == "text_encoder" else g[:, :n]

    km64 = as_float64(km) if comp == "decoder" else None
    metric = "log-mel SNR vs float64" if comp == "decoder" else "rel err"
    rows = {}
    lengths = sorted({B, B // 2, B // 4, lookup(comp).min_export_length}, reverse=True)
    for n in lengths:
        inputs = example_inputs(comp, B, cfg, length=n)
        ref = [r.numpy() for r in reference(comp, km64 or km, inputs, n, cfg)]
        err = {}
        for kind in libs:
            got = [g.numpy() for g in call(kind, inputs, n)]
            if comp == "decoder":  # log-mel SNR against float64 kokoro (dB; higher is better)
                audio = got[0].reshape(-1)[: ref[0].size]
                err[kind] = round(log_mel_snr(ref[0].reshape(-1), audio), 2)
            else:
                err[kind] = max(
                    float(np.abs(valid(g, n) - r).max() / (np.abs(r).max() + 1e-30))
                    for g, r in zip(got, ref)
                )
        s = time_interleaved(
            {k: (lambda k=k, i=inputs, n=n: call(k, i, n)) for k in libs}, a.repeats, 1
        )
        ms = {k: round(statistics.median(v) * 1e3, 3) for k, v in s.items()}
        rows[n] = {"ms": ms, "rel_err": err, "load_avg_1m": round(os.getloadavg()[0], 2)}
        print(
            f"  n={n:4d}: padded {ms['padded']:9.2f} ms  bounded {ms['bounded']:9.2f} ms  "
            f"bounded/padded {ms['bounded'] / ms['padded']:.2f}  {metric} padded "
            f"{err['padded']:.3g} bounded {err['bounded']:.3g}  load {rows[n]['load_avg_1m']}",
            flush=True,
        )
    if a.top:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/kernels.py
        from kernels import _hotspots

        from kokoro_tvm.eval.roofline import fma_peak

        peak = fma_peak(target, a.threads)["gflops"]
        inputs = example_inputs(comp, B, cfg)
        for kind, c in libs.items():
            print(f"  {kind}: rules {dict(sorted(c.report.functions.items()))}")
            t = tvm.runtime.tensor
            args = [
                t(x.numpy())
                for x in (inputs if kind == "padded" else bounded_example_inputs(comp, B, cfg, B))
            ]
            _hotspots(c.legalized, c.executable, [*args, *params[kind]], a.top, peak)
    top, quarter = rows[B]["ms"], rows[B // 4]["ms"]
    summary = {
        "bounded_at_B_over_padded": round(top["bounded"] / top["padded"], 3),
        "bounded_B4_over_bounded_B": round(quarter["bounded"] / top["bounded"], 3),
    }
    print("  " + ", ".join(f"{k} {v}" for k, v in summary.items()))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(
                {
                    "component": comp,
                    "bucket": B,
                    "config": a.config,
                    "weights": weights,
                    "threads": a.threads,
                    "repeats": a.repeats,
                    "lengths": rows,
                    **summary,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
