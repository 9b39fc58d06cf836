"""Hold a library's outputs to kokoro run in float64, by the criterion of its registry entry.

float32 is not the ground truth: two correct float32 builds of the trained model differ by
~25 dB log-mel (SineGen's phase accumulates in float32; the ``atan2`` of near-zero STFT bins is
arbitrary). So each length runs three times on the same inputs and draws (``cases``): the
library, float32 kokoro and float64 kokoro, and a library passes when its distance to float64 is
no worse than float32 kokoro's own:

- audio (the decoder): log-mel SNR against float64 >= min(float32's SNR - 3 dB, 60 dB), and
  mel-cepstral distortion <= max(1.5 x float32's MCD, 0.5 dB); the audio is finite;
- features (the token components): relative error against float64 <= max(4 x float32's error,
  1e-5) (a compiled build accumulates in another order); durations, rounded as kokoro rounds
  them, equal float64 kokoro's except on tokens whose unrounded duration lies within 1e-4 of a
  rounding boundary (reported as ``near_boundary``).

A library built in a narrower precision (``bf16``: the decoder's convolutions multiply bfloat16
pairs) cannot be as close to float64 as float32 kokoro is, and need not be: it is held to what a
listener hears (``LISTENER_CRITERION``, docs/precision.md says why these numbers): log-mel SNR
against float64 >= 35 dB and mel-cepstral distortion <= 1.0 dB at every length and language, and
on English, an offline recognizer's word errors no more than on float32 kokoro's audio.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import KokoroTVMError
from ..spec import FP32, Component, Output, lookup
from .cases import Case, reference_cases
from .metrics import log_mel_snr, mel_cepstral_distortion, rel_err, voiced_fraction

SNR_SLACK_DB = 3.0
SNR_CAP_DB = 60.0
MCD_FACTOR, MCD_FLOOR_DB = 1.5, 0.5
REL_ERR_FACTOR, REL_ERR_FLOOR = 4.0, 1e-5
BOUNDARY = 1e-4

LISTENER_SNR_DB = 35.0
LISTENER_MCD_DB = 1.0

AUDIO_CRITERION = (
    f"vs float64 kokoro: log-mel SNR >= min(float32 SNR - {SNR_SLACK_DB}, {SNR_CAP_DB}) dB and "
    f"MCD <= max({MCD_FACTOR} x float32 MCD, {MCD_FLOOR_DB}) dB"
)
TENSOR_CRITERION = (
    f"vs float64 kokoro: relative error <= max({REL_ERR_FACTOR} x float32's, {REL_ERR_FLOOR}); "
    f"durations equal but within {BOUNDARY} of a rounding boundary"
)


LISTENER_CRITERION = (
    f"vs float64 kokoro: log-mel SNR >= {LISTENER_SNR_DB} dB and MCD <= {LISTENER_MCD_DB} dB; "
    "English words recognized no worse than on float32 kokoro's audio"
)


class ValidationError(KokoroTVMError, RuntimeError):
    """A library missed a threshold; the message carries the whole table."""


def criterion(component: str, precision: str = FP32) -> str:
    """The criterion ``component``'s outputs are held to, in words (the metrics documents')."""
    if lookup(component).output is not Output.AUDIO:
        return TENSOR_CRITERION
    return AUDIO_CRITERION if precision == FP32 else LISTENER_CRITERION


def _crop(ref: list[np.ndarray], got: list[np.ndarray]) -> list[np.ndarray]:
    return [g[tuple(slice(0, n) for n in r.shape)] for r, g in zip(ref, got)]


def judge(
    component: str,
    case: Case,
    got: list[np.ndarray],
    precision: str = FP32,
    text: str | None = None,
) -> dict[str, Any]:
    """One case's metrics row: ``got`` (a library's outputs on ``case["inputs"]``) against
    float64 kokoro, by ``component``'s criterion at ``precision``; ``text``: an English case's
    words, which the listener's criterion also holds a recognizer to."""
    entry = lookup(component)
    if entry.output is Output.AUDIO:
        if precision != FP32:
            return listener_verdict(case["r64"][0], case["r32"][0], got[0], text)
        return compare_audio(case["r64"][0], case["r32"][0], got[0], case["f0"][0])
    return compare_tensors(entry, case["r64"], case["r32"], got)


