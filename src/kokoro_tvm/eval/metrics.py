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
        raise ValueError(
            f"audio length mismatch: reference {np.size(ref)} vs got {np.size(got)} samples"
        )
    noise = np.sum((a - b) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(a**2) / noise))


def mel_cepstrum(audio: np.ndarray, order: int = 24) -> np.ndarray:
    """Mel-cepstral coefficients 1..order per frame: the orthonormal DCT-II of the log mel
    amplitude spectrum (c0, the frame energy, is left out as MCD conventionally does)."""
    log_amp = 0.5 * log_mel(audio)  # log mel power -> log mel amplitude
    n = log_amp.shape[-1]
    k = np.arange(order + 1)[:, None]
    dct = np.sqrt(2.0 / n) * np.cos(np.pi * k * (2 * np.arange(n)[None, :] + 1) / (2 * n))
    return (log_amp @ dct.T)[:, 1:]


def mel_cepstral_distortion(ref: np.ndarray, got: np.ndarray) -> float:
    """Mean MCD in dB, ``10 / ln(10) * sqrt(2 * sum_d (c_d - c'_d)^2)``, over aligned frames."""
    a, b = mel_cepstrum(ref), mel_cepstrum(got)
    if a.shape != b.shape:
        raise ValueError(
            f"audio length mismatch: reference {np.size(ref)} vs got {np.size(got)} samples"
        )
    return float(np.mean(10.0 / np.log(10.0) * np.sqrt(2.0 * np.sum((a - b) ** 2, axis=-1))))


def voiced_fraction(f0: np.ndarray, threshold: float = 10.0) -> float:
    """Share of F0 samples above kokoro's voiced threshold (SineGen: 10 Hz)."""
    f0 = np.asarray(f0).reshape(-1)
    return float(np.mean(f0 > threshold)) if f0.size else 0.0
