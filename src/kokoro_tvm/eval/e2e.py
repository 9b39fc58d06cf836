"""End-to-end parity: runtime audio vs ``KModel.forward_with_tokens`` on the same chunks and draws.

The reference replays each chunk the runtime planned (same token ids, voice-pack row, speed)
through kokoro's own eager forward, with the runtime's decoder draws injected
(``reference.InjectDraws``), then joins the chunks the same way. Chunk boundaries are thus held
equal, and everything inside a chunk (durations, alignment, F0/N, decoder) is compared.

``measure_rtf`` times the same two paths (the ``bench_e2e@<target>`` stage): the whole runtime
(plan, pad, run every library, align, join) against ``KModel.forward_with_tokens`` per chunk.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..runtime.chunking import join
from ..runtime.synthesizer import Chunk, KokoroTVM
from .metrics import log_mel_snr
from ..errors import KokoroTVMError

class E2EError(KokoroTVMError, RuntimeError):
    """The runtime's audio differs from eager kokoro's: its speed is not worth reporting."""

AUDIO_SNR_DB = 40.0


# misaki phonemes for a few English sentences: realistic punctuation and word lengths.
SAMPLE = ("kˈOkəɹO ɪz ɐn ˈOpən wˈAt tˌitˌiˈɛs mˈɑdᵊl, wɪð ˈATi tˈu mˈɪljən pəɹˈæməTəɹz. dəspˈIt ɪts "
          "lˈItwˌAt ˈɑɹkətˌɛkʧəɹ, ɪt dəlˈɪvəɹz kˈɑmpəɹəbᵊl kwˈɑləTi tə lˈɑɹʤəɹ mˈɑdᵊlz; wˌIl bˈiɪŋ "
          "səɡnˈɪfəkəntli fˈæstəɹ ænd mˈɔɹ kˈɑst ɪfˈɪʃənt! wɪð ˈOpən wˈAt, ɪt kæn bi dəplˈYd ˈɛniwˌɛɹ.")


def sample_phonemes(n: int) -> str:
    """About ``n`` phonemes of SAMPLE (repeated as needed), ending at a word boundary when possible."""
    text = SAMPLE
    while len(text) < n:
        text += " " + SAMPLE
    cut = text[:n]
    if n < len(text) and text[n] != " " and " " in cut[n // 2:]:
        cut = cut[: cut.rindex(" ")]
    return cut.strip()


def default_lengths(token_buckets: list[int]) -> list[int]:
    """Phoneme counts that exercise every token bucket half and fully filled (+2 boundary tokens
    fill it), and one input 2.5x the largest bucket, which the runtime splits into chunks."""
    lengths = set()
    for b in token_buckets:
        lengths |= {max(1, b // 2), max(1, b - 2)}
    lengths.add(int(2.5 * max(token_buckets)))
    return sorted(lengths)


def eager_chunk(km, chunk: Chunk, speed: float) -> tuple[np.ndarray, np.ndarray]:
    """kokoro's audio and ``pred_dur`` for one decoded chunk, with its draws injected."""
    import torch

    from .reference import InjectDraws

    ids = torch.from_numpy(chunk.input_ids).unsqueeze(0)
    with InjectDraws(torch.from_numpy(chunk.rand_ini), torch.from_numpy(chunk.noise)):
        audio, pred_dur = km.forward_with_tokens(ids, torch.from_numpy(chunk.style), speed)
    return audio.reshape(-1).numpy(), pred_dur.reshape(-1).numpy()