def listener_verdict(
    r64: np.ndarray, r32: np.ndarray, got: np.ndarray, text: str | None = None
) -> dict[str, Any]:
    """The listener's criterion (``LISTENER_CRITERION``): ``got`` against float64 kokoro by
    fixed bounds, float32 kokoro's own distance beside it; with ``text`` (English), the words a
    recognizer hears in ``got`` against those it hears in float32 kokoro's audio."""
    r64, r32, got = (
        np.asarray(a, np.float64).reshape(-1) for a in _crop([r64] * 3, [r64, r32, got])
    )
    finite = bool(np.isfinite(got).all())
    snr = log_mel_snr(r64, got) if finite else float("-inf")
    mcd = mel_cepstral_distortion(r64, got) if finite else float("inf")
    row: dict[str, Any] = {
        "log_mel_snr_db": round(snr, 2),
        "f32_log_mel_snr_db": round(log_mel_snr(r64, r32), 2),
        "min_snr_db": LISTENER_SNR_DB,
        "mcd_db": round(mcd, 4),
        "f32_mcd_db": round(mel_cepstral_distortion(r64, r32), 4),
        "max_mcd_db": LISTENER_MCD_DB,
        "finite": finite,
        "ok": finite and snr >= LISTENER_SNR_DB and mcd <= LISTENER_MCD_DB,
    }
    if text is not None and finite:
        from . import asr

        row["wer"] = round(asr.word_error_rate(text, asr.transcribe(got.astype(np.float32))), 3)
        row["f32_wer"] = round(asr.word_error_rate(text, asr.transcribe(r32.astype(np.float32))), 3)
        row["ok"] = row["ok"] and row["wer"] <= row["f32_wer"]
    return row


def compare_audio(
    r64: np.ndarray, r32: np.ndarray, got: np.ndarray, f0: np.ndarray
) -> dict[str, Any]:
    (got,) = _crop([r64], [got])
    return audio_verdict(r64, r32, got) | {"voiced_fraction": round(voiced_fraction(f0), 3)}


def audio_verdict(r64: np.ndarray, r32: np.ndarray, got: np.ndarray) -> dict[str, Any]:
    """The audio criterion: ``got`` against float64 kokoro, no worse than float32 kokoro."""
    r64, r32, got = (np.asarray(a, np.float64).reshape(-1) for a in (r64, r32, got))
    if got.size != r64.size:
        raise ValueError(
            f"audio length mismatch: float64 kokoro {r64.size} vs got {got.size} samples"
        )
    finite = bool(np.isfinite(got).all())
    snr = log_mel_snr(r64, got) if finite else float("-inf")
    mcd = mel_cepstral_distortion(r64, got) if finite else float("inf")
    snr32, mcd32 = log_mel_snr(r64, r32), mel_cepstral_distortion(r64, r32)
    need_snr, need_mcd = (
        min(snr32 - SNR_SLACK_DB, SNR_CAP_DB),
        max(MCD_FACTOR * mcd32, MCD_FLOOR_DB),
    )
    return {
        "log_mel_snr_db": round(snr, 2),
        "f32_log_mel_snr_db": round(snr32, 2),
        "min_snr_db": round(need_snr, 2),
        "mcd_db": round(mcd, 4),
        "f32_mcd_db": round(mcd32, 4),
        "max_mcd_db": round(need_mcd, 4),
        "finite": finite,
        "ok": finite and snr >= need_snr and mcd <= need_mcd,
    }


def _durations(raw: np.ndarray) -> np.ndarray:
    """kokoro's ``round(duration).clamp(min=1)`` (half to even, as torch.round)."""
    return np.maximum(np.round(raw), 1)


