"""Peak memory of a stream against its length, at full size: ``kokoro-tvm synth --stream -o -``
on one kokoro-sized utterance (~400 phonemes) and on N of them, in fresh processes, alternated.

A stream should hold one chunk at a time, so N chunks should peak within a few MB of one chunk.
Peak RSS is the child's ``ru_maxrss`` (its high-water mark, which includes the libraries and
weights every run loads the same way). The audio goes to a pipe this script drains and counts.

usage: python benchmarks/once/stream_memory.py [--artifacts artifacts] [--chunks 20] [--rounds 3]
       [--voice jf_alpha]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kokoro_tvm.eval import samples

#: kokoro's own utterance size for a long paragraph (it groups up to 510 phonemes)
CHUNK_PHONEMES = 400


def utterance() -> str:
    """~400 phonemes of English as one sentence (its inner sentence ends made commas), so that
    kokoro's chunking makes each copy exactly one chunk: every chunk of a run is the same size,
    and a longer run can only differ by holding more of them."""
    text = samples.phonemes(CHUNK_PHONEMES).rstrip(" .!?,;:")
    for mark in ".!?;:":
        text = text.replace(mark, ",")
    return text + "."


def run(artifacts: str, voice: str, chunks: int) -> tuple[float, float, int]:
    """(peak RSS MB, wall s, bytes of audio) of one fresh ``synth --stream -o -`` process."""
    text = "\n".join([utterance()] * chunks)
    argv = [sys.executable, "-m", "kokoro_tvm.runtime.cli", "synth", "--artifacts", artifacts]
    argv += ["--voice", voice, "--phonemes", "-", "--stream", "-o", "-", "-q"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    p.stdin.write(text.encode())
    p.stdin.close()
    n = 0
    while block := p.stdout.read(1 << 16):
        n += len(block)
    if p.wait() != 0:
        raise SystemExit(f"synth failed with status {p.returncode}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak < before:
        raise SystemExit("ru_maxrss went down: run each size in its own invocation")
    return peak / 1024, time.perf_counter() - t0, n


def child(artifacts: str, voice: str, chunks: int) -> tuple[float, float, int]:
    """``run`` in a fresh helper process, so each measurement has its own children high-water
    mark."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
        "import stream_memory as s; "
        f"print(*s.run({artifacts!r}, {voice!r}, {chunks}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    peak, wall, n = out.stdout.split()
    return float(peak), float(wall), int(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--voice", default="jf_alpha")
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {CHUNK_PHONEMES} phonemes per chunk", flush=True)
    peaks: dict[int, list[float]] = {1: [], a.chunks: []}
    for r in range(a.rounds):
        for n in (1, a.chunks):  # alternated
            peak, wall, size = child(a.artifacts, a.voice, n)
            peaks[n].append(peak)
            audio_s = size / 2 / 24000
            print(
                f"round {r + 1}: {n:3d} chunk(s): peak RSS {peak:7.1f} MB, {audio_s:6.1f} s of "
                f"audio in {wall:6.1f} s",
                flush=True,
            )
    one, many = statistics.median(peaks[1]), statistics.median(peaks[a.chunks])
    print(
        f"median peak RSS: 1 chunk {one:.1f} MB, {a.chunks} chunks {many:.1f} MB: "
        f"+{many - one:.1f} MB; load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
