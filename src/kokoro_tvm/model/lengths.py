"""How a component sees a time axis: whole (bounded libraries) or a valid prefix of a padded bucket.

The components (``components``) are written once, over one of these *length policies*, which
supply everything that differs between the two library shapes (``spec.Shapes``):

``Bounded`` (``Shapes.BOUNDED``): the tensor is exactly the valid length ``n``, a
symbolic ``torch.export.Dim`` up to the bucket. Nothing is masked and kokoro's own norms run.
Resamplings are written out: with a symbolic length, ``F.interpolate``'s ``scale_factor`` form
computes its output size in floats (``sym_float``, ``truediv``, ``trunc``), which TVM 0.27's
importer cannot express ("Unsupported function types"); nearest upsampling becomes expand +
reshape, SineGen's linear resampling slices of a reshaped signal with constant weights (the
positions ``align_corners=False`` samples). The STFT needs no frame masks.

``Padded`` (``Shapes.PADDED``): only the first ``length`` of ``size`` positions are valid, and
three things would leak padding into valid outputs:
- instance-norm statistics taken over the whole time axis (a public port measured correlation
  0.77 with the reference at bucket 256 because of this);
- a convolution with kernel > 1 reading past the valid end, where kokoro reads its zero padding;
- layers that add a bias (convs, AdaIN's ``beta``) turning zero padding into non-zero values.
So its norms take statistics over the valid length only, and every tensor that feeds a
convolution is re-zeroed past the valid length of *its own* time resolution.

Both run every LSTM as the ``kokoro_tvm::lstm`` op (packing does not export).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .lstm_op import lstm_with_lengths

# -- the two policies ---------------------------------------------------------------------------


class Bounded:
    """Every position of the axis is valid: kokoro's own computation at the tensor's length."""

    def scaled(self, factor: int, size: int, offset: int = 0) -> Bounded:
        return self

    def upsampled(self, factor: int) -> Bounded:
        return self

    def zero_pad(self, x: Tensor, channels_last: bool = False) -> Tensor:
        return x

    def attention_mask(self, input_ids: Tensor) -> Tensor:
        return torch.ones_like(input_ids, dtype=torch.int32)

    def lstm(self, module: nn.LSTM, x: Tensor) -> Tensor:
        """kokoro's ``module(x)[0]`` over the whole sequence, through the exportable op."""
        return lstm_with_lengths(
            module, x, torch.full((x.shape[0],), x.shape[1], dtype=torch.int64, device=x.device)
        )

    def adain(self, block, x: Tensor, s: Tensor) -> Tensor:
        return block(x, s)  # kokoro ``AdaIN1d``

    def resblock1(self, block, x: Tensor, s: Tensor) -> Tensor:
        return block(x, s)  # kokoro ``AdaINResBlock1``

    def upsample_nearest(self, x: Tensor, factor: int) -> Tensor:
        return upsample_nearest(x, factor)

    def resample_linear(self, x: Tensor, factor: float) -> Tensor:
        return resample_linear(x, factor)

    def stft(self, stft, x: Tensor) -> tuple[Tensor, Tensor]:
        return stft.transform_whole(x)

    def istft(self, stft, magnitude: Tensor, phase: Tensor, samples: int) -> Tensor:
        return stft.inverse_whole(magnitude, phase, samples)


