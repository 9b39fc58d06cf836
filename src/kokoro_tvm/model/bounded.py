"""Bounded-length export wrappers (issue 17): kokoro's own computation at the input's length ``n``.

A bounded library takes unpadded inputs of any length up to its bucket (``torch.export.Dim``
with ``max = bucket``; TVM plans memory for that bound from ``tir_var_upper_bound``), so nothing
is padded and nothing is masked: these wrappers are kokoro's ``forward`` with the changes that
make a symbolic length export and import. They subclass the padded, masked wrappers of
``components`` (same submodules and parameter names, so one weights file serves both) and
replace only ``forward``:

- every LSTM is the ``kokoro_tvm::lstm`` op over the whole (symbolic) length (packing does not
  export);
- the decoder's resamplings are written out. With a symbolic length, ``F.interpolate``'s
  ``scale_factor`` form computes its output size in floats (``sym_float``, ``truediv``,
  ``trunc``), which TVM 0.27's importer cannot express ("Unsupported function types"); nearest
  upsampling becomes expand + reshape, SineGen's linear resampling by 300 slices of a reshaped
  signal with constant weights (the positions ``align_corners=False`` samples);
- the decoder's sine noise is an input of shape [1, n, 600, 9] (the runtime's view of
  [1, 600 n, 9]): an input with a derived length (``600 * n``) exports, but torch 2.13 cannot
  decompose it after a ``.pt2`` round trip ("expected sympy.Symbol" in
  ``_replace_unbacked_bindings``), and the pipeline stores ``.pt2`` between stages;
- the STFT's reflection and inverse have no frame masks (``RealSTFT.transform_whole``).
"""

from __future__ import annotations

import torch
from torch import nn

import torch.nn.functional as F

from ..spec import input_specs, length_axes, unpadded
from . import components
from .lstm_op import lstm_with_lengths

#: Shortest input a bounded library takes, per component (the ``Dim``'s min; the decoder's
#: instance norms need 2 frames, and kokoro's shortest utterance has 3 tokens of >= 1 frame).
MIN_LENGTH = {"text_encoder": 1, "duration": 1, "decoder": 3}


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


# -- decoder ------------------------------------------------------------------------------------

def upsample_nearest(x: torch.Tensor, factor: int) -> torch.Tensor:
    """``F.interpolate(x, scale_factor=factor, mode="nearest")`` for an integer factor, [B, C, L]."""
    b, c, length = x.shape
    return x.unsqueeze(-1).expand(b, c, length, factor).reshape(b, c, length * factor)


def resample_linear(x: torch.Tensor, factor: float) -> torch.Tensor:
    """``components.interpolate_linear`` for SineGen's factors (1/300 and 300), written out."""
    return _downsample_linear(x, round(1 / factor)) if factor < 1 else _upsample_linear(x, int(factor))


