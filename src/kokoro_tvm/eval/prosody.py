"""What a cut costs a listener: one rendition of a sentence against another, by ear-like measures.

kokoro's prosody is per utterance (every utterance ends as a sentence ends: final lengthening,
falling pitch), so a stream cut where kokoro would not cut is heard as a different melody,
pauses where none belong and a slower pace, and words lost at the seams. Each of those is a
number here, between a reference (kokoro's whole sentence) and another rendition:

* ``f0_rmse_cents``: the pitch contours' RMS difference in cents over frames voiced in both,
  after aligning the two recordings by dynamic time warping on their mel-cepstral envelopes (a
  cut shifts everything after it in time; alignment keeps that shift out of the pitch error, and
  an envelope, unlike a spectrum, does not match frames by their pitch);
* ``inner_pauses``: silences of at least ``MIN_PAUSE`` seconds between the first and the last
  sound (kokoro's commas give some; a cut inside a phrase adds more);
* ``speech_seconds``: the first sound to the last (leading and trailing silence is a wait, not
  part of the sentence's pace);
* word error rate of an offline recognizer against the text (``eval.asr``).

Pitch is YIN (de Cheveigné and Kawahara, 2002): the cumulative-mean-normalized difference
function, its first dip under a threshold, refined by parabolic interpolation. Octave errors are
what makes a cents RMSE meaningless, and YIN's normalization is what keeps them rare.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..spec import SAMPLE_RATE
from .metrics import log_mel

HOP_S = 0.01  # pitch frames every 10 ms
FMIN, FMAX = 60.0, 500.0  # the range of the 54 voices, with room
YIN_THRESHOLD = 0.15
SILENCE_DB = -40.0  # a frame this far below the loudest frame's level is silent
MIN_PAUSE = 0.12  # seconds of silence heard as a pause (a comma's pause is longer)


def frame_levels(audio: np.ndarray, sr: int = SAMPLE_RATE, win_s: float = 0.02) -> np.ndarray:
    """Each ``HOP_S`` frame's RMS level in dB relative to the loudest frame."""
    x = np.asarray(audio, np.float64).reshape(-1)
    hop, win = int(HOP_S * sr), int(win_s * sr)
    if x.size < win:
        x = np.pad(x, (0, win - x.size))
    frames = np.lib.stride_tricks.sliding_window_view(x, win)[::hop]
    rms = np.sqrt(np.mean(frames**2, axis=-1)) + 1e-12
    return 20 * np.log10(rms / rms.max())


