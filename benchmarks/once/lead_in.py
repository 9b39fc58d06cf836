"""What shortening the silence before the first word does to an uncut sentence, two ways.

usage: python benchmarks/once/lead_in.py [--artifacts artifacts] [--voice af_heart] [--lead 2]
           [--phonemes 'plˈiz lˈiv ðə pˈækɪʤ æt ðə fɹˈʌnt dˈɔɹ bəfˈɔɹ nˈun.']

The sentence is spoken once with kokoro's durations (the reference), then with ``--lead`` frames
of leading silence: given to the model as the first boundary token's duration (what the runtime
does when the first chunk is a piece of its sentence), and cut from the decoded audio
(``Cuts(lead_in=...)`` before a whole sentence, ``Chunk.lead_trim``). Each is time-aligned to
the reference by the frames removed and compared over what follows: waveform SNR and log-mel
SNR. Same seed, so the decoder's draws are the same; a trained build shows the model's rendition
(on random weights the comparison says nothing about speech).
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", default=os.environ.get("KOKORO_TVM_ARTIFACTS", "artifacts"))
    ap.add_argument("--voice", default="af_heart")
    ap.add_argument("--lead", type=int, default=2, help="frames of silence kept (25 ms each)")
    ap.add_argument("--phonemes", default="plˈiz lˈiv ðə pˈækɪʤ æt ðə fɹˈʌnt dˈɔɹ bəfˈɔɹ nˈun.")
    args = ap.parse_args()

    from kokoro_tvm.eval.metrics import log_mel_snr
    from kokoro_tvm.runtime import seams
    from kokoro_tvm.runtime.decoder import decode
    from kokoro_tvm.runtime.options import Cuts
    from kokoro_tvm.runtime.planner import shorten_pauses
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    tts = KokoroTVM.from_manifest(args.artifacts)
    libs = tts.libraries
    pack = tts.voice_pack(args.voice)
    (ref,) = list(tts.stream(args.phonemes, pack, cuts="kokoro"))
    (cut,) = list(tts.stream(args.phonemes, pack, cuts=Cuts("lead-in", lead_in=args.lead)))

    # the same durations but the first, decoded whole with the stream's draws (seed 0): the model
    # given the shorter lead
    (chunk,) = tts.plan(args.phonemes, pack, cuts="kokoro")
    decoded = decode(libs, shorten_pauses(chunk, args.lead, None), np.random.default_rng(0))
    given = seams.segment(decoded.audio, first=True, last=True)

    drop = (int(ref.chunk.durations[0]) - args.lead) * libs.samples_per_frame
    tail = ref.audio[drop:]
    print(
        f"{tts.target}; {args.voice}; kokoro's lead {int(ref.chunk.durations[0])} frames, "
        f"kept {args.lead}"
    )
    for name, audio in (("given to the model", given), ("cut from the audio", cut.audio)):
        n = min(tail.size, audio.size)
        err = np.sum((tail[:n] - audio[:n]) ** 2)
        wave = float("inf") if err == 0 else 10 * np.log10(np.sum(tail[:n] ** 2) / err)
        print(
            f"  {name:20s} {audio.size / 24000:.2f} s; against kokoro's, aligned: waveform SNR "
            f"{wave:.1f} dB, log-mel SNR {log_mel_snr(tail[:n], audio[:n]):.1f} dB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
