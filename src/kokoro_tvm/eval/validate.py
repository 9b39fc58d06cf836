"""Hold every compiled library to kokoro run in float64, on the *unpadded* input, at several
valid lengths inside its bucket.

A bucket is only useful if padding is invisible: a library built for 64 tokens must give, at 37
valid tokens, what kokoro gives on those 37 tokens alone. And float32 is not the ground truth:
two correct float32 builds of the trained model differ by ~25 dB log-mel (SineGen's phase
accumulates in float32; the ``atan2`` of near-zero STFT bins is arbitrary). So each length runs
three times on the same inputs and draws: the library, float32 kokoro and float64 kokoro, and a
library passes when its distance to float64 is no worse than float32 kokoro's own:

- decoder: log-mel SNR against float64 >= min(float32's SNR - 3 dB, 60 dB), and mel-cepstral
  distortion <= max(1.5 x float32's MCD, 0.5 dB); the audio is finite;
- token components: relative error against float64 <= max(4 x float32's error, 1e-5) (a compiled
  build accumulates in another order); durations, rounded as kokoro rounds them, equal float64
  kokoro's except on tokens whose unrounded duration lies within 1e-4 of a rounding boundary
  (reported as ``near_boundary``).

Inputs are realistic: token ids of English text (``samples``), the validation voice's row for
that length, and, for the decoder, ``en``/``asr`` aligned from float64 kokoro's own token side.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import KokoroTVMError
from ..spec import (
    HARMONICS,
    MIN_LENGTH,
    check_component,
    input_specs,
    length_axes,
    samples_per_frame,
)
from . import samples
from .metrics import log_mel_snr, mel_cepstral_distortion, rel_err, voiced_fraction
from .reference import f0_curve, reference

SNR_SLACK_DB = 3.0
SNR_CAP_DB = 60.0
MCD_FACTOR, MCD_FLOOR_DB = 1.5, 0.5
REL_ERR_FACTOR, REL_ERR_FLOOR = 4.0, 1e-5
BOUNDARY = 1e-4


class ValidationError(KokoroTVMError, RuntimeError):
    """A library missed a threshold; the message carries the whole table."""


def lengths_for(component: str, bucket: int, emulated: bool = False) -> list[int]:
    """The shortest valid length, just above an eighth and a half of the bucket (just above the
    next smaller buckets of a doubling ladder), and full: the edges of the range a bucket serves,
    and a short utterance, which a lone bounded bucket serves too.

    They depend on the bucket alone, so adding a bucket never reruns another bucket's validation.
    ``emulated`` (a device under qemu-user, ``EMULATED_LENGTHS``): the first two only.
    """
    lo = MIN_LENGTH[check_component(component)]
    lengths = sorted({max(lo, n) for n in (lo, bucket // 8 + 1, bucket // 2 + 1, bucket)})
    return lengths[:EMULATED_LENGTHS] if emulated else lengths


#: Lengths validated on an emulated device: the shortest and ~B/8. qemu-user runs the kernels
#: tens of times slower than the CPU does (README "Targets"), and its numerics are the emulated
#: CPU's own, so two lengths check the library without costing the repro the full-bucket calls.
EMULATED_LENGTHS = 2


def token_ids(vocab: dict[str, int], tokens: int, start: int = 0) -> tuple[torch.Tensor, int]:
    """``[0, ids of English phonemes..., 0]`` with ``tokens`` entries, and how many phonemes."""
    inner = max(tokens - 2, 0)
    text = samples.phonemes(2 * inner + 16, start)
    ids = [vocab[c] for c in text if c in vocab][:inner]
    full = [0, *ids, 0] if tokens >= 2 else [0]
    return torch.tensor([full], dtype=torch.int64), len(ids)


def style_row(pack: np.ndarray, n_phonemes: int) -> torch.Tensor:
    """kokoro's ``pack[len(ps) - 1]`` ([1, W])."""
    return torch.from_numpy(
        np.asarray(pack[min(max(n_phonemes, 1), len(pack)) - 1], np.float32)
    ).reshape(1, -1)


def _pad(x: torch.Tensor, size: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, size - x.shape[-1]))


def token_inputs(component: str, bucket: int, length: int, cfg: dict[str, Any], pack: np.ndarray):
    ids, n_phonemes = token_ids(cfg["vocab"], length)
    inputs = [_pad(ids, bucket), torch.tensor([length])]
    if component == "duration":
        inputs.append(style_row(pack, n_phonemes)[:, cfg["style_dim"] :])
    return tuple(inputs)


