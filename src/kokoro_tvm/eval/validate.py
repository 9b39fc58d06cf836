"""Hold every compiled library to eager kokoro on the *unpadded* input, at several valid lengths.

A bucket is only useful if padding is invisible: a library built for 64 tokens must give, at 37
valid tokens, what kokoro gives on those 37 tokens alone. ``check`` runs a library at lengths
inside its bucket and compares each with ``reference`` (kokoro's own modules, same weights and
the same noise draws).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import KokoroTVMError
from ..model.inputs import example_inputs
from ..spec import MIN_LENGTH, check_component
from .metrics import log_mel_snr, rel_err
from .reference import reference

TEXT_REL_ERR = 1e-4  # durations, d, t_en over the valid region
AUDIO_SNR_DB = 40.0  # log-mel SNR of the decoder's audio; never waveform L2 (atan2 flips by 2*pi)


class ValidationError(KokoroTVMError, RuntimeError):
    """A library missed a threshold; the message carries the whole table."""


def lengths_for(component: str, bucket: int) -> list[int]:
    """The shortest valid length, just above half the bucket (just above the next smaller bucket
    when buckets double), three quarters, and full.

    They depend on the bucket alone, so adding a bucket never reruns another bucket's validation.
    """
    lo = MIN_LENGTH[check_component(component)]
    return sorted({max(lo, n) for n in (lo, bucket // 2 + 1, (3 * bucket) // 4, bucket)})


def compare(component: str, ref: list[np.ndarray], got: list[np.ndarray]) -> dict[str, Any]:
    """Metrics of ``got`` (bucket-sized) against ``ref`` (unpadded), over the valid region."""
    got = [g[tuple(slice(0, n) for n in r.shape)] for r, g in zip(ref, got)]
    if component == "decoder":
        finite = bool(np.isfinite(got[0]).all())
        snr = log_mel_snr(ref[0], got[0]) if finite else float("-inf")
        return {"log_mel_snr_db": round(snr, 2), "finite": finite, "ok": finite and snr >= AUDIO_SNR_DB}
    err = max(rel_err(r, g) for r, g in zip(ref, got))
    return {"rel_err": float(f"{err:.3e}"), "ok": bool(err <= TEXT_REL_ERR)}


def check(lib, component: str, bucket: int, km, cfg: dict[str, Any],
          lengths: list[int] | None = None) -> dict[int, dict[str, Any]]:
    """Run ``lib`` (a ``CompiledComponent``) at each valid length; one metrics row per length."""
    rows = {}
    for length in lengths or lengths_for(component, bucket):
        inputs = example_inputs(component, bucket, cfg, length=length, seed=length)
        got = lib(*[x.numpy() for x in inputs])
        ref = [r.numpy() for r in reference(component, km, inputs, length, cfg)]
        rows[length] = compare(component, ref, got)
    return rows


def summary(component: str, bucket: int, target: str, rows: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The DVC metrics document of one library: every length, the worst case, and the verdict."""
    key = "log_mel_snr_db" if component == "decoder" else "rel_err"
    values = [r[key] for r in rows.values()]
    worst = min(values) if component == "decoder" else max(values)
    return {"component": component, "bucket": bucket, "target": target,
            "threshold": {key: AUDIO_SNR_DB if component == "decoder" else TEXT_REL_ERR},
            "lengths": {str(n): r for n, r in rows.items()}, f"worst_{key}": worst,
            "ok": all(r["ok"] for r in rows.values())}


def raise_if_failed(doc: dict[str, Any]) -> None:
    if doc["ok"]:
        return
    lines = [f"  length {n}: {r}" for n, r in doc["lengths"].items()]
    raise ValidationError(
        f"{doc['component']}-{doc['bucket']} ({doc['target']}) misses {doc['threshold']} against eager "
        "kokoro on the unpadded input:\n" + "\n".join(lines)
        + "\nThe library is not exact on padded input; fix the component wrapper or its lowering.")
