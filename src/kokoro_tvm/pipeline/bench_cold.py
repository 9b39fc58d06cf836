"""Stage ``bench_cold``: one sentence in a process that starts, speaks and exits, as a CLI user or a
worker process pays for it, beside kokoro-onnx as its users run it (``eval.cold_start``): cold
wall and CPU time, time to the first streamed byte, peak RSS, the warm call, and the pages two
processes on the same artifacts share. DVC metrics, with the CPU, its ISA, the load average
before and after, the input and the voice.

The runtime is timed through its installed ``kokoro-tvm`` command, beside the interpreter that
runs this stage (the project's venv, the path users take first) or another one
(``runtime_python``: a runtime-only install, ``benchmarks/cold_start_probe.py --runtime-venv``).
Rounds: params ``bench.repeats``; kokoro-onnx runs beside it with ``bench.onnxruntime`` (it needs
ONNX Runtime, the ``bench`` extra). The voice is ``jf_alpha`` on Kokoro-82M, whose voice it is,
and kokoro-onnx speaks it from the registry's voices file; another model config (the tests' tiny
one) has no real voice, and its runtime speaks ``random``. The processes run the runtime's CLI
and API, not code this process calls, so ``runtime.cli`` is imported here for the stage's code
fingerprint (``pipeline.code`` reads imports) to cover every file they run.

The runtime runs as users run it, in the precision it picks (``auto``); where that is narrower than
float32 for some component, its float32 libraries run beside it (``kokoro_tvm_fp32``,
``--precision fp32``), as in ``bench_e2e``. The metrics say what each runtime runner computes in,
per component, as the manifest picks on this CPU (``precision``).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import artifacts, cpuinfo
from ..eval import cold_start
from ..eval.kokoro_onnx_package import INSTALL, VERSION, PackageMissingError
from ..model.onnx_checkpoint.registry import REGISTRY_MODEL_SHA256, registry_onnx_bytes
from ..params import Params
from ..runtime import cli as timed_cli
from ..runtime.manifest import Manifest, explain_pick, explain_precision, read_manifest
from ..runtime.threads import available_cores
from ..runtime.voices import read_named_file, registry_voices_file
from ..spec import FP32

#: kokoro-onnx as its README has users call it; the README writes the file with soundfile, which
#: the project does not install: stdlib ``wave`` writes the same 16-bit file (``-``: raw s16le on
#: stdout)
ONNX_SCRIPT = """\
import sys, wave
import numpy as np
from kokoro_onnx import Kokoro

model, voices, phonemes, voice, out = sys.argv[1:6]
samples, rate = Kokoro(model, voices).create(phonemes, voice=voice, is_phonemes=True)
pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()
if out == "-":
    sys.stdout.buffer.write(pcm)
