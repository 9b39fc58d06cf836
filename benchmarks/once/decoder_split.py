"""Can a sentence be decoded in two calls (a point where a worker could take a newcomer's chunk)?

usage: python benchmarks/once/decoder_split.py [--artifacts artifacts] [--voice af_heart]
           [--out decoder_split.json]

Each of ``eval.cuts.SENTENCES`` is planned whole (kokoro's chunk) and decoded three ways with the
same plan: whole (the reference), whole with another seed (the floor: what the decoder's draws
alone change), and in two decoder calls split at the word gap nearest the middle, each half with
its own frames and the reference's draws for them. The split rendition is held against the whole
one by ``eval.prosody.cut_cost`` (pitch after alignment, pauses, duration), as the cut-cost
benchmark holds a cut, with ``prosody.BOUNDS``; and each half's decoder time is printed beside
the whole call's. The decoder normalizes over its whole input (AdaIN), runs its F0/N LSTM over
all of it, and starts its harmonic source's phase afresh at each call, so the seam is not exact;
the numbers say by how much.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def split_frame(chunk) -> int:
    """The frame where the token nearest the middle that is a space (a word gap) ends, else the
    token boundary nearest the middle."""
    ends = np.cumsum(chunk.durations)
    middle = ends[-1] / 2
    spaces = [i for i, p in enumerate(chunk.phonemes, start=1) if p == " " and i < len(ends)]
    picks = spaces or list(range(1, len(ends) - 1))
    best = min(picks, key=lambda i: abs(ends[i] - middle))
    return int(ends[best])


def decode_frames(libs, chunk, rand_ini, noise, lo: int, hi: int) -> tuple[np.ndarray, float]:
    """The decoder on frames ``lo:hi`` of ``chunk`` alone, with the given draws."""
    from kokoro_tvm.runtime import alignment
    from kokoro_tvm.runtime.planner import token_input

    t = chunk.n_tokens
    te = libs.get("text_encoder", chunk.token_bucket)
    (t_en,) = te(token_input(chunk.input_ids, te), np.array([t]))
    en = alignment.expand(chunk.d, chunk.durations)[:, :, lo:hi]
    asr = alignment.expand(t_en[:, :, :t], chunk.durations)[:, :, lo:hi]
    m = hi - lo
    dec = libs.get("decoder", libs.bucket("frames", m))
    spf = libs.samples_per_frame
    part = np.ascontiguousarray(noise[:, lo * spf : hi * spf])
    t0 = time.perf_counter()
    (audio,) = dec(
        np.ascontiguousarray(en),
        np.ascontiguousarray(asr),
        np.array([m]),
        chunk.style,
        rand_ini,
        part,
    )
    return audio.reshape(-1)[: m * spf].astype(np.float32), time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--voice", default="af_heart")
    ap.add_argument("--out")
    args = ap.parse_args()

    from kokoro_tvm.cpuinfo import load_average, this_cpu
    from kokoro_tvm.eval import cuts, prosody
    from kokoro_tvm.runtime.options import KOKORO
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    tts = KokoroTVM.from_manifest(args.artifacts)
    libs = tts.libraries
    pack = tts.voice_pack(args.voice)
    rows, costs, floors = [], [], []
    for text in cuts.SENTENCES:
        decoded = {}
        for seed in (0, 1):
            opts = tts.options(pack, seed=seed, cuts=KOKORO, keep_draws=True)
            (part,) = list(tts.stream(tts.source(text, "en-us", False, opts, True), opts))
            decoded[seed] = part
        ref = decoded[0]
        chunk, d = ref.chunk, ref.decoded
        m, h = chunk.n_frames, split_frame(chunk)
        whole, t_whole = decode_frames(libs, chunk, d.rand_ini, d.noise, 0, m)
        first, t_first = decode_frames(libs, chunk, d.rand_ini, d.noise, 0, h)
        second, t_second = decode_frames(libs, chunk, d.rand_ini, d.noise, h, m)
        split = np.concatenate([first, second])
        cost = prosody.cut_cost(whole, split)
        floor = prosody.cut_cost(whole, decoded[1].decoded.audio)
        costs.append(cost)
        floors.append(floor)
        rows.append(
            {
                "text": text,
                "frames": m,
                "split_at": h,
                "decoder_s": {"whole": t_whole, "first": t_first, "second": t_second},
                "same_as_runtime": bool(np.array_equal(whole, d.audio)),
                "split": cost.__dict__,
                "floor": floor.__dict__,
            }
        )
        print(
            f"{m:4d} frames, split at {h:4d}: F0 {cost.f0_rmse_cents:6.1f} cents "
            f"(floor {floor.f0_rmse_cents:5.1f}), pauses {cost.pauses} (ref "
            f"{cost.reference_pauses}), duration {cost.duration_ratio:.3f}; decoder "
            f"{t_whole:.3f} s whole, {t_first:.3f} + {t_second:.3f} s split",
            flush=True,
        )
    verdict = prosody.judge(costs)
    print("split against whole:", verdict)
    print("floor (another seed):", prosody.judge(floors))
    report = {
        "cpu": this_cpu().as_dict(),
        "target": tts.target,
        "precision": dict(getattr(tts, "precision", {})),
        "load_average": load_average(),
        "rows": rows,
        "split": verdict,
        "floor": prosody.judge(floors),
        "command": " ".join(sys.argv),
    }
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
