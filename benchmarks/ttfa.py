"""Time to first audio: the runtime's stream, with each of its cuts profiles, against kokoro.

usage: python benchmarks/ttfa.py [--artifacts artifacts] [--target T] [--phonemes 400]
                                 [--repeats 5] [--warmup 1] [--threads N] [--out ttfa.json]

A ~400-phoneme paragraph (``eval.samples``) is spoken with the voice pack validation uses, four
ways, in interleaved rounds (``eval.timing.time_interleaved``: rotating order, a settle pause
before each call), each timed until its first audio is in hand:

* ``runtime_kokoro``: ``KokoroTVM.stream(..., cuts="kokoro")``, kokoro's chunks; a paragraph
  under 510 phonemes is one utterance, so its first audio is all of it;
* ``runtime_sentences``: ``cuts="sentences"`` (``synth --stream``'s and ``serve``'s default): the
  first chunk ends at its first sentence end;
* ``runtime_fast``: ``cuts="fast"``: the first chunk ends at its first clause mark or after a few
  words (``runtime/options.py``);
* ``kokoro``: ``next(KPipeline.generate_from_tokens(ps, pack, model=KModel))``, kokoro's own
  generator on its default path (``KModel.forward``), same weights (``artifacts/weights``).

Prints (and with ``--out`` writes) medians, all samples, the load average before and after, and
each way's first chunk, the runtime's chunk lengths and any warning that a bucket was too small
to run kokoro's utterances whole (then the runtime's chunks are not kokoro's). Runs on any build:
the real one, or for a smoke run the tiny test build
(``tests/runtime_project``; its small buckets split the paragraph further, and eager kokoro on
it is slow: ``--phonemes 40 --repeats 1 --warmup 0``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import warnings
from pathlib import Path

#: the cuts profiles a listener can ask for (``synth --stream --cuts``)
PROFILES = ("kokoro", "sentences", "fast")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", default=os.environ.get("KOKORO_TVM_ARTIFACTS", "artifacts"))
    ap.add_argument("--target")
    ap.add_argument(
        "--phonemes", type=int, default=400, help="paragraph length in phonemes (default 400)"
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument(
        "--threads", type=int, default=0, help="threads for TVM and torch (0: all cores)"
    )
    ap.add_argument("--out", help="also write the result as JSON")
    args = ap.parse_args()

    import numpy as np
    import torch

    from kokoro_tvm import artifacts
    from kokoro_tvm.eval.eager import load_kokoro
    from kokoro_tvm.eval.samples import phonemes as sample_phonemes
    from kokoro_tvm.eval.timing import apply_threads, cpu_name, time_interleaved
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    warnings.filterwarnings(
        "ignore", message="dropout option adds dropout"
    )  # kokoro's 1-layer LSTMs
    root = Path(args.artifacts)
    threads = apply_threads(args.threads)  # before the first TVM call
    tts = KokoroTVM.from_manifest(root, target=args.target, num_threads=threads)
    _, km = load_kokoro(artifacts.kokoro_checkpoint_file(root), artifacts.model_config_file(root))
    pack = artifacts.load_array(artifacts.voice_file(root)).astype(np.float32)
    if (
        pack.shape[0] < 510
    ):  # a one-style test voice: every row the same (kokoro indexes pack[len(ps) - 1])
        pack = np.repeat(pack[-1:], 510, axis=0)
    ps = sample_phonemes(args.phonemes)
    pipe = quiet_pipeline(km)
    pack_t = torch.from_numpy(pack)

    first: dict[str, dict] = {}

    def runtime(cuts: str, name: str):
        def run():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # small test buckets: the overflow warning
                stream = tts.stream(ps, pack, cuts=cuts)
                part = next(stream)
                stream.close()
            first[name] = {
                "phonemes": len(part.chunk.phonemes),
                "audio_s": part.audio.size / part.sample_rate,
                "last": part.last,
            }

        return run

    def kokoro():
        with torch.inference_mode():
            gen = pipe.generate_from_tokens(ps, pack_t, model=km)
            result = next(gen)
            gen.close()
        first["kokoro"] = {
            "phonemes": len(result.phonemes),
            "audio_s": result.audio.numel() / 24000,
        }

    plans, said = {}, set()
    runners = {}
    for cuts in PROFILES:
        name = f"runtime_{cuts}"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plans[name] = [len(c.phonemes) for c in tts.plan(ps, pack, cuts=cuts)]
        said |= {str(w.message) for w in caught}
        runners[name] = runtime(cuts, name)
    load_before = os.getloadavg()
    samples = time_interleaved(runners | {"kokoro": kokoro}, args.repeats, args.warmup)
    load_after = os.getloadavg()
    med = {k: statistics.median(v) for k, v in samples.items()}
    doc = {
        "artifacts": str(root),
        "target": tts.target,
        "model": tts.manifest.model.as_dict(),
        "token_buckets": tts.libraries.token_buckets,
        "frame_buckets": tts.libraries.frame_buckets,
        "threads": threads,
        "cpu": cpu_name(),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "paragraph_phonemes": len(ps),
        "repeats": args.repeats,
        "chunk_phonemes": plans,
        "runtime_warnings": sorted(said),
        "median_s": med,
        "samples_s": samples,
        "first_chunk": first,
        **{f"kokoro_over_{name}": med["kokoro"] / med[name] for name in runners},
    }
    text = json.dumps(doc, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    for name, s in med.items():
        print(
            f"{name:22s} first audio after {s:.3f} s (median of {len(samples[name])}; first chunk "
            f"{first[name]['phonemes']} phonemes, {first[name]['audio_s']:.2f} s of audio)",
            file=sys.stderr,
        )
    print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after", file=sys.stderr)
    return 0


def quiet_pipeline(km):
    """kokoro's ``KPipeline`` for phoneme input, around ``km``: built without ``__init__``, whose
    English G2P would want the spaCy model (``generate_from_tokens`` with a string never uses
    it)."""
    from kokoro.pipeline import KPipeline

    pipe = KPipeline.__new__(KPipeline)
    pipe.lang_code, pipe.model, pipe.voices, pipe.g2p, pipe.repo_id = (
        "a",
        km,
        {},
        None,
        "hexgrad/Kokoro-82M",
    )
    return pipe


if __name__ == "__main__":
    sys.exit(main())