def f0_track(audio: np.ndarray, sr: int = SAMPLE_RATE) -> np.ndarray:
    """F0 in Hz every ``HOP_S`` seconds (YIN); NaN where a frame is unvoiced or silent."""
    x = np.asarray(audio, np.float64).reshape(-1)
    hop = int(HOP_S * sr)
    tau_min, tau_max = int(sr / FMAX), int(sr / FMIN)
    win = tau_max  # the integration window: one period of the lowest pitch
    need = win + tau_max
    n = max(0, (x.size - need) // hop + 1)
    if n == 0:
        return np.full(0, np.nan)
    frames = np.lib.stride_tricks.sliding_window_view(x, need)[::hop][:n]
    # d(tau) = sum_j (x_j - x_{j+tau})^2 over j < win, by energies and one FFT correlation
    head = frames[:, :win]
    size = 1 << int(np.ceil(np.log2(need + win)))
    corr = np.fft.irfft(np.fft.rfft(frames, size) * np.conj(np.fft.rfft(head, size)), size)[
        :, : tau_max + 1
    ]
    sq = np.concatenate([np.zeros((n, 1)), np.cumsum(frames**2, axis=1)], axis=1)
    taus = np.arange(tau_max + 1)
    energy_head = sq[:, win][:, None]
    energy_shift = sq[:, taus + win] - sq[:, taus]
    d = energy_head + energy_shift - 2 * corr
    d[:, 0] = 0.0
    cmnd = np.ones_like(d)
    cum = np.cumsum(d[:, 1:], axis=1)
    cmnd[:, 1:] = d[:, 1:] * taus[1:] / np.maximum(cum, 1e-12)
    f0 = np.full(n, np.nan)
    levels = frame_levels(x, sr)[:n]
    for i in range(n):
        if levels[i] < SILENCE_DB:
            continue
        row = cmnd[i]
        below = np.flatnonzero(row[tau_min:tau_max] < YIN_THRESHOLD)
        if not below.size:
            continue
        t = tau_min + int(below[0])
        while t + 1 < tau_max and row[t + 1] < row[t]:  # down to the dip's bottom
            t += 1
        a, b, c = row[t - 1], row[t], row[t + 1] if t + 1 <= tau_max else row[t]
        shift = 0.5 * (a - c) / (a - 2 * b + c) if (a - 2 * b + c) > 0 else 0.0
        f0[i] = sr / (t + float(np.clip(shift, -0.5, 0.5)))
    return f0


def dtw_path(a: np.ndarray, b: np.ndarray, penalty: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """The lowest-cost monotone alignment of feature rows ``a`` [N, D] and ``b`` [M, D]
    (Euclidean distance, steps (1,0), (0,1), (1,1)): matched row indices of each.

    A step off the diagonal costs ``penalty`` times the median frame distance more: two
    renditions of one text keep pace but where one pauses, so the path stays on the diagonal
    unless a stretch of one has no counterpart, and never wanders to match frames by detail."""
    cost = np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))
    extra = penalty * float(np.median(cost))
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        # the diagonal and vertical steps come from the row above, in one vector operation;
        # the horizontal step is a running minimum along the row
        row = cost[i - 1] + np.minimum(acc[i - 1, :-1], acc[i - 1, 1:] + extra)
        out = acc[i]
        for j in range(1, m + 1):
            v = row[j - 1]
            left = out[j - 1] + cost[i - 1, j - 1] + extra
            out[j] = v if v < left else left
    i, j = n, m
    path = [(i - 1, j - 1)]
    while i > 1 or j > 1:
        c = cost[i - 1, j - 1]
        steps = (
            (acc[i - 1, j - 1] + c, i - 1, j - 1),
            (acc[i - 1, j] + c + extra, i - 1, j),
            (acc[i, j - 1] + c + extra, i, j - 1),
        )
        _, i, j = min(steps, key=lambda s: s[0])
        path.append((i - 1, j - 1))
    ia, ib = np.array(path[::-1]).T
    return ia, ib


def _speech_frames(audio: np.ndarray) -> slice:
    """The ``HOP_S`` frames from the first to the last sound."""
    loud = np.flatnonzero(frame_levels(audio) > SILENCE_DB)
    return slice(int(loud[0]), int(loud[-1]) + 1) if loud.size else slice(0, 0)


def _envelope(x: np.ndarray, hop: int, order: int = 12) -> np.ndarray:
    """Mel-cepstral coefficients 1..``order`` every ``hop`` samples: the spectral envelope
    (what is said), not its harmonics (the pitch), so aligning on them leaves pitch to compare."""
    logm = log_mel(x, n_fft=1024, hop=hop, n_mels=40)
    n = logm.shape[-1]
    k = np.arange(1, order + 1)[:, None]
    dct = np.cos(np.pi * k * (2 * np.arange(n)[None, :] + 1) / (2 * n))
    return logm @ dct.T


def f0_rmse_cents(ref: np.ndarray, got: np.ndarray) -> float:
    """RMS pitch difference in cents over frames voiced in both, the recordings aligned by DTW
    on their spectral envelopes (each cut to its speech, so leading silence aligns nothing)."""
    f0s, mels = [], []
    for audio in (ref, got):
        span = _speech_frames(audio)
        f0s.append(f0_track(audio)[span])
        hop = int(HOP_S * SAMPLE_RATE)
        x = np.asarray(audio, np.float64).reshape(-1)[span.start * hop : span.stop * hop]
        mels.append(_envelope(x, hop))
    n = [min(len(f), len(m)) for f, m in zip(f0s, mels)]
    ia, ib = dtw_path(mels[0][: n[0]], mels[1][: n[1]])
    a, b = _steady(f0s[0][: n[0]])[ia], _steady(f0s[1][: n[1]])[ib]
    both = np.isfinite(a) & np.isfinite(b)
    if both.sum() < 5:
        return float("nan")
    cents = 1200 * np.log2(b[both] / a[both])
    # a tracker's octave error is not a melody: no cut moves the pitch by a whole octave
    cents -= 1200 * np.round(cents / 1200)
    return float(np.sqrt(np.mean(cents**2)))


