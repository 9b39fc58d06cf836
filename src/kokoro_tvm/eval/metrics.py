"""Parity metrics. Audio is compared as log-mel spectra, never waveform L2: the atan2 of
near-zero STFT bins legitimately flips by 2*pi between correct implementations."""

from __future__ import annotations

import numpy as np

from ..spec import SAMPLE_RATE


def rel_err(ref: np.ndarray, got: np.ndarray) -> float:
    """max |ref - got| / max |ref|: one number per tensor, scale-free."""
    ref = np.asarray(ref, np.float64)
    got = np.asarray(got, np.float64)
    if ref.shape != got.shape:
        raise ValueError(f"shape mismatch: reference {ref.shape} vs got {got.shape}")
    return float(np.abs(ref - got).max() / max(np.abs(ref).max(), 1e-30))


def _mel_filters(n_fft: int, n_mels: int, sr: int) -> np.ndarray:
    def hz_to_mel(f):
        return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)

    mels = np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = np.fft.rfftfreq(n_fft, 1.0 / sr)
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (bins[None] - lo) / (mid - lo)
    down = (hi - bins[None]) / (hi - mid)
    return np.maximum(0.0, np.minimum(up, down))


def log_mel(audio: np.ndarray, n_fft: int = 1024, hop: int = 256, n_mels: int = 80) -> np.ndarray:
    x = np.asarray(audio, np.float64).reshape(-1)
    if x.size < n_fft:
        x = np.pad(x, (0, n_fft - x.size))
    frames = np.lib.stride_tricks.sliding_window_view(x, n_fft)[::hop] * np.hanning(n_fft)
    power = np.abs(np.fft.rfft(frames, axis=-1)) ** 2
    return np.log(power @ _mel_filters(n_fft, n_mels, SAMPLE_RATE).T + 1e-5)


def log_mel_snr(ref: np.ndarray, got: np.ndarray) -> float:
    """SNR in dB of the log-mel spectrogram of ``got`` against ``ref`` (same length)."""
    a, b = log_mel(ref), log_mel(got)
    if a.shape != b.shape:
        raise ValueError(f"audio length mismatch: reference {np.size(ref)} vs got {np.size(got)} samples")
    noise = np.sum((a - b) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(a**2) / noise))
