"""ALBERT's attention: the fused kernel (``compile/attention.py``) against the kernels the schedule
rules make of the same attention without it, at several lengths, interleaved.

usage: python benchmarks/once/attention.py [--relax artifacts/relax/duration-512.json]
                                      [--target x86_64_v3] [--lengths 30 126 510 512] [--rounds 9]

The duration library's imported module is legalized twice, with and without ``FuseAttention``.
One layer's attention is timed: the fused kernel, and the chain it replaces (scores + mask,
safe-softmax guard, softmax, ``P V``), each kernel scheduled by the rules and built for the
target, on the same random ``q``, ``k^T``, ``v`` and a zero mask. Prints medians of ``--rounds``
alternating rounds, GFLOP/s of the two products, the ratio, the largest difference between the
two outputs and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from kokoro_tvm import artifacts

ROOT = Path(__file__).resolve().parents[2]


def _chain(legal) -> list[str]:
    """The unfused attention's kernels, found from its softmax: the kernels that make the
    softmax's two inputs (scores + mask, the safe-softmax guard), the softmax, and the one that
    reads its output (``P V``)."""
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    calls = {}  # bound variable -> (kernel name, argument variables)
    for block in legal["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and value.op.same_as(call_tir):
                calls[binding.var] = (value.args[0].name_hint, list(value.args[1].fields))
    var, (softmax, (scores, guard)) = next((v, c) for v, c in calls.items() if "softmax" in c[0])
    pv = next(name for name, args in calls.values() if any(x.same_as(var) for x in args))
    return [calls[scores][0], calls[guard][0], softmax, pv]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--relax", type=Path, default=ROOT / artifacts.relax_file("duration", 512))
    ap.add_argument("--target", default="x86_64_v3")
    ap.add_argument("--lengths", type=int, nargs="+", default=[30, 126, 510, 512])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(a.threads)

    import numpy as np
    import tvm

    from kokoro_tvm import params
    from kokoro_tvm.compile import phase_legalize, schedule
    from kokoro_tvm.compile.schedule.analysis import assume_bounds
    from kokoro_tvm.compile.symbolic import upper_bounds
    from kokoro_tvm.eval.timing import cpu_name

    imported = artifacts.load_ir(a.relax)
    target = tvm.target.Target(params.load().target(a.target))
    fused = phase_legalize.phase()(imported)
    without = [p for p in phase_legalize.phase().passes if p.info.name != "FuseAttention"]
    unfused = tvm.transform.Sequential(without, name="legalize")(imported)
    bounds = upper_bounds(unfused)

    def built(mod, name):
        with assume_bounds(bounds):
            scheduled, _ = schedule.apply(
                tvm.IRModule({"main": mod[name].with_attr("global_symbol", "main")}), target
            )
        return tvm.compile(scheduled, target=target)["main"]

    (kernel,) = [gv.name_hint for gv in fused.functions if gv.name_hint.startswith("attention_")]
    one = built(fused, kernel)
    chain = [built(unfused, name) for name in _chain(unfused)]
    func = fused[kernel]
    heads, dim = (int(d) for d in (func.params[0].shape[1], func.params[0].shape[3]))
    dev, rng = tvm.cpu(), np.random.default_rng(0)
    print(f"{cpu_name()}, {a.target}, {a.threads} threads; chain: {', '.join(_chain(unfused))}")
    for n in a.lengths:
        t = lambda x: tvm.runtime.tensor(x, dev)
        q = t(rng.standard_normal((1, heads, n, dim)).astype("float32") * 0.3)
        kt = t(rng.standard_normal((1, heads, dim, n)).astype("float32") * 0.3)
        v = t(rng.standard_normal((1, heads, n, dim)).astype("float32"))
        mask = t(np.zeros((1, 1, n, n), "float32"))
        scores, guard, probs = (
            t(np.zeros((1, heads, n, n), "float32")),
            t(np.zeros((1, heads, n, 1), "int8")),
            t(np.zeros((1, heads, n, n), "float32")),
        )
        out = {k: t(np.zeros((1, heads, n, dim), "float32")) for k in ("fused", "rules")}
        masked = len(func.params) == 5
        runs = {
            "fused": lambda: one(q, kt, v, *([mask] if masked else []), out["fused"]),
            "rules": lambda: (
                chain[0](q, kt, mask, scores),
                chain[1](scores, guard),
                chain[2](scores, guard, probs),
                chain[3](probs, v, out["rules"]),
            ),
        }
        inner = max(1, int(2e5 // (n * n)))
        samples = {k: [] for k in runs}
        for r in range(a.rounds):
            for k in list(runs) if r % 2 == 0 else list(runs)[::-1]:
                runs[k]()
                t0 = time.perf_counter()
                for _ in range(inner):
                    runs[k]()
                samples[k].append((time.perf_counter() - t0) / inner * 1e3)
        ms = {k: statistics.median(s) for k, s in samples.items()}
        gflop = 4 * heads * dim * n * n / 1e9
        diff = float(np.abs(out["fused"].numpy() - out["rules"].numpy()).max())
        print(
            f"n={n}: fused {ms['fused']:.3f} ms ({gflop / ms['fused'] * 1e3:.0f} GFLOP/s), rules "
            f"{ms['rules']:.3f} ms ({gflop / ms['rules'] * 1e3:.0f}), fused/rules "
            f"{ms['fused'] / ms['rules']:.3f}, max |diff| {diff:.1e}, load {os.getloadavg()[0]:.2f}"
        )


if __name__ == "__main__":
    main()