@dataclass(frozen=True)
class Padded:
    """The valid prefix of a time axis: ``length`` ([B] int64) positions out of ``size``."""

    length: Tensor
    size: int

    @staticmethod
    def of(length: Tensor, size: int) -> Padded:
        return Padded(length.to(torch.int64), size)

    def scaled(self, factor: int, size: int, offset: int = 0) -> Padded:
        """The same content at another time resolution (an upsampling by ``factor``, then
        ``offset`` positions padded on the left)."""
        return Padded(self.length * factor + offset, size)

    def upsampled(self, factor: int) -> Padded:
        return Padded(self.length * factor, self.size * factor)

    @property
    def mask(self) -> Tensor:
        """[B, 1, size] float: 1 on valid positions, 0 on padding."""
        pos = torch.arange(self.size, device=self.length.device)
        return (pos.unsqueeze(0) < self.length.unsqueeze(1)).unsqueeze(1).to(torch.float32)

    def zero_pad(self, x: Tensor, channels_last: bool = False) -> Tensor:
        """``x`` ([B, C, size], or [B, size, C]) with padded positions set to 0 (what kokoro's
        convs read there)."""
        return x * (self.mask.transpose(1, 2) if channels_last else self.mask)

    def attention_mask(self, input_ids: Tensor) -> Tensor:
        return self.mask.squeeze(1).int()

    def lstm(self, module: nn.LSTM, x: Tensor) -> Tensor:
        return lstm_with_lengths(module, x, self.length)

    def adain(self, block, x: Tensor, s: Tensor) -> Tensor:
        """kokoro ``AdaIN1d``: ``(1 + gamma) * norm(x) + beta``, zero past the span (beta is a
        bias)."""
        h = block.fc(s).unsqueeze(-1)
        gamma, beta = torch.chunk(h, chunks=2, dim=1)
        return self.zero_pad((1 + gamma) * self.instance_norm(block.norm, x) + beta)

    def instance_norm(self, norm: nn.InstanceNorm1d, x: Tensor) -> Tensor:
        """``nn.InstanceNorm1d`` (eval, no running stats) with mean and variance over the span."""
        mask = self.mask
        count = self.length.to(x.dtype).view(-1, 1, 1)
        mean = (x * mask).sum(-1, keepdim=True) / count
        centred = (x - mean) * mask
        var = (centred * centred).sum(-1, keepdim=True) / count  # biased, as InstanceNorm
        y = centred * torch.rsqrt(var + norm.eps)
        if norm.affine:
            y = y * norm.weight.view(1, -1, 1) + norm.bias.view(1, -1, 1)
        return y

    def resblock1(self, block, x: Tensor, s: Tensor) -> Tensor:
        """kokoro ``AdaINResBlock1`` (generator resblocks), zero past the span; snake(0) = 0."""
        for c1, c2, n1, n2, a1, a2 in zip(
            block.convs1, block.convs2, block.adain1, block.adain2, block.alpha1, block.alpha2
        ):
            xt = c1(snake(self.adain(n1, x, s), a1))
            xt = c2(snake(self.adain(n2, xt, s), a2))
            x = xt + x
        return self.zero_pad(x)

    def upsample_nearest(self, x: Tensor, factor: int) -> Tensor:
        return F.interpolate(
            x, scale_factor=factor, mode="nearest"
        )  # kokoro's UpSample1d, f0_upsamp

    def resample_linear(self, x: Tensor, factor: float) -> Tensor:
        return F.interpolate(
            x, scale_factor=factor, mode="linear"
        )  # SineGen's, align_corners=False

    def stft(self, stft, x: Tensor) -> tuple[Tensor, Tensor]:
        return stft.transform(x, self.length)

    def istft(self, stft, magnitude: Tensor, phase: Tensor, samples: int) -> Tensor:
        return stft.inverse(magnitude, phase, self.length)


Lengths = Bounded | Padded


def snake(x: Tensor, alpha: Tensor) -> Tensor:
    """Snake1D as kokoro writes it."""
    return x + (1 / alpha) * (torch.sin(alpha * x) ** 2)


# -- resamplings written out (``Bounded``) ------------------------------------------------------


def upsample_nearest(x: Tensor, factor: int) -> Tensor:
    """``F.interpolate(x, scale_factor=factor, mode="nearest")`` for an integer factor, [B, C,
    L]."""
    b, c, length = x.shape
    return x.unsqueeze(-1).expand(b, c, length, factor).reshape(b, c, length * factor)


def resample_linear(x: Tensor, factor: float) -> Tensor:
    """``F.interpolate(x, scale_factor=factor, mode="linear")`` for SineGen's factors (1/300,
    300)."""
    return (
        _downsample_linear(x, round(1 / factor)) if factor < 1 else _upsample_linear(x, int(factor))
    )


def _downsample_linear(x: Tensor, factor: int) -> Tensor:
    """By an even ``factor`` that divides the length: output ``j`` samples the input at
    ``factor j + factor / 2 - 0.5``, the mean of two neighbours."""
    b, c, length = x.shape
    y = x.reshape(b, c, length // factor, factor)
    return 0.5 * (y[..., factor // 2 - 1] + y[..., factor // 2])


def _upsample_linear(x: Tensor, factor: int) -> Tensor:
    """By an even ``factor``: output ``factor j + r`` samples the input at ``j + (r + 0.5) / factor
    - 0.5``, clamped at both ends; with the signal edge-padded by one (``p``) that is
    ``p[j + a] (1 - w_r) + p[j + a + 1] w_r``, ``a`` = 0 for the first half of ``r``, 1 after."""
    b, c, length = x.shape
    half = factor // 2
    p = torch.cat([x[..., :1], x, x[..., -1:]], dim=-1)
    r = torch.arange(factor, dtype=x.dtype, device=x.device)
    w = (r + 0.5) / factor - 0.5
    w = torch.where(r < half, w + 1.0, w)  # the upper neighbour's weight
    lo = torch.cat(
        [
            p[..., :length, None].expand(b, c, length, half),
            p[..., 1 : length + 1, None].expand(b, c, length, factor - half),
        ],
        dim=-1,
    )
    hi = torch.cat(
        [
            p[..., 1 : length + 1, None].expand(b, c, length, half),
            p[..., 2:, None].expand(b, c, length, factor - half),
        ],
        dim=-1,
    )
    return (lo * (1 - w) + hi * w).reshape(b, c, length * factor)
