"""Why ``timing.SETTLE_S`` exists: one runtime's spinning worker threads slow the next one.

    python benchmarks/once/settle.py duration 64 [--ort] [--artifacts artifacts]
        [--target x86_64_v3]
    python benchmarks/once/settle.py decoder 128 --ort --first-calls

Times eager, TVM (and ONNX Runtime) on one built library with ``timing.time_interleaved`` at
several pauses before each timed call; medians in ms per pause. On 2 cores, ORT's intra-op
threads keep spinning after a run and eager kokoro timed right after them ran ~2x slower.
``--first-calls`` instead times each runner's very first calls, round by round, with no warmup
(why ``bench.measure`` times the agreement check's round of long calls).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("component")
    ap.add_argument("bucket", type=int)
    ap.add_argument("--ort", action="store_true")
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--target", default="x86_64_v3")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--pauses", type=float, nargs="*", default=[0.0, 0.05, 0.3, 1.0])
    ap.add_argument(
        "--first-calls", action="store_true", help="time the first three rounds, no warmup"
    )
    a = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(a.threads)

    import numpy as np
    import torch

    from kokoro_tvm import params
    from kokoro_tvm.eval import latency
    from kokoro_tvm.eval.timing import time_interleaved, timed_call
    from kokoro_tvm.model.checkpoint import load as load_model
    from kokoro_tvm.model.inputs import example_inputs
    from kokoro_tvm.runtime.built import Built, load_built

    torch.set_num_threads(a.threads)
    prm = params.load(a.params)
    lib = load_built(Path(a.artifacts), Built(a.component, a.bucket, a.target))
    cfg, km = load_model(prm.model.config, prm.model.checkpoint, prm.model.seed)
    inputs = example_inputs(a.component, a.bucket, cfg)
    runners = {
        "eager": latency.eager_runner(a.component, a.bucket, km, inputs, cfg),
        "tvm": latency.tvm_runner(lib, inputs),
    }
    if a.ort:
        runners["ort"] = latency.ort_runner(a.component, a.bucket, km, cfg, inputs, a.threads)
    if a.first_calls:
        print(
            f"{a.component}-{a.bucket}, {a.threads} threads, "
            "ms per call from the first call on, no warmup"
        )
        for r in range(3):
            print(
                f"  round {r}: "
                + "  ".join(f"{k} {timed_call(f)[1] * 1e3:8.1f}" for k, f in runners.items()),
                flush=True,
            )
        return
    print(
        f"{a.component}-{a.bucket}, {a.threads} threads, "
        f"median ms of {a.repeats} interleaved rounds"
    )
    for pause in a.pauses:
        s = time_interleaved(runners, a.repeats, 1, pause)
        print(
            f"  pause {pause:4.2f} s: "
            + "  ".join(f"{k} {float(np.median(v)) * 1e3:8.1f}" for k, v in s.items()),
            flush=True,
        )


if __name__ == "__main__":
    main()
