"""``kokoro-tvm``: synthesize speech from the compiled libraries, or describe what was built.

    kokoro-tvm synth --phonemes 'həlˈO wˈɜɹld' --voice jf_alpha -o out.wav
    kokoro-tvm synth --text 'Hello world.' --voice jf_alpha --speed 1.1 -o out.wav
    kokoro-tvm synth --text - --voice jf_alpha --stream --first-clause -o - | aplay -f S16_LE -r 24000 -c 1
    kokoro-tvm info

Known problems (missing artifacts, a target not built, bad input, a missing G2P model) print
one ``error:`` line with the fix and exit with status 1; bugs keep their traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ARTIFACTS = os.environ.get("KOKORO_TVM_ARTIFACTS", "artifacts")


def _read_arg(value: str) -> str:
    return sys.stdin.read() if value == "-" else value


def _say(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        print(message, file=sys.stderr, flush=True)


def _chunk_line(chunk, done: str) -> str:
    return (
        f"  chunk {done}: {len(chunk.phonemes)} phonemes, {chunk.n_tokens} tokens (bucket {chunk.token_bucket}), "
        f"{chunk.n_frames} frames (bucket {chunk.frame_bucket}), {chunk.seconds:.1f} s"
    )


def _source(args: argparse.Namespace):
    """Phonemes as typed, or kokoro's utterances for ``--text``."""
    if args.text is None:
        return _read_arg(args.phonemes)
    from .g2p import text_utterances

    utts = text_utterances(
        _read_arg(args.text), british=args.british, first_clause=args.first_clause
    )
    for u in utts:
        _say(args, f"phonemes: {u.phonemes}")
    return utts


@dataclass
class _Written:
    """What a synth run wrote, for the summary line and ``--timestamps``."""

    chunks: list
    samples: int
    sample_rate: int
    clipped: int
    tokens: list
    words: list
    seconds: float
    first_audio: float | None = None


def _write_streamed(args: argparse.Namespace, tts, source, unknown: str) -> _Written:
    """Each chunk to the output as soon as it is decoded: a WAV file (header patched at the end)
    or raw samples on stdout."""
    from .stream import all_word_times
    from .wav import AudioWriter

    to_stdout = args.output == "-"
    _say(
        args,
        f"target {tts.target}; token buckets {tts.libraries.token_buckets}, frame buckets "
        f"{tts.libraries.frame_buckets}; "
        "streaming",
    )
    t0 = time.perf_counter()
    writer, parts = None, []
    with contextlib.ExitStack() as stack:  # on any exit: patch the header, then close the file
        for part in tts.stream(
            source, args.voice, args.speed, args.seed, unknown, args.first_clause
        ):
            if writer is None:  # open the output only once there is audio for it
                out = (
                    sys.stdout.buffer if to_stdout else stack.enter_context(open(args.output, "wb"))
                )
                writer = AudioWriter(out, part.sample_rate, args.format, raw=to_stdout)
                stack.callback(writer.close)
            writer.write(part.audio)
            parts.append(part)
            _say(
                args,
                _chunk_line(part.chunk, f"{part.index + 1}") + f", out at {part.latency:.2f} s",
            )
    chunks = [p.chunk for p in parts]
    return _Written(
        chunks,
        writer.samples,
        parts[0].sample_rate,
        writer.clipped,
        [t for p in parts for t in p.tokens],
        all_word_times(tts.libraries, chunks),
        time.perf_counter() - t0,
        parts[0].latency,
    )


def _write_whole(args: argparse.Namespace, tts, source, unknown: str) -> _Written:
    from .wav import write_wav

    t0 = time.perf_counter()
    chunks = tts.plan(source, args.voice, args.speed, args.seed, unknown, args.first_clause)
    _say(
        args,
        f"target {tts.target}; token buckets {tts.libraries.token_buckets}, frame buckets "
        f"{tts.libraries.frame_buckets}; "
        f"{len(chunks)} chunk(s), {sum(c.n_frames for c in chunks)} frames",
    )
    progress = (
        None
        if args.quiet
        else (lambda done, total, c: _say(args, _chunk_line(c, f"{done}/{total}")))
    )
    res = tts.render(chunks, args.seed, progress=progress, started=t0)
    clipped = write_wav(args.output, res.audio, res.sample_rate, args.format)
    return _Written(
        chunks, res.audio.size, res.sample_rate, clipped, res.tokens, res.words, res.seconds
    )


def _timestamps_doc(w: _Written) -> dict:
    rate = w.sample_rate
    return {
        "sample_rate": rate,
        "samples": w.samples,
        "audio_seconds": w.samples / rate,
        "chunks": [
            {
                "index": i,
                "start": c.offset / rate,
                "end": (c.offset + c.audio.size) / rate,
                "phonemes": c.phonemes,
                "text": c.text,
            }
            for i, c in enumerate(w.chunks)
        ],
        "tokens": [t.as_dict() for t in w.tokens],
        "words": [x.as_dict() for x in w.words],
    }


