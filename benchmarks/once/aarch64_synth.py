"""`kokoro-tvm synth` in an aarch64 Python (qemu-user), judged against float64 kokoro.

usage: python benchmarks/once/aarch64_synth.py [--artifacts artifacts] [--lengths 30 100]
           [--out rows.json]

1. Installs the torch-free runtime into the emulated aarch64 Python: pip resolves the package's
   dependencies for ``manylinux_2_28_aarch64`` (numpy, apache-tvm, apache-tvm-ffi: printed), and
   installs the package itself into a fresh directory; the sysroot (``devices.setup``) holds those
   same pinned aarch64 wheels.
2. Runs ``python -m kokoro_tvm.runtime.cli synth --target aarch64`` there (``kokoro-tvm synth``),
   on English phonemes with the validation voice, float32 WAV out, timestamps out.
3. On this host: the x86 runtime plans the same input (same chunks, durations and seeded draws),
   kokoro replays those chunks in float64 and float32, and the aarch64 audio is held to the
   validation criterion (``eval.verdicts.audio_verdict``), beside the x86 runtime's own audio.
   The aarch64 durations must equal the x86 ones (read from its timestamps).
Emulated, so no time is reported. Exits 1 when a length misses the criterion.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def install_runtime(dest: Path) -> list[str]:
    """The runtime package in ``dest`` for the aarch64 Python; what pip resolves for it there."""
    from kokoro_tvm.devices import qemu

    wheels = dest / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
        check=True,
    )
    (wheel,) = wheels.glob("*.whl")
    aarch64 = [
        "--platform",
        qemu.WHEEL_PLATFORM,
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        "--only-binary=:all:",
    ]
    report = dest / "resolve.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--dry-run",
            "--ignore-installed",
            *aarch64,
            "--target",
            str(dest / "dry"),
            "--report",
            str(report),
            str(wheel),
        ],
        check=True,
    )
    resolved = [
        f"{i['metadata']['name']}=={i['metadata']['version']}"
        for i in json.loads(report.read_text())["install"]
    ]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            *aarch64,
            "--target",
            str(dest / "site"),
            str(wheel),
        ],
        check=True,
    )
    return resolved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--lengths", type=int, nargs="*", default=[30, 100], help="phoneme counts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    args = ap.parse_args()

    import warnings

    import numpy as np
    import torch

    warnings.filterwarnings(
        "ignore", message="dropout option adds dropout"
    )  # kokoro's 1-layer LSTMs
    warnings.filterwarnings("ignore", message=".*weight_norm.* is deprecated")
    from kokoro_tvm import artifacts
    from kokoro_tvm.devices import qemu
    from kokoro_tvm.eval.e2e import eager_chunk, sample_phonemes
    from kokoro_tvm.eval.eager import as_float64, load_kokoro
    from kokoro_tvm.eval.verdicts import audio_verdict
    from kokoro_tvm.runtime.chunking import join
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    root = Path(args.artifacts).absolute()
    voice = artifacts.voice_file(root)
    tts = KokoroTVM.from_manifest(root)  # this CPU's pick: plans the chunks kokoro replays
    _, km = load_kokoro(artifacts.kokoro_checkpoint_file(root), artifacts.model_config_file(root))
    km64 = as_float64(km)
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        resolved = install_runtime(tmp)
        print(f"aarch64 install resolves: {', '.join(resolved)}")
        for n in args.lengths:
            phonemes = sample_phonemes(n)
            wav, stamps = tmp / f"{n}.wav", tmp / f"{n}.json"
            cmd = [
                "-m",
                "kokoro_tvm.runtime.cli",
                "synth",
                "--phonemes",
                phonemes,
                "--voice",
                str(voice),
                "--seed",
                str(args.seed),
                "--format",
                "float32",
                "--target",
                "aarch64",
                "--artifacts",
                str(root),
                "--timestamps",
                str(stamps),
                "-o",
                str(wav),
                "-q",
                "--threads",
                "1",
            ]  # emulated: 1 thread
            proc = qemu.run_python(
                cmd, env={"PYTHONPATH": str(tmp / "site")}, capture_output=True, text=True
            )
            if proc.returncode != 0:
                print(proc.stdout, proc.stderr, file=sys.stderr)
                return 1
            arm = np.frombuffer(wav.read_bytes()[-4 * _samples(wav) :], dtype="<f4")
            res = tts.synthesize(phonemes, str(voice), speed=1.0, seed=args.seed)
            with torch.no_grad():
                ref64 = join([eager_chunk(km64, p, 1.0, replay=True)[0] for p in res.parts])
                ref32 = join([eager_chunk(km, p, 1.0, replay=True)[0] for p in res.parts])
            same_length = arm.size == res.audio.size
            row = {
                "phonemes": n,
                "frames": sum(c.n_frames for c in res.chunks),
                "chunks": len(res.chunks),
                "same_length_as_x86": same_length,
                "same_durations_as_x86": _token_times(stamps)
                == [(t.start, t.end) for t in res.tokens],
            }
            if same_length:
                row |= {
                    "aarch64": audio_verdict(ref64, ref32, arm),
                    "x86": audio_verdict(ref64, ref32, res.audio),
                }
            good = same_length and row["same_durations_as_x86"] and row["aarch64"]["ok"]
            ok &= good
            a = row.get("aarch64", {})
            print(
                f"{n:4d} phonemes, {row['frames']} frames: aarch64 {a.get('log_mel_snr_db')} dB "
                f"(needs {a.get('min_snr_db')}), x86 {row.get('x86', {}).get('log_mel_snr_db')} "
                f"dB, float32 kokoro {a.get('f32_log_mel_snr_db')} dB; durations equal "
                f"{row['same_durations_as_x86']}: {'ok' if good else 'FAIL'}"
            )
            rows.append(row)
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {"target": "aarch64", "device": "qemu", "resolved": resolved, "rows": rows},
                indent=2,
            )
        )
    return 0 if ok else 1


def _samples(wav: Path) -> int:
    """The sample count of a float32 WAV (its ``data`` chunk size / 4)."""
    data = wav.read_bytes()
    i = data.rindex(b"data")
    return int.from_bytes(data[i + 4 : i + 8], "little") // 4


def _token_times(stamps: Path) -> list[tuple]:
    """Per-token (start, end) from ``--timestamps``: they tile the audio by the predicted
    durations, so they are equal exactly when the durations are."""
    return [(t["start"], t["end"]) for t in json.loads(stamps.read_text())["tokens"]]


if __name__ == "__main__":
    sys.exit(main())
