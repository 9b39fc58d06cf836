"""Export wrappers: the three compiled components, written over kokoro's own submodules.

Each wrapper reads like kokoro's ``forward_with_tokens`` slice it replaces, with three changes
that make it exportable and bucketable (DESIGN.md §3):
- every LSTM is the length-aware ``kokoro_tvm::lstm`` op (packing does not export);
- the decoder's random draws (phase ``rand``, sine noise ``randn``) are explicit inputs;
- the STFT is kokoro's default ``TorchSTFT`` in real arithmetic (complex ops do not import).
Weight norm is folded away so the exported graph does not recompute it on every call.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..spec import check_component
from .lstm_op import lstm_with_lengths
from .masked import Span, adain_resblk1d, adain_resblock1
from .stft import RealSTFT


def fold_weight_norm(module: nn.Module) -> nn.Module:
    """Replace ``weight_g``/``weight_v`` by the plain weight they compute."""
    for m in module.modules():
        if hasattr(m, "weight_g") and hasattr(m, "weight_v"):
            torch.nn.utils.remove_weight_norm(m)
    return module


def _valid_mask(lengths: torch.Tensor, size: int) -> torch.Tensor:
    """[B, size] bool, True on valid positions."""
    return torch.arange(size, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


class DurationPredictor(nn.Module):
    """ALBERT -> bert_encoder -> DurationEncoder -> LSTM -> duration_proj (per-token durations)."""

    def __init__(self, km):
        super().__init__()
        self.bert = copy.deepcopy(km.bert)
        self.bert_encoder = copy.deepcopy(km.bert_encoder)
        self.predictor = fold_weight_norm(copy.deepcopy(km.predictor))
        for name in ("shared", "F0", "N", "F0_proj", "N_proj"):  # frame-side: the decoder's
            delattr(self.predictor, name)

    def forward(self, input_ids, input_lengths, style):
        valid = _valid_mask(input_lengths, input_ids.shape[1])
        bert_dur = self.bert(input_ids, attention_mask=valid.int())
        d_en = self.bert_encoder(bert_dur).transpose(-1, -2)
        d = duration_encoder(self.predictor.text_encoder, d_en, style, input_lengths, valid)
        x = lstm_with_lengths(self.predictor.lstm, d, input_lengths)
        duration = self.predictor.duration_proj(x)
        duration = torch.sigmoid(duration).sum(dim=-1)
        return duration, d


def duration_encoder(enc, x, style, lengths, valid):
    """kokoro ``DurationEncoder.forward`` with the length-aware LSTM. Returns [B, T, d_model+sty]."""
    from kokoro.modules import AdaLayerNorm

    pad = ~valid  # [B, T]
    x = x.permute(2, 0, 1)  # [T, B, C]
    s = style.expand(x.shape[0], x.shape[1], -1)
    x = torch.cat([x, s], dim=-1)
    x = x.masked_fill(pad.transpose(0, 1).unsqueeze(-1), 0.0)
    x = x.permute(1, 2, 0)  # [B, C, T]
    for block in enc.lstms:
        if isinstance(block, AdaLayerNorm):
            x = block(x.transpose(-1, -2), style).transpose(-1, -2)
            x = torch.cat([x, s.permute(1, 2, 0)], dim=1)
            x = x.masked_fill(pad.unsqueeze(1), 0.0)
        else:
            x = lstm_with_lengths(block, x.transpose(-1, -2), lengths).transpose(-1, -2)
    return x.transpose(-1, -2)


class TextEncoder(nn.Module):
    """Embedding -> CNN -> BiLSTM, kokoro ``TextEncoder.forward`` with the length-aware LSTM."""

    def __init__(self, km):
        super().__init__()
        self.te = fold_weight_norm(copy.deepcopy(km.text_encoder))

    def forward(self, input_ids, input_lengths):
        pad = (~_valid_mask(input_lengths, input_ids.shape[1])).unsqueeze(1)  # [B, 1, T]
        x = self.te.embedding(input_ids).transpose(1, 2)
        x = x.masked_fill(pad, 0.0)
        for c in self.te.cnn:
            x = c(x).masked_fill(pad, 0.0)
        x = lstm_with_lengths(self.te.lstm, x.transpose(1, 2), input_lengths).transpose(-1, -2)
        return x.masked_fill(pad, 0.0)


class Decoder(nn.Module):
    """F0/N prediction (``predictor.F0Ntrain``) + iSTFTNet decoder, exact on padded frames.

    ``rand_ini`` is SineGen's initial-phase draw ([B, harmonics]; column 0 is zeroed as kokoro
    does) and ``noise`` its ``randn_like`` ([B, samples, harmonics]). Only the first
    ``frame_lengths`` frames are valid: norms, convolutions and the STFT see exactly what kokoro
    sees on the unpadded input (``masked``), and audio past ``frame_lengths * 600`` samples is 0.
    Time resolutions: frames (m) -> F0/N rate (2m) -> generator stages (2m * prod(ups[:i+1]),
    +1 after the reflection pad) -> samples (2m * prod(ups) * hop).
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
        s_dec, s_pros = ref_s[:, :128], ref_s[:, 128:]
        frames = Span.of(frame_lengths, en.shape[-1])
        f0, n = self.f0n(en, s_pros, frames)
        return self.decode(asr, f0, n, s_dec, rand_ini, noise, frames)

    def f0n(self, en, s, frames: Span):
        """F0 and N curves at twice the frame rate, zero past ``2 * length``."""
        p = self.predictor
        x = lstm_with_lengths(p.shared, en.transpose(-1, -2), frames.length).transpose(-1, -2)
        f0, n, f0_span = x, x, frames
        for block in p.F0:
            f0, f0_span = adain_resblk1d(block, f0, s, f0_span)
        n_span = frames
        for block in p.N:
            n, n_span = adain_resblk1d(block, n, s, n_span)
        return f0_span.zero_pad(p.F0_proj(f0)).squeeze(1), n_span.zero_pad(p.N_proj(n)).squeeze(1)

    def decode(self, asr, f0_curve, n, s, rand_ini, noise, frames: Span):
        d = self.decoder
        f0 = d.F0_conv(f0_curve.unsqueeze(1))
        n = d.N_conv(n.unsqueeze(1))
        x, span = adain_resblk1d(d.encode, torch.cat([asr, f0, n], dim=1), s, frames)
        asr_res = d.asr_res(asr)
        res = True
        for block in d.decode:
            if res:
                x = torch.cat([x, asr_res, f0, n], dim=1)
            x, span = adain_resblk1d(block, x, s, span)
            if block.upsample_type != "none":
                res = False
        return generator(d.generator, self.stft, x, s, f0_curve, rand_ini, noise, span)