def synth(args: argparse.Namespace) -> None:
    from .synthesizer import KokoroTVM

    source = _source(args)
    tts = KokoroTVM.from_manifest(args.artifacts, target=args.target, num_threads=args.threads)
    if tts.manifest["model"]["checkpoint"] == "random":
        print(
            "warning: these libraries were built from random weights (params.yaml model.checkpoint: random): "
            "the audio will not be speech; build with trained weights (the default, kokoro-onnx-int8)",
            file=sys.stderr,
        )
    unknown = "error" if args.strict else "warn"
    to_stdout = args.output == "-"
    w = (_write_streamed if args.stream or to_stdout else _write_whole)(args, tts, source, unknown)
    if args.timestamps:
        Path(args.timestamps).write_text(
            json.dumps(_timestamps_doc(w), ensure_ascii=False, indent=1), encoding="utf-8"
        )
    if w.clipped:
        print(
            f"warning: {w.clipped} samples exceeded [-1, 1] and were clipped (use --format float32 to keep "
            "them)",
            file=sys.stderr,
        )
    where = (
        f"stdout (raw {'s16le' if args.format == 'pcm16' else 'f32le'} mono)"
        if to_stdout
        else args.output
    )
    audio_s = w.samples / w.sample_rate
    first = "" if w.first_audio is None else f", first audio after {w.first_audio:.2f} s"
    print(
        f"wrote {where}: {audio_s:.2f} s of audio at {w.sample_rate} Hz ({args.format}), {len(w.chunks)} chunk(s), "
        f"{w.seconds:.1f} s compute, RTF {w.seconds / max(audio_s, 1e-9):.2f}{first}",
        file=sys.stderr if to_stdout else sys.stdout,
    )


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def _validation(v: dict) -> str:
    """The validate stage's worst case vs eager kokoro, as recorded in the manifest."""
    worst = {k[len("worst_") :]: x for k, x in v.items() if k.startswith("worst_")}
    if not worst or not v.get("lengths"):
        return ""
    return (
        "  validated at lengths "
        + ",".join(map(str, v["lengths"]))
        + ": "
        + ", ".join(f"worst {k} {x:.3g}" for k, x in worst.items())
    )


def info(args: argparse.Namespace) -> None:
    from .library import read_manifest
    from .synthesizer import describe

    root = Path(args.artifacts)
    d = describe(read_manifest(root), root)
    if args.json:
        print(json.dumps(d, indent=2))
        return
    m = d["model"]
    print(f"artifacts: {d['artifacts']}")
    print(f"model: {m['config']} (checkpoint {m['checkpoint']}, seed {m['seed']})")
    print("toolchain: " + ", ".join(f"{k} {v}" for k, v in d["toolchain"].items()))
    print(f"buckets: tokens {d['buckets']['tokens']}, frames {d['buckets']['frames']}")
    print("weights: " + ", ".join(f"{c} {_size(b)}" for c, b in d["weights"].items()))
    print(f"target on this CPU: {d['picked_target'] or 'none'}")
    for line in d["pick_reasons"]:
        print(f"  {line}")
    for target, why in d["unvalidated"].items():
        print(f"  {target}: built but not validated, so not loadable ({why})")
    for target, libs in d["libraries"].items():
        print(f"target {target}: {d['targets'][target]}")
        for lib in libs:
            state = "" if lib["present"] else "  MISSING (run `dvc repro` or `dvc pull`)"
            print(
                f"  {lib['component']:13s} bucket {lib['bucket']:5d}  {_size(lib['bytes']):>10s}"
                f"{_validation(lib['validation'])}{state}"
            )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kokoro-tvm", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("synth", help="phonemes or English text to a WAV file")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--phonemes", help="Kokoro/misaki phonemes ('-' reads stdin)")
    src.add_argument("--text", help="English text, phonemized by misaki ('-' reads stdin)")
    s.add_argument(
        "--voice",
        help="a registry voice name (jf_alpha, jm_kumo, ...), a Kokoro voice pack (.pt, "
        "[510, 1, 256]), FILE:NAME of a kokoro-onnx voices file (.bin/.npz), or a "
        "blend such as 'jf_alpha:0.6,jm_kumo:0.4', or 'random' (a style seeded by --seed, for "
        "random-weight builds); required, as in kokoro",
    )
    s.add_argument("--speed", type=float, default=1.0, help="speaking rate (default 1.0)")
    s.add_argument(
        "--seed", type=int, default=0, help="seeds the decoder noise (and the random style)"
    )
    s.add_argument(
        "-o",
        "--output",
        required=True,
        help="output WAV path; '-' streams raw samples to stdout (mono 24 kHz, s16le, or f32le with "
        "--format float32)",
    )
    s.add_argument("--format", choices=["pcm16", "float32"], default="pcm16", help="sample format")
    s.add_argument(
        "--stream",
        action="store_true",
        help="write each chunk as soon as it is decoded (WAV header first, sizes patched at the end)",
    )
    s.add_argument(
        "--first-clause",
        action="store_true",
        help="end the first chunk at the first clause mark (,;:.!?—…) for earlier first audio "
        "(differs from kokoro's chunking there)",
    )
    s.add_argument(
        "--timestamps",
        metavar="JSON",
        help="write per-token and per-word start/end times (seconds) to this JSON file",
    )
    s.add_argument(
        "--strict",
        action="store_true",
        help="reject symbols outside the phoneme vocabulary "
        "(default: warn and drop them, as kokoro does)",
    )
    s.add_argument("--british", action="store_true", help="British English G2P for --text")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    for p in (
        s,
        sub.add_parser("info", help="list components, buckets, targets, sizes and toolchain"),
    ):
        p.add_argument(
            "--artifacts",
            default=DEFAULT_ARTIFACTS,
            help="artifact directory with manifest.json (default: $KOKORO_TVM_ARTIFACTS or ./artifacts)",
        )
    s.add_argument("--target", help="built target to run (default: the best one this CPU supports)")
    s.add_argument("--threads", type=int, help="TVM threads (default: all cores)")
    sub.choices["info"].add_argument("--json", action="store_true", help="machine-readable output")
    return ap


def main(argv: list[str] | None = None) -> int:
    from ..commands import exit_status

    args = parser().parse_args(argv)
    return exit_status(lambda: _run(args))


def _run(args: argparse.Namespace) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda msg, *a, **k: print(f"warning: {msg}", file=sys.stderr)
        (synth if args.command == "synth" else info)(args)


if __name__ == "__main__":
    sys.exit(main())
