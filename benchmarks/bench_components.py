"""Eager vs ONNX Runtime vs TVM latency for every library in a manifest, as a markdown table.

usage: python benchmarks/bench_components.py [--root artifacts] [--params params.yaml]
           [--target T] [--components duration text_encoder] [--repeats 10] [--json out.json]
(after `dvc repro`, from the repo root; needs `pip install -e '.[bench]'`)

Kokoro is built once and shared by all rows; each row is what the bench stage measures on this CPU
(``kokoro_tvm.pipeline.bench.on_host``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kokoro_tvm.artifacts import ArtifactError
from kokoro_tvm.eval.onnx_export import OnnxExportError
from kokoro_tvm.model.checkpoint import CheckpointError, load
from kokoro_tvm.pipeline.bench import on_host
from kokoro_tvm.pipeline.common import setup
from kokoro_tvm.runtime.manifest import read_manifest
from kokoro_tvm.toolchain import ToolchainError

HEADER = (
    "| component | bucket | target | eager ms | ORT ms "
    "| TVM ms | speedup vs eager | vs ORT | threads |\n"
    "|---|---:|---|---:|---:|---:|---:|---:|---:|"
)


def row(r: dict) -> str:
    ort = f"{r['ort_ms']:.1f}" if "ort_ms" in r else "-"
    vs_ort = f"{r['speedup_vs_ort']:.3f}x" if "speedup_vs_ort" in r else "-"
    return (
        f"| {r['component']} | {r['bucket']} | {r['target']} | {r['eager_ms']:.1f} | {ort} | "
        f"{r['tvm_ms']:.1f} | {r['speedup_vs_eager']:.3f}x | {vs_ort} | {r['threads']} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--root", type=Path, default=Path("artifacts"))
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--target", help="only this target (default: every built target)")
    ap.add_argument("--components", nargs="+", help="only these components (default: every one)")
    ap.add_argument("--repeats", type=int, help="default: params.yaml bench.repeats")
    ap.add_argument("--json", type=Path, help="also write every row here")
    a = ap.parse_args()
    try:
        prm = setup(a.params)
        if a.repeats:
            prm = prm.updated(bench={"repeats": a.repeats})
        manifest = read_manifest(a.root)
        model = load(**manifest.model.as_dict())  # the weights the libraries were given
        entries = [
            e
            for e in manifest.libraries
            if a.target in (None, e.target) and (not a.components or e.component in a.components)
        ]
        if not entries:
            raise ArtifactError(
                f"{a.root}/manifest.json has no library for target {a.target!r}"
                f" and components {a.components}"
            )
        print(HEADER, flush=True)
        rows = []
        for e in entries:
            rows.append(on_host(prm, e.component, e.bucket, e.target, a.root, model))
            print(row(rows[-1]), flush=True)
    except (ArtifactError, ToolchainError, CheckpointError, OnnxExportError, ValueError) as e:
        sys.exit(f"error: {e}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
