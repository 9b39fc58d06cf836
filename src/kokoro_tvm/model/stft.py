"""kokoro's ``TorchSTFT`` (``torch.stft`` / ``torch.istft``) in real arithmetic, exact on a padded
time axis.

kokoro's default decoder path (``disable_complex=False``) runs ``torch.stft(center=True,
pad_mode="reflect")`` -> ``abs``/``angle`` and ``torch.istft(mag * exp(1j * phase))``. Complex
tensors do not import into TVM Relax, so this module computes the same numbers with one strided
``conv1d`` (forward DFT), one ``conv_transpose1d`` (inverse DFT + overlap-add), ``atan2``,
``sqrt``, ``cos``/``sin``, ``gather`` and ``where``.

A compiled bucket holds ``size`` samples of which only the first ``length`` are valid (a runtime
tensor). The valid part of every output equals what torch computes on the unpadded signal:
- forward: the centre padding reflects at the *runtime* end of the signal (``x[L+k] = x[L-2-k]``),
  built as one ``gather`` with computed indices; frames past ``length // hop + 1`` are zero;
- DC / Nyquist: torch's real FFT gives an imaginary part of exactly +0 there, so ``angle`` is 0
  or +pi. A float DFT row ``sin(pi * n)`` is not exactly 0, so those two imaginary rows are not
  computed at all: they are a constant +0 (``atan2(+0, x<0) = +pi``, as torch);
- inverse: ``irfft`` drops the imaginary part of DC/Nyquist and doubles bins 1..N/2-1; the
  result is windowed, overlap-added and divided by the sum of squared windows over the frames
  that *exist* (padding frames are left out of the envelope, or the last ``hop`` valid samples
  would be divided by too much); ``n_fft // 2`` samples are trimmed at both ends; samples past
  the valid end are 0 and the envelope is never divided by 0.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class RealSTFT(nn.Module):
    """Drop-in for kokoro ``TorchSTFT.transform`` / ``.inverse`` on padded axes, without complex
    ops.

    The DFT bases are built in float64 from the instance's own window (kokoro keeps a float32 Hann
    window and torch upcasts it for float64 input, so float64 runs use the same window values)
    and stored as float32 buffers; ``.double()`` rebuilds them exactly in float64.
    """

    def __init__(self, n_fft: int, hop: int, window: Tensor):
        super().__init__()
        if n_fft % 2 or window.numel() != n_fft:
            raise ValueError("needs an even n_fft and a window of n_fft samples (kokoro: 20, hann)")
        self.n_fft, self.hop, self.pad = n_fft, hop, n_fft // 2
        self.bins = n_fft // 2 + 1
        self._window = window.detach().to(torch.float64).cpu()  # plain attribute: not exported
        for name, basis in self._bases(torch.float32).items():
            self.register_buffer(name, basis)

    def _bases(self, dtype: torch.dtype) -> dict[str, Tensor]:
        """Forward/inverse DFT bases and the envelope kernel, computed in float64, cast to
        ``dtype``."""
        n_fft, w = self.n_fft, self._window
        n = torch.arange(n_fft, dtype=torch.float64)
        k = torch.arange(self.bins, dtype=torch.float64)
        # exp(-2 pi i k n / N), k*n reduced mod N first so the angle is exact.
        angle = 2 * math.pi * ((k[:, None] * n[None, :]) % n_fft) / n_fft
        cos, sin = torch.cos(angle), torch.sin(angle)
        cos[cos.abs() < 1e-15] = 0.0  # quarter turns exactly 0 (cos(pi/2) is 6e-17 in float)
        sin[sin.abs() < 1e-15] = 0.0
        inner = slice(1, self.bins - 1)  # bins with a non-zero imaginary part
        # Forward: one conv, out channels = [real (bins) | imag (bins 1..N/2-1)].
        forward = torch.cat([cos * w, -sin[inner] * w], dim=0)
        # Inverse (irfft): scale 1/N, bins 1..N/2-1 doubled, imag of DC/Nyquist ignored;
        # times the synthesis window for the overlap-add.
        scale = torch.full((self.bins, 1), 2.0 / n_fft, dtype=torch.float64)
        scale[0] = scale[-1] = 1.0 / n_fft
        inverse = torch.cat([cos * scale * w, -sin[inner] * scale[inner] * w], dim=0)
        return {
            "forward_basis": forward.unsqueeze(1).to(dtype),  # [N, 1, N]
            "inverse_basis": inverse.unsqueeze(1).to(dtype),  # [N, 1, N]
            "window_sq": (w * w).view(1, 1, -1).to(dtype),
        }  # envelope kernel

    def _apply(self, fn, recurse=True):
        """``.double()`` rebuilds the bases from float64 rather than upcasting float32 roundings
        (which would leave a 1e-7 error in a float64 reference run)."""
        super()._apply(fn, recurse)
        dtype, device = self.forward_basis.dtype, self.forward_basis.device
        if dtype == torch.float64:
            for name, basis in self._bases(dtype).items():
                setattr(self, name, basis.to(device))
        return self

    @classmethod
    def from_torch_stft(cls, stft) -> RealSTFT:
        """From kokoro's ``TorchSTFT`` (its filter_length, hop_length and window)."""
        if stft.win_length != stft.filter_length:
            raise ValueError("win_length < n_fft (zero-padded window) is not handled")
        return cls(stft.filter_length, stft.hop_length, stft.window)

    def frames(self, samples: int) -> int:
        """Frames of a centred STFT over ``samples`` samples."""
        return samples // self.hop + 1

    def _frame_mask(self, frames: int, frames_valid: Tensor) -> Tensor:
        """[B, 1, frames] bool, True on the valid frames."""
        pos = torch.arange(frames, device=frames_valid.device)
        return (pos.unsqueeze(0) < frames_valid.unsqueeze(1)).unsqueeze(1)

    def _reflect_pad(self, x: Tensor, length: Tensor) -> Tensor:
        """``F.pad(x[:, :length], (p, p), "reflect")``, then zeros: [B, size + 2p].

        The end reflection depends on the runtime length, so it is one ``gather`` with computed
        indices (integer arithmetic on an ``arange``; no boolean indexing, no data-dependent shape).
        Needs ``length > p``, as torch's reflect padding does.
        """
        size, p = x.shape[-1], self.pad
        i = torch.arange(-p, size + p, device=x.device).unsqueeze(
            0
        )  # source position, [1, size+2p]
        last = length.unsqueeze(1) - 1
        src = torch.where(i < 0, -i, i)  # start: x[-k] = x[k]
        src = torch.where(src > last, 2 * last - src, src)  # end: x[L-1+k] = x[L-1-k]
        keep = i <= last + p  # beyond the reflected tail: zero (only padding frames read it)
        src = src.clamp(0, size - 1)
        xp = torch.gather(x, 1, src.expand(x.shape[0], -1))
        return torch.where(keep, xp, torch.zeros_like(xp))

    def transform(self, x: Tensor, length: Tensor) -> tuple[Tensor, Tensor]:
        """``torch.stft(x[:, :length], center=True)`` -> (abs, angle), each [B, N/2+1, size//hop+1].

        Frames from ``length // hop + 1`` on are exactly 0 in both outputs.
        """
        xp = self._reflect_pad(x, length).unsqueeze(1)
        spec = F.conv1d(xp, self.forward_basis, stride=self.hop)  # [B, real bins | inner imag, F]
        # Frame f is valid iff f * hop <= length (f < length // hop + 1), written without a
        # tensor floor division (it imports as int64 // int32, which Relax rejects).
        pos = torch.arange(spec.shape[-1], device=x.device) * self.hop
        valid = (pos.unsqueeze(0) <= length.unsqueeze(1)).unsqueeze(1)
        spec = torch.where(valid, spec, torch.zeros_like(spec))  # +0 (a product by 0 can give -0)
        return self._polar(spec)

    def transform_whole(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``transform`` of a signal valid to its end (a bounded library's, of symbolic length):
        the plain reflection and no frame mask. Needs more than ``n_fft // 2`` samples, as torch."""
        p = self.pad
        xp = torch.cat([x[:, 1 : p + 1].flip(-1), x, x[:, -p - 1 : -1].flip(-1)], dim=-1)
        return self._polar(F.conv1d(xp.unsqueeze(1), self.forward_basis, stride=self.hop))

    def _polar(self, spec: Tensor) -> tuple[Tensor, Tensor]:
        """(abs, angle) of the forward DFT's output [B, real bins | inner imag, F], as torch gives
        them."""
        real, inner_imag = spec[:, : self.bins], spec[:, self.bins :]
        inner_real = real[:, 1:-1]
        magnitude = torch.cat(
            [
                real[:, :1].abs(),
                torch.sqrt(inner_real * inner_real + inner_imag * inner_imag),
                real[:, -1:].abs(),
            ],
            dim=1,
        )  # torch.abs: no epsilon
        # DC and Nyquist have an exact +0 imaginary part, so torch.angle gives 0 or pi there: a
        # comparison, not atan2 (ONNX's atan2, as torch exports it, gives -pi for atan2(+0, x < 0)).
        # Padding frames are +0: angle 0.
        edge = torch.cat([real[:, :1], real[:, -1:]], dim=1)
        edge = torch.where(edge < 0, torch.full_like(edge, math.pi), torch.zeros_like(edge))
        phase = torch.cat([edge[:, :1], torch.atan2(inner_imag, inner_real), edge[:, 1:]], dim=1)
        return magnitude, phase

    def inverse_whole(self, magnitude: Tensor, phase: Tensor, samples: int) -> Tensor:
        """``inverse`` when every frame is valid (a bounded library's): -> [B, 1, samples], where
        ``samples = hop * (frames - 1)`` is passed in so that it stays the plain ``600 n``."""
        z = self._rectangular(magnitude, phase)
        audio = F.conv_transpose1d(z, self.inverse_basis, stride=self.hop)
        envelope = F.conv_transpose1d(
            torch.ones_like(magnitude[:, :1]), self.window_sq, stride=self.hop
        )
        p = self.pad
        return audio[..., p : p + samples] / envelope[..., p : p + samples]

    def _rectangular(self, magnitude: Tensor, phase: Tensor) -> Tensor:
        """[B, real bins | inner imag, F]: irfft ignores the imaginary part of DC and Nyquist."""
        inner = slice(1, self.bins - 1)
        return torch.cat(
            [magnitude * torch.cos(phase), magnitude[:, inner] * torch.sin(phase[:, inner])], dim=1
        )

    def inverse(self, magnitude: Tensor, phase: Tensor, frames_valid: Tensor) -> Tensor:
        """``torch.istft(magnitude * exp(1j * phase), center=True)`` on the first ``frames_valid``
        frames -> [B, 1, hop * (frames - 1)] (``unsqueeze(-2)`` as kokoro's ``TorchSTFT.inverse``).

        Samples from ``hop * (frames_valid - 1)`` on are exactly 0.
        """
        frames = magnitude.shape[-1]
        valid = self._frame_mask(frames, frames_valid)
        z = self._rectangular(magnitude, phase)
        z = torch.where(valid, z, torch.zeros_like(z))  # padding frames: exp(junk) in the generator
        audio = F.conv_transpose1d(z, self.inverse_basis, stride=self.hop)
        envelope = F.conv_transpose1d(valid.to(magnitude.dtype), self.window_sq, stride=self.hop)
        p, samples = self.pad, self.hop * (frames - 1)
        audio, envelope = audio[..., p : p + samples], envelope[..., p : p + samples]
        # torch.istft divides by the envelope (it asserts > 1e-11 there); past the valid end the
        # envelope falls to 0, so divide by 1 there and zero the result.
        inside = torch.arange(samples, device=magnitude.device) < (
            self.hop * (frames_valid - 1)
        ).view(-1, 1, 1)
        audio = audio / torch.where(inside, envelope, torch.ones_like(envelope))
        return torch.where(inside, audio, torch.zeros_like(audio))
