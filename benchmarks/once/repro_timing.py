"""Time a `dvc repro` per stage kind, then a no-op repro, and list artifact sizes.

usage: python benchmarks/once/repro_timing.py [--force] [--out timing.json]
       (run from the repo root)

``--force`` times ``dvc repro --force``: every stage from scratch, what a new checkout without a
DVC remote pays (the default ``make repro``); without it, only what is out of date.

DVC prints no per-stage times, so we timestamp its "Running stage" lines: a stage's time runs
until the next stage starts (or repro ends). Writes JSON and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from kokoro_tvm import artifacts


def timed_repro(force: bool = False) -> tuple[dict[str, float], float, str]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        ["dvc", "repro", *(["--force"] if force else [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    starts: list[tuple[str, float]] = []
    log = []
    for line in proc.stdout:
        log.append(line)
        m = re.search(r"Running stage '([^']+)'", line)
        if m:
            starts.append((m.group(1), time.perf_counter()))
    rc = proc.wait()
    end = time.perf_counter()
    if rc:
        sys.exit("".join(log[-40:]) + f"\ndvc repro failed ({rc})")
    per_stage = {}
    for i, (name, t) in enumerate(starts):
        per_stage[name] = (starts[i + 1][1] if i + 1 < len(starts) else end) - t
    return per_stage, end - t0, "".join(log)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="timing.json")
    ap.add_argument("--force", action="store_true", help="rerun every stage (dvc repro --force)")
    args = ap.parse_args()
    load_before = os.getloadavg()
    per_stage, total, _ = timed_repro(args.force)
    load_after = os.getloadavg()
    kinds: dict[str, list[float]] = defaultdict(list)
    for name, sec in per_stage.items():
        kinds[name.split("@")[0].replace("_tokens", "").replace("_frames", "")].append(sec)
    t = time.perf_counter()
    noop_stages, _, _ = timed_repro()
    noop = time.perf_counter() - t
    sizes = {
        p.as_posix(): p.stat().st_size
        for p in sorted(artifacts.ROOT.rglob("*"))
        if p.is_file() and p.suffix in (".so", ".npz", ".pt2")
    }
    result = {
        "total_s": round(total, 1),
        "force": args.force,
        "load_avg_before": load_before,
        "load_avg_after": load_after,
        "per_stage_s": {k: round(v, 1) for k, v in per_stage.items()},
        "per_kind_s": {k: round(sum(v), 1) for k, v in kinds.items()},
        "noop_s": round(noop, 1),
        "noop_ran": sorted(noop_stages),
        "bytes": sizes,
    }
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(
        f"repro {total:.0f} s (load average {load_before[0]:.2f} before, {load_after[0]:.2f} "
        f"after); no-op repro {noop:.1f} s (ran {sorted(noop_stages)})"
    )
    for k, v in kinds.items():
        print(f"  {k:10s} {sum(v):8.1f} s over {len(v)} stage(s)")
    for name, sec in per_stage.items():
        print(f"  {name:45s} {sec:8.1f} s")
    for p, b in sizes.items():
        print(f"  {p:55s} {b / 1e6:9.1f} MB")


if __name__ == "__main__":
    main()
