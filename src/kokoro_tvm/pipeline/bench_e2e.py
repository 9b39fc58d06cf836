"""Stage ``bench_e2e``: the whole runtime against eager kokoro, from the manifest, with the
target the runtime itself picks on this CPU (``library.explain_pick``): what a user here gets.
One stage, not one per target: eager kokoro and ONNX Runtime, half its time, do not depend on
the target, and the per-library ``bench`` stages already time every target this CPU runs.

``e2e.measure_rtf`` on the validated libraries at ``bench.phonemes`` (``auto``:
``e2e.default_lengths`` of the token buckets), with the validation voice and the thread count
and rounds of params (``runtime.num_threads``, ``bench.repeats``); each length must first pass
the float64 criterion. With ``bench.onnxruntime`` kokoro-onnx's whole model runs beside them on
ONNX Runtime (``eval.onnx_kmodel``), and the kokoro-onnx package's ``create()`` on the same
models (``eval.kokoro_onnx_package``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .. import artifacts
from ..eval import e2e, kokoro_onnx_package, onnx_kmodel
from ..eval.eager import as_float64, load_kokoro
from ..eval.timing import apply_threads, cpu_name
from ..params import Params
from ..runtime.manifest import explain_pick, read_manifest
from ..runtime.synthesizer import KokoroTVM


def run(prm: Params) -> None:
    threads = apply_threads(prm.num_threads)  # before the first TVM call
    target, why = explain_pick(read_manifest(artifacts.ROOT))
    print(f"bench_e2e: {why[-1]}", flush=True)
    tts = KokoroTVM.from_manifest(artifacts.ROOT, target=target, num_threads=threads)
    cfg, km = load_kokoro(artifacts.kokoro_checkpoint_file(), artifacts.model_config_file())
    voice = artifacts.load_array(artifacts.voice_file())
    with tempfile.TemporaryDirectory(prefix="kokoro-onnx-") as workdir:
        onnx = packages = None
        if (
            prm.bench_onnxruntime
        ):  # kokoro-onnx's whole model; its int8 file holds Kokoro-82M's weights only
            files = onnx_kmodel.models(
                artifacts.kokoro_checkpoint_file(),
                artifacts.model_config_file(),
                int8=prm.model_config == "kokoro-82m",
            )
            onnx = onnx_kmodel.sessions(files, threads)
            packages = kokoro_onnx_package.packages(
                files, voice, cfg["vocab"], threads, Path(workdir)
            )
        lengths = list(prm.bench_phonemes or e2e.default_lengths(list(prm.tokens)))
        rows = e2e.measure_rtf(
            tts,
            km,
            as_float64(km),
            lengths,
            prm.bench_repeats,
            voice=voice,
            onnx=onnx,
            packages=packages,
        )
    artifacts.write_json(
        artifacts.bench_e2e_file(),
        {
            "target": target,
            "picked": why,
            "threads": threads,
            "repeats": prm.bench_repeats,
            "cpu": cpu_name(),
            **rows,
        },
    )
