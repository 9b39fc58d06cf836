"""Wall time of one tune stage's search on 1 against 2 RPC servers of a tracker (issue 28).

    python benchmarks/tune_rpc.py [--legalized artifacts/legalize/text_encoder-512.json]
        [--trials 32] [--rounds 2] [--mcpu x86-64-v4] [--out tune_rpc.json]

What ``tune@…`` runs when ``devices.<target>`` names a tracker (``compile.tune.tune`` with the
device record): a local tracker and N servers registered under one key, each server one thread,
i.e. one core per device, as separate boards would be. ``--warmup`` untimed searches come first
(the first search in a process pays ~35 s of start-up: imports, the cost model, LLVM). Then the
runs alternate (1, 2, 1, 2, ...), each with the same seed and trial budget; the table gives each
wall time, the median ratio and the load average. Without ``--legalized`` the module is a conv (128 -> 128 channels, k = 7, 256
frames) and a 128 x 512 linear, the two kernel kinds the decoder and ALBERT spend their time in.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def synthetic():
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_tvm.compile.legalize import legalize

    class ConvLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(128, 128, 7, padding=3)
            self.lin = torch.nn.Linear(128, 512)

        def forward(self, x):
            return self.lin(torch.relu(self.conv(x)).transpose(1, 2))

    ep = torch.export.export(ConvLinear().eval(), (torch.randn(1, 128, 256),))
    mod, _ = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    return legalize(mod)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--legalized", type=Path, default=None, help="a legalize stage's output (default: synthetic)")
    ap.add_argument("--trials", type=int, default=32, help="trials per task")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1, help="untimed searches first (1 server)")
    ap.add_argument("--mcpu", default="x86-64-v3")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()

    from kokoro_tvm import artifacts as A
    from kokoro_tvm.compile import tune
    from kokoro_tvm.devices.tracker import local_servers, local_tracker
    from kokoro_tvm.eval.timing import cpu_name

    mod = A.load_ir(a.legalized) if a.legalized else synthetic()
    spec = {"kind": "llvm", "mcpu": a.mcpu}
    cores = os.cpu_count() or 1
    rows = []
    with local_tracker() as tracker:
        for w in range(a.warmup):
            with local_servers(tracker, f"warmup-{w}", 1), tempfile.TemporaryDirectory() as db:
                record = {"device": "rpc", "target": a.mcpu, "tracker": tracker, "key": f"warmup-{w}", "timeout_s": 60}
                t0 = time.perf_counter()
                tune.tune(lambda: mod, spec, a.trials, Path(db), cores, device=record)
                print(f"warm-up search {w + 1}/{a.warmup}: {time.perf_counter() - t0:.1f} s (not counted)", flush=True)
        for r in range(a.rounds):
            for servers in (1, 2):
                key = f"bench-{servers}-{r}"
                with local_servers(tracker, key, servers) as _, tempfile.TemporaryDirectory() as db:
                    record = {"device": "rpc", "target": a.mcpu, "tracker": tracker, "key": key, "timeout_s": 60}
                    t0 = time.perf_counter()
                    report = tune.tune(lambda: mod, spec, a.trials, Path(db), cores, device=record)
                    wall = time.perf_counter() - t0
                rows.append({"servers": servers, "round": r, "wall_s": round(wall, 1), "load": os.getloadavg()[0],
                             "kept": report["kept"], "tasks": len(report["tasks"])})
                print(json.dumps(rows[-1]), flush=True)
    med = {n: statistics.median(x["wall_s"] for x in rows if x["servers"] == n) for n in (1, 2)}
    result = {"cpu": cpu_name(), "mcpu": a.mcpu, "trials_per_task": a.trials, "rows": rows,
              "median_wall_s": med, "ratio_2_over_1": round(med[2] / med[1], 3)}
    print(json.dumps(result, indent=1))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
