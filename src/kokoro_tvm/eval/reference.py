"""Eager kokoro on the *unpadded* input: the ground truth every compiled bucket is held to.

These call kokoro's own modules (packed LSTMs, kokoro's Decoder) rather than our wrappers, so
a mistake in a wrapper shows up as a parity failure instead of being copied into the reference.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..spec import samples_per_frame


class InjectDraws(TorchFunctionMode):
    """Serve kokoro's ``torch.rand`` / ``torch.randn_like`` calls from given tensors, in call order.

    kokoro's SineGen draws ``rand`` (initial phase) then ``randn_like`` (sine noise); the source
    module then draws another ``randn_like`` whose result the generator never uses.
    """

    def __init__(self, rand: torch.Tensor, randn: torch.Tensor):
        super().__init__()
        self.rand, self.randn, self.randn_used = rand, randn, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.rand:
            return self.rand.clone()  # kokoro writes rand_ini[:, 0] = 0 in place
        if func is torch.randn_like and not self.randn_used:
            self.randn_used = True
            assert args[0].shape == self.randn.shape, (args[0].shape, self.randn.shape)
            return self.randn.clone()
        return func(*args, **kwargs)


@torch.no_grad()
def reference(component: str, km, inputs: tuple[torch.Tensor, ...], length: int,
              cfg: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """kokoro eager outputs for the first ``length`` positions of wrapper-style ``inputs``."""
    if component in ("duration", "text_encoder"):
        ids = inputs[0][:, :length]
        lengths = torch.tensor([length])
        text_mask = torch.arange(length).unsqueeze(0) >= lengths.unsqueeze(1)
        if component == "text_encoder":
            return (km.text_encoder(ids, lengths, text_mask),)
        style = inputs[2]
        bert_dur = km.bert(ids, attention_mask=(~text_mask).int())
        d_en = km.bert_encoder(bert_dur).transpose(-1, -2)
        d = km.predictor.text_encoder(d_en, style, lengths, text_mask)
        x, _ = km.predictor.lstm(d)
        duration = torch.sigmoid(km.predictor.duration_proj(x)).sum(dim=-1)
        return duration, d
    en, asr, _, ref_s, rand_ini, noise = inputs
    f0, n = km.predictor.F0Ntrain(en[..., :length], ref_s[:, 128:])
    with InjectDraws(rand_ini, noise[:, : length * samples_per_frame(cfg)]):
        audio = km.decoder(asr[..., :length], f0, n, ref_s[:, :128])
    return (audio,)
