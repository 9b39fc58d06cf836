"""What does the first synthesis in a fresh process cost over the next ones?

usage: python benchmarks/once/first_call.py [--phonemes 510] [--calls 3] [--precision auto]
           [--runs 2] [--artifacts artifacts]

Each run is a fresh process (the CLI's case: ``synth --stream`` speaks its first chunk in one):
it loads the manifest's libraries, then synthesizes the same phonemes ``--calls`` times and
prints each call's wall time, the minor page faults it took and the resident set after it. The
first call touches the packed weights (mapped from their files) and every page of the
activations for the first time; later calls reuse the VM's pooled memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, resource, sys, time
from pathlib import Path
from kokoro_tvm import artifacts
from kokoro_tvm.eval.e2e import sample_phonemes
from kokoro_tvm.runtime.manifest import explain_pick, read_manifest
from kokoro_tvm.runtime.synthesizer import KokoroTVM

root, n, calls, precision = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
target, _ = explain_pick(read_manifest(root))
t0 = time.perf_counter()
tts = KokoroTVM.from_manifest(root, target=target, precision=precision)
out = {"load_s": time.perf_counter() - t0, "rss_after_load_mb": rss_mb(), "calls": []}
voice = artifacts.load_array(artifacts.voice_file(root))
phonemes = sample_phonemes(n)
for _ in range(calls):
    f0, t = faults(), time.perf_counter()
    tts.synthesize(phonemes, voice, seed=0)
    out["calls"].append({"s": time.perf_counter() - t, "minor_faults": faults() - f0,
                         "rss_mb": rss_mb()})
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phonemes", type=int, default=510)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--artifacts", default="artifacts")
    args = ap.parse_args()
    print(f"{args.phonemes} phonemes, precision {args.precision}, load {os.getloadavg()[0]:.2f}")
    for run in range(args.runs):
        cmd = [sys.executable, "-c", CHILD, args.artifacts, str(args.phonemes)]
        cmd += [str(args.calls), args.precision]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out = json.loads(done.stdout.strip().splitlines()[-1])
        calls = "  ".join(
            f"{c['s']:.3f} s ({c['minor_faults']} faults, {c['rss_mb']:.0f} MB)"
            for c in out["calls"]
        )
        print(
            f"run {run + 1}: load {out['load_s']:.2f} s ({out['rss_after_load_mb']:.0f} MB); "
            f"calls {calls}"
        )
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
