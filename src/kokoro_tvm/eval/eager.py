"""Eager kokoro on the *unpadded* input: the ground truth every compiled bucket is held to.

This is kokoro's own default path (``KModel(disable_complex=False)``: packed LSTMs, ``TorchSTFT``
with ``torch.stft``/``istft``), never the project's wrappers, so a mistake in a wrapper shows up
as a parity failure instead of being copied into the reference. It runs in float32 (what users
run) and in float64 (the ground truth: two correct float32 builds of the trained model differ by
~25 dB log-mel, because SineGen's phase accumulates in float32 and the ``atan2`` of near-zero
STFT bins is arbitrary, so a build is judged by its distance to float64 kokoro against float32
kokoro's own distance).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..model.kmodel import SUBMODULES, quiet_upstream
from ..spec import DECODER, DURATION, TEXT_ENCODER, lookup, samples_per_frame


class InjectDraws(TorchFunctionMode):
    """Serve kokoro's ``torch.rand`` / ``torch.randn_like`` calls from given tensors, in call order.

    kokoro's SineGen draws ``rand`` (initial phase) then ``randn_like`` (sine noise); the source
    module then draws another ``randn_like`` whose result the generator never uses. Draws take
    the dtype kokoro asks for, so one set of draws serves the float32 and float64 runs.
    """

    def __init__(self, rand: torch.Tensor, randn: torch.Tensor):
        super().__init__()
        self.rand, self.randn, self.randn_used = rand, randn, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.rand:
            return self.rand.to(
                kwargs.get("dtype") or torch.get_default_dtype()
            ).clone()  # kokoro zeroes [:, 0]
        if func is torch.randn_like and not self.randn_used:
            self.randn_used = True
            assert args[0].shape == self.randn.shape, (args[0].shape, self.randn.shape)
            return self.randn.to(args[0].dtype).clone()
        return func(*args, **kwargs)


def load_kokoro(pth: Path, config: Path):
    """kokoro's ``KModel`` (default path, eval mode) from a checkpoint the ``weights`` stage wrote
    (``pipeline.weights.save_checkpoint``).

    ``KModel.__init__`` falls back to a non-strict load with the first 7 characters of every key
    cut off when a strict load fails; the loaded parameters are compared with the file so that
    such a fallback can never pass unnoticed.
    """
    from kokoro.model import KModel

    cfg = json.loads(Path(config).read_text(encoding="utf-8"))
    with (
        torch.no_grad(),
        quiet_upstream(),
    ):  # weight norm's weights stay leaves, so the model can be copied
        km = KModel(
            repo_id="hexgrad/Kokoro-82M", config=cfg, model=str(pth), disable_complex=False
        ).eval()
    state = torch.load(pth, map_location="cpu", weights_only=True)
    for key in SUBMODULES:
        loaded = getattr(km, key).state_dict()
        if set(loaded) != set(state[key]) or any(
            not torch.equal(loaded[k], v) for k, v in state[key].items()
        ):
            raise RuntimeError(f"kokoro did not load {pth}[{key}] strictly")
    km.requires_grad_(False)
    return cfg, km


def as_float64(km):
    """A float64 copy of ``km``: parameters, and TorchSTFT's window (a plain attribute that
    ``.double()`` does not convert; torch.istft with a float32 window on float64 data is itself
    off by ~1e-8)."""
    km64 = copy.deepcopy(km).double()
    stft = km64.decoder.generator.stft
    if hasattr(stft, "window"):
        stft.window = stft.window.double()
    return km64


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """kokoro builds some tensors with the default dtype (the alignment matrix, SineGen's draws)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _dtype(km) -> torch.dtype:
    return next(km.parameters()).dtype


@torch.no_grad()
def reference(
    component: str, km, inputs: tuple[torch.Tensor, ...], length: int, cfg: dict[str, Any]
) -> tuple[torch.Tensor, ...]:
    """kokoro's outputs for the first ``length`` positions of wrapper-style ``inputs``, in the
    dtype of ``km`` (float inputs are cast to it)."""
    dtype = _dtype(km)
    inputs = tuple(x.to(dtype) if x is not None and x.is_floating_point() else x for x in inputs)
    with default_dtype(dtype):
        return KOKORO_SLICES[lookup(component)](km, inputs, length, cfg)


def _token_side(inputs, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first ``length`` token ids, their length and kokoro's padding mask over them."""
    ids = inputs[0][:, :length]
    lengths = torch.tensor([length])
    text_mask = torch.arange(length).unsqueeze(0) >= lengths.unsqueeze(1)
    return ids, lengths, text_mask


def _text_encoder(km, inputs, length: int, _cfg: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    ids, lengths, text_mask = _token_side(inputs, length)
    return (km.text_encoder(ids, lengths, text_mask),)


def _duration(km, inputs, length: int, _cfg: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    ids, lengths, text_mask = _token_side(inputs, length)
    style = inputs[2]
    bert_dur = km.bert(ids, attention_mask=(~text_mask).int())
    d_en = km.bert_encoder(bert_dur).transpose(-1, -2)
    d = km.predictor.text_encoder(d_en, style, lengths, text_mask)
    x, _ = km.predictor.lstm(d)
    duration = torch.sigmoid(km.predictor.duration_proj(x)).sum(dim=-1)
    return duration, d


def _decoder(km, inputs, length: int, cfg: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    en, asr, _, ref_s, rand_ini, noise = inputs
    f0, n = km.predictor.F0Ntrain(en[..., :length], ref_s[:, 128:])
    with InjectDraws(rand_ini, noise[:, : length * samples_per_frame(cfg)]):
        audio = km.decoder(asr[..., :length], f0, n, ref_s[:, :128])
    return (audio,)


#: kokoro's own code for the slice each registry entry replaces, on its padded inputs.
KOKORO_SLICES = {TEXT_ENCODER: _text_encoder, DURATION: _duration, DECODER: _decoder}


@torch.no_grad()
def f0_curve(km, en: torch.Tensor, ref_s: torch.Tensor, length: int) -> torch.Tensor:
    """kokoro's predicted F0 (Hz, twice the frame rate) for the first ``length`` frames."""
    dtype = _dtype(km)
    with default_dtype(dtype):
        return km.predictor.F0Ntrain(en[..., :length].to(dtype), ref_s[:, 128:].to(dtype))[0]
