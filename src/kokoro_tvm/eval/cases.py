"""The inputs every library is validated on, and kokoro's outputs on them: one case per length.

A bucket is only useful if padding is invisible: a library built for 64 tokens must give, at 37
valid tokens, what kokoro gives on those 37 tokens alone. So each bucket is held to kokoro at
several valid lengths inside it (``lengths_for``), on inputs made at that length and zero-padded
to the bucket's signature (``spec.Component.signature``).

Inputs are realistic: token ids of English text (``samples``), the validation voice's row for
that length, and, for a frame-axis component (the decoder), ``en``/``asr`` aligned from float64
kokoro's own token side. Each case holds kokoro's outputs in float64 (the ground truth) and in
float32 (what users run), which ``verdicts`` hold a library between.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..spec import DURATION, HARMONICS, TEXT_ENCODER, Axis, Output, lookup, samples_per_frame, valid
from . import samples
from .eager import as_float64, f0_curve, reference

#: One length's case: ``inputs`` (bucket-sized, in signature order), kokoro's outputs ``r64`` and
#: ``r32``, and for an audio component ``f0`` (float64 kokoro's pitch, for the voiced fraction).
Case = dict[str, list[np.ndarray]]

#: Lengths validated on an emulated device: the shortest and ~B/8. qemu-user runs the kernels
#: far slower than the CPU does, and its numerics are the emulated CPU's own, so two lengths check
#: the library without costing the repro the full-bucket calls (docs/measurements.md, "Emulated
#: validation lengths").
EMULATED_LENGTHS = 2


def lengths_for(component: str, bucket: int, emulated: bool = False) -> list[int]:
    """The shortest valid length, just above an eighth and a half of the bucket (just above the
    next smaller buckets of a doubling ladder), and full: the edges of the range a bucket serves,
    and a short utterance, which a lone bounded bucket serves too.

    They depend on the bucket alone, so adding a bucket never reruns another bucket's validation.
    ``emulated`` (a device under qemu-user, ``EMULATED_LENGTHS``): the first two only.
    """
    lo = lookup(component).min_length
    lengths = sorted({max(lo, n) for n in (lo, bucket // 8 + 1, bucket // 2 + 1, bucket)})
    return lengths[:EMULATED_LENGTHS] if emulated else lengths


def token_ids(vocab: dict[str, int], tokens: int, start: int = 0) -> tuple[torch.Tensor, int]:
    """``[0, ids of English phonemes..., 0]`` with ``tokens`` entries, and how many phonemes."""
    inner = max(tokens - 2, 0)
    text = samples.phonemes(2 * inner + 16, start)
    ids = [vocab[c] for c in text if c in vocab][:inner]
    full = [0, *ids, 0] if tokens >= 2 else [0]
    return torch.tensor([full], dtype=torch.int64), len(ids)


def style_row(pack: np.ndarray, n_phonemes: int) -> torch.Tensor:
    """kokoro's ``pack[len(ps) - 1]`` ([1, W])."""
    return torch.from_numpy(
        np.asarray(pack[min(max(n_phonemes, 1), len(pack)) - 1], np.float32)
    ).reshape(1, -1)


def token_inputs(length: int, cfg: dict[str, Any], pack: np.ndarray) -> dict[str, torch.Tensor]:
    """A token-axis component's inputs at ``length`` tokens, by name (each takes its own)."""
    ids, n_phonemes = token_ids(cfg["vocab"], length)
    return {
        "input_ids": ids,
        "input_lengths": torch.tensor([length]),
        "style": style_row(pack, n_phonemes)[:, cfg["style_dim"] :],
    }