def compare(tts: KokoroTVM, km, phonemes: str, voice: Any = None, speed: float = 1.0,
            seed: int = 0) -> dict[str, Any]:
    """Synthesize with TVM and eager kokoro; one row of the parity table."""
    import torch

    res = tts.synthesize(phonemes, voice, speed, seed)
    t0 = time.perf_counter()
    with torch.no_grad():
        ref = [eager_chunk(km, c, speed) for c in res.chunks]
    eager_s = time.perf_counter() - t0
    ref_audio = join([a for a, _ in ref])
    same_dur = all(np.array_equal(c.durations, d) for c, (_, d) in zip(res.chunks, ref))
    snr = log_mel_snr(ref_audio, res.audio) if ref_audio.size == res.audio.size else float("-inf")
    audio_s = res.audio_seconds
    return {
        "phonemes": len(phonemes), "tokens": sum(c.tokens for c in res.chunks),
        "frames": sum(c.frames for c in res.chunks), "chunks": len(res.chunks),
        "token_buckets": [c.token_bucket for c in res.chunks], "frame_buckets": [c.frame_bucket for c in res.chunks],
        "at_bucket": all(c.frames == c.frame_bucket for c in res.chunks),
        "snr_db": snr, "durations_equal": same_dur, "finite": bool(np.isfinite(res.audio).all()),
        "rtf_tvm": res.seconds / audio_s, "rtf_eager": eager_s / audio_s, "audio_s": audio_s,
        "ok": same_dur and snr >= AUDIO_SNR_DB,
        "result": res, "reference": ref_audio,
    }


def measure_rtf(tts: KokoroTVM, km, lengths: list[int], repeats: int, warmup: int = 1,
                settle_s: float | None = None, seed: int = 0) -> dict[str, Any]:
    """Real-time factors (compute s / audio s) of the runtime and of eager kokoro, interleaved.

    Per phoneme count in ``lengths``: one parity run (``compare``: equal durations and log-mel
    SNR >= ``AUDIO_SNR_DB``, else ``E2EError``), then ``repeats`` interleaved rounds of
    ``tts.synthesize`` against eager ``forward_with_tokens`` on the chunks it planned (same ids,
    style, speed and draws; ``bench.time_interleaved``). Medians; ``speedup_vs_eager`` =
    eager / runtime. ``total`` sums the medians over all lengths.
    """
    import torch

    from .timing import SETTLE_S, time_interleaved

    rows: dict[str, Any] = {}
    tvm_total = eager_total = audio_total = 0.0
    for n in lengths:
        phonemes = sample_phonemes(n)
        row = compare(tts, km, phonemes, seed=seed)
        if not row["ok"]:
            raise E2EError(f"{n} phonemes: runtime audio differs from eager kokoro (durations equal: "
                           f"{row['durations_equal']}, log-mel SNR {row['snr_db']:.1f} dB < {AUDIO_SNR_DB}); "
                           "rebuild with `dvc repro` and run `python benchmarks/e2e.py` to see which length")
        chunks = row["result"].chunks

        def eager(chunks=chunks):
            with torch.no_grad():
                return [eager_chunk(km, c, 1.0) for c in chunks]

        samples = time_interleaved({"tvm": lambda p=phonemes: tts.synthesize(p, None, 1.0, seed), "eager": eager},
                                   repeats, warmup, SETTLE_S if settle_s is None else settle_s)
        tvm_s, eager_s = (float(np.median(samples[k])) for k in ("tvm", "eager"))
        audio_s = row["audio_s"]
        rows[f"phonemes_{n}"] = {
            "phonemes": row["phonemes"], "tokens": row["tokens"], "frames": row["frames"], "chunks": row["chunks"],
            "audio_s": round(audio_s, 4), "tvm_s": round(tvm_s, 5), "eager_s": round(eager_s, 5),
            "rtf_tvm": round(tvm_s / audio_s, 5), "rtf_eager": round(eager_s / audio_s, 5),
            "speedup_vs_eager": round(eager_s / tvm_s, 4), "snr_db": round(row["snr_db"], 2)}
        tvm_total, eager_total, audio_total = tvm_total + tvm_s, eager_total + eager_s, audio_total + audio_s
    rows["total"] = {"audio_s": round(audio_total, 4), "rtf_tvm": round(tvm_total / audio_total, 5),
                     "rtf_eager": round(eager_total / audio_total, 5),
                     "speedup_vs_eager": round(eager_total / tvm_total, 4)}
    return rows
