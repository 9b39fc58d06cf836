"""Eager vs ONNX Runtime vs TVM latency for every library in a manifest, as a markdown table.

usage: python benchmarks/bench_components.py [--root artifacts] [--params params.yaml]
           [--target T] [--repeats 10] [--warmup 2] [--json out.json]
(after `dvc repro`, from the repo root; needs `pip install -e '.[bench]'`)

Kokoro is built once and shared by all rows; each row is one ``kokoro_tvm.bench.measure``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kokoro_tvm import bench, stages
from kokoro_tvm.artifacts import ArtifactError
from kokoro_tvm.model import CheckpointError
from kokoro_tvm.onnx_export import OnnxExportError
from kokoro_tvm.toolchain import ToolchainError

HEADER = ("| component | bucket | target | eager ms | ORT ms | TVM ms | speedup vs eager | vs ORT | threads |\n"
          "|---|---:|---|---:|---:|---:|---:|---:|---:|")


def row(r: dict) -> str:
    return (f"| {r['component']} | {r['bucket']} | {r['target']} | {r['eager_ms']:.1f} | {r['ort_ms']:.1f} | "
            f"{r['tvm_ms']:.1f} | {r['speedup_vs_eager']:.3f}x | {r['speedup_vs_ort']:.3f}x | {r['threads']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path("artifacts"))
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--target", help="only this target (default: every built target)")
    ap.add_argument("--repeats", type=int, default=bench.DEFAULT_REPEATS)
    ap.add_argument("--warmup", type=int, default=bench.DEFAULT_WARMUP)
    ap.add_argument("--json", type=Path, help="also write every row here")
    a = ap.parse_args()
    try:
        prm = stages.setup(a.params)
        manifest = bench.read_manifest(a.root)
        model = bench.model_of(manifest)
        entries = [e for e in manifest["libraries"] if a.target in (None, e["target"])]
        if not entries:
            raise ArtifactError(f"{a.root}/manifest.json has no library for target {a.target!r}")
        print(HEADER, flush=True)
        rows = []
        for e in entries:
            rows.append(bench.measure(e["component"], e["bucket"], e["target"], a.root, prm,
                                      a.repeats, a.warmup, model=model))
            print(row(rows[-1]), flush=True)
    except (ArtifactError, ToolchainError, CheckpointError, OnnxExportError, ValueError) as e:
        sys.exit(f"error: {e}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
