"""Length-masked versions of kokoro's normalising blocks, so a padded bucket gives the unpadded answer.

kokoro runs its decoder on exactly the valid frames. A compiled bucket sees ``bucket`` frames of
which only ``length`` are valid, and three things would then leak padding into valid outputs:
- instance-norm statistics taken over the whole time axis (a public port measured correlation
  0.77 with the reference at bucket 256 because of this);
- a convolution with kernel > 1 reading past the valid end, where kokoro reads its zero padding;
- layers that add a bias (convs, AdaIN's ``beta``) turning zero padding into non-zero values.

So every norm here takes its statistics over the valid length only, and every tensor that feeds
a convolution is re-zeroed past the valid length of *its own* time resolution (``Span``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class Span:
    """The valid prefix of a time axis: ``length`` ([B] int64) positions out of ``size``."""

    length: Tensor
    size: int

    @staticmethod
    def of(length: Tensor, size: int) -> "Span":
        return Span(length.to(torch.int64), size)

    def scaled(self, factor: int, size: int, offset: int = 0) -> "Span":
        """The same content at another time resolution (an upsampling by ``factor``)."""
        return Span(self.length * factor + offset, size)

    @property
    def mask(self) -> Tensor:
        """[B, 1, size] float: 1 on valid positions, 0 on padding."""
        pos = torch.arange(self.size, device=self.length.device)
        return (pos.unsqueeze(0) < self.length.unsqueeze(1)).unsqueeze(1).to(torch.float32)

    def zero_pad(self, x: Tensor) -> Tensor:
        """``x`` [B, C, size] with padded positions set to 0 (what kokoro's convs read there)."""
        return x * self.mask


def instance_norm(norm: nn.InstanceNorm1d, x: Tensor, span: Span) -> Tensor:
    """``nn.InstanceNorm1d`` (eval, no running stats) with mean and variance over the valid span."""
    mask = span.mask
    count = span.length.to(x.dtype).view(-1, 1, 1)
    mean = (x * mask).sum(-1, keepdim=True) / count
    centred = (x - mean) * mask
    var = (centred * centred).sum(-1, keepdim=True) / count  # biased, as InstanceNorm
    y = centred * torch.rsqrt(var + norm.eps)
    if norm.affine:
        y = y * norm.weight.view(1, -1, 1) + norm.bias.view(1, -1, 1)
    return y


def adain(block, x: Tensor, s: Tensor, span: Span) -> Tensor:
    """kokoro ``AdaIN1d``: ``(1 + gamma) * norm(x) + beta``, zero past the span (beta is a bias)."""
    h = block.fc(s).unsqueeze(-1)
    gamma, beta = torch.chunk(h, chunks=2, dim=1)
    return span.zero_pad((1 + gamma) * instance_norm(block.norm, x, span) + beta)


def adain_resblk1d(block, x: Tensor, s: Tensor, span: Span) -> tuple[Tensor, Span]:
    """kokoro ``AdainResBlk1d`` (F0/N and decoder blocks); returns the output and its span.

    An upsampling block doubles the time axis: its depthwise transposed conv adds a bias, so
    its output is re-zeroed before ``conv1`` reads it.
    """
    out_span = span if block.upsample_type == "none" else span.scaled(2, 2 * span.size)
    r = block.actv(adain(block.norm1, x, s, span))
    if block.upsample_type != "none":
        r = out_span.zero_pad(block.pool(r))
    r = block.conv1(r)
    r = block.conv2(block.actv(adain(block.norm2, r, s, out_span)))
    shortcut = block.upsample(x)
    if block.learned_sc:
        shortcut = block.conv1x1(shortcut)
    return out_span.zero_pad((r + shortcut) * (2.0 ** -0.5)), out_span


def snake(x: Tensor, alpha: Tensor) -> Tensor:
    """Snake1D as kokoro writes it; snake(0) = 0, so zero padding stays zero."""
    return x + (1 / alpha) * (torch.sin(alpha * x) ** 2)


def adain_resblock1(block, x: Tensor, s: Tensor, span: Span) -> Tensor:
    """kokoro ``AdaINResBlock1`` (generator resblocks), zero past the span."""
    for c1, c2, n1, n2, a1, a2 in zip(block.convs1, block.convs2, block.adain1, block.adain2,
                                      block.alpha1, block.alpha2):
        xt = c1(snake(adain(n1, x, s, span), a1))
        xt = c2(snake(adain(n2, xt, s, span), a2))
        x = xt + x
    return span.zero_pad(x)
