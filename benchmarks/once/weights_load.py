"""Loading one library and its weights, three ways, in fresh processes, alternated: the packed file
mapped (what the runtime does: ``kokoro_tvm.packed``, sha256 included), TVM's own parameter
format (``tvm.runtime.save_param_dict`` / ``load_param_dict``: read and deserialized into new
tensors), and the raw ``.npz`` read into tensors and transformed by the library at load (what the
runtime did before packing).

For each: wall seconds until the library and its weights are ready to call, and the resident
memory they added (VmRSS after minus before).

usage: python benchmarks/once/weights_load.py [--artifacts artifacts] [--component decoder]
       [--bucket 1536] [--target x86_64_v4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from kokoro_tvm.runtime.manifest import Library, read_manifest

CHILD = r"""
import json, sys, time
from pathlib import Path
import numpy as np
mode, root, comp, bucket, target, extra = sys.argv[1:7]

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
from kokoro_tvm.runtime import tvm_import
tvm_import.prefer_runtime_only()
tvm = tvm_import.import_tvm()
from kokoro_tvm import artifacts, packed
from kokoro_tvm.runtime.built import Built, load_built
entry = json.loads(artifacts.manifest_file(Path(root)).read_text())
lib_entry = next(e for e in entry["libraries"]
                 if (e["component"], e["bucket"], e["target"]) == (comp, int(bucket), target))
from tvm.runtime.vm import VirtualMachine
before = rss()
t0 = time.perf_counter()
if mode == "raw_npz":  # the raw weights read, then transformed by the library at load
    params = load_built(Path(root), Built(comp, int(bucket), target)).params
else:
    vm = VirtualMachine(tvm.runtime.load_module(str(Path(root) / lib_entry["path"])), tvm.cpu())
    if mode == "mapped":
        info = lib_entry["packed"]
        arrays = packed.map_arrays(Path(root) / info["path"], info["sha256"])
        params = [tvm.runtime.from_dlpack(a) for a in arrays]
    else:
        params = list(tvm.runtime.load_param_dict(Path(extra).read_bytes()).values())
print(json.dumps({"seconds": time.perf_counter() - t0, "rss_mb": rss() - before,
                  "tensors": len(params)}))
"""


def tvm_param_file(root: Path, entry: Library, out: Path) -> None:
    """The packed arrays in TVM's own format, for the second candidate."""
    import tvm

    from kokoro_tvm import packed

    arrays = packed.map_arrays(root / entry.packed.path)
    blob = tvm.runtime.save_param_dict(
        {f"p{i}": tvm.runtime.tensor(a) for i, a in enumerate(arrays)}
    )
    out.write_bytes(blob)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--component", default="decoder")
    ap.add_argument("--bucket", type=int, default=1536)
    ap.add_argument("--target", default="x86_64_v4")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    root = Path(a.artifacts).resolve()
    entry = read_manifest(root).library(a.component, a.bucket, a.target)
    with tempfile.TemporaryDirectory() as tmp:
        params_file = Path(tmp) / "params.bin"
        tvm_param_file(root, entry, params_file)
        runs: dict[str, list[dict]] = {"mapped": [], "tvm_params": [], "raw_npz": []}
        print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
        for _ in range(a.rounds):
            for mode in runs:  # alternated, each in a fresh process
                argv = [sys.executable, "-c", CHILD, mode, str(root), a.component]
                argv += [str(a.bucket), a.target, str(params_file)]
                out = subprocess.run(argv, capture_output=True, text=True, check=True)
                runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"{a.component}-{a.bucket} {a.target}: median of {a.rounds} fresh processes; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    for mode, rows in runs.items():
        s = statistics.median(r["seconds"] for r in rows)
        m = statistics.median(r["rss_mb"] for r in rows)
        print(f"  {mode:11s} {s:7.3f} s   +{m:7.1f} MB resident   {rows[0]['tensors']} tensors")


if __name__ == "__main__":
    main()
