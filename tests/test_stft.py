"""RealSTFT against kokoro's default path (``torch.stft`` / ``torch.istft``) on padded axes.

Every agreement check has a negative control next to it: the same check run on a plausible
wrong implementation (kokoro's CustomSTFT, a static pad, an unmasked envelope, a -0 imaginary
part, a TVM run at another length) and shown to fail, so a pass means something.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from kokoro.custom_stft import CustomSTFT
from kokoro.istftnet import SourceModuleHnNSF, TorchSTFT

from kokoro_tvm.model.stft import RealSTFT

N_FFT, HOP = 20, 5  # Kokoro-82M: istftnet gen_istft_n_fft / gen_istft_hop_size
SIZE = 8 * 600  # a bucket of 8 acoustic frames, in samples
FRAMES = SIZE // HOP + 1
LENGTHS = [11, 1800, 3000, 4795, SIZE]  # 11 = the shortest torch can reflect-pad; SIZE = unpadded
EDGE = [0, N_FFT // 2]  # DC and Nyquist rows
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}  # max abs error relative to the signal's max


@pytest.fixture(scope="module")
def kokoro_stft() -> TorchSTFT:
    return TorchSTFT(N_FFT, HOP, N_FFT)


def real_stft(kokoro_stft: TorchSTFT, dtype: torch.dtype) -> RealSTFT:
    return RealSTFT.from_torch_stft(kokoro_stft).to(dtype)


def window(kokoro_stft: TorchSTFT, dtype: torch.dtype) -> torch.Tensor:
    """kokoro's float32 Hann window in ``dtype``. (Passing the float32 window with float64 input,
    as kokoro does, makes torch.istft itself deviate by ~1e-9 from its own float64 result.)"""
    return kokoro_stft.window.to(dtype)


def ref_stft(kokoro_stft, x: torch.Tensor) -> torch.Tensor:
    return torch.stft(
        x, N_FFT, HOP, N_FFT, window=window(kokoro_stft, x.dtype), return_complex=True
    )


def ref_istft(kokoro_stft, mag: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """kokoro ``TorchSTFT.inverse`` (same expression) with the window in the input's dtype."""
    return torch.istft(
        mag * torch.exp(phase * 1j), N_FFT, HOP, N_FFT, window=window(kokoro_stft, mag.dtype)
    )


def complex_error(mag, phase, ref: torch.Tensor) -> float:
    """max |mag e^{i phase} - ref| / max |ref|: insensitive to the arbitrary angle of ~0 bins."""
    return ((torch.polar(mag, phase) - ref).abs().max() / ref.abs().max()).item()


def rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return ((got - ref).abs().max() / ref.abs().max()).item()


def padded(x: torch.Tensor, size: int, garbage: bool = True) -> torch.Tensor:
    """``x`` [B, L] in a [B, size] bucket; the padding holds large junk unless ``garbage=False``."""
    fill = (
        100 * torch.randn(x.shape[0], size - x.shape[1], dtype=x.dtype)
        if garbage
        else torch.zeros(x.shape[0], size - x.shape[1], dtype=x.dtype)
    )
    return torch.cat([x, fill], dim=1)


