"""What the server's chunk limits cost in fidelity, judged against float64 kokoro.

usage: python benchmarks/chunk_limits.py [--artifacts artifacts] [--limits 16,24,24]
           [--voice jf_alpha] [--lang en-us] [--seed 0] [--threads 0] [--out chunk_limits.json]

``kokoro-tvm serve`` cuts the first chunk short (``first_clause``, then ``chunking.limit_chunks``
at a word when a sentence has no comma within the limit) and caps every chunk. Each cut ends one
utterance and starts another, so the audio around it is not kokoro's: the BiLSTMs and norms see
less context, a boundary token is added on each side, and the durations change. For English
sentences and paragraphs the same text is synthesized both ways, and every audio compared with
float64 kokoro on kokoro's own utterances (DESIGN §3's ground truth):

* ``f32``: float32 kokoro, same utterances and draws: float32's own distance (the criterion's
  bar: a build is right when it is no farther);
* ``runtime``: the runtime, kokoro's utterances: a correct build sits near ``f32``;
* ``reseeded``: float64 kokoro, same utterances, the decoder's other random draws (another
  seed): how far two of kokoro's own calls are apart;
* ``limited_f64``: float64 kokoro on the limited utterances: the cost of the cuts alone;
* ``limited``: the runtime on the limited utterances: what the server sends.

Cut utterances have other durations, so the audio is compared word by word: each word's log-mel
frames (word spans from each side's own durations, as kokoro's timestamps give them) are
stretched to the reference's frame count, and the SNR is taken over all words, and over the
words that touch a cut that kokoro would not make ("seam" words). The words' duration changes
are reported beside it.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np

TEXTS = [
    "Please leave the package at the front door before noon.",
    "The train to the coast leaves every hour from the second platform, and on weekends the "
    "first one departs a little later than usual.",
    "She kept the old letters in a tin box under the stairs. Years later her grandson found "
    "them while looking for a lost key, and he spent the whole afternoon reading them aloud "
    "to his sister, who laughed at the parts about the neighbours.",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", default=os.environ.get("KOKORO_TVM_ARTIFACTS", "artifacts"))
    ap.add_argument("--limits", default=None, help="default: the server's (engine.py)")
    ap.add_argument("--voice", default="jf_alpha")
    ap.add_argument("--lang", default="en-us")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out")
    args = ap.parse_args()

    import torch

    warnings.filterwarnings("ignore", message="dropout option adds dropout")
    warnings.filterwarnings("ignore", message=".*weight_norm.* is deprecated")
    from kokoro_tvm import artifacts
    from kokoro_tvm.eval.eager import as_float64, load_kokoro
    from kokoro_tvm.runtime.chunking import SHARED_CHUNK_LIMITS
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    limits = tuple(int(x) for x in args.limits.split(",")) if args.limits else SHARED_CHUNK_LIMITS
    if args.threads:
        torch.set_num_threads(args.threads)
    root = Path(args.artifacts)
    tts = KokoroTVM.from_manifest(root, num_threads=args.threads or None)
    _, km = load_kokoro(artifacts.kokoro_checkpoint_file(root), artifacts.model_config_file(root))
    km64 = as_float64(km)
    libs = tts.libraries
    pack = tts.voice_pack(args.voice)

    rows = []
    for text in TEXTS:
        ref = _side(tts, libs, text, pack, args, args.seed, None, km64)  # float64, kokoro's cuts
        sides = {
            "f32": _side(tts, libs, text, pack, args, args.seed, None, km, chunks=ref["chunks"]),
            "runtime": _side(tts, libs, text, pack, args, args.seed, None, None),
            "reseeded": _side(tts, libs, text, pack, args, args.seed + 1, None, km64),
            "limited_f64": _side(tts, libs, text, pack, args, args.seed, limits, km64),
            "limited": _side(tts, libs, text, pack, args, args.seed, limits, None),
        }
        seams = _seam_words(sides["limited"], ref)
        row = {
            "text": text,
            "words": len(ref["words"]),
            "kokoro_chunks": [len(c.phonemes) for c in ref["chunks"]],
            "limited_chunks": [len(c.phonemes) for c in sides["limited"]["chunks"]],
            "seam_words": [ref["words"][i][0] for i in sorted(seams)],
            "audio_s": ref["audio"].size / 24000,
        }
        for name, side in sides.items():
            row[name] = _compare(ref, side, seams)
        rows.append(row)
        _print(row)
    report = {"limits": list(limits), "voice": args.voice, "lang": args.lang, "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


def _side(tts, libs, text, pack, args, seed, limits, km, chunks=None) -> dict:
    """One synthesis: the runtime's (``km`` None) or kokoro's on the runtime's chunks and draws;
    its audio and its words' spans (word text, start, end in samples). With ``limits`` it is
    what the server sends: the server's chunks, with its pauses at cuts inside a sentence and
    before the first word shortened before decoding (``runtime.planner``), and kokoro decodes
    those chunks on the same (shortened) durations."""
    import torch

    from kokoro_tvm.eval.e2e import eager_chunk
    from kokoro_tvm.runtime import chunking, stream, timestamps

    if chunks is None:  # the text as KokoroTVM.__call__ reads it, with the draws kept for kokoro
        source = tts._source(text, args.lang, False, limits is not None)
        pauses = {}
        if limits is not None:
            pauses = {
                "cut_pauses": chunking.LISTENER_CUT_PAUSE,
                "lead_in": chunking.LISTENER_LEAD_IN,
            }
        parts = list(
            tts.stream(
                source, pack, 1.0, seed, keep_draws=True, chunk_limits=limits or None, **pauses
            )
        )
        chunks = [p.chunk for p in parts]
    audio, words, offset = [], [], 0
    for i, c in enumerate(chunks):
        if km is None:
            a, dur = c.audio, c.durations
        else:
            with torch.no_grad():
                a, dur = eager_chunk(km, c, 1.0, replay=limits is not None)
        a = stream.seams.segment(a, i == 0, i == len(chunks) - 1)
        per_symbol = timestamps.symbol_durations(c.phonemes, np.asarray(dur), libs.vocab)
        for w in timestamps.word_times(c.words, per_symbol, 0, libs.samples_per_frame, 24000, i):
            if w.start is not None and w.end is not None and w.text.strip(".,!?;:—… "):
                start = offset + int(w.start * 24000)
                words.append((w.text, start, offset + int(w.end * 24000), i))
        audio.append(a)
        offset += a.size
    return {"audio": np.concatenate(audio), "words": words, "chunks": copy.copy(chunks)}


def _seam_words(limited: dict, ref: dict) -> set[int]:
    """Indices of the words on either side of a cut the limits made (not one kokoro makes)."""
    own = {i for i in range(1, len(ref["words"])) if ref["words"][i][3] != ref["words"][i - 1][3]}
    out = set()
    w = limited["words"]
    for i in range(1, len(w)):
        if w[i][3] != w[i - 1][3] and i not in own:
            out |= {i - 1, i}
    return out


def _compare(ref: dict, side: dict, seams: set[int]) -> dict:
    """Word-stretched log-mel SNR against ``ref`` over all words and the seam words, and the
    words' duration changes."""
    from kokoro_tvm.eval.metrics import log_mel

    hop = 256
    if [w[0] for w in side["words"]] != [w[0] for w in ref["words"]]:
        raise SystemExit("the two sides read different words; the G2P differs between them")
    a, b = log_mel(ref["audio"]), log_mel(side["audio"])
    sums = {"all": [0.0, 0.0], "seam": [0.0, 0.0]}
    shift = []
    for i, (rw, sw) in enumerate(zip(ref["words"], side["words"])):
        seg_a = a[rw[1] // hop : max(rw[2] // hop, rw[1] // hop + 1)]
        seg_b = b[sw[1] // hop : max(sw[2] // hop, sw[1] // hop + 1)]
        if not len(seg_a) or not len(seg_b):
            continue
        pos = np.linspace(0, len(seg_b) - 1, len(seg_a))
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, len(seg_b) - 1)
        frac = (pos - lo)[:, None]
        stretched = seg_b[lo] * (1 - frac) + seg_b[hi] * frac
        for key in ("all", "seam") if i in seams else ("all",):
            sums[key][0] += float(np.sum(seg_a**2))
            sums[key][1] += float(np.sum((seg_a - stretched) ** 2))
        shift.append(abs((sw[2] - sw[1]) - (rw[2] - rw[1])) / 24)  # ms
    snr = {
        k: (None if not s[0] else float("inf") if s[1] == 0 else 10 * np.log10(s[0] / s[1]))
        for k, s in sums.items()
    }
    return {
        "snr_db": snr["all"],
        "seam_snr_db": snr["seam"],
        "word_duration_change_ms_mean": float(np.mean(shift)) if shift else None,
        "audio_s": side["audio"].size / 24000,
    }


def _print(row: dict) -> None:
    print(f"\n{row['text'][:70]}...  ({row['words']} words, {row['audio_s']:.1f} s)")
    print(f"  kokoro's utterances {row['kokoro_chunks']}, limited {row['limited_chunks']}")
    print(f"  seam words: {row['seam_words']}")
    for name in ("f32", "runtime", "reseeded", "limited_f64", "limited"):
        r = row[name]
        seam = "-" if r["seam_snr_db"] is None else f"{r['seam_snr_db']:.1f}"
        print(
            f"  {name:12s} log-mel SNR {r['snr_db']:.1f} dB (seam words {seam} dB), word "
            f"durations changed {r['word_duration_change_ms_mean']:.1f} ms on average, "
            f"{r['audio_s']:.2f} s"
        )


if __name__ == "__main__":
    sys.exit(main())
