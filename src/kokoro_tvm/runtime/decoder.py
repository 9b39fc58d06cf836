"""Decoding one planned chunk: text encoder, host alignment, decoder. A bounded library (the
default, ``shapes: bounded``) gets its inputs at the valid length and computes only that; a
padded one gets them zero-padded to its bucket, computes the whole bucket, and the audio is cut
to the valid length here."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import alignment
from .libraries import Libraries
from .planner import Chunk, token_input
from .transfer import aligned_empty


@dataclass(frozen=True)
class Decoded:
    """The decoder's result for one chunk: its audio before any trim or fade, and the draws
    that made it (kokoro's SineGen draws them; a replay in eager kokoro injects them)."""

    audio: np.ndarray = field(repr=False)  # float32 [frames * samples_per_frame]
    frame_bucket: int
    rand_ini: np.ndarray = field(repr=False)  # [1, harmonics]
    noise: np.ndarray = field(repr=False)  # [1, frames * samples_per_frame, harmonics]
    seconds: float  # compute time of the text encoder, alignment and decoder


def decode(libs: Libraries, chunk: Chunk, rng: np.random.Generator) -> Decoded:
    """``chunk``'s audio, its decoder draws taken from ``rng`` in kokoro's order."""
    t0 = time.perf_counter()
    t, m = chunk.n_tokens, chunk.n_frames
    tb, fb = chunk.token_bucket, libs.bucket("frames", m)
    te = libs.get("text_encoder", tb)
    (t_en,) = te(token_input(chunk.input_ids, te), np.array([t]))
    dec = libs.get("decoder", fb)
    harmonics = int(dec.entry.input("rand_ini").shape[1])
    spf = libs.samples_per_frame
    rand_ini = rng.random((1, harmonics), dtype=np.float32)
    # drawn where the library reads it: no copy of the call's largest input
    noise = aligned_empty((1, m * spf, harmonics), np.float32)
    rng.standard_normal(dtype=np.float32, out=noise)
    pad = None if dec.bounded else fb
    given = noise
    if pad is not None:
        given = aligned_empty((1, fb * spf, harmonics), np.float32)
        given[:, : m * spf] = noise
        given[:, m * spf :] = 0
    en = alignment.expand(chunk.d, chunk.durations, pad)
    asr = alignment.expand(t_en[:, :, :t], chunk.durations, pad)
    (audio,) = dec(en, asr, np.array([m]), chunk.style, rand_ini, given)
    audio = audio.reshape(-1)[: m * spf].astype(np.float32)
    return Decoded(audio, fb, rand_ini, noise, time.perf_counter() - t0)
