"""Words heard in a recording, by an offline recognizer: PocketSphinx's US English model.

A weak recognizer on purpose: it has no language model strong enough to guess words the audio
does not carry, so words lost or blurred at a cut show as errors. It hears kokoro's own whole
sentences well but not perfectly; what a comparison reads is the word error rate of a rendition
*beside* that of the whole sentence, never either alone.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from ..spec import SAMPLE_RATE

ASR_RATE = 16000  # PocketSphinx's acoustic model's sample rate


@functools.lru_cache(maxsize=1)
def _decoder():
    from pocketsphinx import Decoder

    return Decoder(samprate=ASR_RATE, loglevel="FATAL")


def transcribe(audio: np.ndarray, sr: int = SAMPLE_RATE) -> str:
    """The words PocketSphinx hears in float ``audio`` at ``sr`` (lower case, spaces)."""
    from scipy.signal import resample_poly

    x = np.asarray(audio, np.float64).reshape(-1)
    g = np.gcd(ASR_RATE, sr)
    x = resample_poly(x, ASR_RATE // g, sr // g)
    pcm = (np.clip(x, -1.0, 1.0) * 32767).astype(np.int16)
    d = _decoder()
    d.start_utt()
    d.process_raw(pcm.tobytes(), full_utt=True)
    d.end_utt()
    hyp = d.hyp()
    return hyp.hypstr if hyp is not None else ""


def words(text: str) -> list[str]:
    """Lower-case words, punctuation dropped (apostrophes kept: "don't")."""
    return re.findall(r"[a-z0-9']+", text.lower())


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level edit distance over the reference's word count."""
    ref, hyp = words(reference), words(hypothesis)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1] / max(len(ref), 1)
