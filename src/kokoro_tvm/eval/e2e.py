"""End-to-end parity: runtime audio vs kokoro's ``KModel.forward_with_tokens`` on the same chunks
and draws, judged against kokoro in float64 as validation judges a library (``validate``).

The reference replays each chunk the runtime planned (same token ids, voice-pack row, speed)
through kokoro's own eager forward, in float32 and in float64, with the runtime's decoder draws
injected (``reference.InjectDraws``), then joins the chunks the same way. Chunk boundaries are
thus held equal, and everything inside a chunk (durations, alignment, F0/N, decoder) is compared.

``measure_rtf`` times the runtime (plan, pad, run every library, align, join) against float32
``KModel.forward_with_tokens`` per chunk (the ``bench_e2e@<target>`` stage).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..errors import KokoroTVMError
from ..runtime.chunking import join
from ..runtime.synthesizer import Chunk, KokoroTVM
from .samples import phonemes as sample_phonemes
from .validate import audio_verdict, durations_verdict


class E2EError(KokoroTVMError, RuntimeError):
    """The runtime's audio differs from kokoro's: its speed is not worth reporting."""


def default_lengths(token_buckets: list[int]) -> list[int]:
    """Phoneme counts that fill every token bucket (+2 boundary tokens), half the smallest, and,
    when the largest bucket is below kokoro's 510 phonemes, one input 2.5x the largest, which the
    runtime must split beyond kokoro's utterances."""
    lengths = {max(1, min(b - 2, 510)) for b in token_buckets} | {max(1, min(token_buckets) // 2)}
    if max(token_buckets) - 2 < 510:
        lengths.add(int(2.5 * max(token_buckets)))
    return sorted(lengths)


def eager_chunk(km, chunk: Chunk, speed: float) -> tuple[np.ndarray, np.ndarray]:
    """kokoro's audio and ``pred_dur`` for one decoded chunk, with its draws injected, in the
    dtype of ``km``."""
    import torch

    from .reference import InjectDraws, default_dtype

    dtype = next(km.parameters()).dtype
    ids = torch.from_numpy(chunk.input_ids).unsqueeze(0)
    with default_dtype(dtype), InjectDraws(torch.from_numpy(chunk.rand_ini), torch.from_numpy(chunk.noise)):
        audio, pred_dur = km.forward_with_tokens(ids, torch.from_numpy(chunk.style).to(dtype), speed)
    return audio.reshape(-1).float().numpy(), pred_dur.reshape(-1).numpy()


def raw_durations(km64, chunk: Chunk, speed: float) -> np.ndarray:
    """Float64 kokoro's unrounded durations of one chunk, after the speed division."""
    import torch

    from .reference import reference

    ids = torch.from_numpy(chunk.input_ids).unsqueeze(0)
    style = torch.from_numpy(chunk.style[:, chunk.style.shape[1] // 2:])
    return reference("duration", km64, (ids, None, style), ids.shape[1], {})[0].reshape(-1).numpy() / speed


def compare(tts: KokoroTVM, km, km64, phonemes: str, voice: Any = None, speed: float = 1.0,
            seed: int = 0) -> dict[str, Any]:
    """Synthesize with TVM and with kokoro in float32 and float64; one row of the parity table."""
    import torch

    res = tts.synthesize(phonemes, voice, speed, seed)
    t0 = time.perf_counter()
    with torch.no_grad():
        ref32 = [eager_chunk(km, c, speed) for c in res.chunks]
    eager_s = time.perf_counter() - t0
    with torch.no_grad():
        ref64 = [eager_chunk(km64, c, speed) for c in res.chunks]
    durations = [durations_verdict(raw_durations(km64, c, speed), c.durations) for c in res.chunks]
    near = [i for d in durations for i in d["near_boundary"]]
    same_dur = all(d["durations_equal"] for d in durations)
    row: dict[str, Any] = {
        "phonemes": len(phonemes), "tokens": sum(c.tokens for c in res.chunks),
        "frames": sum(c.frames for c in res.chunks), "chunks": len(res.chunks),
        "token_buckets": [c.token_bucket for c in res.chunks], "frame_buckets": [c.frame_bucket for c in res.chunks],
        "at_bucket": all(c.frames == c.frame_bucket for c in res.chunks),
        "durations_equal": same_dur, "near_boundary": near,
        "rtf_tvm": res.seconds / res.audio_seconds, "rtf_eager": eager_s / res.audio_seconds,
        "audio_s": res.audio_seconds, "result": res, "reference": join([a for a, _ in ref32]),
    }
    audio64 = join([a for a, _ in ref64])
    if not same_dur or audio64.size != res.audio.size:
        # other durations, so audio of another length: the row stands on the durations alone (a
        # flip on a token within 1e-4 of a rounding boundary is allowed, and listed)
        return row | {"finite": bool(np.isfinite(res.audio).all()), "ok": same_dur, "log_mel_snr_db": None,
                      "f32_log_mel_snr_db": None, "mcd_db": None, "f32_mcd_db": None}
    verdict = audio_verdict(audio64, row["reference"], res.audio)
    return row | verdict | {"ok": verdict["ok"]}


def measure_rtf(tts: KokoroTVM, km, km64, lengths: list[int], repeats: int, voice: Any = None,
                warmup: int = 1, settle_s: float | None = None, seed: int = 0) -> dict[str, Any]:
    """Real-time factors (compute s / audio s) of the runtime and of eager kokoro, interleaved.

    Per phoneme count in ``lengths``: one parity run (``compare``: the float64 criterion, else
    ``E2EError``), then ``repeats`` interleaved rounds of
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
        row = compare(tts, km, km64, phonemes, voice, seed=seed)
        if not row["ok"]:
            shown = {k: row.get(k) for k in ("durations_equal", "log_mel_snr_db", "min_snr_db", "mcd_db", "max_mcd_db")}
            raise E2EError(f"{n} phonemes: runtime audio differs from kokoro beyond float32's own distance to "
                           f"float64 kokoro ({shown}); rebuild with `dvc repro` and run `python benchmarks/e2e.py`")
        chunks = row["result"].chunks

        def eager(chunks=chunks):
            with torch.no_grad():
                return [eager_chunk(km, c, 1.0) for c in chunks]

        samples = time_interleaved({"tvm": lambda p=phonemes: tts.synthesize(p, voice, 1.0, seed), "eager": eager},
                                   repeats, warmup, SETTLE_S if settle_s is None else settle_s)
        tvm_s, eager_s = (float(np.median(samples[k])) for k in ("tvm", "eager"))
        audio_s = row["audio_s"]
        rows[f"phonemes_{n}"] = {
            "phonemes": row["phonemes"], "tokens": row["tokens"], "frames": row["frames"], "chunks": row["chunks"],
            "frame_buckets": row["frame_buckets"],
            "padding_waste": round(1 - row["frames"] / sum(row["frame_buckets"]), 4),
            "audio_s": round(audio_s, 4), "tvm_s": round(tvm_s, 5), "eager_s": round(eager_s, 5),
            "rtf_tvm": round(tvm_s / audio_s, 5), "rtf_eager": round(eager_s / audio_s, 5),
            "speedup_vs_eager": round(eager_s / tvm_s, 4), "log_mel_snr_db": row["log_mel_snr_db"],
            "f32_log_mel_snr_db": row["f32_log_mel_snr_db"], "mcd_db": row["mcd_db"], "f32_mcd_db": row["f32_mcd_db"]}
        tvm_total, eager_total, audio_total = tvm_total + tvm_s, eager_total + eager_s, audio_total + audio_s
    rows["total"] = {"audio_s": round(audio_total, 4), "rtf_tvm": round(tvm_total / audio_total, 5),
                     "rtf_eager": round(eager_total / audio_total, 5),
                     "speedup_vs_eager": round(eager_total / tvm_total, 4)}
    return rows
