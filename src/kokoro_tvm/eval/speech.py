"""Speech properties of a waveform, measured without listening: is it voiced where it is loud,
does its pitch follow the F0 the model predicted, and is it quiet where the text pauses.

Random weights give noise that fails all three; trained weights give speech that passes them
(benchmarks/speech_check.py runs these on a WAV the CLI wrote).
"""

from __future__ import annotations

import numpy as np

from ..spec import SAMPLE_RATE

PUNCTUATION = set(",.;:!?—…")


def pitch_track(
    x: np.ndarray,
    sr: int = SAMPLE_RATE,
    win: float = 0.04,
    hop: float = 0.01,
    fmin: float = 60.0,
    fmax: float = 500.0,
    threshold: float = 0.5,
):
    """Per frame: centre time (s), loudness (dB re the loudest frame), voiced (normalised
    autocorrelation peak above ``threshold`` in the ``fmin..fmax`` lag range), and pitch (Hz)."""
    x = np.asarray(x, np.float64).reshape(-1)
    n, h = int(win * sr), int(hop * sr)
    lo, hi = int(sr / fmax), int(sr / fmin)
    starts = range(0, max(len(x) - n, 0), h)
    rms = np.array([np.sqrt(np.mean(x[i : i + n] ** 2)) + 1e-12 for i in starts])
    times, voiced, f0 = [], [], []
    for i in starts:
        f = (x[i : i + n] - x[i : i + n].mean()) * np.hanning(n)
        ac = np.correlate(f, f, "full")[n - 1 :]
        ac = ac / (ac[0] + 1e-12)
        lag = lo + int(np.argmax(ac[lo:hi]))
        times.append((i + n / 2) / sr)
        voiced.append(ac[lag] > threshold)
        f0.append(sr / lag)
    db = 20 * np.log10(rms / rms.max()) if rms.size else rms
    return np.array(times), db, np.array(voiced, bool), np.array(f0)


def speech_stats(
    audio: np.ndarray, f0_pred: np.ndarray, f0_hop_s: float, loud_db: float = -30.0
) -> dict:
    """Voiced share of loud frames, and the correlation of the pitch track with the predicted F0
    (``f0_pred`` sampled every ``f0_hop_s``) where both are voiced; the same correlation against the
    reversed prediction is the control (it must be far lower)."""
    t, db, voiced, f0 = pitch_track(audio)
    loud = db > loud_db
    grid = np.arange(len(f0_pred)) * f0_hop_s

    def corr(pred: np.ndarray) -> float:
        p = np.interp(t, grid, pred)
        both = loud & voiced & (p > 50)
        return float(np.corrcoef(f0[both], p[both])[0, 1]) if both.sum() > 3 else float("nan")

    return {
        "loud_frames": int(loud.sum()),
        "voiced_fraction_of_loud": float(voiced[loud].mean()) if loud.any() else 0.0,
        "pitch_f0_correlation": corr(np.asarray(f0_pred)),
        "pitch_reversed_f0_correlation": corr(np.asarray(f0_pred)[::-1]),
        "median_pitch_hz": float(np.median(f0[loud & voiced]))
        if (loud & voiced).any()
        else float("nan"),
    }


def pause_contrast(
    audio: np.ndarray, phonemes: str, durations: np.ndarray, samples_per_frame: int
) -> dict:
    """Loudness (dB) of the punctuation tokens' spans against the median word token's.

    ``durations`` are the frames of ``[BOS, *phonemes, EOS]``; a pause at punctuation shows as
    spans far quieter than speech (kokoro renders ``,`` and ``.`` as short silences).
    """
    x = np.asarray(audio, np.float64).reshape(-1)
    edges = np.concatenate([[0], np.cumsum(durations)]) * samples_per_frame

    def level(i: int) -> float:
        seg = x[edges[i] : edges[i + 1]]
        return float(10 * np.log10(np.mean(seg**2) + 1e-12)) if seg.size else float("nan")

    tokens = list(phonemes)
    punct = [i + 1 for i, c in enumerate(tokens) if c in PUNCTUATION]
    words = [i + 1 for i, c in enumerate(tokens) if c not in PUNCTUATION and c != " "]
    speech = float(np.nanmedian([level(i) for i in words])) if words else float("nan")
    pauses = [level(i) - speech for i in punct]
    return {
        "punctuation_tokens": len(punct),
        "speech_level_db": speech,
        "pause_minus_speech_db": [round(p, 1) for p in pauses],
        "median_pause_minus_speech_db": float(np.nanmedian(pauses)) if pauses else float("nan"),
    }