#: The harmonic source and its STFT run in float64: float32 accumulates the sine phase (the 9th
#: harmonic passes 1e5 rad within seconds, where a float32 step is 0.008 rad) and gives an arbitrary
#: ``atan2`` to near-zero STFT bins, which ``noise_convs`` then read linearly. It is ~1e-4 of the
#: decoder's arithmetic (9 harmonics and a 20-tap DFT per sample, against the generator's convs).
SOURCE_DTYPE = torch.float64


def interpolate_linear(x: torch.Tensor, factor: float) -> torch.Tensor:
    """SineGen's resampling of [B, C, L] by ``factor`` (kokoro's call, align_corners=False)."""
    return F.interpolate(x, scale_factor=factor, mode="linear")


def sine_source(src, f0: torch.Tensor, rand_ini: torch.Tensor, noise: torch.Tensor,
                resample: Callable[[torch.Tensor, float], torch.Tensor] = interpolate_linear) -> torch.Tensor:
    """``SourceModuleHnNSF`` + ``SineGen`` with the draws passed in. f0: [B, L, 1].

    Padding needs no special case: f0 is 0 there, so the phase increments are 0 and the
    cumulative phase holds its last valid value, which is exactly how kokoro's linear
    upsampling clamps at the end of the unpadded signal. ``resample``: another form of
    ``interpolate_linear`` (a bounded export's, ``model.bounded``).
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


def generator(g, stft: RealSTFT, x, s, f0_curve, rand_ini, noise, span: Span):
    """kokoro ``Generator.forward`` over explicit noise, exact on the valid ``span`` of ``x``.

    Its STFT is kokoro's default ``TorchSTFT`` (``torch.stft``/``istft``) in real arithmetic
    (``stft.RealSTFT``), which reflects the harmonic source at its *valid* end, zeroes the STFT
    frames past it, and leaves the padding frames out of the inverse and its window envelope.
    """
    upsample = int(g.f0_upsamp.scale_factor)  # F0 rate (``span``) -> samples
    f0 = g.f0_upsamp(f0_curve[:, None]).transpose(1, 2)
    samples = span.scaled(upsample, f0.shape[1])
    noise = noise * samples.mask.transpose(1, 2)
    exact = stft.forward_basis.dtype  # SOURCE_DTYPE when the wrapper was built
    source = sine_source(g.m_source, f0.to(exact), rand_ini.to(exact), noise.to(exact))
    har = torch.cat(stft.transform(source.transpose(1, 2).squeeze(1), samples.length), dim=1).to(x.dtype)
    for i in range(g.num_upsamples):
        x = F.leaky_relu(x, negative_slope=0.1)
        x = g.ups[i](x)
        span = span.scaled(g.ups[i].stride[0], x.shape[-1])
        if i == g.num_upsamples - 1:
            x = g.reflection_pad(x)
            span = span.scaled(1, x.shape[-1], offset=1)
        x_source = adain_resblock1(g.noise_res[i], span.zero_pad(g.noise_convs[i](har)), s, span)
        x = span.zero_pad(x) + x_source
        xs = adain_resblock1(g.resblocks[i * g.num_kernels], x, s, span)
        for j in range(1, g.num_kernels):
            xs = xs + adain_resblock1(g.resblocks[i * g.num_kernels + j], x, s, span)
        x = xs / g.num_kernels
    x = g.conv_post(F.leaky_relu(x))
    spec = torch.exp(x[:, : g.post_n_fft // 2 + 1, :])
    phase = torch.sin(x[:, g.post_n_fft // 2 + 1 :, :])
    return stft.inverse(spec.to(exact), phase.to(exact), span.length).to(x.dtype)


WRAPPERS: dict[str, Callable[[Any], nn.Module]] = {
    "duration": DurationPredictor,
    "text_encoder": TextEncoder,
    "decoder": Decoder,
}


def build_component(component: str, km) -> nn.Module:
    return WRAPPERS[check_component(component)](km).eval()


def component_weights(component: str, km) -> dict[str, torch.Tensor]:
    """Every parameter of a component by FQN: what a library takes after its inputs."""
    module = build_component(component, km)
    return {k: v.detach().contiguous() for k, v in module.named_parameters()}
