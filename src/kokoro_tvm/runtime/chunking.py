"""Phonemes to token ids, splitting long input, and joining chunk audio.

Why split tokens, never frames: the decoder runs a bidirectional LSTM (``predictor.shared``)
and instance norms over *all* frames of an utterance, so cutting frames anywhere changes every
frame's output. Instead a long input is cut into shorter phoneme strings, each synthesized as
its own utterance exactly as ``KModel.forward_with_tokens`` would, the way kokoro's
``KPipeline`` chunks long text: prefer the last sentence end (``!.?…``), then ``:;``, then
``,—``, then any word boundary, and a hard cut only inside a single over-long word.

Joining: kokoro's pipeline yields each chunk's audio for the caller to concatenate, with nothing
inserted between chunks. Every chunk starts and ends with the boundary token 0 (at least one
600-sample frame each), which a trained model renders as near-silence, so the concatenation has
no gap and lands in silence. ``join`` adds a 5 ms raised-cosine fade at
each inner seam, well inside those boundary frames, so the seam cannot click even when an edge is
not silent (random weights, a cut mid-word); it never removes or inserts samples.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import KokoroTVMError

BOUNDARY_ID = 0  # kokoro wraps every utterance in this pad token: [0, *ids, 0]
WATERFALL = ("!.?…", ":;", ",—")  # kokoro's KPipeline.waterfall_last, strongest break first
CLOSERS = ')”"'  # a cut after punctuation keeps a closing bracket/quote with its sentence
FADE_SAMPLES = 120  # 5 ms at 24 kHz; a boundary token lasts >= 600 samples


class InputError(KokoroTVMError, ValueError):
    """Input the model cannot synthesize; the message says what to change."""


def clean_phonemes(phonemes: str, vocab: dict[str, int], unknown: str = "warn") -> str:
    """Drop (``warn``, kokoro's behaviour) or refuse (``error``) symbols outside the vocabulary.

    kokoro's ``KModel.forward`` silently drops unknown symbols; we keep that (so misaki output
    with a stray symbol still speaks) but say which were dropped, or refuse in strict mode.
    """
    if unknown not in ("warn", "error"):
        raise ValueError(f"unknown must be 'warn' or 'error', got {unknown!r}")
    text = " ".join(str(phonemes).split())  # newlines/tabs are not in the vocabulary; spaces are
    if not text:
        raise InputError("empty input: give at least one phoneme (e.g. --phonemes 'həlˈO')")
    bad = sorted({c for c in text if c not in vocab})
    if bad:
        msg = (f"{len([c for c in text if c not in vocab])} symbol(s) outside the Kokoro phoneme vocabulary: "
               f"{''.join(bad)!r} ({', '.join(f'U+{ord(c):04X}' for c in bad[:8])})")
        if unknown == "error":
            raise InputError(f"{msg}; pass phonemes (misaki output), not text, or remove them")
        warnings.warn(f"{msg} were dropped, as kokoro does", stacklevel=2)
        text = " ".join("".join(c for c in text if c in vocab).split())
        if not text:
            raise InputError("no phoneme of the input is in the Kokoro vocabulary; pass phonemes (misaki "
                             "output) with --phonemes, or text with --text")
    return text


def token_ids(phonemes: str, vocab: dict[str, int]) -> np.ndarray:
    """``[0, *ids, 0]`` as kokoro builds ``input_ids``; ``phonemes`` must be cleaned."""
    return np.array([BOUNDARY_ID, *(vocab[c] for c in phonemes), BOUNDARY_ID], dtype=np.int64)


def cut_point(phonemes: str, limit: int) -> int:
    """Where to end the first chunk of ``phonemes`` so it has at most ``limit`` symbols.

    The last cut (a space) after the strongest punctuation wins, as in kokoro's waterfall; then
    the last word boundary; a word longer than ``limit`` is cut at ``limit``.
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if len(phonemes) <= limit:
        return len(phonemes)
    spaces = [k for k in range(1, limit + 1) if phonemes[k] == " "]
    for marks in WATERFALL:
        for k in reversed(spaces):
            head = phonemes[:k].rstrip().rstrip(CLOSERS)
            if head and head[-1] in marks:
                return k
    return spaces[-1] if spaces else limit


def split_phonemes(phonemes: str, limit: int) -> list[str]:
    """Cut a cleaned phoneme string into chunks of at most ``limit`` symbols (see ``cut_point``)."""
    chunks, rest = [], phonemes.strip()
    while rest:
        k = cut_point(rest, limit)
        head, rest = rest[:k].strip(), rest[k:].strip()
        if head:
            chunks.append(head)
    return chunks


def fade_window(n: int) -> np.ndarray:
    """Raised-cosine ramp 0 -> 1 over ``n`` samples, never exactly 0 (no inserted silence)."""
    return (np.sin(0.5 * np.pi * (np.arange(n) + 0.5) / n) ** 2).astype(np.float32)


def join(chunks: list[np.ndarray], fade: int = FADE_SAMPLES) -> np.ndarray:
    """Concatenate chunk audio (as kokoro does), fading each inner seam; keeps every sample."""
    if not chunks:
        return np.zeros(0, np.float32)
    parts = [np.asarray(c, np.float32).reshape(-1).copy() for c in chunks]
    for i in range(len(parts) - 1):
        a, b = parts[i], parts[i + 1]
        n = min(fade, a.size, b.size)
        if n:
            ramp = fade_window(n)
            a[-n:] *= ramp[::-1]
            b[:n] *= ramp
    return np.concatenate(parts)
