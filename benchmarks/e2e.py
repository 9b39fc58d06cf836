"""End-to-end parity and speed: the compiled runtime vs eager ``KModel.forward_with_tokens``.

usage: python benchmarks/e2e.py [--artifacts artifacts] [--target T] [--lengths 10 30 ...]
                                [--voice af_heart.pt] [--speed 1.0] [--out e2e.json]

For each input length (default: around half and all of every token bucket, and 2.5x the
largest, which needs several chunks) it synthesizes with ``KokoroTVM`` and replays every chunk
through kokoro's eager model in float32 and float64 on the same weights (the pipeline's
``artifacts/weights``), token ids, voice row and decoder draws. Prints one row per length:
tokens, frames, chunks, log-mel SNR against float64 kokoro of the runtime and of float32 kokoro,
whether the durations are equal, whether the utterances are the ones kokoro's KPipeline makes of the
input, and the real-time factor (compute s / audio s) of both.
Exits 1 when a row misses the float64 criterion of validation (``eval.verdicts``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--target")
    ap.add_argument(
        "--lengths", type=int, nargs="*", help="phoneme counts (default: from the buckets)"
    )
    ap.add_argument(
        "--voice", help="voice: file, registry name or blend (default: the validation voice)"
    )
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", help="also write the rows as JSON")
    args = ap.parse_args()

    import warnings

    import torch

    warnings.filterwarnings(
        "ignore", message="dropout option adds dropout"
    )  # kokoro's 1-layer LSTMs
    warnings.filterwarnings("ignore", message=".*weight_norm.* is deprecated")
    from kokoro_tvm import artifacts
    from kokoro_tvm.eval.e2e import compare, default_lengths, sample_phonemes
    from kokoro_tvm.eval.eager import as_float64, load_kokoro
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    torch.set_num_threads(args.threads)  # the same cores for both sides
    root = Path(args.artifacts)
    tts = KokoroTVM.from_manifest(root, target=args.target, num_threads=args.threads)
    m = tts.manifest.model.as_dict()
    _, km = load_kokoro(artifacts.kokoro_checkpoint_file(root), artifacts.model_config_file(root))
    km64 = as_float64(km)
    voice = args.voice if args.voice else artifacts.load_array(artifacts.voice_file(root))
    print(
        f"model {m['config']} ({m['checkpoint']}), target {tts.target}, {args.threads} threads; "
        f"token buckets {tts.libraries.token_buckets}, frame buckets {tts.libraries.frame_buckets}"
    )
    header = (
        f"{'phon':>5} {'tokens':>6} {'frames':>6} {'chunks':>6} {'buckets (frames)':>18} "
        f"{'SNR tvm':>7} {'SNR f32':>7} {'dur==':>5} {'utt==':>5} {'RTF tvm':>8} {'RTF eager':>9}"
    )
    print(header)
    rows, ok = [], True
    for n in args.lengths or default_lengths(tts.libraries.token_buckets):
        ps = sample_phonemes(n)
        r = compare(tts, km, km64, ps, voice, args.speed, args.seed)
        ok &= r["ok"]
        fb = ",".join(map(str, sorted(set(r["frame_buckets"]))))
        snr, snr32 = (
            f"{r[k]:7.1f}" if r[k] is not None else "    n/a"
            for k in ("log_mel_snr_db", "f32_log_mel_snr_db")
        )
        print(
            f"{r['phonemes']:5d} {r['tokens']:6d} {r['frames']:6d} {r['chunks']:6d} {fb:>18} "
            f"{snr} {snr32} {r['durations_equal']!s:>5} {r['same_utterances']!s:>5} "
            f"{r['rtf_tvm']:8.2f} {r['rtf_eager']:9.2f}",
            flush=True,
        )
        rows.append({k: v for k, v in r.items() if k not in ("result", "reference")})
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))
    print("all rows pass the float64 criterion" if ok else "SOME ROWS FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
