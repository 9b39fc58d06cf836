"""The listener's criterion (``eval.verdicts.listener_verdict``), which narrower precisions are held
to, and the nine-language validation fixture it is applied to.

The signals are synthetic speech-like audio (voiced harmonics under a moving pitch, with pauses):
the criterion's bounds are absolute, so a known error in the harmonics puts a copy on either side
of them, and the float32 criterion beside it shows why a narrower precision needs its own.
"""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

from kokoro_tvm.config import load_model_config
from kokoro_tvm.eval import verdicts
from kokoro_tvm.eval.metrics import log_mel_snr

SR = 24_000


HARMONICS = 60


def _speechlike(error: float = 0.0, seed: int = 0, seconds: float = 2.0) -> np.ndarray:
    """Voiced harmonics under a moving pitch, with pauses; ``error``: each harmonic's gain and
    phase off by that much (relative, radians) at random, an error shaped like the speech it
    perturbs, as a narrower multiply's is."""
    rng = np.random.default_rng(seed)
    gains = 1 + error * rng.standard_normal(HARMONICS)
    phases = error * rng.standard_normal(HARMONICS)
    t = np.arange(int(seconds * SR)) / SR
    f0 = 140 + 40 * np.sin(2 * np.pi * 1.3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / SR
    voiced = sum(g * np.sin(k * phase + p) / k for k, (g, p) in enumerate(zip(gains, phases), 1))
    envelope = (np.sin(2 * np.pi * 2.1 * t) > -0.6).astype(float)  # pauses between "syllables"
    return 0.1 * voiced * envelope


def test_a_copy_a_listener_cannot_tell_apart_passes():
    r64, r32, got = _speechlike(), _speechlike(0.001, 1), _speechlike(0.015, 2)
    row = verdicts.listener_verdict(r64, r32, got)
    assert row["ok"], row
    assert row["log_mel_snr_db"] >= verdicts.LISTENER_SNR_DB
    # the float32 criterion refuses the same copy: float32 kokoro is far closer than that
    assert not verdicts.audio_verdict(r64, r32, got)["ok"]


@pytest.mark.parametrize("error", [0.1, 0.3])
def test_audible_errors_fail(error):
    """The negative control: 33 and 21 dB of log-mel SNR (kokoro's ONNX path sits near 15)."""
    r64 = _speechlike()
    got = _speechlike(error, 3)
    assert log_mel_snr(r64, got) < verdicts.LISTENER_SNR_DB
    assert not verdicts.listener_verdict(r64, _speechlike(0.001, 1), got)["ok"]


def test_non_finite_audio_fails():
    r64 = _speechlike()
    got = r64.copy()
    got[100] = np.nan
    row = verdicts.listener_verdict(r64, r64, got)
    assert not row["ok"] and not row["finite"]


def test_the_criterion_follows_the_precision():
    assert verdicts.criterion("decoder") == verdicts.AUDIO_CRITERION
    assert verdicts.criterion("decoder", "bf16") == verdicts.LISTENER_CRITERION
    # tensors (durations, encodings) keep the float32 criterion whatever the precision
    assert verdicts.criterion("duration", "bf16") == verdicts.TENSOR_CRITERION


def test_the_fixture_holds_one_sentence_per_language_in_the_models_vocabulary():
    text = resources.files("kokoro_tvm.data").joinpath("validation_languages.json").read_text()
    cases = json.loads(text)
    assert sorted(c["lang"] for c in cases) == sorted("abefhijpz")
    vocab = load_model_config("kokoro-82m")["vocab"]
    for c in cases:
        assert c["voice"][0] == c["lang"], c  # kokoro's voices start with their language code
        unknown = {s for s in c["phonemes"] if s not in vocab}
        assert not unknown, (c["lang"], unknown)
        assert c["text"].strip() and len(c["phonemes"]) <= 510