def harmonic_source(samples: int, seed: int = 0) -> torch.Tensor:
    """What kokoro's Generator feeds its STFT: SourceModuleHnNSF (9 harmonics, tanh) over a
    realistic F0 contour (voiced 90..260 Hz with an unvoiced stretch). Returns [1, samples]."""
    torch.manual_seed(seed)
    src = SourceModuleHnNSF(24000, 300, harmonic_num=8, voiced_threshod=10)
    t = torch.linspace(0, 1, samples // 300)
    f0 = 175 + 85 * torch.sin(2 * math.pi * 1.3 * t)
    f0[len(f0) // 3 : len(f0) // 2] = 0.0  # unvoiced: noise only
    f0 = F.interpolate(f0.view(1, 1, -1), scale_factor=300).transpose(1, 2)  # nearest, as f0_upsamp
    with torch.no_grad():
        return src(f0)[0].transpose(1, 2).squeeze(1)


def generator_spectrum(
    frames: int, dtype: torch.dtype, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``spec = exp(x)``, ``phase = sin(y)`` as kokoro's Generator builds the inverse's input."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 2 * (N_FFT // 2 + 1), frames, generator=g, dtype=dtype)
    return torch.exp(x[:, : N_FFT // 2 + 1] - 1.0), torch.sin(3 * x[:, N_FFT // 2 + 1 :])


def signals(dtype: torch.dtype, length: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(length)
    return {
        "random": torch.randn(1, length, generator=g, dtype=dtype),
        "harmonic": harmonic_source(SIZE, seed=length)[:, :length].to(dtype),
    }


# --- forward --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("length", LENGTHS)
def test_transform_matches_torch_stft(kokoro_stft, dtype, length):
    stft = real_stft(kokoro_stft, dtype)
    for name, x in signals(dtype, length).items():
        ref = ref_stft(kokoro_stft, x)
        valid = ref.shape[-1]
        mag, phase = stft.transform(padded(x, SIZE), torch.tensor([length]))
        assert mag.shape == phase.shape == (1, N_FFT // 2 + 1, FRAMES)
        assert rel_error(mag[..., :valid], ref.abs()) < TOL[dtype], name
        assert complex_error(mag[..., :valid], phase[..., :valid], ref) < TOL[dtype], name
        if dtype == torch.float64:  # every bin's angle, too
            assert (phase[..., :valid] - ref.angle()).abs().max() < 1e-9, name
        # padding frames: exactly zero, whatever junk the padded samples hold
        assert torch.all(mag[..., valid:] == 0) and torch.all(phase[..., valid:] == 0)


def test_transform_negative_controls(kokoro_stft):
    """What the check above rejects: the stft of the whole bucket (static reflect at ``size``),
    replicate padding at the valid end (kokoro's CustomSTFT / the current pipeline)."""
    length = 3000
    x = signals(torch.float64, length)["harmonic"]
    ref = ref_stft(kokoro_stft, x)
    valid = ref.shape[-1]
    whole = ref_stft(kokoro_stft, padded(x, SIZE, garbage=False))
    assert complex_error(whole[..., :valid].abs(), whole[..., :valid].angle(), ref) > 1e-3
    assert whole[..., valid:].abs().max() > 0  # nothing masks the tail
    # replicate at the valid end: only the last frames differ, and by more than any tolerance
    xr = F.pad(x.unsqueeze(1), (N_FFT // 2, N_FFT // 2), mode="replicate").squeeze(1)
    custom = F.conv1d(
        xr.unsqueeze(1), CustomSTFT(N_FFT, HOP, N_FFT).double().weight_forward_real, stride=HOP
    )
    err = (custom - ref.real).abs().amax(dim=(0, 1))
    assert err[2:-2].max() < 1e-6 and err[-1] > 1e-3 and err[0] > 1e-3  # (float32 weights inside)


def test_dc_nyquist_phase_exact(kokoro_stft):
    """angle at DC/Nyquist is exactly torch's: 0 or +pi (imag is +0 in torch.stft)."""
    for dtype in (torch.float64, torch.float32):
        stft = real_stft(kokoro_stft, dtype)
        for length in LENGTHS[1:]:
            for name, x in signals(dtype, length).items():
                ref = ref_stft(kokoro_stft, x)[:, EDGE]
                valid = ref.shape[-1]
                assert torch.all(ref.imag == 0) and not torch.signbit(ref.imag).any()
                phase = stft.transform(padded(x, SIZE), torch.tensor([length]))[1][:, EDGE, :valid]
                # The sign of the real part decides 0 vs pi; it is reliable where |real| is not
                # at rounding level (float32: a handful of near-zero Nyquist frames).
                sure = ref.real.abs() > 1e3 * torch.finfo(dtype).eps * ref.real.abs().max()
                assert torch.equal(phase[sure], ref.angle()[sure]), (dtype, length, name)
                assert set(phase.unique().tolist()) <= {
                    0.0,
                    torch.tensor(math.pi, dtype=dtype).item(),
                }
                if dtype == torch.float64:
                    assert torch.equal(phase, ref.angle())


def test_dc_nyquist_negative_controls(kokoro_stft):
    """A float-sin DFT (kokoro's CustomSTFT weights) gives non-{0, pi} Nyquist angles, and a -0
    imaginary part gives -pi where torch gives +pi."""
    length = 3000
    x = signals(torch.float64, length)["random"]
    ref = ref_stft(kokoro_stft, x)
    custom = CustomSTFT(N_FFT, HOP, N_FFT, pad_mode="reflect").double()
    assert custom.weight_forward_imag[N_FFT // 2].abs().max() > 0  # sin(pi n) != 0 in float
    _, cphase = custom.transform(x)
    assert not torch.equal(cphase[:, N_FFT // 2], ref.angle()[:, N_FFT // 2])
    dc_real = ref.real[:, 0]
    assert (dc_real < 0).sum() > 5  # the check below is not vacuous
    assert torch.all(torch.atan2(torch.full_like(dc_real, -0.0), dc_real)[dc_real < 0] == -math.pi)
    assert torch.all(ref.angle()[:, 0][dc_real < 0] == math.pi)


# --- inverse --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("frames_valid", [3, 361, 601, 960, FRAMES])
def test_inverse_matches_torch_istft(kokoro_stft, dtype, frames_valid):
    stft = real_stft(kokoro_stft, dtype)
    spec, phase = generator_spectrum(FRAMES, dtype, seed=frames_valid)
    ref = ref_istft(kokoro_stft, spec[..., :frames_valid], phase[..., :frames_valid])
    samples = ref.shape[-1]
    assert samples == HOP * (frames_valid - 1)
    # the padding frames hold exp(junk), as the unmasked conv_post output would
    junk = torch.exp(3 * torch.randn(1, N_FFT // 2 + 1, FRAMES - frames_valid, dtype=dtype))
    spec = torch.cat([spec[..., :frames_valid], junk], dim=-1)
    audio = stft.inverse(spec, phase, torch.tensor([frames_valid]))
    assert audio.shape == (1, 1, SIZE)
    assert rel_error(audio[0, :, :samples], ref) < TOL[dtype]
    assert torch.all(audio[..., samples:] == 0) and torch.isfinite(audio).all()


def test_inverse_negative_controls(kokoro_stft):
    """kokoro's CustomSTFT inverse is istft with DC x1.5, other bins x0.75 (interior), and no
    envelope at the edges; an envelope counting the padding frames is wrong in the last hop."""
    dtype, frames_valid = torch.float64, 601
    spec, phase = generator_spectrum(frames_valid, dtype)
    ref = ref_istft(kokoro_stft, spec, phase)  # [1, T]
    custom = CustomSTFT(N_FFT, HOP, N_FFT).double().inverse(spec, phase)[:, 0]
    assert rel_error(custom, ref) > 0.1
    scale = torch.full((N_FFT // 2 + 1, 1), 0.75, dtype=dtype)
    scale[0] = scale[-1] = 1.5
    scaled = ref_istft(kokoro_stft, spec * scale, phase)
    interior = slice(N_FFT, -N_FFT)
    assert rel_error(custom[..., interior], scaled[..., interior]) < 1e-6  # float32 weights
    for k in (0, 1, 4, 9):  # one bin at a time, for the record
        one = torch.zeros_like(spec)
        one[:, k] = 1.0
        ratio = (
            CustomSTFT(N_FFT, HOP, N_FFT)
            .double()
            .inverse(one, torch.zeros_like(one))[0, 0, interior]
            / ref_istft(kokoro_stft, one, torch.zeros_like(one))[0, interior]
        )
        assert torch.allclose(ratio, torch.full_like(ratio, 1.5 if k == 0 else 0.75), rtol=1e-6)

    # naive envelope: window^2 summed over every frame of the bucket (a static constant)
    stft = real_stft(kokoro_stft, dtype)
    full_spec = torch.cat(
        [spec, torch.zeros(1, N_FFT // 2 + 1, FRAMES - frames_valid, dtype=dtype)], -1
    )
    full_phase = torch.cat([phase, torch.zeros_like(full_spec[..., frames_valid:])], -1)
    good = stft.inverse(full_spec, full_phase, torch.tensor([frames_valid]))[:, 0, : ref.shape[-1]]
    naive_envelope = stft.inverse(full_spec, full_phase, torch.tensor([FRAMES]))[
        :, 0, : ref.shape[-1]
    ]
    assert rel_error(good, ref) < 1e-12
    bad = ((naive_envelope - ref).abs() > 1e-9).nonzero()[:, 1]
    assert bad.numel() > 0 and bad.min() >= ref.shape[-1] - HOP  # exactly the last hop samples


# --- both ------------------------------------------------------------------------------------


def test_batch_of_different_lengths(kokoro_stft):
    stft = real_stft(kokoro_stft, torch.float64)
    lengths = [1800, SIZE]
    xs = [signals(torch.float64, n)["harmonic"] for n in lengths]
    x = torch.cat([padded(v, SIZE) for v in xs])
    mag, phase = stft.transform(x, torch.tensor(lengths))
    audio = stft.inverse(mag, phase, torch.tensor([n // HOP + 1 for n in lengths]))
    for b, (v, n) in enumerate(zip(xs, lengths)):
        ref = ref_stft(kokoro_stft, v)[0]
        assert complex_error(mag[b, :, : ref.shape[-1]], phase[b, :, : ref.shape[-1]], ref) < 1e-12
        back = ref_istft(kokoro_stft, ref.abs()[None], ref.angle()[None])[0]
        assert rel_error(audio[b, 0, :n], back) < 1e-12 and rel_error(audio[b, 0, :n], v[0]) < 1e-12
        assert torch.all(audio[b, 0, n:] == 0)
    # negative control: batch row 0 read with row 1's length is not row 0's answer
    wrong = stft.transform(x, torch.tensor([SIZE, SIZE]))[0][
        0, :, : ref_stft(kokoro_stft, xs[0]).shape[-1]
    ]
    assert rel_error(wrong, ref_stft(kokoro_stft, xs[0])[0].abs()) > 1e-3


def test_zero_signal_is_finite(kokoro_stft):
    """sqrt(0) and atan2(0, 0) on an all-zero input: no NaN, magnitude 0, phase 0."""
    stft = real_stft(kokoro_stft, torch.float32)
    mag, phase = stft.transform(torch.zeros(1, SIZE), torch.tensor([3000]))
    assert torch.all(mag == 0) and torch.all(phase == 0)
    assert torch.all(stft.inverse(mag, phase, torch.tensor([601])) == 0)
    assert torch.isnan(torch.sqrt(torch.tensor(-1e-30)))  # control: the check can see a NaN
    # inf / NaN in padding frames (exp overflow of junk) stay out of the valid samples
    spec, phase = generator_spectrum(FRAMES, torch.float32)
    clean = stft.inverse(spec, phase, torch.tensor([601]))
    dirty = spec.clone()
    dirty[..., 700], dirty[..., 800] = float("inf"), float("nan")
    assert torch.equal(stft.inverse(dirty, phase, torch.tensor([601])), clean)
    assert torch.isnan(
        F.conv_transpose1d(dirty * torch.cos(phase), stft.inverse_basis[:11], stride=HOP)
    ).any()


# --- TVM --------------------------------------------------------------------------------------


class _Both(torch.nn.Module):
    def __init__(self, stft: RealSTFT):
        super().__init__()
        self.stft = stft

    def forward(self, x, length, spec, phase, frames_valid):
        mag, ph = self.stft.transform(x, length)
        return mag, ph, self.stft.inverse(spec, phase, frames_valid)


@pytest.fixture(scope="module")
def tvm_vm(kokoro_stft):
    tvm = pytest.importorskip("tvm")
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    model = _Both(real_stft(kokoro_stft, torch.float32)).eval()
    spec, phase = generator_spectrum(FRAMES, torch.float32)
    example = (torch.randn(1, SIZE), torch.tensor([SIZE]), spec, phase, torch.tensor([FRAMES]))
    ep = torch.export.export(model, example, strict=False)
    mod = from_exported_program(ep)
    text = mod.script()
    assert "complex" not in text
    ex = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    vm = relax.VirtualMachine(ex, tvm.cpu())

    def run(*args):
        return [o.numpy() for o in vm["main"](*[tvm.runtime.tensor(a.numpy()) for a in args])]

    return run


@pytest.mark.parametrize("length", [1800, 4795, SIZE])
def test_tvm_matches_torch(kokoro_stft, tvm_vm, length):
    x = signals(torch.float32, length)["harmonic"]
    frames_valid = length // HOP + 1
    spec, phase = generator_spectrum(FRAMES, torch.float32, seed=length)
    mag, ph, audio = (
        torch.from_numpy(o)
        for o in tvm_vm(
            padded(x, SIZE), torch.tensor([length]), spec, phase, torch.tensor([frames_valid])
        )
    )
    ref = ref_stft(kokoro_stft, x)
    assert complex_error(mag[..., :frames_valid], ph[..., :frames_valid], ref) < 1e-5
    assert torch.all(mag[..., frames_valid:] == 0) and torch.all(ph[..., frames_valid:] == 0)
    sure = ref.real[:, EDGE].abs() > 1e-3 * ref.real[:, EDGE].abs().max()
    assert torch.equal(
        ph[:, EDGE, :frames_valid][sure], ref.angle()[:, EDGE][sure]
    )  # 0 / +pi exactly
    samples = HOP * (frames_valid - 1)
    back = ref_istft(kokoro_stft, spec[..., :frames_valid], phase[..., :frames_valid])
    assert rel_error(audio[0, :, :samples], back) < 1e-5
    assert np.all(audio[..., samples:].numpy() == 0) and torch.isfinite(audio).all()
    # negative control: the compiled module really reads the runtime length
    if length < SIZE:
        other, *_ = tvm_vm(
            padded(x, SIZE), torch.tensor([SIZE]), spec, phase, torch.tensor([FRAMES])
        )
        assert rel_error(torch.from_numpy(other)[..., :frames_valid], ref.abs()) > 1e-3