else:
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
"""


def run(
    prm: Params,
    root: Path = artifacts.ROOT,
    out: Path | None = None,
    rounds: int | None = None,
    phonemes: str | None = None,
    voice: str | None = None,
    onnx_voice: str = cold_start.VOICE,
    runtime_python: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Measure and write the metrics (``out``, default ``artifacts/bench_cold.json``).

    ``phonemes`` default to ``cold_start.SENTENCE``, cut to one utterance of the largest token
    bucket. ``voice`` is the runtime's (default: see the module docstring); kokoro-onnx gets
    ``onnx_voice`` from the registry's voices file. ``root`` is the artifact directory the
    runtime loads."""
    root = Path(root).resolve()
    manifest = read_manifest(root)  # no manifest: the runtime's own clear error, before any run
    target, why = explain_pick(manifest)
    precisions, precision_why = runtime_precisions(manifest, target)
    runtime_python = Path(runtime_python or sys.executable)
    if phonemes is None:
        phonemes = cold_start.sentence(max(manifest.buckets["tokens"]) - 2)  # BOS and EOS
    if voice is None:
        voice = cold_start.VOICE if manifest.model.config == "kokoro-82m" else "random"
    rounds = rounds or prm.bench.repeats
    with_onnx = prm.bench.onnxruntime
    runners = ordered(precisions, with_onnx)
    if with_onnx:
        _check_kokoro_onnx()
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        work = Path(tmp)
        setup = cold_start.Setup(
            root=root,
            phonemes=phonemes,
            voice=voice,
            onnx_voice=onnx_voice,
            onnx_model=work / "kokoro-v1.0.int8.onnx",
            onnx_voices=_onnx_voices(onnx_voice) if with_onnx else work / "unused",
            onnx_script=work / "kokoro_onnx_user.py",
            runtime_python=runtime_python,
            onnx_python=Path(sys.executable),
            workdir=work,
            env=cold_start.user_env(),
        )
        if not setup.kokoro_tvm.is_file():
            raise cold_start.ColdStartError(
                f"no `kokoro-tvm` command beside {runtime_python}: install the package in that "
                "environment (`pip install -e .`, or `pip install --no-deps -e .` in a "
                "runtime-only venv)"
            )
        if with_onnx:
            setup.onnx_model.write_bytes(registry_onnx_bytes())
            setup.onnx_script.write_text(ONNX_SCRIPT, encoding="utf-8")
        before = cpuinfo.load_average()
        log(f"bench_cold: {why[-1]}; {'; '.join(precision_why)}; load average {before}")
        measured = cold_start.measure(setup, rounds, runners, log)
        after = cpuinfo.load_average()
    command = f"kokoro-tvm synth --phonemes ... --voice {voice}"
    report = {
        "cpu": cpuinfo.this_cpu().as_dict(),
        "target": target,
        "picked": why,
        "precision": precisions,
        "precision_picked": precision_why,
        "threads": available_cores(),
        "load_avg_before": before,
        "load_avg_after": after,
        "input": {
            "phonemes": phonemes,
            "n_phonemes": len(phonemes),
            "voice": voice,
            "onnx_voice": onnx_voice if with_onnx else None,
        },
        "rounds": rounds,
        "kokoro_tvm": {
            "command": f"{command} -o x.wav",
            **(
                {"command_fp32": f"{command} --precision {FP32} -o x.wav"}
                if cold_start.TVM_FP32 in precisions
                else {}
            ),
            "python": str(runtime_python),
            "torch_installed": cold_start.has_torch(runtime_python),
            "cli_module": timed_cli.__name__,
        },
        "kokoro_onnx": {
            "version": VERSION,
            "model": "kokoro-v1.0.int8.onnx",
            "model_sha256": REGISTRY_MODEL_SHA256,
            "python": sys.executable,
        }
        if with_onnx
        else None,
        "peak_rss_from": "wait4 ru_maxrss of the child, forked from a bare launcher",
        **measured,
    }
    artifacts.write_json(out or artifacts.bench_cold_file(), report)
    return report


def runtime_precisions(
    manifest: Manifest, target: str
) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The runtime's runners, each with the precision per component the manifest picks for it on
    this CPU, and why ``auto`` picked its (a line per component): ``kokoro_tvm`` as users run it
    and, where that is narrower than float32 somewhere, ``kokoro_tvm_fp32`` beside it. A pick that
    is float32 everywhere (no narrower library, or a CPU without what it needs) gets no second
    runner: it would time the same libraries twice."""
    auto, why = explain_precision(manifest, target)
    runners = {"kokoro_tvm": auto}
    if set(auto.values()) != {FP32}:
        runners[cold_start.TVM_FP32] = explain_precision(manifest, target, FP32)[0]
    return runners, why


def ordered(runtime: dict[str, Any], with_onnx: bool) -> tuple[str, ...]:
    """The runners of a round: the runtime's, with kokoro-onnx between its two (``measure``
    reverses the order every other round, so each of the runtime's runs first in one round and
    last in the next)."""
    first, *beside = runtime
    return (first, *(cold_start.RUNNERS[1:] if with_onnx else ()), *beside)


def _check_kokoro_onnx() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("kokoro-onnx")
    except PackageNotFoundError as e:
        raise PackageMissingError(
            f"bench_cold times kokoro-onnx, which is not installed; `{INSTALL}`"
        ) from e
    if found != VERSION:
        raise PackageMissingError(
            f"kokoro-onnx {found} is installed; the bench pins {VERSION}: `{INSTALL}`"
        )


def _onnx_voices(name: str) -> Path:
    """The registry's kokoro-onnx voices file, which must hold ``name``."""
    path = registry_voices_file()
    if name not in read_named_file(path):
        raise cold_start.ColdStartError(
            f"kokoro-onnx's voices file {path} has no voice {name!r}; pass one it has"
        )
    return path


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run)
