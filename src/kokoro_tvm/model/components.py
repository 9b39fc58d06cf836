"""The three compiled components, written once over kokoro's own submodules.

Each component reads like kokoro's ``forward_with_tokens`` slice it replaces, computed over a
length policy (``lengths``): ``Bounded`` for a bounded library (kokoro's computation at the
input's own length, a ``torch.export.Dim``), ``Padded`` for a padded one (exact on the valid prefix
of a bucket). The export wrappers differ only in their signature: a padded one takes the valid
length as an input, a bounded one reads it from its inputs' shapes. Three changes from kokoro
make them exportable (docs/architecture.md, "Length-correct buckets"):
- every LSTM is the length-aware ``kokoro_tvm::lstm`` op (packing does not export);
- the decoder's random draws (phase ``rand``, sine noise ``randn``) are explicit inputs;
- the STFT is kokoro's default ``TorchSTFT`` in real arithmetic (complex ops do not import).
Weight norm is folded away so the exported graph does not recompute it on every call.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..spec import DECODER, DURATION, TEXT_ENCODER, Component, Shapes, lookup
from .lengths import Bounded, Lengths, Padded
from .stft import RealSTFT


def fold_weight_norm(module: nn.Module) -> nn.Module:
    """Replace ``weight_g``/``weight_v`` by the plain weight they compute."""
    for m in module.modules():
        if hasattr(m, "weight_g") and hasattr(m, "weight_v"):
            torch.nn.utils.remove_weight_norm(m)
    return module


# -- token side ---------------------------------------------------------------------------------


class DurationPredictor(nn.Module):
    """ALBERT -> bert_encoder -> DurationEncoder -> LSTM -> duration_proj (per-token durations).
    Padded: ``(input_ids, input_lengths, style)``."""

    def __init__(self, km):
        super().__init__()
        self.bert = copy.deepcopy(km.bert)
        self.bert_encoder = copy.deepcopy(km.bert_encoder)
        self.predictor = fold_weight_norm(copy.deepcopy(km.predictor))
        for name in ("shared", "F0", "N", "F0_proj", "N_proj"):  # frame-side: the decoder's
            delattr(self.predictor, name)

    def forward(self, input_ids, input_lengths, style):
        return self.compute(input_ids, style, Padded.of(input_lengths, input_ids.shape[1]))

    def compute(self, input_ids, style, tokens: Lengths):
        bert_dur = self.bert(input_ids, attention_mask=tokens.attention_mask(input_ids))
        d = duration_encoder(
            self.predictor.text_encoder,
            self.bert_encoder(bert_dur).transpose(-1, -2),
            style,
            tokens,
        )
        duration = torch.sigmoid(
            self.predictor.duration_proj(tokens.lstm(self.predictor.lstm, d))
        ).sum(dim=-1)
        return duration, d


class BoundedDurationPredictor(DurationPredictor):
    """``(input_ids, style)`` at the input's length."""

    def forward(self, input_ids, style):
        return self.compute(input_ids, style, Bounded())


def duration_encoder(enc, x, style, tokens: Lengths):
    """kokoro ``DurationEncoder.forward`` with the length-aware LSTM. Returns [B, T, d_model +
    style]."""
    from kokoro.modules import AdaLayerNorm

    x = x.permute(2, 0, 1)  # [T, B, C]
    s = style.expand(x.shape[0], x.shape[1], -1)
    x = tokens.zero_pad(torch.cat([x, s], dim=-1).permute(1, 2, 0))  # [B, C, T]
    for block in enc.lstms:
        if isinstance(block, AdaLayerNorm):
            x = block(x.transpose(-1, -2), style).transpose(-1, -2)
            x = tokens.zero_pad(torch.cat([x, s.permute(1, 2, 0)], dim=1))
        else:
            x = tokens.lstm(block, x.transpose(-1, -2)).transpose(-1, -2)
    return x.transpose(-1, -2)


class TextEncoder(nn.Module):
    """Embedding -> CNN -> BiLSTM, kokoro ``TextEncoder.forward``. Padded:
    ``(input_ids, input_lengths)``."""

    def __init__(self, km):
        super().__init__()
        self.te = fold_weight_norm(copy.deepcopy(km.text_encoder))

    def forward(self, input_ids, input_lengths):
        return self.compute(input_ids, Padded.of(input_lengths, input_ids.shape[1]))

    def compute(self, input_ids, tokens: Lengths):
        x = tokens.zero_pad(self.te.embedding(input_ids).transpose(1, 2))
        for c in self.te.cnn:
            x = tokens.zero_pad(c(x))
        return tokens.zero_pad(tokens.lstm(self.te.lstm, x.transpose(1, 2)).transpose(-1, -2))


class BoundedTextEncoder(TextEncoder):
    """``(input_ids)`` at the input's length."""

    def forward(self, input_ids):
        return self.compute(input_ids, Bounded())


# -- frame side ---------------------------------------------------------------------------------


