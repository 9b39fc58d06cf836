"""Wall time of one tune stage's search on 1 against 2 RPC servers of a tracker (issue 28).

    python benchmarks/tune_rpc.py [--legalized artifacts/legalize/text_encoder-512.json]
        [--trials 32] [--rounds 2] [--mcpu x86-64-v4 | --device qemu] [--scheduler gradient]
        [--out tune_rpc.json]

What ``tune@…`` runs when ``devices.<target>`` names a tracker (``compile.metaschedule.tune`` with
the device record): a local tracker and N servers registered under one key, each server one thread,
i.e. one core per device, as separate boards would be. ``--device qemu`` makes the servers
emulated aarch64 boards (qemu-user, ``python -m kokoro_tvm.devices.setup``) tuning the aarch64
target: boards slower than the host, where measuring is most of a search. ``--warmup`` short
untimed searches come first (``WARMUP_TRIALS`` trials: the first search in a process pays the
imports, the cost model and LLVM's start-up, whatever its length). Then the runs alternate (1, 2, 1,
2, ...), each with the same seed and trial budget;
the table gives each wall time, the median ratio and the load average. Without ``--legalized``
the module is ``synthetic()``'s two convs.

``--compare-local`` (host servers only) then asks whether the tracker's database builds the library
local tuning would pick: one search measured on this CPU, one on two servers, same seed, trials
and one thread per measurement on both sides; per task whether both kept a record and whether it
is the same schedule (trace), then the module built three ways (rules, local database, tracker
database), timed interleaved on one thread. Two searches that measure on different processes
are not expected to agree candidate for candidate (a timing a few percent off steers the
evolutionary search elsewhere), so the library's speed is the comparison that can hold.
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
    the leaky ReLU between them: two tasks, each call long enough on a board to dominate. They
    are legalized as direct convs (the conv rule), as the decoder body's 512-1024-channel convs
    are: at 128 channels ``compile/winograd.py`` would take them, and its kernels are hand
    scheduled, so there would be nothing to tune (the README's rows were measured on these direct
    convs)."""
    from unittest import mock

    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_tvm.compile import winograd
    from kokoro_tvm.compile.phases import legalize

    block = torch.nn.Sequential(
        torch.nn.Conv1d(128, 128, 7, padding=3),
        torch.nn.LeakyReLU(0.1),
        torch.nn.Conv1d(128, 128, 3, padding=1),
    ).eval()
    ep = torch.export.export(block, (torch.randn(1, 128, 1024),))
    mod, _ = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    with mock.patch.object(winograd, "tile_outputs", lambda *a, **kw: None):
        return legalize(mod)