def frame_durations(km64, ids: torch.Tensor, style: torch.Tensor, frames: int) -> torch.Tensor:
    """Float64 kokoro's rounded durations of ``ids``, cut or stretched to sum to ``frames``."""
    dur = reference("duration", km64, (ids, None, style), ids.shape[1], {})[0].reshape(-1)
    dur = torch.round(dur).clamp(min=1).long()
    total = torch.cumsum(dur, 0)
    if total[-1] >= frames:  # keep the tokens that fill ``frames``, trim the last one
        keep = int(torch.searchsorted(total, torch.tensor(frames))) + 1
        dur = dur[:keep].clone()
        dur[-1] -= int(dur.sum()) - frames
    else:  # stretch every token alike (a slower speaker), the remainder on the longest
        dur = torch.clamp(torch.floor(dur.double() * frames / float(total[-1])), min=1).long()
        dur[torch.argmax(dur)] += frames - int(dur.sum())
    return dur


def decoder_inputs(
    bucket: int, length: int, cfg: dict[str, Any], pack: np.ndarray, km64, seed: int
):
    """en/asr of ``length`` frames from float64 kokoro's token side on English text, rounded to
    float32 (all three runs get the same values), the voice row, and seeded draws."""
    spf, sty = samples_per_frame(cfg), cfg["style_dim"]
    tokens = min(510, max(3, length // 2))
    ids, n_phonemes = token_ids(cfg["vocab"], tokens, start=seed)
    ref_s = style_row(pack, n_phonemes)
    dur = frame_durations(km64, ids, ref_s[:, sty:], length)
    ids = ids[:, : dur.numel()]
    _, d = reference("duration", km64, (ids, None, ref_s[:, sty:]), ids.shape[1], {})
    (t_en,) = reference("text_encoder", km64, (ids, None), ids.shape[1], {})
    aln = torch.zeros(ids.shape[1], length, dtype=torch.float64)
    aln[torch.repeat_interleave(torch.arange(ids.shape[1]), dur), torch.arange(length)] = 1
    en = (d.transpose(-1, -2) @ aln).float()
    asr = (t_en @ aln).float()
    g = torch.Generator().manual_seed(seed)
    rand_ini = torch.rand((1, HARMONICS), generator=g)
    noise = torch.zeros(1, bucket * spf, HARMONICS)
    noise[:, : length * spf] = torch.randn((1, length * spf, HARMONICS), generator=g)
    return (_pad(en, bucket), _pad(asr, bucket), torch.tensor([length]), ref_s, rand_ini, noise)


def inputs_for(
    component: str,
    bucket: int,
    length: int,
    cfg: dict[str, Any],
    pack: np.ndarray,
    km64,
    seed: int = 0,
) -> tuple[torch.Tensor, ...]:
    """Bucket-sized inputs with ``length`` valid positions, matching ``input_specs``."""
    inputs = (
        decoder_inputs(bucket, length, cfg, pack, km64, seed + length)
        if component == "decoder"
        else token_inputs(component, bucket, length, cfg, pack)
    )
    for spec, x in zip(input_specs(component, bucket, cfg), inputs):
        assert list(x.shape) == list(spec.shape), (spec.name, x.shape, spec.shape)
    return inputs


def _crop(ref: list[np.ndarray], got: list[np.ndarray]) -> list[np.ndarray]:
    return [g[tuple(slice(0, n) for n in r.shape)] for r, g in zip(ref, got)]


def compare_decoder(
    r64: np.ndarray, r32: np.ndarray, got: np.ndarray, f0: np.ndarray
) -> dict[str, Any]:
    (got,) = _crop([r64], [got])
    return audio_verdict(r64, r32, got) | {"voiced_fraction": round(voiced_fraction(f0), 3)}


def audio_verdict(r64: np.ndarray, r32: np.ndarray, got: np.ndarray) -> dict[str, Any]:
    """The decoder criterion: ``got`` against float64 kokoro, no worse than float32 kokoro."""
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


def compare_tokens(
    component: str, r64: list[np.ndarray], r32: list[np.ndarray], got: list[np.ndarray]
) -> dict[str, Any]:
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
    if component == "duration":
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


Case = dict[str, list[np.ndarray]]  # inputs (bucket-sized), r64, r32, f0 (decoder): one length


def reference_cases(
    component: str,
    bucket: int,
    km,
    km64,
    cfg: dict[str, Any],
    pack: np.ndarray,
    lengths: list[int] | None = None,
) -> dict[int, Case]:
    """The inputs of each valid length and kokoro's outputs on them, in float64 and float32:
    what every target's library is held to (the ``reference`` stage computes them once)."""
    cases = {}
    for length in lengths or lengths_for(component, bucket):
        inputs = inputs_for(component, bucket, length, cfg, pack, km64)
        case = {
            "inputs": [x.numpy() for x in inputs],
            "r64": [r.numpy() for r in reference(component, km64, inputs, length, cfg)],
            "r32": [r.numpy() for r in reference(component, km, inputs, length, cfg)],
        }
        if component == "decoder":
            case["f0"] = [f0_curve(km64, inputs[0], inputs[3], length).numpy()]
        cases[length] = case
    return cases


def check_cases(lib, component: str, cases: dict[int, Case]) -> dict[int, dict[str, Any]]:
    """Run ``lib`` (a callable on numpy inputs, e.g. ``CompiledComponent``) on each case; one
    metrics row per length."""
    rows = {}
    for length, case in cases.items():
        got = lib(*case["inputs"])
        if component == "decoder":
            rows[length] = compare_decoder(case["r64"][0], case["r32"][0], got[0], case["f0"][0])
        else:
            rows[length] = compare_tokens(component, case["r64"], case["r32"], got)
    return rows


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


def cases_to_arrays(
    component: str, cases: dict[int, Case], cfg: dict[str, Any]
) -> dict[str, np.ndarray]:
    """Flat arrays for one ``.npz``: inputs cut to their valid length (a decoder bucket's zero
    padding would be most of the file), outputs as they are."""
    axes = length_axes(component, cfg)
    names = [s.name for s in input_specs(component, MIN_LENGTH[component], cfg)]
    out = {}
    for n, case in cases.items():
        for name, x in zip(names, case["inputs"]):
            if name in axes:
                axis, scale = axes[name]
                x = x[(slice(None),) * axis + (slice(0, scale * n),)]
            out[f"{n}__in__{name}"] = x
        for key in ("r64", "r32", "f0"):
            for i, x in enumerate(case.get(key, [])):
                out[f"{n}__{key}__{i}"] = x
    return out


def cases_from_arrays(
    component: str, bucket: int, arrays: dict[str, np.ndarray], cfg: dict[str, Any]
) -> dict[int, Case]:
    """``cases_to_arrays`` undone: inputs zero-padded back to the bucket's signature."""
    specs = input_specs(component, bucket, cfg)
    cases: dict[int, Case] = {}
    for n in sorted({int(k.split("__", 1)[0]) for k in arrays}):
        case: Case = {"inputs": []}
        for spec in specs:
            x = arrays[f"{n}__in__{spec.name}"]
            case["inputs"].append(
                np.pad(x, [(0, want - have) for have, want in zip(x.shape, spec.shape)])
            )
        for key in ("r64", "r32", "f0"):
            parts = sorted(
                (int(k.rsplit("__", 1)[1]), k) for k in arrays if k.startswith(f"{n}__{key}__")
            )
            if parts:
                case[key] = [arrays[k] for _, k in parts]
        cases[n] = case
    return cases


def summary(
    component: str, bucket: int, target: str, rows: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    """The DVC metrics document of one library: every length, the worst case, and the verdict."""
    doc: dict[str, Any] = {
        "component": component,
        "bucket": bucket,
        "target": target,
        "criterion": CRITERION["decoder" if component == "decoder" else "tokens"],
        "lengths": {str(n): r for n, r in rows.items()},
        "ok": all(r["ok"] for r in rows.values()),
    }
    if component == "decoder":
        doc["worst_log_mel_snr_db"] = min(r["log_mel_snr_db"] for r in rows.values())
        doc["worst_mcd_db"] = max(r["mcd_db"] for r in rows.values())
    else:
        doc["worst_rel_err"] = max(r["rel_err"] for r in rows.values())
    return doc


CRITERION = {
    "decoder": f"vs float64 kokoro: log-mel SNR >= min(float32 SNR - {SNR_SLACK_DB}, {SNR_CAP_DB}) dB and "
    f"MCD <= max({MCD_FACTOR} x float32 MCD, {MCD_FLOOR_DB}) dB",
    "tokens": f"vs float64 kokoro: relative error <= max({REL_ERR_FACTOR} x float32's, {REL_ERR_FLOOR}); durations "
    f"equal but within {BOUNDARY} of a rounding boundary",
}


def raise_if_failed(doc: dict[str, Any]) -> None:
    if doc["ok"]:
        return
    lines = [f"  length {n}: {r}" for n, r in doc["lengths"].items()]
    raise ValidationError(
        f"{doc['component']}-{doc['bucket']} ({doc['target']}) misses {doc['criterion']} on the unpadded "
        "input:\n"
        + "\n".join(lines)
        + "\nThe library is not kokoro's computation on padded input; fix the component wrapper or its lowering."
    )