class Decoder(nn.Module):
    """F0/N prediction (``predictor.F0Ntrain``) + iSTFTNet decoder.

    ``rand_ini`` is SineGen's initial-phase draw ([B, harmonics]; column 0 is zeroed as kokoro
    does) and ``noise`` its ``randn_like`` ([B, samples, harmonics]). Padded:
    ``(en, asr, frame_lengths, ref_s, rand_ini, noise)``; only the first ``frame_lengths`` frames
    are valid, norms, convolutions and the STFT see exactly what kokoro sees on the unpadded
    input, and audio past ``frame_lengths * 600`` samples is 0. Time resolutions: frames (m) ->
    F0/N rate (2m) -> generator stages (2m * prod(ups[:i+1]), +1 after the reflection pad) ->
    samples (2m * prod(ups) * hop).
    """

    def __init__(self, km):
        super().__init__()
        self.predictor = fold_weight_norm(copy.deepcopy(km.predictor))
        self.decoder = fold_weight_norm(copy.deepcopy(km.decoder))
        # F0N only needs these; drop the token-side modules so the weights file stays small.
        for name in ("text_encoder", "lstm", "duration_proj"):
            delattr(self.predictor, name)
        self.stft = RealSTFT.from_torch_stft(km.decoder.generator.stft).to(SOURCE_DTYPE)

    def forward(self, en, asr, frame_lengths, ref_s, rand_ini, noise):
        return self.compute(en, asr, ref_s, rand_ini, noise, Padded.of(frame_lengths, en.shape[-1]))

    def compute(self, en, asr, ref_s, rand_ini, noise, frames: Lengths):
        s_dec, s_pros = ref_s[:, :128], ref_s[:, 128:]
        p = self.predictor
        x = frames.lstm(p.shared, en.transpose(-1, -2)).transpose(-1, -2)
        f0, n, f0_span, n_span = x, x, frames, frames
        for block in p.F0:
            f0, f0_span = adain_resblk1d(block, f0, s_pros, f0_span)
        for block in p.N:
            n, n_span = adain_resblk1d(block, n, s_pros, n_span)
        f0_curve, n = (
            f0_span.zero_pad(p.F0_proj(f0)).squeeze(1),
            n_span.zero_pad(p.N_proj(n)).squeeze(1),
        )
        d = self.decoder
        f0, n = d.F0_conv(f0_curve.unsqueeze(1)), d.N_conv(n.unsqueeze(1))
        x, span = adain_resblk1d(d.encode, torch.cat([asr, f0, n], dim=1), s_dec, frames)
        asr_res = d.asr_res(asr)
        res = True
        for block in d.decode:
            if res:
                x = torch.cat([x, asr_res, f0, n], dim=1)
            x, span = adain_resblk1d(block, x, s_dec, span)
            if block.upsample_type != "none":
                res = False
        return generator(d.generator, self.stft, x, s_dec, f0_curve, rand_ini, noise, span)


class BoundedDecoder(Decoder):
    """``(en, asr, ref_s, rand_ini, noise)`` at ``n = en.shape[-1]`` frames. ``noise`` comes as
    [1, n, 600, harmonics] (the runtime's view of [1, 600 n, harmonics]): an input with a derived
    length (``600 * n``) exports, but torch 2.13 cannot decompose it after a ``.pt2`` round trip
    ("expected sympy.Symbol" in ``_replace_unbacked_bindings``), and the pipeline stores ``.pt2``
    between stages."""

    def forward(self, en, asr, ref_s, rand_ini, noise):
        noise = noise.reshape(
            noise.shape[0], -1, noise.shape[-1]
        )  # [B, n, 600, H] -> [B, 600 n, H]
        return self.compute(en, asr, ref_s, rand_ini, noise, Bounded())


def adain_resblk1d(block, x, s, span: Lengths):
    """kokoro ``AdainResBlk1d`` (F0/N and decoder blocks); returns the output and its span.

    An upsampling block doubles the time axis: its depthwise transposed conv (``pool``) adds a
    bias, so a padded output is re-zeroed before ``conv1`` reads it.
    """
    up = block.upsample_type != "none"
    out = span.upsampled(2) if up else span
    r = block.pool(block.actv(span.adain(block.norm1, x, s)))
    if up:
        r = out.zero_pad(r)
    r = block.conv2(block.actv(out.adain(block.norm2, block.conv1(r), s)))
    shortcut = span.upsample_nearest(x, 2) if up else x
    if block.learned_sc:
        shortcut = block.conv1x1(shortcut)
    return out.zero_pad((r + shortcut) * (2.0**-0.5)), out


#: The harmonic source and its STFT run in float64: float32 accumulates the sine phase (the 9th
#: harmonic passes 1e5 rad within seconds, where a float32 step is 0.008 rad) and gives an arbitrary
#: ``atan2`` to near-zero STFT bins, which ``noise_convs`` then read linearly. It is ~1e-4 of the
#: decoder's arithmetic (9 harmonics and a 20-tap DFT per sample, against the generator's convs;
#: docs/measurements.md, "Harmonic source in float64").
SOURCE_DTYPE = torch.float64


