"""End-to-end parity: runtime audio vs kokoro's ``KModel.forward_with_tokens`` on the same chunks
and draws, judged against kokoro in float64 as validation judges a library (``verdicts``).

The reference replays each chunk the runtime planned (same token ids, voice-pack row, speed)
through kokoro's own eager forward, in float32 and in float64, with the runtime's decoder draws
injected (``eager.InjectDraws``), then joins the chunks the same way. Chunk boundaries are
thus held equal, and everything inside a chunk (durations, alignment, F0/N, decoder) is compared.

``measure_rtf`` times the runtime (plan, pad, run every library, align, join) against float32
``KModel.forward_with_tokens`` per chunk (the ``bench_e2e`` stage).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any

import numpy as np
from torch.overrides import TorchFunctionMode

from ..errors import KokoroTVMError
from ..runtime.chunking import MAX_PHONEMES, join
from ..runtime.planner import BucketSplitWarning, Chunk
from ..runtime.stream import ChunkAudio
from ..runtime.synthesizer import KokoroTVM
from ..spec import FP32, SAMPLE_RATE
from .samples import phonemes as sample_phonemes
from .verdicts import audio_verdict, durations_verdict, listener_verdict


class E2EError(KokoroTVMError, RuntimeError):
    """The runtime's audio differs from kokoro's: its speed is not worth reporting."""


def default_lengths(token_buckets: list[int]) -> list[int]:
    """Phoneme counts that fill every token bucket (+2 boundary tokens); the largest bucket's
    halves down to 32 tokens (30, 62, 126, 254 phonemes under 512), since bounded libraries make one
    large bucket serve short inputs too, else half the smallest bucket; and, when the largest
    bucket is below kokoro's 510 phonemes, one input 2.5x the largest, which the runtime must
    split beyond kokoro's utterances."""
    top = max(token_buckets)
    lengths = {max(1, min(b - 2, 510)) for b in token_buckets}
    halves = {top // 2**k - 2 for k in range(1, top.bit_length()) if top // 2**k >= 32}
    lengths |= halves or {max(1, min(token_buckets) // 2)}
    if top - 2 < 510:
        lengths.add(int(2.5 * top))
    return sorted(lengths)


class ReplayDurations(TorchFunctionMode):
    """Make kokoro's ``torch.round(duration)`` in ``forward_with_tokens`` return given frame
    counts, so its alignment, F0/N and decoder run on another run's durations: a duration within
    ~1e-5 of a rounding boundary may round either way in two correct builds, and everything
    after the rounding is still compared."""

    def __init__(self, durations):
        super().__init__()
        self.durations, self.used = durations, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        import torch

        kwargs = kwargs or {}
        if func is torch.round and not self.used:
            self.used = True
            assert args[0].numel() == self.durations.numel(), (args[0].shape, self.durations.shape)
            return self.durations.to(args[0].dtype).reshape(args[0].shape)
        return func(*args, **kwargs)


def eager_chunk(
    km, part: ChunkAudio, speed: float, replay: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """kokoro's audio and ``pred_dur`` for one decoded chunk (its draws kept), with its draws
    injected, in the dtype of ``km``; with ``replay``, on the chunk's (the runtime's) durations."""
    import torch

    from .eager import InjectDraws, default_dtype

    chunk, drawn = part.chunk, part.decoded
    dtype = next(km.parameters()).dtype
    ids = torch.from_numpy(chunk.input_ids).unsqueeze(0)
    durations = (
        ReplayDurations(torch.from_numpy(chunk.durations)) if replay else contextlib.nullcontext()
    )
    with (
        default_dtype(dtype),
        InjectDraws(torch.from_numpy(drawn.rand_ini), torch.from_numpy(drawn.noise)),
        durations,
    ):
        audio, pred_dur = km.forward_with_tokens(
            ids, torch.from_numpy(chunk.style).to(dtype), speed
        )
    return audio.reshape(-1).float().numpy(), pred_dur.reshape(-1).numpy()


def kokoro_utterances(phonemes: str) -> list[str]:
    """The utterances kokoro's ``KPipeline.generate_from_tokens`` makes of a phoneme string
    (model-less: no audio, no G2P or voice loaded)."""
    from kokoro import KPipeline

    pipeline = KPipeline.__new__(KPipeline)  # __init__ would load a G2P; raw phonemes need none
    pipeline.model = None
    return [r.phonemes for r in pipeline.generate_from_tokens(phonemes, None)]


def raw_durations(km64, chunk: Chunk, speed: float) -> np.ndarray:
    """Float64 kokoro's unrounded durations of one chunk, after the speed division."""
    import torch

    from .eager import reference

    ids = torch.from_numpy(chunk.input_ids).unsqueeze(0)
    style = torch.from_numpy(chunk.style[:, chunk.style.shape[1] // 2 :])
    return (
        reference("duration", km64, (ids, None, style), ids.shape[1], {})[0].reshape(-1).numpy()
        / speed
    )


def compare(
    tts: KokoroTVM,
    km,
    km64,
    phonemes: str,
    voice: Any = "random",
    speed: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Synthesize with TVM and with kokoro in float32 and float64; one row of the parity table."""
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = tts.synthesize(phonemes, voice, speed=speed, seed=seed)
    # the runtime cut an utterance past its largest bucket (and said so): chunks differ from
    # kokoro's
    split = any(issubclass(w.category, BucketSplitWarning) for w in caught)
    t0 = time.perf_counter()
    with torch.no_grad():
        ref32 = [eager_chunk(km, p, speed, replay=True) for p in res.parts]
    eager_s = time.perf_counter() - t0
    with torch.no_grad():
        ref64 = [eager_chunk(km64, p, speed, replay=True) for p in res.parts]
    durations = [durations_verdict(raw_durations(km64, c, speed), c.durations) for c in res.chunks]
    near = [i for d in durations for i in d["near_boundary"]]
    same_dur = all(d["durations_equal"] for d in durations)
    # kokoro's utterances of this input: the runtime must run the same ones unless it had to cut
    utterances = kokoro_utterances(phonemes) if len(phonemes) <= MAX_PHONEMES else None
    same_utterances = [c.phonemes for c in res.chunks] == utterances
    row: dict[str, Any] = {
        "phonemes": len(phonemes),
        "tokens": sum(c.n_tokens for c in res.chunks),
        "frames": sum(c.n_frames for c in res.chunks),
        "chunks": len(res.chunks),
        "kokoro_utterances": None if utterances is None else len(utterances),
        "same_utterances": same_utterances,
        "split_beyond_kokoro": split,
        "token_buckets": [c.token_bucket for c in res.chunks],
        "frame_buckets": [p.frame_bucket for p in res.parts],
        "at_bucket": all(p.chunk.n_frames == p.frame_bucket for p in res.parts),
        "durations_equal": same_dur,
        "near_boundary": near,
        "rtf_tvm": res.seconds / res.audio_seconds,
        "rtf_eager": eager_s / res.audio_seconds,
        "audio_s": res.audio_seconds,
        "result": res,
        "reference": join([a for a, _ in ref32]),
    }
    # kokoro on the runtime's durations (a token within 1e-4 of a rounding boundary may flip, and
    # is listed): everything after the rounding is compared, audio of the same length; a
    # narrower precision's decoder by the listener's criterion, as its validation held it
    r64 = join([a for a, _ in ref64])
    if tts.precision.get("decoder", FP32) == FP32:
        verdict = audio_verdict(r64, row["reference"], res.audio)
    else:
        verdict = listener_verdict(r64, row["reference"], res.audio)
    return row | verdict | {"ok": verdict["ok"] and same_dur and (same_utterances or split)}


def measure_rtf(
    tts: KokoroTVM,
    km,
    km64,
    lengths: list[int],
    repeats: int,
    voice: Any = "random",
    warmup: int = 0,
    settle_s: float | None = None,
    seed: int = 0,
    onnx: dict[str, Any] | None = None,
    packages: dict[str, Any] | None = None,
    beside: dict[str, KokoroTVM] | None = None,
) -> dict[str, Any]:
    """Real-time factors (compute s / audio s) of the runtime, eager kokoro and, given ``onnx``
    (name -> session, ``onnx_kmodel.sessions``), kokoro-onnx's whole model on ONNX Runtime, and
    given ``packages`` (name -> ``kokoro_onnx.Kokoro``, ``kokoro_onnx_package.packages``) the
    kokoro-onnx package's ``create()`` on the same phonemes and voice (runner
    ``kokoro_onnx_<name>``), and ``beside`` (name -> another runtime, e.g. ``tvm_fp32``: the float32
    libraries beside a narrower precision's) on the same input, each checked by its own precision's
    criterion first.

    Per phoneme count in ``lengths``: one parity run (``compare``: the float64 criterion, else
    ``E2EError``), one ``onnx_kmodel.agreement`` run per session (fp32 must give kokoro's
    durations, but for tokens at a rounding boundary), then ``repeats`` interleaved rounds of
    ``tts.synthesize`` against eager ``forward_with_tokens`` and each session on the chunks it
    planned (same ids, style and speed; eager also the same draws; ``timing.time_interleaved``).
    Medians; ``speedup_vs_eager`` = eager / runtime, ``speedup_vs_ort_<name>`` = ORT / runtime.
    ``total`` sums the medians over all lengths. No ``warmup`` by default: the parity and
    agreement runs have already called every side on the same chunks.
    """
    import torch

    from . import kokoro_onnx_package, onnx_kmodel
    from .timing import SETTLE_S, time_interleaved

    rows: dict[str, Any] = {}
    totals: dict[str, float] = {}
    pack = tts.voice_pack(voice) if packages else None
    audio_total = 0.0
    for n in lengths:
        phonemes = sample_phonemes(n)
        row = compare(tts, km, km64, phonemes, voice, seed=seed)
        if not row["ok"]:
            shown = {
                k: row.get(k)
                for k in ("durations_equal", "log_mel_snr_db", "min_snr_db", "mcd_db", "max_mcd_db")
            }
            raise E2EError(
                f"{n} phonemes: runtime audio differs from kokoro beyond float32's own distance to "
                f"float64 kokoro ({shown}); rebuild with `dvc repro` and run "
                "`python benchmarks/e2e.py`"
            )
        parts = row["result"].parts
        chunks = row["result"].chunks

        def eager(parts=parts):
            with torch.no_grad():
                return [eager_chunk(km, p, 1.0) for p in parts]

        runners = {"tvm": lambda p=phonemes: tts.synthesize(p, voice, seed=seed), "eager": eager}
        for name, other in (beside or {}).items():
            if not compare(other, km, km64, phonemes, voice, seed=seed)["ok"]:
                raise E2EError(
                    f"{n} phonemes: {name} misses its criterion; rebuild with `dvc repro`"
                )
            runners[name] = lambda o=other, p=phonemes: o.synthesize(p, voice, seed=seed)
        ort_rows = {}
        for name, session in (onnx or {}).items():
            check = onnx_kmodel.agreement(session, chunks, row["reference"])
            if check["durations_differ"] is not None and check["durations_differ"] > len(
                row["near_boundary"]
            ):
                raise E2EError(
                    f"{n} phonemes: ONNX Runtime ({name}) predicts other durations than kokoro at "
                    f"{check['durations_differ']} tokens ({len(row['near_boundary'])} are at a "
                    "rounding boundary): its export is not kokoro's model; its time is not worth "
                    "reporting"
                )
            ort_rows[name] = check
            runners[f"ort_{name}"] = lambda s=session, c=chunks: [
                onnx_kmodel.run(s, ch) for ch in c
            ]
        package_audio = {}
        for name, kokoro in (packages or {}).items():
            # its first call, untimed: trimmed and paused audio, of which only the length is
            # comparable
            package_audio[f"kokoro_onnx_{name}_audio_s"] = round(
                kokoro_onnx_package.create(kokoro, phonemes, pack).size / SAMPLE_RATE, 4
            )
            runners[f"kokoro_onnx_{name}"] = lambda k=kokoro, p=phonemes: (
                kokoro_onnx_package.create(k, p, pack)
            )
        samples = time_interleaved(
            runners, repeats, warmup, SETTLE_S if settle_s is None else settle_s
        )
        secs = {k: float(np.median(v)) for k, v in samples.items()}
        audio_s = row["audio_s"]
        rows[f"phonemes_{n}"] = {
            "phonemes": row["phonemes"],
            "tokens": row["tokens"],
            "frames": row["frames"],
            "chunks": row["chunks"],
            "frame_buckets": row["frame_buckets"],
            "padding_waste": padding_waste(tts, row),
            "audio_s": round(audio_s, 4),
            **{f"{k}_s": round(v, 5) for k, v in secs.items()},
            **{f"rtf_{k}": round(v / audio_s, 5) for k, v in secs.items()},
            **_speedups(secs),
            "log_mel_snr_db": row["log_mel_snr_db"],
            "f32_log_mel_snr_db": row["f32_log_mel_snr_db"],
            "mcd_db": row["mcd_db"],
            "f32_mcd_db": row["f32_mcd_db"],
            **{f"ort_{k}_{m}": v for k, check in ort_rows.items() for m, v in check.items()},
            **package_audio,
        }
        for k, v in secs.items():
            totals[k] = totals.get(k, 0.0) + v
        audio_total += audio_s
    rows["total"] = {
        "audio_s": round(audio_total, 4),
        **{f"rtf_{k}": round(v / audio_total, 5) for k, v in totals.items()},
        **_speedups(totals),
    }
    return rows


def padding_waste(tts: KokoroTVM, row: dict[str, Any]) -> float:
    """The fraction of the decoder's computed frames that are padding: 1 - frames / buckets for a
    padded decoder, 0 for a bounded one (it computes the frames it is given)."""
    if all(tts.libraries.get("decoder", b).bounded for b in row["frame_buckets"]):
        return 0.0
    return round(1 - row["frames"] / sum(row["frame_buckets"]), 4)


def _speedups(secs: dict[str, float]) -> dict[str, float]:
    """Runtime speed against every other runner: ``speedup_vs_eager``, ``speedup_vs_ort_fp32``..."""
    return {f"speedup_vs_{k}": round(v / secs["tvm"], 4) for k, v in secs.items() if k != "tvm"}
