"""Does a WAV written by the CLI sound like speech? Measured, not listened to.

usage: python benchmarks/speech_check.py --wav x.wav --phonemes 'ðɪs ɪz ɐ tˈɛst.' --voice jf_alpha
                                         [--artifacts artifacts] [--speed 1.0] [--json out.json]

The phonemes (one utterance, <= 510) are run through eager kokoro (the pipeline's
``artifacts/weights``) for the predicted durations and F0; the WAV is then checked for
(``eval.speech``): a voiced fraction above 0.5 among loud frames, a pitch track that follows
the predicted F0 (correlation above 0.8, and well above the reversed-F0 control), and pauses at
punctuation (spans at least 10 dB below speech). Exits 1 when any check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wav", required=True)
    ap.add_argument("--phonemes", required=True)
    ap.add_argument("--voice", required=True, help="as kokoro-tvm synth --voice")
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--json", help="also write the numbers here")
    a = ap.parse_args()

    import numpy as np
    import torch

    from kokoro_tvm import artifacts
    from kokoro_tvm.eval.eager import load_kokoro
    from kokoro_tvm.eval.speech import pause_contrast, speech_stats
    from kokoro_tvm.runtime import voices
    from kokoro_tvm.runtime.chunking import check_symbols, normalize_phonemes, token_ids
    from kokoro_tvm.runtime.wav import read_wav
    from kokoro_tvm.spec import samples_per_frame

    root = Path(a.artifacts)
    cfg, km = load_kokoro(artifacts.kokoro_checkpoint_file(root), artifacts.model_config_file(root))
    phonemes = normalize_phonemes(a.phonemes)
    check_symbols(phonemes, cfg["vocab"])
    if len(phonemes) > 510:
        raise SystemExit("error: give one utterance (<= 510 phonemes)")
    pack = voices.resolve(a.voice, 2 * cfg["style_dim"])
    ref_s = torch.from_numpy(voices.style_for(pack, len(phonemes)))
    ids = torch.from_numpy(token_ids(phonemes, cfg["vocab"])).unsqueeze(0)
    with torch.no_grad():  # kokoro's forward_with_tokens up to F0Ntrain
        n = ids.shape[1]
        mask = torch.zeros(1, n, dtype=torch.bool)
        d_en = km.bert_encoder(km.bert(ids, attention_mask=(~mask).int())).transpose(-1, -2)
        d = km.predictor.text_encoder(d_en, ref_s[:, 128:], torch.tensor([n]), mask)
        x, _ = km.predictor.lstm(d)
        dur = (
            torch.round(torch.sigmoid(km.predictor.duration_proj(x)).sum(-1) / a.speed)
            .clamp(min=1)
            .long()[0]
        )
        aln = torch.zeros(n, int(dur.sum()))
        aln[torch.repeat_interleave(torch.arange(n), dur), torch.arange(aln.shape[1])] = 1
        f0, _ = km.predictor.F0Ntrain(d.transpose(-1, -2) @ aln, ref_s[:, 128:])
    audio, rate = read_wav(a.wav)
    spf = samples_per_frame(cfg)
    stats = speech_stats(audio, f0.reshape(-1).numpy(), spf / 2 / rate)
    pauses = pause_contrast(audio, phonemes, dur.numpy(), spf)
    checks = {
        "voiced_fraction_above_0.5": stats["voiced_fraction_of_loud"] > 0.5,
        "pitch_follows_f0": stats["pitch_f0_correlation"] > 0.8
        and stats["pitch_f0_correlation"] > stats["pitch_reversed_f0_correlation"] + 0.3,
        "pauses_at_punctuation": pauses["punctuation_tokens"] == 0
        or pauses["median_pause_minus_speech_db"] < -10.0,
    }
    doc = {
        "wav": a.wav,
        "audio_s": round(audio.size / rate, 3),
        "frames": int(dur.sum()),
        "audio_frames": round(audio.size / spf, 2),
        **stats,
        **pauses,
        "checks": checks,
    }
    print(json.dumps(doc, indent=2, default=float))
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=2, default=float))
    return 0 if all(checks.values()) and np.isfinite(audio).all() else 1


if __name__ == "__main__":
    sys.exit(main())