def sine_source(
    src,
    f0: torch.Tensor,
    rand_ini: torch.Tensor,
    noise: torch.Tensor,
    resample: Callable[[torch.Tensor, float], torch.Tensor],
) -> torch.Tensor:
    """``SourceModuleHnNSF`` + ``SineGen`` with the draws passed in. f0: [B, L, 1].

    Padding needs no special case: f0 is 0 there, so the phase increments are 0 and the
    cumulative phase holds its last valid value, which is exactly how kokoro's linear
    upsampling clamps at the end of the unpadded signal. ``resample``: the length policy's
    linear resampling (``Padded``'s is kokoro's ``F.interpolate``; ``Bounded`` writes it out for a
    symbolic length).
    """
    gen = src.l_sin_gen
    harmonics = torch.arange(1, gen.dim + 1, dtype=f0.dtype, device=f0.device)
    fn = f0 * harmonics.view(1, 1, -1)
    rad = (fn / gen.sampling_rate) % 1
    first = (harmonics > 1).to(f0.dtype)  # kokoro zeroes the fundamental's initial phase
    rad = torch.cat([rad[:, :1, :] + (rand_ini * first).unsqueeze(1), rad[:, 1:, :]], dim=1)
    rad = resample(rad.transpose(1, 2), 1 / gen.upsample_scale).transpose(1, 2)
    phase = torch.cumsum(rad, dim=1) * 2 * torch.pi
    phase = resample(phase.transpose(1, 2) * gen.upsample_scale, gen.upsample_scale).transpose(1, 2)
    sines = torch.sin(phase) * gen.sine_amp
    uv = (f0 > gen.voiced_threshold).to(f0.dtype)
    noise_amp = uv * gen.noise_std + (1 - uv) * gen.sine_amp / 3
    sine_waves = sines * uv + noise_amp * noise
    linear = src.l_linear
    return torch.tanh(F.linear(sine_waves, linear.weight.to(f0.dtype), linear.bias.to(f0.dtype)))


def generator(g, stft: RealSTFT, x, s, f0_curve, rand_ini, noise, span: Lengths):
    """kokoro ``Generator.forward`` over explicit noise, exact on the valid ``span`` of ``x``.

    Its STFT is kokoro's default ``TorchSTFT`` (``torch.stft``/``istft``) in real arithmetic
    (``stft.RealSTFT``); padded, it reflects the harmonic source at its *valid* end, zeroes the
    STFT frames past it, and leaves the padding frames out of the inverse and its window envelope.
    """
    upsample = int(g.f0_upsamp.scale_factor)  # F0 rate (``span``) -> samples
    f0 = span.upsample_nearest(f0_curve[:, None], upsample).transpose(1, 2)
    samples = span.scaled(upsample, f0.shape[1])
    noise = samples.zero_pad(noise, channels_last=True)
    exact = stft.forward_basis.dtype  # SOURCE_DTYPE when the wrapper was built
    source = sine_source(
        g.m_source, f0.to(exact), rand_ini.to(exact), noise.to(exact), span.resample_linear
    )
    har = torch.cat(samples.stft(stft, source.transpose(1, 2).squeeze(1)), dim=1).to(x.dtype)
    last = g.num_upsamples - 1
    for i in range(g.num_upsamples):
        x = F.leaky_relu(x, negative_slope=0.1)
        x_source = g.noise_convs[i](
            har
        )  # at this stage's rate: after ``ups[i]`` (and the last stage's pad)
        span = span.scaled(g.ups[i].stride[0], x_source.shape[-1], offset=int(i == last))
        x_source = span.resblock1(g.noise_res[i], span.zero_pad(x_source), s)
        x = g.ups[i](x)
        if i == last:
            x = g.reflection_pad(x)
        x = span.zero_pad(x) + x_source
        xs = span.resblock1(g.resblocks[i * g.num_kernels], x, s)
        for j in range(1, g.num_kernels):
            xs = xs + span.resblock1(g.resblocks[i * g.num_kernels + j], x, s)
        x = xs / g.num_kernels
    x = g.conv_post(F.leaky_relu(x))
    spec = torch.exp(x[:, : g.post_n_fft // 2 + 1, :])
    phase = torch.sin(x[:, g.post_n_fft // 2 + 1 :, :])
    return span.istft(stft, spec.to(exact), phase.to(exact), f0.shape[1]).to(x.dtype)


#: The export wrapper of each registry entry, per library shape (``params.yaml`` ``shapes``).
WRAPPERS: dict[Shapes, dict[Component, Callable[[Any], nn.Module]]] = {
    Shapes.PADDED: {DURATION: DurationPredictor, TEXT_ENCODER: TextEncoder, DECODER: Decoder},
    Shapes.BOUNDED: {
        DURATION: BoundedDurationPredictor,
        TEXT_ENCODER: BoundedTextEncoder,
        DECODER: BoundedDecoder,
    },
}


def build_component(component: str, km, shapes: Shapes = Shapes.PADDED) -> nn.Module:
    return WRAPPERS[shapes][lookup(component)](km).eval()


def component_weights(component: str, km) -> dict[str, torch.Tensor]:
    """Every parameter of a component by FQN: what a library takes after its inputs (the same
    for both shapes: the bounded wrappers only change the signature)."""
    module = build_component(component, km)
    return {k: v.detach().contiguous() for k, v in module.named_parameters()}