def compare_tensors(
    entry: Component, r64: list[np.ndarray], r32: list[np.ndarray], got: list[np.ndarray]
) -> dict[str, Any]:
    """The features criterion on every output; for durations, also as kokoro rounds them."""
    got = _crop(r64, got)
    err = max(rel_err(r, g) for r, g in zip(r64, got))
    err32 = max(rel_err(r, g) for r, g in zip(r64, r32))
    bound = max(REL_ERR_FACTOR * err32, REL_ERR_FLOOR)
    row: dict[str, Any] = {
        "rel_err": float(f"{err:.3e}"),
        "f32_rel_err": float(f"{err32:.3e}"),
        "max_rel_err": float(f"{bound:.3e}"),
        "ok": bool(err <= bound),
    }
    if entry.output is Output.DURATIONS:
        row |= durations_verdict(
            np.asarray(r64[0]).reshape(-1), _durations(np.asarray(got[0]).reshape(-1))
        )
        row["f32_durations_equal"] = durations_verdict(
            np.asarray(r64[0]).reshape(-1), _durations(np.asarray(r32[0]).reshape(-1))
        )["durations_equal"]
        row["ok"] = row["ok"] and row["durations_equal"]
    return row


def durations_verdict(raw64: np.ndarray, got: np.ndarray) -> dict[str, Any]:
    """Rounded durations ``got`` against float64 kokoro's unrounded ``raw64`` (after any speed
    division): equal, but on tokens within ``BOUNDARY`` of a rounding boundary (listed)."""
    raw64 = np.asarray(raw64, np.float64).reshape(-1)
    near = np.abs(raw64 - np.floor(raw64) - 0.5) < BOUNDARY
    differ = _durations(raw64) != np.asarray(got).reshape(-1)
    return {
        "durations_equal": not bool((differ & ~near).any()),
        "near_boundary": [int(i) for i in np.flatnonzero(near)],
    }


def check_cases(
    lib,
    component: str,
    cases: dict[Any, Case],
    precision: str = FP32,
    texts: dict[Any, str] | None = None,
) -> dict[Any, dict[str, Any]]:
    """Run ``lib`` (a callable on numpy inputs, e.g. ``CompiledComponent``) on each case; one
    metrics row per case, by the criterion of ``precision``; ``texts``: English cases' words."""
    texts = texts or {}
    return {
        key: judge(component, case, lib(*case["inputs"]), precision, texts.get(key))
        for key, case in cases.items()
    }


def check(
    lib,
    component: str,
    bucket: int,
    km,
    km64,
    cfg: dict[str, Any],
    pack: np.ndarray,
    lengths: list[int] | None = None,
) -> dict[int, dict[str, Any]]:
    """``check_cases`` on freshly computed ``reference_cases``. ``km``/``km64``: kokoro in float32
    and float64."""
    return check_cases(
        lib, component, reference_cases(component, bucket, km, km64, cfg, pack, lengths)
    )


def summary(
    component: str,
    bucket: int,
    target: str,
    rows: dict[int, dict[str, Any]],
    precision: str = FP32,
    languages: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The DVC metrics document of one library: every length, every language's sentence (keyed
    ``lang_<code>``), the worst case, and the verdict."""
    every = [*rows.values(), *(languages or {}).values()]
    doc: dict[str, Any] = {
        "component": component,
        "bucket": bucket,
        "target": target,
        "precision": precision,
        "criterion": criterion(component, precision),
        "lengths": {str(n): r for n, r in rows.items()},
        "ok": all(r["ok"] for r in every),
    }
    if languages is not None:
        doc["languages"] = languages
    if lookup(component).output is Output.AUDIO:
        doc["worst_log_mel_snr_db"] = min(r["log_mel_snr_db"] for r in every)
        doc["worst_mcd_db"] = max(r["mcd_db"] for r in every)
    else:
        doc["worst_rel_err"] = max(r["rel_err"] for r in every)
    return doc


def raise_if_failed(doc: dict[str, Any]) -> None:
    if doc["ok"]:
        return
    lines = [f"  length {n}: {r}" for n, r in doc["lengths"].items()]
    lines += [f"  {k}: {r}" for k, r in doc.get("languages", {}).items() if not r["ok"]]
    raise ValidationError(
        f"{doc['component']}-{doc['bucket']} ({doc['target']}) misses {doc['criterion']} on the "
        "unpadded input:\n"
        + "\n".join(lines)
        + "\nThe library is not kokoro's computation on padded "
        "input; fix the component wrapper or its lowering."
    )