@contextlib.contextmanager
def servers(device: str, tracker: str, key: str, count: int) -> Iterator[None]:
    """``count`` one-thread RPC servers under ``key``: host processes, or emulated aarch64
    boards."""
    from kokoro_tvm.devices import qemu
    from kokoro_tvm.devices.tracker import local_servers

    if device == "host":
        with local_servers(tracker, key, count):
            yield
        return
    extra = qemu.sysroot() / qemu.RUNTIME_EXTRA
    with contextlib.ExitStack() as stack:
        for _ in range(count):
            stack.enter_context(
                qemu.rpc_server(tracker=tracker, key=key, load_library=[extra], threads=1)
            )
        yield


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--legalized",
        type=Path,
        default=None,
        help="a legalize stage's output (default: synthetic)",
    )
    ap.add_argument("--trials", type=int, default=32, help="trials per task")
    ap.add_argument(
        "--rounds", type=int, default=2, help="0: no 1-vs-2 timing (with --compare-local)"
    )
    ap.add_argument("--warmup", type=int, default=1, help="untimed searches first (1 server)")
    ap.add_argument("--mcpu", default="x86-64-v3", help="with --device host")
    ap.add_argument(
        "--device",
        choices=("host", "qemu"),
        default="host",
        help="servers: host processes (x86 candidates), or qemu-user aarch64 boards",
    )
    ap.add_argument(
        "--compare-local",
        action="store_true",
        help="then tune locally and through 2 servers and "
        "compare the picks and libraries (host only)",
    )
    ap.add_argument(
        "--scheduler",
        choices=("round-robin", "gradient"),
        default=None,
        help="MetaSchedule's task scheduler on the tracker (default: the tune stage's, "
        "compile.measure.TrackerMeasure.scheduler)",
    )
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if a.compare_local and a.device != "host":
        ap.error(
            "--compare-local needs --device host: an "
            "emulated board's target cannot be tuned locally"
        )
    if (
        a.compare_local
    ):  # before TVM's thread pool starts: one core per measurement, here as on a server
        os.environ["TVM_NUM_THREADS"] = "1"

    from kokoro_tvm import artifacts
    from kokoro_tvm.compile import measure, metaschedule
    from kokoro_tvm.devices.tracker import local_tracker
    from kokoro_tvm.eval.timing import cpu_name

    if a.scheduler:
        measure.TrackerMeasure.scheduler = a.scheduler
    mod = artifacts.load_ir(a.legalized) if a.legalized else synthetic()
    spec = {"kind": "llvm", "mcpu": a.mcpu} if a.device == "host" else AARCH64
    name = a.mcpu if a.device == "host" else "aarch64"
    cores = os.cpu_count() or 1
    rows = []
    with local_tracker() as tracker:
        for w in range(a.warmup):
            with servers(a.device, tracker, f"warmup-{w}", 1), tempfile.TemporaryDirectory() as db:
                record = {
                    "device": "rpc",
                    "target": name,
                    "tracker": tracker,
                    "key": f"warmup-{w}",
                    "timeout_s": 60,
                }
                t0 = time.perf_counter()
                metaschedule.tune(
                    lambda: mod, spec, min(a.trials, WARMUP_TRIALS), Path(db), cores, device=record
                )
                print(
                    f"warm-up search {w + 1}/{a.warmup}: "
                    f"{time.perf_counter() - t0:.1f} s (not counted)",
                    flush=True,
                )
        for r in range(a.rounds):
            for count in (1, 2):
                key = f"bench-{count}-{r}"
                with servers(a.device, tracker, key, count), tempfile.TemporaryDirectory() as db:
                    record = {
                        "device": "rpc",
                        "target": name,
                        "tracker": tracker,
                        "key": key,
                        "timeout_s": 60,
                    }
                    t0 = time.perf_counter()
                    report = metaschedule.tune(
                        lambda: mod, spec, a.trials, Path(db), cores, device=record
                    )
                    wall = time.perf_counter() - t0
                rows.append(
                    {
                        "servers": count,
                        "round": r,
                        "wall_s": round(wall, 1),
                        "load": os.getloadavg()[0],
                        "search_s": report["search_s"],
                        "keep_s": report["keep_s"],
                        "kept": report["kept"],
                        "tasks": len(report["tasks"]),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
        if a.compare_local:
            compared = compare_local(mod, spec, a.trials, cores, tracker)
    result = {
        "cpu": cpu_name(),
        "device": a.device,
        "target": name,
        "trials_per_task": a.trials,
        "scheduler": measure.TrackerMeasure.scheduler,
        "rows": rows,
    }
    if rows:  # --rounds 0: only --compare-local
        med = {n: statistics.median(x["wall_s"] for x in rows if x["servers"] == n) for n in (1, 2)}
        result.update(median_wall_s=med, ratio_2_over_1=round(med[2] / med[1], 3))
    if a.compare_local:
        result["compare_local"] = compared
    print(json.dumps(result, indent=1))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


def compare_local(mod, spec: dict, trials: int, cores: int, tracker: str, rounds: int = 15) -> dict:
    """The same search measured here and on two servers of ``tracker``; see the module docstring."""
    import numpy as np
    import tvm
    from tvm import relax

    from kokoro_tvm.compile import metaschedule
    from kokoro_tvm.compile.phases import build
    from kokoro_tvm.eval.timing import time_interleaved

    assert os.environ.get("TVM_NUM_THREADS") == "1", "main() sets one thread before TVM starts"
    with tempfile.TemporaryDirectory() as work:
        dbs = {"local": Path(work, "local"), "tracker": Path(work, "tracker")}
        reports = {"local": metaschedule.tune(lambda: mod, spec, trials, dbs["local"], cores)}
        with servers("host", tracker, "compare", 2):
            record = {
                "device": "rpc",
                "target": "host",
                "tracker": tracker,
                "key": "compare",
                "timeout_s": 60,
            }
            reports["tracker"] = metaschedule.tune(
                lambda: mod, spec, trials, dbs["tracker"], cores, device=record
            )
        picks = {where: _kept_traces(db) for where, db in dbs.items()}
        kept = {
            where: [r["task"] for r in rep["tasks"] if r["kept"]] for where, rep in reports.items()
        }
        both = sorted(set(picks["local"]) & set(picks["tracker"]))
        same = [h for h in both if picks["local"][h] == picks["tracker"][h]]
        vms = {}
        for where, db in {"rules": None, **dbs}.items():
            ex, _, _ = build(mod, spec, tune_db=db)
            vms[where] = relax.VirtualMachine(ex, tvm.cpu())
        rng = np.random.default_rng(0)
        inputs = [
            tvm.runtime.tensor(rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32"))
            for p in mod["main"].params
        ]
        outputs = {where: _first(vm["main"](*inputs)).numpy() for where, vm in vms.items()}
        samples = time_interleaved(
            {where: (lambda vm=vm: vm["main"](*inputs)) for where, vm in vms.items()},
            rounds,
            warmup=1,
        )
    ms = {where: round(1e3 * statistics.median(s), 4) for where, s in samples.items()}
    result = {
        "tasks": len(reports["local"]["tasks"]),
        "kept": kept,
        "kept_by_both": len(both),
        "same_schedule": len(same),
        "library_ms": ms,
        "tracker_over_local": round(ms["tracker"] / ms["local"], 3),
        "max_abs_diff_tracker_vs_local": float(np.abs(outputs["tracker"] - outputs["local"]).max()),
        "load": os.getloadavg()[0],
    }
    print(json.dumps(result, indent=1), flush=True)
    return result


def _first(out):
    """The module's output tensor (the Relax function returns a one-element tuple)."""
    return out if hasattr(out, "numpy") else out[0]


def _kept_traces(db_dir: Path) -> dict[int, str]:
    """Workload (its structural hash) -> the kept record's schedule trace, from a tune database."""
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    from kokoro_tvm.compile import metaschedule

    workloads, records = metaschedule.database_files(db_dir)
    db = ms.database.JSONDatabase(path_workload=str(workloads), path_tuning_record=str(records))
    return {
        tvm_ffi.structural_hash(r.workload.mod): str(r.trace) for r in db.get_all_tuning_records()
    }


if __name__ == "__main__":
    main()