def _steady(f0: np.ndarray, edge: int = 2) -> np.ndarray:
    """``f0`` median-filtered over 5 frames, without the ``edge`` frames at each end of a voiced
    run (where voicing starts and stops, a frame's pitch is the tracker's guess)."""
    out = np.full_like(f0, np.nan)
    voiced = np.isfinite(f0)
    k = 0
    while k < f0.size:
        if not voiced[k]:
            k += 1
            continue
        end = k
        while end < f0.size and voiced[end]:
            end += 1
        run = f0[k:end]
        if run.size > 2 * edge:
            pad = np.pad(run, 2, mode="edge")
            smooth = np.median(np.lib.stride_tricks.sliding_window_view(pad, 5), axis=-1)
            out[k + edge : end - edge] = smooth[edge : run.size - edge]
        k = end
    return out


def inner_pauses(audio: np.ndarray, min_pause: float = MIN_PAUSE) -> list[float]:
    """The lengths (s) of silences of at least ``min_pause`` between the first and last sound."""
    levels = frame_levels(audio)
    span = _speech_frames(audio)
    silent = levels[span] <= SILENCE_DB
    out, run = [], 0
    for s in silent:
        if s:
            run += 1
            continue
        if run * HOP_S >= min_pause:
            out.append(run * HOP_S)
        run = 0
    return out


def speech_seconds(audio: np.ndarray) -> float:
    """From the first sound to the last: the sentence's pace, without its leading silence."""
    span = _speech_frames(audio)
    return (span.stop - span.start) * HOP_S


@dataclass(frozen=True)
class CutCost:
    """One rendition of a sentence against kokoro's whole-sentence rendition."""

    f0_rmse_cents: float
    pauses: int  # inner pauses of this rendition
    reference_pauses: int  # of the reference
    duration_ratio: float  # speech seconds over the reference's
    wer: float  # of this rendition against the text (nan without a recognizer)
    reference_wer: float

    @property
    def extra_pauses(self) -> int:
        return self.pauses - self.reference_pauses

    @property
    def extra_wer(self) -> float:
        return self.wer - self.reference_wer


def cut_cost(
    ref: np.ndarray, got: np.ndarray, wer: float = float("nan"), ref_wer: float = float("nan")
) -> CutCost:
    """``got`` against ``ref`` (both float audio at ``SAMPLE_RATE``)."""
    return CutCost(
        f0_rmse_cents=f0_rmse_cents(ref, got),
        pauses=len(inner_pauses(got)),
        reference_pauses=len(inner_pauses(ref)),
        duration_ratio=speech_seconds(got) / max(speech_seconds(ref), 1e-9),
        wer=wer,
        reference_wer=ref_wer,
    )


@dataclass(frozen=True)
class CutBounds:
    """How far a rendition may stray from kokoro's whole sentence, on average over sentences,
    and still be heard as kokoro's: pitch within a quarter tone's fraction, no extra pause in
    most sentences, the pace within a tenth, the words as recognizable."""

    f0_rmse_cents: float = 50.0
    extra_pauses: float = 0.3  # per sentence
    duration: float = 0.10  # |ratio - 1|
    extra_wer: float = 0.05


BOUNDS = CutBounds()


def judge(costs: list[CutCost], bounds: CutBounds = BOUNDS) -> dict[str, float | bool]:
    """The means over sentences, and whether each is within ``bounds``; ``pass``: all are."""
    f0 = float(np.nanmean([c.f0_rmse_cents for c in costs]))
    pauses = float(np.mean([c.extra_pauses for c in costs]))
    duration = float(np.mean([c.duration_ratio for c in costs]))
    wers = [c.extra_wer for c in costs if np.isfinite(c.extra_wer)]
    wer = float(np.mean(wers)) if wers else float("nan")
    out: dict[str, float | bool] = {
        "f0_rmse_cents": f0,
        "extra_pauses_per_sentence": pauses,
        "duration_ratio": duration,
        "extra_wer": wer,
        "f0_ok": f0 <= bounds.f0_rmse_cents,
        "pauses_ok": pauses <= bounds.extra_pauses,
        "duration_ok": abs(duration - 1) <= bounds.duration,
        "wer_ok": (not wers) or wer <= bounds.extra_wer,
    }
    out["pass"] = all(out[k] for k in ("f0_ok", "pauses_ok", "duration_ok", "wer_ok"))
    return out
