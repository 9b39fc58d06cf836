"""Time against length for built padded and bounded libraries, every component and bucket.

    python benchmarks/once/modes.py --padded ../wt-padded/artifacts [--bounded artifacts]
        [--repeats 3] [--components decoder duration text_encoder] [--out modes.json]

Issue 17's table, from libraries the pipeline built (not rebuilt here): ``--bounded`` and
``--padded`` are the artifacts of two checkouts that differ only in ``shapes`` (e.g. a
``git worktree`` with ``shapes: padded`` sharing this one's DVC cache). Each library runs the
same bucket-sized inputs (``model.inputs.example_inputs``) through ``CompiledComponent``, the
runtime's own calling convention, at n = B, B/2, B/4 and the smallest length; the two modes are
timed interleaved (``timing.time_interleaved``). A third column runs the component's largest
bounded bucket at the same n: whether one large bounded bucket could stand in for the ladder
(issue 16's build and bench time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from kokoro_tvm import artifacts


def buckets(root: Path, component: str, target: str) -> list[int]:
    names = (artifacts.build_dir(root) / target).glob(f"{component}-*.so")
    return sorted(int(p.stem.rsplit("-", 1)[1]) for p in names)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--padded", type=Path, required=True, help="artifacts dir of a shapes: padded checkout"
    )
    ap.add_argument("--bounded", type=Path, default=artifacts.ROOT)
    ap.add_argument("--target", default="x86_64_v3")
    ap.add_argument("--components", nargs="+", default=["text_encoder", "duration", "decoder"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()

    from kokoro_tvm.config import load_model_config
    from kokoro_tvm.eval.timing import apply_threads, cpu_name, time_interleaved
    from kokoro_tvm.model.inputs import example_inputs
    from kokoro_tvm.runtime.built import Built, load_built
    from kokoro_tvm.spec import lookup

    apply_threads(a.threads)
    cfg = load_model_config("kokoro-82m")
    rows = []
    print(f"{cpu_name()}, {a.threads} threads, medians of {a.repeats} interleaved rounds (ms)")
    print(
        "| component-B | n | padded | bounded | bounded/padded "
        "| largest bounded bucket at n | load |"
    )
    print("|---|---|---|---|---|---|---|")
    for comp in a.components:
        ladder = buckets(a.bounded, comp, a.target)
        if ladder != buckets(a.padded, comp, a.target):
            raise SystemExit(
                f"{comp}: bounded buckets {ladder} differ from padded "
                f"{buckets(a.padded, comp, a.target)}"
            )
        top = ladder[-1]
        largest = load_built(a.bounded, Built(comp, top, a.target))
        for B in ladder:
            libs = {
                "padded": load_built(a.padded, Built(comp, B, a.target)),
                "bounded": load_built(a.bounded, Built(comp, B, a.target)),
            }
            if (libs["padded"].bounded, libs["bounded"].bounded) != (False, True):
                raise SystemExit(f"{comp}-{B}: --padded/--bounded libraries have the other shapes")
            for i, n in enumerate(
                sorted({B, B // 2, B // 4, lookup(comp).min_length}, reverse=True)
            ):
                x = [t.numpy() for t in example_inputs(comp, B, cfg, length=n)]
                xl = [t.numpy() for t in example_inputs(comp, top, cfg, length=n)]
                runners = {k: (lambda c=c: c(*x)) for k, c in libs.items()}
                if B != top:
                    runners["largest"] = lambda: largest(*xl)
                s = time_interleaved(runners, a.repeats, warmup=1 if i == 0 else 0)
                ms = {k: round(statistics.median(v) * 1e3, 2) for k, v in s.items()}
                row = {
                    "component": comp,
                    "bucket": B,
                    "n": n,
                    "ms": ms,
                    "largest_bucket": top,
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                }
                rows.append(row)
                big = (
                    f"{ms['largest']:.1f} ({ms['largest'] / ms['bounded']:.2f}x)"
                    if "largest" in ms
                    else "-"
                )
                print(
                    f"| {comp}-{B} | {n} | {ms['padded']:.1f} | {ms['bounded']:.1f} | "
                    f"{ms['bounded'] / ms['padded']:.2f} | {big} | {row['load_avg_1m']} |",
                    flush=True,
                )
            del libs
    if a.out:
        a.out.write_text(
            json.dumps(
                {
                    "cpu": cpu_name(),
                    "threads": a.threads,
                    "repeats": a.repeats,
                    "target": a.target,
                    "rows": rows,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
