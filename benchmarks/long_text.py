"""Text of any length through ``kokoro-tvm synth --text - --stream``: first audio and peak memory
against a one-sentence run.

usage: python benchmarks/long_text.py [--artifacts artifacts] [--voice af_heart]
                                      [--seconds 60] [--chars 1200000] [--out F]

Inputs on stdin, each to a fresh ``synth --text - --voice V --stream -o -`` process:

* ``sentence``: one sentence, the baseline;
* ``paragraph``: ``--chars`` characters of ``"hello "`` words in one paragraph (no sentence end:
  the G2P gets it in pieces, with the warning), and ``paragraph_chunk``, its first chunk's words
  alone (85 of them: kokoro's 510 phonemes, against a sentence's hundred or so);
* ``paragraphs``: the same characters as 10,000 paragraphs of 20 ``"hello "`` words, and
  ``paragraphs_one``, the first of them alone.

A ``_chunk``/``_one`` run is what the long run's first chunk costs by itself, so the difference
is what the length of the text costs. Per run: ``first_audio_s``, from the process's start to
its first sample on stdout (imports, library loading and G2P included); ``stream_first_s``, the
CLI's own "out at" of its first chunk (from the start of the stream, after loading);
``rss_at_first_audio_mb`` and ``rss_at_stop_mb`` (a stream's memory should not grow while it
speaks), and the high-water RSS (``VmHWM``, sampled every 50 ms), ``peak_rss_mb``. A long run is
stopped with SIGINT ``--seconds`` after its first audio (the whole text would speak for hours),
which also checks that Ctrl-C ends it with status 130; ``audio_s`` is what it wrote by then. Prints
the CPU (``lscpu``) and the load average before and after: on a shared machine the times move with
it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SAMPLE_RATE, BYTES_PER_SAMPLE = 24_000, 2  # s16le on stdout
SENTENCE = "The quick brown fox jumps over the lazy dog, and then it rests."


def inputs(chars: int) -> dict[str, str]:
    words = chars // len("hello ")
    per = 20  # words per paragraph: 10,000 paragraphs of 120 characters for 1.2 M
    paragraphs = "\n\n".join(" ".join(["hello"] * per) for _ in range(words // per))
    return {
        "sentence": SENTENCE,
        "paragraph_chunk": "hello " * 85,
        "paragraph": "hello " * words,
        "paragraphs_one": " ".join(["hello"] * per),
        "paragraphs": paragraphs,
    }


def _vm(pid: int, key: str) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None


def run(argv: list[str], text_file: Path, seconds: float) -> dict:
    """One ``synth`` process on ``text_file``: first audio, RSS, stopped ``seconds`` after it."""
    start = time.perf_counter()
    with open(text_file, "rb") as stdin:
        proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = {"first_audio_s": None, "rss_at_first_audio_mb": None, "peak_rss_mb": 0.0}
    out["stream_first_s"] = None
    written = 0
    done = threading.Event()
    tail: list[str] = []

    def errors() -> None:  # drained as it comes: a full pipe would stop the CLI
        for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            if line.startswith("  chunk 1:") and "out at" in line:
                out["stream_first_s"] = float(line.rsplit("out at", 1)[1].split()[0])
            if not line.startswith(("phonemes:", "  chunk")):
                tail.append(line)

    def sample() -> None:
        while not done.is_set():
            hwm = _vm(proc.pid, "VmHWM")
            if hwm is not None:
                out["peak_rss_mb"] = max(out["peak_rss_mb"], hwm)
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    reader = threading.Thread(target=errors, daemon=True)
    reader.start()

    def interrupt() -> None:  # Ctrl-C, as a listener who has heard enough
        if proc.poll() is None:
            out["peak_rss_mb"] = max(out["peak_rss_mb"], _vm(proc.pid, "VmHWM") or 0.0)
            out["rss_at_stop_mb"] = _vm(proc.pid, "VmRSS")
            proc.send_signal(signal.SIGINT)

    stop = threading.Timer(seconds, interrupt)
    while block := proc.stdout.read1(65536):
        if out["first_audio_s"] is None:
            out["first_audio_s"] = round(time.perf_counter() - start, 3)
            out["rss_at_first_audio_mb"] = _vm(proc.pid, "VmRSS")
            stop.start()
        written += len(block)
    stop.cancel()
    out["returncode"] = proc.wait()
    done.set()
    sampler.join()
    reader.join()
    out["audio_s"] = round(written / BYTES_PER_SAMPLE / SAMPLE_RATE, 2)
    out["wall_s"] = round(time.perf_counter() - start, 2)
    out["peak_rss_mb"] = round(out["peak_rss_mb"], 1)
    out["stderr_tail"] = tail[-3:]
    return out


def cpu_model() -> str:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    except FileNotFoundError:
        return "unknown"
    return next((x.split(":", 1)[1].strip() for x in lines if x.startswith("Model name")), "?")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--voice", default="af_heart")
    ap.add_argument("--seconds", type=float, default=60.0, help="run time after first audio")
    ap.add_argument("--chars", type=int, default=1_200_000)
    ap.add_argument("--runs", nargs="+", default=list(inputs(12)))
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    argv = [sys.executable, "-m", "kokoro_tvm.runtime.cli", "synth", "--text", "-"]
    argv += ["--voice", args.voice, "--stream", "-o", "-", "--artifacts", args.artifacts]
    report = {"cpu": cpu_model(), "cores": os.cpu_count(), "load_avg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in inputs(args.chars).items():
            if name not in args.runs:
                continue
            path = Path(tmp) / f"{name}.txt"
            path.write_text(text, encoding="utf-8")
            result = {"chars": len(text), **run(argv, path, args.seconds)}
            report[name] = result
            print(name, json.dumps(result), flush=True)
    report["load_avg_after"] = os.getloadavg()
    print(
        f"\n{report['cpu']}, {report['cores']} cores; load {report['load_avg_before']} -> "
        f"{report['load_avg_after']}"
    )
    print("| input | characters | first audio (s) | in the stream (s) | peak RSS (MB) | exit |")
    print("|---|---|---|---|---|---|")
    for name in args.runs:
        r = report.get(name)
        if r is None:
            continue
        base = report.get(
            {"paragraph": "paragraph_chunk", "paragraphs": "paragraphs_one"}.get(name)
        )
        extra = ""
        if base is not None and r["first_audio_s"] is not None:
            extra = (
                f" ({r['first_audio_s'] - base['first_audio_s']:+.2f} s, "
                f"{r['peak_rss_mb'] - base['peak_rss_mb']:+.0f} MB against its first chunk alone)"
            )
        print(
            f"| {name} | {r['chars']:,} | {r['first_audio_s']} | {r['stream_first_s']} | "
            f"{r['peak_rss_mb']}{extra} | {r['returncode']} |"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
