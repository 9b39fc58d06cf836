"""Decoder libraries against kokoro's eager decoder path at several thread counts, on this CPU.

usage: python benchmarks/decoder_threads.py LIB.so [LIB.so ...] [--threads 2 16] [--frames 96 400]
                                            [--rounds 3] [--runtime-only] [--out F]

Each ``LIB.so`` is a bounded decoder library (``artifacts/build/<target>/decoder-<bucket>.so``)
with its build record beside it (``.json``: the parameter names). The weights are kokoro's
random initialization (``build_kmodel(cfg, "random")``) given to both sides, so the script needs
no artifacts but the libraries and runs on a machine that has none: timing does not depend on
the weights' values. Per thread count, a fresh process (TVM reads its pool size once) runs, per
length, every library and ``km.predictor.F0Ntrain`` + ``km.decoder`` (what
``KModel.forward_with_tokens`` runs after the alignment), interleaved over ``--rounds`` after one
warm-up, and prints one JSON row: medians, eager over each library, and each library's relative
L2 distance to the eager wrapper on the same random draws (a sanity check, not validation:
float32 audio is chaotic). A library whose ISA the CPU lacks is skipped. ``--runtime-only``
loads TVM's runtime library alone (``TVM_USE_RUNTIME_LIB=1``), as on a machine with a
runtime-only install.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def _without_g2p() -> None:
    """kokoro's package imports its G2P (misaki, and spaCy through it) when imported; the decoder
    needs neither, so a machine without them (a runtime-only box) gets empty stand-ins."""
    import importlib.util
    import types

    if importlib.util.find_spec("misaki") is not None:
        return
    misaki = types.ModuleType("misaki")
    misaki.en, misaki.espeak = types.ModuleType("misaki.en"), types.ModuleType("misaki.espeak")
    misaki.en.MToken = object  # a type annotation of KPipeline's
    sys.modules.update({"misaki": misaki, "misaki.en": misaki.en, "misaki.espeak": misaki.espeak})


def child(libs: list[Path], threads: int, frames: list[int], rounds: int) -> list[dict]:
    import numpy as np
    import torch

    from kokoro_tvm.eval.timing import apply_threads, time_interleaved

    apply_threads(threads)  # before TVM's pool starts
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from kokoro_tvm.config import load_model_config
    from kokoro_tvm.devices import isa
    from kokoro_tvm.model.checkpoint import build_kmodel
    from kokoro_tvm.model.components import BoundedDecoder, component_weights
    from kokoro_tvm.runtime.vm import bind_params
    from kokoro_tvm.spec import unpadded

    _without_g2p()
    km = build_kmodel(load_model_config("kokoro-82m"), "random", 0)
    weights = component_weights("decoder", km)
    loaded, axes = {}, None
    for so in libs:
        info = json.loads(so.with_suffix(".json").read_text())
        missing = isa.missing(info["needs"])
        if missing:
            print(f"skip {so}: this CPU lacks {', '.join(missing)}", file=sys.stderr)
            continue
        vm = VirtualMachine(tvm.runtime.load_module(str(so)), tvm.cpu())
        params = bind_params(
            vm, [tvm.runtime.tensor(weights[n].numpy()) for n in info["signature"]["params"]]
        )
        loaded[str(so)] = (vm, params)
        axes = info["signature"]["info"]["length_axes"]
    if not loaded:
        raise SystemExit("no library given runs on this CPU")
    wrapper = BoundedDecoder(km).eval()
    rows = []
    for n in frames:
        g = np.random.default_rng(n)
        x = {
            "en": g.standard_normal((1, 640, n), dtype=np.float32) * 0.5,
            "asr": g.standard_normal((1, 512, n), dtype=np.float32) * 0.5,
            "ref_s": g.standard_normal((1, 256), dtype=np.float32) * 0.1,
            "rand_ini": g.random((1, 9), dtype=np.float32),
            "noise": g.standard_normal((1, 600 * n, 9), dtype=np.float32) * 0.003,
            "frame_lengths": np.array([n]),
        }
        cut = {k: np.ascontiguousarray(v) for k, v in unpadded(x, axes, n).items()}
        args = [tvm.runtime.tensor(v) for v in cut.values()]
        s, en, asr = (torch.from_numpy(x[k]) for k in ("ref_s", "en", "asr"))

        def eager():
            with torch.inference_mode():
                f0, n_curve = km.predictor.F0Ntrain(en, s[:, 128:])
                return km.decoder(asr, f0, n_curve, s[:, :128])

        runners = {
            name: (lambda vm=vm, p=p: vm["main"](*args, *p)) for name, (vm, p) in loaded.items()
        }
        with torch.inference_mode():
            ref = wrapper(*(torch.from_numpy(v) for v in cut.values())).numpy().ravel()
        agree = {}
        for name, run in runners.items():
            out = run()
            got = (out if hasattr(out, "numpy") else out[0]).numpy().ravel()
            agree[name] = round(float(np.linalg.norm(got - ref) / np.linalg.norm(ref)), 5)
        runners["eager"] = eager
        med = {
            k: statistics.median(v) for k, v in time_interleaved(runners, rounds, warmup=1).items()
        }
        rows.append(
            {
                "threads": threads,
                "frames": n,
                "median_s": {k: round(v, 4) for k, v in med.items()},
                "eager_over": {
                    k: round(med["eager"] / v, 3) for k, v in med.items() if k != "eager"
                },
                "rel_l2_vs_eager_wrapper": agree,
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "torch": torch.__version__,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("libs", type=Path, nargs="+")
    ap.add_argument("--threads", type=int, nargs="+", default=[2, os.cpu_count() or 1])
    ap.add_argument("--frames", type=int, nargs="+", default=[96, 400])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runtime-only", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        child(a.libs, a.child, a.frames, a.rounds)
        return
    from kokoro_tvm.eval.timing import cpu_name

    rows = []
    for threads in a.threads:
        env = dict(os.environ, **({"TVM_USE_RUNTIME_LIB": "1"} if a.runtime_only else {}))
        cmd = [
            sys.executable,
            __file__,
            *map(str, a.libs),
            "--child",
            str(threads),
            "--frames",
            *map(str, a.frames),
            "--rounds",
            str(a.rounds),
        ]
        out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        for line in out.splitlines():
            print(line, flush=True)
    if a.out:
        a.out.write_text(json.dumps({"cpu": cpu_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
