"""Why the bench stages export ONNX with the TorchScript exporter: same ORT speed, faster export.

    python benchmarks/once/onnx_exporters.py decoder 512 [--repeats 4] [--threads 2]

Exports one component at a static bucket with torch's dynamo exporter and with the TorchScript
exporter (``bench.ort_runner(dynamo=...)``), then times both ONNX Runtime sessions in
interleaved rounds on the same inputs (``timing.time_interleaved``). Needs built
``artifacts/weights``.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("component")
    ap.add_argument("bucket", type=int)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    from kokoro_tvm import artifacts
    from kokoro_tvm.eval.eager import load_kokoro
    from kokoro_tvm.eval.latency import ort_runner
    from kokoro_tvm.eval.timing import apply_threads, time_interleaved
    from kokoro_tvm.model.inputs import example_inputs

    threads = apply_threads(a.threads)
    cfg, km = load_kokoro(artifacts.kokoro_checkpoint_file(), artifacts.model_config_file())
    inputs = example_inputs(a.component, a.bucket, cfg)
    runners = {}
    for dynamo in (True, False):
        name = "dynamo" if dynamo else "torchscript"
        t0 = time.perf_counter()
        runners[name] = ort_runner(a.component, km, inputs, threads, dynamo=dynamo)
        print(f"{name:12s} export + session {time.perf_counter() - t0:6.1f} s", flush=True)
    samples = time_interleaved(runners, a.repeats, warmup=1)
    for name, s in samples.items():
        print(f"{name:12s} ORT median {statistics.median(s) * 1e3:8.1f} ms over {len(s)} rounds")


if __name__ == "__main__":
    main()
