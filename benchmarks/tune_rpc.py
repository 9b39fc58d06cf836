"""Wall time of one tune stage's search on 1 against 2 RPC servers of a tracker (issue 28).

    python benchmarks/tune_rpc.py [--legalized artifacts/legalize/text_encoder-512.json]
        [--trials 32] [--rounds 2] [--mcpu x86-64-v4 | --device qemu] [--out tune_rpc.json]

What ``tune@…`` runs when ``devices.<target>`` names a tracker (``compile.tune.tune`` with the
device record): a local tracker and N servers registered under one key, each server one thread,
i.e. one core per device, as separate boards would be. ``--device qemu`` makes the servers
emulated aarch64 boards (qemu-user, ``python -m kokoro_tvm.devices.setup``) tuning the aarch64
target: boards slower than the host, where measuring is most of a search. ``--warmup`` short
untimed searches come first (``WARMUP_TRIALS`` trials: the first search in a process pays the
imports, the cost model and LLVM's start-up, whatever its length). Then the runs alternate (1, 2, 1, 2, ...), each with the same seed and trial budget;
the table gives each wall time, the median ratio and the load average. Without ``--legalized``
the module is ``synthetic()``'s two convs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

WARMUP_TRIALS = 8
#: the aarch64 target of params.yaml, measured on emulated boards with --device qemu
AARCH64 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}


def synthetic():
    """Two convs of a generator ResBlock's shape (128 channels, k = 7 then 3, 1024 samples) with
    the leaky ReLU between them: two tasks, each call long enough on a board to dominate."""
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_tvm.compile.legalize import legalize

    block = torch.nn.Sequential(torch.nn.Conv1d(128, 128, 7, padding=3), torch.nn.LeakyReLU(0.1),
                                torch.nn.Conv1d(128, 128, 3, padding=1)).eval()
    ep = torch.export.export(block, (torch.randn(1, 128, 1024),))
    mod, _ = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    return legalize(mod)


@contextlib.contextmanager
def servers(device: str, tracker: str, key: str, count: int) -> Iterator[None]:
    """``count`` one-thread RPC servers under ``key``: host processes, or emulated aarch64 boards."""
    from kokoro_tvm.devices import qemu
    from kokoro_tvm.devices.tracker import local_servers

    if device == "host":
        with local_servers(tracker, key, count):
            yield
        return
    extra = qemu.sysroot() / qemu.RUNTIME_EXTRA
    with contextlib.ExitStack() as stack:
        for _ in range(count):
            stack.enter_context(qemu.rpc_server(tracker=tracker, key=key, load_library=[extra], threads=1))
        yield


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--legalized", type=Path, default=None, help="a legalize stage's output (default: synthetic)")
    ap.add_argument("--trials", type=int, default=32, help="trials per task")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1, help="untimed searches first (1 server)")
    ap.add_argument("--mcpu", default="x86-64-v3", help="with --device host")
    ap.add_argument("--device", choices=("host", "qemu"), default="host",
                    help="servers: host processes (x86 candidates), or qemu-user aarch64 boards")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()

    from kokoro_tvm import artifacts as A
    from kokoro_tvm.compile import tune
    from kokoro_tvm.devices.tracker import local_tracker
    from kokoro_tvm.eval.timing import cpu_name

    mod = A.load_ir(a.legalized) if a.legalized else synthetic()
    spec = {"kind": "llvm", "mcpu": a.mcpu} if a.device == "host" else AARCH64
    name = a.mcpu if a.device == "host" else "aarch64"
    cores = os.cpu_count() or 1
    rows = []
    with local_tracker() as tracker:
        for w in range(a.warmup):
            with servers(a.device, tracker, f"warmup-{w}", 1), tempfile.TemporaryDirectory() as db:
                record = {"device": "rpc", "target": name, "tracker": tracker, "key": f"warmup-{w}", "timeout_s": 60}
                t0 = time.perf_counter()
                tune.tune(lambda: mod, spec, min(a.trials, WARMUP_TRIALS), Path(db), cores, device=record)
                print(f"warm-up search {w + 1}/{a.warmup}: {time.perf_counter() - t0:.1f} s (not counted)", flush=True)
        for r in range(a.rounds):
            for count in (1, 2):
                key = f"bench-{count}-{r}"
                with servers(a.device, tracker, key, count), tempfile.TemporaryDirectory() as db:
                    record = {"device": "rpc", "target": name, "tracker": tracker, "key": key, "timeout_s": 60}
                    t0 = time.perf_counter()
                    report = tune.tune(lambda: mod, spec, a.trials, Path(db), cores, device=record)
                    wall = time.perf_counter() - t0
                rows.append({"servers": count, "round": r, "wall_s": round(wall, 1), "load": os.getloadavg()[0],
                             "search_s": report["search_s"], "keep_s": report["keep_s"],
                             "kept": report["kept"], "tasks": len(report["tasks"])})
                print(json.dumps(rows[-1]), flush=True)
    med = {n: statistics.median(x["wall_s"] for x in rows if x["servers"] == n) for n in (1, 2)}
    result = {"cpu": cpu_name(), "device": a.device, "target": name, "trials_per_task": a.trials, "rows": rows,
              "median_wall_s": med, "ratio_2_over_1": round(med[2] / med[1], 3)}
    print(json.dumps(result, indent=1))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
