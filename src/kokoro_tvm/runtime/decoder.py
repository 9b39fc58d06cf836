"""Decoding one planned chunk: text encoder, host alignment, decoder. A bounded library (the
default, ``shapes: bounded``) gets its inputs at the valid length and computes only that; a
padded one gets them zero-padded to its bucket, computes the whole bucket, and the audio is cut
to the valid length here."""

from __future__ import annotations

import time

import numpy as np

from . import alignment
from .libraries import Libraries
from .planner import Chunk, token_input


def decode(libs: Libraries, chunk: Chunk, rng: np.random.Generator) -> np.ndarray:
    """Fill ``chunk``'s decoder draws (from ``rng``, as kokoro's SineGen draws them) and audio."""
    t0 = time.perf_counter()
    t, m = chunk.n_tokens, chunk.n_frames
    tb, fb = chunk.token_bucket, libs.bucket("frames", m)
    te = libs.get("text_encoder", tb)
    (t_en,) = te(token_input(chunk.input_ids, te), np.array([t]))
    dec = libs.get("decoder", fb)
    harmonics = next(s["shape"][1] for s in dec.entry["inputs"] if s["name"] == "rand_ini")
    spf = libs.samples_per_frame
    chunk.frame_bucket = fb
    chunk.rand_ini = rng.random((1, harmonics), dtype=np.float32)
    chunk.noise = rng.standard_normal((1, m * spf, harmonics), dtype=np.float32)
    pad = None if dec.bounded else fb
    noise = chunk.noise
    if pad is not None:
        noise = np.zeros((1, fb * spf, harmonics), np.float32)
        noise[:, : m * spf] = chunk.noise
    en = alignment.expand(chunk.d, chunk.durations, pad)
    asr = alignment.expand(t_en[:, :, :t], chunk.durations, pad)
    (audio,) = dec(en, asr, np.array([m]), chunk.style, chunk.rand_ini, noise)
    chunk.audio = audio.reshape(-1)[: m * spf].astype(np.float32)
    chunk.seconds += time.perf_counter() - t0
    return chunk.audio