def frame_durations(km64, ids: torch.Tensor, style: torch.Tensor, frames: int) -> torch.Tensor:
    """Float64 kokoro's rounded durations of ``ids``, cut or stretched to sum to ``frames``."""
    dur = reference(DURATION.name, km64, (ids, None, style), ids.shape[1], {})[0].reshape(-1)
    dur = torch.round(dur).clamp(min=1).long()
    total = torch.cumsum(dur, 0)
    if total[-1] >= frames:  # keep the tokens that fill ``frames``, trim the last one
        keep = int(torch.searchsorted(total, torch.tensor(frames))) + 1
        dur = dur[:keep].clone()
        dur[-1] -= int(dur.sum()) - frames
    else:  # stretch every token alike (a slower speaker), the remainder on the longest
        dur = torch.clamp(torch.floor(dur.double() * frames / float(total[-1])), min=1).long()
        dur[torch.argmax(dur)] += frames - int(dur.sum())
    return dur


def frame_inputs(
    length: int, cfg: dict[str, Any], pack: np.ndarray, km64, seed: int
) -> dict[str, torch.Tensor]:
    """en/asr of ``length`` frames from float64 kokoro's token side on English text, rounded to
    float32 (all three runs get the same values), the voice row, and seeded draws, by name."""
    sty = cfg["style_dim"]
    tokens = min(510, max(3, length // 2))
    ids, n_phonemes = token_ids(cfg["vocab"], tokens, start=seed)
    ref_s = style_row(pack, n_phonemes)
    dur = frame_durations(km64, ids, ref_s[:, sty:], length)
    return aligned_inputs(ids[:, : dur.numel()], ref_s, dur, cfg, km64, seed)


def aligned_inputs(
    ids: torch.Tensor, ref_s: torch.Tensor, dur: torch.Tensor, cfg: dict[str, Any], km64, seed: int
) -> dict[str, torch.Tensor]:
    """The decoder's inputs for ``ids`` spoken with durations ``dur`` (frames per token): en/asr
    from float64 kokoro's token side, aligned as kokoro aligns them, and seeded draws."""
    spf, sty = samples_per_frame(cfg), cfg["style_dim"]
    length = int(dur.sum())
    _, d = reference(DURATION.name, km64, (ids, None, ref_s[:, sty:]), ids.shape[1], {})
    (t_en,) = reference(TEXT_ENCODER.name, km64, (ids, None), ids.shape[1], {})
    aln = torch.zeros(ids.shape[1], length, dtype=torch.float64)
    aln[torch.repeat_interleave(torch.arange(ids.shape[1]), dur), torch.arange(length)] = 1
    g = torch.Generator().manual_seed(seed)
    rand_ini = torch.rand((1, HARMONICS), generator=g)
    return {
        "en": (d.transpose(-1, -2) @ aln).float(),
        "asr": (t_en @ aln).float(),
        "frame_lengths": torch.tensor([length]),
        "ref_s": ref_s,
        "rand_ini": rand_ini,
        "noise": torch.randn((1, length * spf, HARMONICS), generator=g),
    }


def inputs_model(component: str, km):
    """The kokoro ``inputs_for`` needs, from float32 ``km``: a frame-axis component's inputs come
    from float64 kokoro's token side (a copy of ``km``); token inputs need none."""
    return as_float64(km) if lookup(component).axis is Axis.FRAMES else None


def inputs_for(
    component: str,
    bucket: int,
    length: int,
    cfg: dict[str, Any],
    pack: np.ndarray,
    km64,
    seed: int = 0,
) -> tuple[torch.Tensor, ...]:
    """The signature's inputs at ``bucket`` with ``length`` valid positions, zero past them.
    ``km64``: float64 kokoro (``inputs_model``), which a frame-axis component's inputs need."""
    named = (
        frame_inputs(length, cfg, pack, km64, seed + length)
        if lookup(component).axis is Axis.FRAMES
        else token_inputs(length, cfg, pack)
    )
    return padded(component, bucket, length, named, cfg)


def padded(
    component: str, bucket: int, length: int, named: dict[str, torch.Tensor], cfg: dict[str, Any]
) -> tuple[torch.Tensor, ...]:
    """Inputs by name, in signature order, zero-padded from ``length`` to ``bucket``."""
    entry = lookup(component)
    axes = entry.length_axes(cfg)
    inputs = []
    for spec in entry.signature(bucket, cfg):
        x = named[spec.name]
        if spec.name in axes:
            full = x.new_zeros(spec.shape)
            full[valid(axes[spec.name], length)] = x
            x = full
        if list(x.shape) != list(spec.shape):
            raise ValueError(f"{component} input {spec.name}: {list(x.shape)} != {spec.shape}")
        inputs.append(x)
    return tuple(inputs)


def sentence_inputs(
    component: str, bucket: int, phonemes: str, pack: np.ndarray, cfg: dict[str, Any], km64
) -> tuple[tuple[torch.Tensor, ...], int] | None:
    """One sentence's inputs as kokoro makes them (``[0, ids..., 0]``, the voice's row for its
    length, float64 kokoro's rounded durations at speed 1), padded to ``bucket``, and its length
    on the component's axis; None when it does not fit the bucket."""
    sty = cfg["style_dim"]
    inner = [cfg["vocab"][c] for c in phonemes if c in cfg["vocab"]]
    ids = torch.tensor([[0, *inner, 0]], dtype=torch.int64)
    ref_s = style_row(pack, len(inner))
    if lookup(component).axis is Axis.TOKENS:
        length = ids.shape[1]
        named = {"input_ids": ids, "input_lengths": torch.tensor([length]), "style": ref_s[:, sty:]}
    else:
        raw = reference(DURATION.name, km64, (ids, None, ref_s[:, sty:]), ids.shape[1], {})[0]
        dur = torch.round(raw.reshape(-1)).clamp(min=1).long()
        length = int(dur.sum())
        if length > bucket:
            return None
        named = aligned_inputs(ids, ref_s, dur, cfg, km64, seed=len(inner))
    if length > bucket:
        return None
    return padded(component, bucket, length, named, cfg), length


def reference_cases(
    component: str,
    bucket: int,
    km,
    km64,
    cfg: dict[str, Any],
    pack: np.ndarray,
    lengths: list[int] | None = None,
) -> dict[int, Case]:
    """The inputs of each valid length and kokoro's outputs on them, in float64 and float32:
    what every target's library is held to (the ``reference`` stage computes them once)."""
    entry = lookup(component)
    cases = {}
    for length in lengths or lengths_for(component, bucket):
        inputs = inputs_for(component, bucket, length, cfg, pack, km64)
        case = {
            "inputs": [x.numpy() for x in inputs],
            "r64": [r.numpy() for r in reference(component, km64, inputs, length, cfg)],
            "r32": [r.numpy() for r in reference(component, km, inputs, length, cfg)],
        }
        if entry.output is Output.AUDIO:
            named = dict(zip(entry.input_names, inputs))
            case["f0"] = [f0_curve(km64, named["en"], named["ref_s"], length).numpy()]
        cases[length] = case
    return cases


def language_cases(
    component: str,
    bucket: int,
    km,
    km64,
    cfg: dict[str, Any],
    packs: dict[str, np.ndarray],
) -> dict[str, Case]:
    """One case per language of ``languages.SENTENCES`` whose sentence fits ``bucket``, keyed
    ``lang_<code>``: its inputs, kokoro's outputs in float64 and float32, its length (``length``)
    and, for English, its text (for the recognizer of the listener's criterion). ``packs``: the
    voices by name; a language whose voice is not among them is left out."""
    from .languages import SENTENCES

    entry = lookup(component)
    cases: dict[str, Case] = {}
    for sentence in SENTENCES:
        if sentence.voice not in packs:
            continue
        made = sentence_inputs(
            component, bucket, sentence.phonemes, packs[sentence.voice], cfg, km64
        )
        if made is None:
            continue
        inputs, length = made
        case: Case = {
            "inputs": [x.numpy() for x in inputs],
            "r64": [r.numpy() for r in reference(component, km64, inputs, length, cfg)],
            "r32": [r.numpy() for r in reference(component, km, inputs, length, cfg)],
            "length": [np.array(length)],
        }
        if entry.output is Output.AUDIO:
            named = dict(zip(entry.input_names, inputs))
            case["f0"] = [f0_curve(km64, named["en"], named["ref_s"], length).numpy()]
        cases[sentence.key] = case
    return cases
