"""Bounded-length export wrappers (issue 17): kokoro's own computation at the input's length ``n``.

A bounded library takes unpadded inputs of any length up to its bucket (``torch.export.Dim``
with ``max = bucket``; TVM plans memory for that bound from ``tir_var_upper_bound``), so nothing
is padded and nothing is masked: these wrappers are kokoro's ``forward`` with one change, every
LSTM is the ``kokoro_tvm::lstm`` op over the whole (symbolic) length, because packing does not
export. They subclass the padded, masked wrappers of ``components`` (same submodules and
parameter names, so one weights file serves both) and replace only ``forward``.

Token side only so far; the decoder's interpolations and STFT need symbolic-length rewrites
(BOUNDED_NOTES in the ``bounded-probe`` branch lists them).
"""

from __future__ import annotations

import torch
from torch import nn

from . import components
from .lstm_op import lstm_with_lengths

#: Shortest input a bounded library takes, per component (the ``Dim``'s min).
MIN_LENGTH = {"text_encoder": 1, "duration": 1}


def full_lengths(x: torch.Tensor) -> torch.Tensor:
    """``[B]`` int64 holding ``x.shape[1]``: the whole, symbolic, time axis is valid."""
    return torch.full((x.shape[0],), x.shape[1], dtype=torch.int64, device=x.device)


def lstm(module: nn.LSTM, x: torch.Tensor) -> torch.Tensor:
    """kokoro's ``module(x)[0]`` over the whole sequence, through the exportable op."""
    return lstm_with_lengths(module, x, full_lengths(x))


class TextEncoder(components.TextEncoder):
    """kokoro ``TextEncoder.forward`` at the input's length (its mask is all False there)."""

    def forward(self, input_ids):
        x = self.te.embedding(input_ids).transpose(1, 2)
        for c in self.te.cnn:
            x = c(x)
        return lstm(self.te.lstm, x.transpose(1, 2)).transpose(-1, -2)


class DurationPredictor(components.DurationPredictor):
    """ALBERT -> bert_encoder -> DurationEncoder -> LSTM -> duration_proj at the input's length."""

    def forward(self, input_ids, style):
        bert_dur = self.bert(input_ids, attention_mask=torch.ones_like(input_ids, dtype=torch.int32))
        d = duration_encoder(self.predictor.text_encoder, self.bert_encoder(bert_dur).transpose(-1, -2), style)
        duration = torch.sigmoid(self.predictor.duration_proj(lstm(self.predictor.lstm, d))).sum(dim=-1)
        return duration, d


def duration_encoder(enc, x, style):
    """kokoro ``DurationEncoder.forward`` with nothing masked. Returns [B, T, d_model + style]."""
    from kokoro.modules import AdaLayerNorm

    x = x.permute(2, 0, 1)  # [T, B, C]
    s = style.expand(x.shape[0], x.shape[1], -1)
    x = torch.cat([x, s], dim=-1).permute(1, 2, 0)  # [B, C, T]
    for block in enc.lstms:
        if isinstance(block, AdaLayerNorm):
            x = block(x.transpose(-1, -2), style).transpose(-1, -2)
            x = torch.cat([x, s.permute(1, 2, 0)], dim=1)
        else:
            x = lstm(block, x.transpose(-1, -2)).transpose(-1, -2)
    return x.transpose(-1, -2)


WRAPPERS = {"text_encoder": TextEncoder, "duration": DurationPredictor}


def export(component: str, bucket: int, km, cfg) -> torch.export.ExportedProgram:
    """``component`` exported with its length a ``Dim`` in ``MIN_LENGTH..bucket``; the example is
    at neither bound (a bound as example specialises it)."""
    from .inputs import example_inputs

    if component not in WRAPPERS:
        raise NotImplementedError(f"no bounded wrapper for {component!r} yet (bounded: {sorted(WRAPPERS)})")
    module = WRAPPERS[component](km).eval()
    n = torch.export.Dim("n", min=MIN_LENGTH[component], max=bucket)
    ids, *rest = example_inputs(component, bucket, cfg)
    example = ids[:, : max(2, bucket // 2)]
    args = (example,) if component == "text_encoder" else (example, rest[-1])
    shapes = ({1: n},) if component == "text_encoder" else ({1: n}, None)
    with torch.no_grad():
        return torch.export.export(module, args, dynamic_shapes=shapes, strict=False)
