"""End-to-end parity: runtime audio vs ``KModel.forward_with_tokens`` on the same chunks and draws.

The reference replays each chunk the runtime planned (same token ids, voice-pack row, speed)
through kokoro's own eager forward, with the runtime's decoder draws injected
(``reference.InjectDraws``), then joins the chunks the same way. Chunk boundaries are thus held
equal, and everything inside a chunk (durations, alignment, F0/N, decoder) is compared.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .chunking import join
from .metrics import log_mel_snr
from .runtime import Chunk, KokoroTVM

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
