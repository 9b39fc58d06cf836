"""Audio fidelity per language: one voice of each of Kokoro's nine languages, the runtime against
kokoro in float64, judged by validation's float64 criterion (docs/architecture.md, "Validation";
``eval.verdicts``).

usage: python benchmarks/languages.py [--artifacts artifacts] [--target T] [--voices DIR_OR_TGZ]
                                      [--out languages.json]

For each language a sentence (numbers, punctuation, a word in another script) goes through that
language's G2P (``runtime.g2p``: kokoro's ``KPipeline`` phonemes), and the phonemes through
``eval.e2e.compare``: the runtime's audio, and kokoro's eager model in float32 and float64 on
the same weights, chunks, voice rows and decoder draws. One row per language: phonemes, chunks,
log-mel SNR against float64 kokoro of the runtime and of float32 kokoro, MCD, and the verdict.

Voices: the manifest's (the ``voices`` stage), or ``--voices`` (a kokoro-js tarball or a
folder of ``.pt``/``.bin`` packs) for artifacts built before that stage. Exits 1 when a language
misses the criterion.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

#: per language: its voice, and a sentence with numbers, punctuation and a foreign-script word
CASES = {
    "a": ("af_heart", "Hello, world! It's 3:45 pm on May 5th; I paid $12.50 at the café."),
    "b": ("bf_emma", "The colour of 12 theatres; “quoted” text, £3.20 each, at 10:30!"),
    "e": ("ef_dora", "¡Hola, mundo! Tengo 25 años y 3,5 euros. ¿Qué tal? Vivo en New York."),
    "f": ("ff_siwis", "Bonjour le monde, j'ai 42 ans (vraiment) ! Il coûte 3,50 €, à Berlin."),
    "h": ("hf_alpha", "नमस्ते दुनिया, मेरे पास 15 किताबें हैं। मैं Delhi में computer पर हूँ!"),
    "i": ("if_sara", "Ciao mondo, ho 7 gatti: che bello! Costa 12,50 euro a New York."),
    "p": ("pf_dora", "Olá mundo, tenho 30 anos — é verdade? Custa R$ 15,90 em São Paulo!"),
    "j": ("jf_alpha", "こんにちは世界、今日は2024年5月5日です！iPhoneを買った。"),
    "z": ("zf_xiaobei", "你好世界，今天是2024年5月5日！我买了iPhone。价格是3.5元。"),
}


def voice_packs(source: str | None, names: list[str]) -> dict[str, object]:
    """``name -> pack`` from ``--voices``, or the names themselves (the manifest's voices)."""
    if source is None:
        return {n: n for n in names}
    from kokoro_tvm.pipeline import voices

    packs, _ = voices.read_source(source, 256)
    return {n: packs[n] for n in names}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifacts", default="artifacts")
    ap.add_argument("--target")
    ap.add_argument("--voices", help="kokoro-js tarball or voices folder (default: the manifest's)")
    ap.add_argument("--langs", default="".join(CASES), help="lang codes to run (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", help="also write the rows as JSON")
    args = ap.parse_args()

    import torch

    warnings.filterwarnings("ignore", message="dropout option adds dropout")
    warnings.filterwarnings("ignore", message=".*weight_norm.* is deprecated")
    from kokoro_tvm import artifacts
    from kokoro_tvm.eval.e2e import compare
    from kokoro_tvm.eval.eager import as_float64, load_kokoro
    from kokoro_tvm.runtime import g2p, languages
    from kokoro_tvm.runtime.synthesizer import KokoroTVM

    torch.set_num_threads(args.threads)
    root = Path(args.artifacts)
    tts = KokoroTVM.from_manifest(root, target=args.target, num_threads=args.threads)
    _, km = load_kokoro(artifacts.kokoro_checkpoint_file(root), artifacts.model_config_file(root))
    km64 = as_float64(km)
    codes = [c for c in args.langs if c in CASES]
    packs = voice_packs(args.voices, [CASES[c][0] for c in codes])
    m = tts.manifest.model.as_dict()
    print(f"model {m['config']} ({m['checkpoint']}), target {tts.target}, {args.threads} threads")
    print(
        f"{'lang':22s} {'voice':11s} {'phon':>4} {'chunks':>6} {'SNR tvm':>7} {'SNR f32':>7} "
        f"{'MCD tvm':>7} {'MCD f32':>7} {'ok':>5}"
    )
    rows, ok = [], True
    for code in codes:
        voice, text = CASES[code]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (utt,) = g2p.text_utterances(text, code)  # one sentence: one utterance, as kokoro
            r = compare(tts, km, km64, utt.phonemes, packs[voice], 1.0, args.seed)
        ok &= r["ok"]
        lang = languages.LANGUAGES[code]
        print(
            f"{lang.name + ' (' + code + ')':22s} {voice:11s} {r['phonemes']:4d} {r['chunks']:6d} "
            f"{r['log_mel_snr_db']:7.1f} {r['f32_log_mel_snr_db']:7.1f} {r['mcd_db']:7.3f} "
            f"{r['f32_mcd_db']:7.3f} {r['ok']!s:>5}",
            flush=True,
        )
        rows.append(
            {"lang": code, "voice": voice, "text": text, "phonemes_text": utt.phonemes}
            | {k: v for k, v in r.items() if k not in ("result", "reference")}
        )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2, ensure_ascii=False))
    print("every language passes the float64 criterion" if ok else "SOME LANGUAGES FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