def _downsample_linear(x: torch.Tensor, factor: int) -> torch.Tensor:
    """By an even ``factor`` that divides the length: output ``j`` samples the input at
    ``factor j + factor / 2 - 0.5``, the mean of two neighbours."""
    b, c, length = x.shape
    y = x.reshape(b, c, length // factor, factor)
    return 0.5 * (y[..., factor // 2 - 1] + y[..., factor // 2])


def _upsample_linear(x: torch.Tensor, factor: int) -> torch.Tensor:
    """By an even ``factor``: output ``factor j + r`` samples the input at ``j + (r + 0.5) / factor
    - 0.5``, clamped at both ends; with the signal edge-padded by one (``p``) that is
    ``p[j + a] (1 - w_r) + p[j + a + 1] w_r``, ``a`` = 0 for the first half of ``r``, 1 after."""
    b, c, length = x.shape
    half = factor // 2
    p = torch.cat([x[..., :1], x, x[..., -1:]], dim=-1)
    r = torch.arange(factor, dtype=x.dtype, device=x.device)
    w = (r + 0.5) / factor - 0.5
    w = torch.where(r < half, w + 1.0, w)  # the upper neighbour's weight
    lo = torch.cat([p[..., :length, None].expand(b, c, length, half),
                    p[..., 1 : length + 1, None].expand(b, c, length, factor - half)], dim=-1)
    hi = torch.cat([p[..., 1 : length + 1, None].expand(b, c, length, half),
                    p[..., 2:, None].expand(b, c, length, factor - half)], dim=-1)
    return (lo * (1 - w) + hi * w).reshape(b, c, length * factor)


def adain_resblk1d(block, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """kokoro ``AdainResBlk1d.forward`` with its nearest upsampling written out."""
    r = block.conv1(block.pool(block.actv(block.norm1(x, s))))
    r = block.conv2(block.actv(block.norm2(r, s)))
    shortcut = x if block.upsample_type == "none" else upsample_nearest(x, 2)
    if block.learned_sc:
        shortcut = block.conv1x1(shortcut)
    return (r + shortcut) * (2.0 ** -0.5)


class Decoder(components.Decoder):
    """``predictor.F0Ntrain`` + kokoro ``Decoder`` at ``n = en.shape[-1]`` frames (``components``'s
    ``Decoder`` without masks; the source and its STFT in float64 alike)."""

    def forward(self, en, asr, ref_s, rand_ini, noise):
        noise = noise.reshape(noise.shape[0], -1, noise.shape[-1])  # [B, n, 600, H] -> [B, 600 n, H]
        s_dec, s_pros = ref_s[:, :128], ref_s[:, 128:]
        p = self.predictor
        x = lstm(p.shared, en.transpose(-1, -2)).transpose(-1, -2)
        f0, n = x, x
        for block in p.F0:
            f0 = adain_resblk1d(block, f0, s_pros)
        for block in p.N:
            n = adain_resblk1d(block, n, s_pros)
        f0_curve, n = p.F0_proj(f0).squeeze(1), p.N_proj(n).squeeze(1)
        d = self.decoder
        f0, n = d.F0_conv(f0_curve.unsqueeze(1)), d.N_conv(n.unsqueeze(1))
        x = adain_resblk1d(d.encode, torch.cat([asr, f0, n], dim=1), s_dec)
        asr_res = d.asr_res(asr)
        res = True
        for block in d.decode:
            if res:
                x = torch.cat([x, asr_res, f0, n], dim=1)
            x = adain_resblk1d(block, x, s_dec)
            if block.upsample_type != "none":
                res = False
        return generator(d.generator, self.stft, x, s_dec, f0_curve, rand_ini, noise)


def generator(g, stft, x, s, f0_curve, rand_ini, noise):
    """kokoro ``Generator.forward`` over explicit noise (``components.generator`` unmasked)."""
    f0 = upsample_nearest(f0_curve[:, None], int(g.f0_upsamp.scale_factor)).transpose(1, 2)
    exact = stft.forward_basis.dtype
    source = components.sine_source(g.m_source, f0.to(exact), rand_ini.to(exact), noise.to(exact), resample_linear)
    har = torch.cat(stft.transform_whole(source.transpose(1, 2).squeeze(1)), dim=1).to(x.dtype)
    for i in range(g.num_upsamples):
        x = F.leaky_relu(x, negative_slope=0.1)
        x_source = g.noise_res[i](g.noise_convs[i](har), s)
        x = g.ups[i](x)
        if i == g.num_upsamples - 1:
            x = g.reflection_pad(x)
        x = x + x_source
        xs = g.resblocks[i * g.num_kernels](x, s)
        for j in range(1, g.num_kernels):
            xs = xs + g.resblocks[i * g.num_kernels + j](x, s)
        x = xs / g.num_kernels
    x = g.conv_post(F.leaky_relu(x))
    spec = torch.exp(x[:, : g.post_n_fft // 2 + 1, :])
    phase = torch.sin(x[:, g.post_n_fft // 2 + 1 :, :])
    return stft.inverse_whole(spec.to(exact), phase.to(exact), f0.shape[1]).to(x.dtype)


WRAPPERS = {"text_encoder": TextEncoder, "duration": DurationPredictor, "decoder": Decoder}


def example_inputs(component: str, bucket: int, cfg, length: int) -> tuple[torch.Tensor, ...]:
    """What a bounded library of ``component`` takes at ``length``: ``model.inputs``' padded
    example cut as the runtime cuts it (``spec.unpadded``)."""
    from .inputs import example_inputs as padded

    names = [s.name for s in input_specs(component, bucket, cfg)]
    named = dict(zip(names, padded(component, bucket, cfg, length=length)))
    cut = unpadded(named, length_axes(component, cfg), length)
    # contiguous, as the runtime passes them: torch.export guards on a view's strides (the bucket)
    return tuple(x.contiguous() for x in cut.values())


def export(component: str, bucket: int, km, cfg) -> torch.export.ExportedProgram:
    """``component`` exported with its length a ``Dim`` in ``MIN_LENGTH..bucket``; the example is
    at neither bound (a bound as example specialises it)."""
    if component not in WRAPPERS:
        raise NotImplementedError(f"no bounded wrapper for {component!r} (bounded: {sorted(WRAPPERS)})")
    module = WRAPPERS[component](km).eval()
    n = torch.export.Dim("n", min=MIN_LENGTH[component], max=bucket)
    args = example_inputs(component, bucket, cfg, max(MIN_LENGTH[component] + 1, bucket // 2))
    lengths = {"text_encoder": ({1: n},), "duration": ({1: n}, None),
               "decoder": ({2: n}, {2: n}, None, None, {1: n})}[component]
    with torch.no_grad():
        return torch.export.export(module, args, dynamic_shapes=lengths, strict=False)
