"""Cold start and peak memory: the runtime against the kokoro-onnx package, each in a fresh process.

usage: python benchmarks/footprint.py [--artifacts artifacts] [--target T] [--lengths 30 510]
                                      [--rounds 3] [--threads N] [--runtime-python PY] [--out F]

Per phoneme count (``eval.samples``, the validation voice) and round, alternating the runners
(A B C, B C A, ...), each in its own Python process started from nothing, as a user's would be:

* ``tvm``: ``KokoroTVM.from_manifest(...).synthesize(phonemes, pack)``, twice;
* ``kokoro_onnx_int8``: ``Kokoro(model, voices).create(phonemes, voice, is_phonemes=True)``
  with the registry's ``kokoro-v1.0.int8.onnx`` (what its users download), twice;
* ``kokoro_onnx_fp32``: the same with the fp32 export of the same checkpoint
  (``eval.onnx_kmodel``), twice.

Give ``--runtime-python`` the interpreter of a runtime-only install (``pip install
kokoro-tvm-pipeline``: numpy and the TVM runtime, no torch), as its users have it: in the
development venv ``import tvm`` also imports torch (apache-tvm-ffi does, when it is installed),
~1.3 s and ~200 MB that a user's process does not pay. The package builds its session as it does for
its users (ORT's default threads: every physical
core); the runtime gets ``--threads`` (default: every core). Reported per runner, medians over
rounds: ``ready_s`` (process start to loaded, imports included: the runtime loads its libraries
lazily, so its first call carries that), ``first_audio_s`` (process start to the first call's
audio), ``warm_s`` (the second call), and ``peak_rss_mb`` (the process's high-water RSS,
``VmHWM``: ``wait4``'s would count the parent's pages at the fork). Prints the load average
before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
import numpy as np
runner, start, phonemes, voice_path, root, target, threads, model = sys.argv[1:9]
start = float(start)
pack = np.load(voice_path)
if runner == "tvm":
    from kokoro_tvm.runtime.synthesizer import KokoroTVM
    tts = KokoroTVM.from_manifest(root, target=target or None, num_threads=int(threads))
    ready = time.time()
    call = lambda: tts.synthesize(phonemes, pack).audio
else:
    from kokoro_onnx import Kokoro
    voices = voice_path.replace(".npy", ".npz")
    np.savez(voices, bench=pack)
    k = Kokoro(model, voices)
    ready = time.time()
    call = lambda: k.create(phonemes, voice=pack, is_phonemes=True)[0]
audio = call()
first = time.time()
t = time.perf_counter(); call(); warm = time.perf_counter() - t
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"ready_s": ready - start, "first_audio_s": first - start, "warm_s": warm,
                  "audio_s": len(audio) / 24000, "peak_rss_mb": hwm / 1024}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--target", default="")
    ap.add_argument("--lengths", type=int, nargs="*", default=[30, 510])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument(
        "--runtime-python",
        default=sys.executable,
        help="interpreter for the runtime's process (a torch-free install; default: this one)",
    )
    ap.add_argument("--out")
    args = ap.parse_args()

    import numpy as np

    from kokoro_tvm import artifacts
    from kokoro_tvm.eval import onnx_kmodel
    from kokoro_tvm.eval.eager import load_kokoro
    from kokoro_tvm.eval.samples import phonemes as sample_phonemes
    from kokoro_tvm.eval.timing import cpu_name
    from kokoro_tvm.model.onnx_checkpoint import registry_onnx_bytes

    root = Path(args.artifacts)
    work = Path(tempfile.mkdtemp(prefix="footprint-"))
    voice = work / "voice.npy"
    np.save(voice, artifacts.load_array(artifacts.voice_file(root)))
    models = {"int8": work / "int8.onnx", "fp32": work / "fp32.onnx"}
    models["int8"].write_bytes(registry_onnx_bytes())
    cfg, km = load_kokoro(artifacts.kokoro_checkpoint_file(root), artifacts.model_config_file(root))
    models["fp32"].write_bytes(onnx_kmodel.export_kmodel(km, cfg))
    del km  # this process only launches the runners
    env = dict(os.environ, TVM_NUM_THREADS=str(args.threads))
    runners = ["tvm", "kokoro_onnx_int8", "kokoro_onnx_fp32"]
    report = {
        "cpu": cpu_name(),
        "threads": args.threads,
        "runtime_python": args.runtime_python,
        "load_avg_before": os.getloadavg()[0],
        "lengths": {},
    }
    for n in args.lengths:
        ps = sample_phonemes(n)
        samples: dict[str, list[dict]] = {r: [] for r in runners}
        for rnd in range(args.rounds):
            for name in runners[rnd % 3 :] + runners[: rnd % 3]:
                model = str(models[name.rsplit("_", 1)[-1]]) if name != "tvm" else ""
                row = _measured(name, ps, voice, root, args, model, env)
                samples[name].append(row)
                print(n, name, {k: round(v, 3) for k, v in row.items()}, flush=True)
        report["lengths"][n] = {
            name: {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
            for name, rows in samples.items()
        }
    report["load_avg_after"] = os.getloadavg()[0]
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


def _measured(
    name: str, ps: str, voice: Path, root: Path, args, model: str, env: dict[str, str]
) -> dict:
    start = time.time()
    python = args.runtime_python if name == "tvm" else sys.executable
    proc = subprocess.Popen(
        [
            python,
            "-c",
            CHILD,
            name,
            repr(start),
            ps,
            str(voice),
            str(root),
            args.target,
            str(args.threads),
            model,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{name} failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
