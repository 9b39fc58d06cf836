"""End-to-end parity and speed: the compiled runtime vs eager ``KModel.forward_with_tokens``.

usage: python benchmarks/e2e.py [--artifacts artifacts] [--target T] [--lengths 10 30 ...]
                                [--voice af_heart.pt] [--speed 1.0] [--out e2e.json]

For each input length (default: around half and all of every token bucket, and 2.5x the
largest, which needs several chunks) it synthesizes with ``KokoroTVM`` and replays every chunk
through kokoro's eager model on the same weights (those named in the manifest), token ids,
voice row and decoder draws. Prints one row per length: tokens, frames, chunks, log-mel SNR,
whether the durations are equal, and the real-time factor (compute s / audio s) of both.
Exits 1 when a row misses SNR >= 40 dB or equal durations.
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
    ap.add_argument("--lengths", type=int, nargs="*", help="phoneme counts (default: from the buckets)")
    ap.add_argument("--voice", help="Kokoro voice pack .pt (default: seeded random style)")
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", help="also write the rows as JSON")
    args = ap.parse_args()

    import warnings

    import torch

    warnings.filterwarnings("ignore", message="dropout option adds dropout")  # kokoro's 1-layer LSTMs
    warnings.filterwarnings("ignore", message=".*weight_norm.* is deprecated")
    from kokoro_tvm.config import load_model_config
    from kokoro_tvm.eval.e2e import compare, default_lengths, sample_phonemes
    from kokoro_tvm.model.checkpoint import build_kmodel
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    torch.set_num_threads(args.threads)  # the same cores for both sides
    tts = KokoroTVM.from_manifest(args.artifacts, target=args.target, num_threads=args.threads)
    m = tts.manifest["model"]
    km = build_kmodel(load_model_config(m["config"]), m["checkpoint"], m["seed"])
    print(f"model {m['config']} ({m['checkpoint']}), target {tts.target}, {args.threads} threads; "
          f"token buckets {tts.token_buckets}, frame buckets {tts.frame_buckets}")
    header = f"{'phon':>5} {'tokens':>6} {'frames':>6} {'chunks':>6} {'buckets (frames)':>18} {'SNR dB':>7} " \
             f"{'dur==':>5} {'RTF tvm':>8} {'RTF eager':>9}"
    print(header)
    rows, ok = [], True
    for n in args.lengths or default_lengths(tts.token_buckets):
        ps = sample_phonemes(n)
        r = compare(tts, km, ps, args.voice, args.speed, args.seed)
        ok &= r["ok"]
        fb = ",".join(map(str, sorted(set(r["frame_buckets"]))))
        print(f"{r['phonemes']:5d} {r['tokens']:6d} {r['frames']:6d} {r['chunks']:6d} {fb:>18} "
              f"{r['snr_db']:7.1f} {str(r['durations_equal']):>5} {r['rtf_tvm']:8.2f} {r['rtf_eager']:9.2f}",
              flush=True)
        rows.append({k: v for k, v in r.items() if k not in ("result", "reference")})
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))
    print("all rows pass (SNR >= 40 dB, equal durations)" if ok else "SOME ROWS FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
