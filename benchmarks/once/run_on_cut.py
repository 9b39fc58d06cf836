"""What a run-on's shorter first chunk costs a listener, against kokoro's chunks of the same text.

usage: python benchmarks/once/run_on_cut.py [--artifacts artifacts] [--voice af_heart] [--out F]

A run-on, 510 phonemes without one mark of kokoro's waterfall, is text kokoro cuts at whatever
word reaches 510. With ``cuts="sentences"`` (``synth --stream``, ``serve``) its first chunk ends
at a word near 100 phonemes instead (``chunking.run_on_cut``), and the rest is grouped as kokoro
groups it. Texts of the project's own with no punctuation at all (a dictated note, a transcript),
each past 510 phonemes, are spoken by ``create()`` (kokoro's chunks, the reference), by
``create()`` with another seed (the floor), and by the stream; ``eval.cuts.rows`` compares each
with the reference (pitch after alignment, inner pauses, pace, PocketSphinx's word errors), and
the means go to ``eval.cuts.judge``'s bounds. Prints each way's chunks (phonemes) and the CPU.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

RUN_ONS = (
    "so I called the landlord this morning about the heater and he said someone would come by "
    "on thursday but I told him that we had been waiting since last month and the kids have been "
    "sleeping in their coats and honestly I do not think he listened because he just kept saying "
    "the same thing about the repair company being busy with other buildings in the area and that "
    "there was nothing he could do until they sent someone so I asked him if we could at least "
    "have a space heater for the bedroom and he said he would look into it but that was what he "
    "said last time too and we never heard back from him",
    "we started the hike a little after seven and the trail was muddy from the rain the night "
    "before so it took us almost two hours to reach the first lookout where we stopped for coffee "
    "and watched the clouds lift off the valley and then we kept going along the ridge until the "
    "path turned back down through the pine forest toward the lake where we had left the car and "
    "by then everyone was tired and hungry so we drove to the little diner by the bridge and "
    "ordered pancakes even though it was already past two in the afternoon and nobody said a "
    "word until the plates were empty",
    "the quarterly numbers look better than we expected mostly because the new customers in the "
    "north region signed longer contracts than usual and the support costs went down after we "
    "moved the help desk to the new system but we still need to talk about the delays in shipping "
    "because three of our biggest orders arrived late and one of those clients has already asked "
    "for a discount on the next renewal which we cannot really afford if we want to keep hiring "
    "in the spring and I would like the team to come to the next meeting with a plan for "
    "getting those deliveries back on schedule",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", default=os.environ.get("KOKORO_TVM_ARTIFACTS", "artifacts"))
    ap.add_argument("--voice", default="af_heart")
    ap.add_argument("--out", help="also write the rows and verdicts as JSON")
    args = ap.parse_args()

    from kokoro_tvm.cpuinfo import this_cpu
    from kokoro_tvm.eval import cuts
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    tts = KokoroTVM.from_manifest(args.artifacts)
    voice = args.voice
    chunks: dict[str, list[list[int]]] = {"create()": [], "synth --stream": []}

    def reference(text: str) -> np.ndarray:
        parts = list(tts(text, voice))
        chunks["create()"].append([len(p.phonemes) for p in parts])
        return tts.create(text, voice)[0]

    def streamed(text: str) -> np.ndarray:
        parts = list(tts(text, voice, cuts="sentences"))
        chunks["synth --stream"].append([len(p.phonemes) for p in parts])
        return np.concatenate([p.audio for p in parts])

    ways = {
        "kokoro, another seed": lambda t: tts.create(t, voice, seed=1)[0],
        "synth --stream": streamed,
    }
    load_before = os.getloadavg()
    table = cuts.rows(RUN_ONS, reference, ways)
    doc = {
        "cpu": this_cpu().as_dict(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "chunks": chunks,
        "ways": {name: {"verdict": cuts.judge(rows), "rows": rows} for name, rows in table.items()},
    }
    print(f"{doc['cpu'].get('model_name')}; load {load_before} -> {doc['load_after']}")
    for name, counts in chunks.items():
        print(f"{name}: chunks (phonemes) {counts}")
    for name, way in doc["ways"].items():
        v = way["verdict"]
        print(
            f"{name}: F0 {v['f0_rmse_cents']:.0f} cents, extra pauses per text "
            f"{v['extra_pauses_per_sentence']:.2f}, duration {v['duration_ratio']:.3f}, extra WER "
            f"{v['extra_wer']:.3f}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1, default=str)


if __name__ == "__main__":
    main()
