"""Stage ``bench_e2e``: the whole runtime against eager kokoro, from the manifest, with the
target the runtime itself picks on this CPU (``library.explain_pick``): what a user here gets.
One stage, not one per target: eager kokoro and ONNX Runtime, half its time, do not depend on
the target, and the per-library ``bench`` stages already time every target this CPU runs.

The runtime runs each component in the precision it picks (``precision="auto"``); where that is a
narrower one (bf16 decoders on a CPU with AVX512_BF16), the float32 libraries of the same target
run beside it (``tvm_fp32``), so the metrics hold what the precision buys.

``e2e.measure_rtf`` on the validated libraries at ``bench.phonemes`` (``auto``:
``e2e.default_lengths`` of the token buckets), with the validation voice and the thread count
and rounds of params (``runtime.num_threads``, ``bench.repeats``); each length must first pass
the float64 criterion. With ``bench.onnxruntime`` kokoro-onnx's whole model runs beside them on
ONNX Runtime (``eval.onnx_kmodel``), and the kokoro-onnx package's ``create()`` on the same
models (``eval.kokoro_onnx_package``). This module reads what they run on (the manifest's
libraries, kokoro, the voice, the registry's int8 model) and writes the files the package reads
and the metrics; ``eval`` computes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from .. import artifacts, cpuinfo
from ..eval import e2e, kokoro_onnx_package, onnx_kmodel
from ..eval.eager import as_float64, load_kokoro
from ..eval.timing import apply_threads
from ..model.onnx_checkpoint import registry_onnx_bytes
from ..params import Params
from ..runtime.manifest import explain_pick, read_manifest
from ..runtime.synthesizer import KokoroTVM
from ..spec import FP32


def run(prm: Params) -> None:
    threads = apply_threads(prm.runtime.num_threads)  # before the first TVM call
    target, why = explain_pick(read_manifest(artifacts.ROOT))
    print(f"bench_e2e: {why[-1]}", flush=True)
    tts = KokoroTVM.from_manifest(artifacts.ROOT, target=target, num_threads=threads)
    # the runtime as it picks (``precision="auto"``), and where that is narrower than float32,
    # the float32 libraries of the same target timed beside it
    beside = {}
    if set(tts.precision.values()) != {FP32}:
        beside[f"tvm_{FP32}"] = KokoroTVM.from_manifest(
            artifacts.ROOT, target=target, num_threads=threads, precision=FP32
        )
    cfg, km = load_kokoro(artifacts.kokoro_checkpoint_file(), artifacts.model_config_file())
    voice = artifacts.load_array(artifacts.voice_file())
    with tempfile.TemporaryDirectory(prefix="kokoro-onnx-") as workdir:
        onnx = packages = None
        if prm.bench.onnxruntime:
            files = onnx_models(km, cfg, int8=prm.model.config == "kokoro-82m")
            onnx = onnx_kmodel.sessions(files, threads)
            packages = kokoro_onnx_package.packages(
                *package_files(files, voice, Path(workdir)), cfg["vocab"], threads
            )
        lengths = list(prm.bench.lengths or e2e.default_lengths(list(prm.buckets.tokens)))
        rows = e2e.measure_rtf(
            tts,
            km,
            as_float64(km),
            lengths,
            prm.bench.repeats,
            voice=voice,
            onnx=onnx,
            packages=packages,
            beside=beside,
        )
    artifacts.write_json(
        artifacts.bench_e2e_file(),
        {
            "target": target,
            "picked": why,
            "precision": tts.precision,
            "threads": threads,
            "repeats": prm.bench.repeats,
            "cpu": cpuinfo.model_name(),
            **rows,
        },
    )


def onnx_models(km, cfg: dict, int8: bool) -> dict[str, bytes]:
    """kokoro-onnx's whole model by name: ``fp32``, these weights exported as kokoro-onnx exports
    them, and with ``int8`` the registry's file (it holds Kokoro-82M's weights only)."""
    files = {"fp32": onnx_kmodel.export_kmodel(km, cfg)}
    if int8:
        files["int8"] = registry_onnx_bytes()
    return files


def package_files(
    files: dict[str, bytes], pack: np.ndarray, workdir: Path
) -> tuple[dict[str, Path], Path]:
    """What the kokoro-onnx package reads, written under ``workdir``: each model by name, and a
    voices file holding ``pack``."""
    voices = workdir / "voices.npz"
    np.savez(voices, **kokoro_onnx_package.voices_arrays(pack))
    models = {name: workdir / f"kokoro-{name}.onnx" for name in files}
    for name, data in files.items():
        models[name].write_bytes(data)
    return models, voices


if __name__ == "__main__":
    from .entry import stage

    stage(__doc__, run)
