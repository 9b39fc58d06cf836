"""The decoder takes one noise draw per sample where kokoro's SineGen draws nine: kokoro's source
only reads their mix by its linear layer, so the one draw (in units of that layer's norm) is the
same noise in distribution, and replayed into kokoro as nine draws (``kokoro_sine_noise``), the
same harmonic source in value."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from kokoro_tvm.config import load_model_config
from kokoro_tvm.eval.eager import InjectDraws, as_float64
from kokoro_tvm.model.checkpoint import build_kmodel
from kokoro_tvm.model.components import sine_source
from kokoro_tvm.model.lengths import Bounded
from kokoro_tvm.spec import HARMONICS

SAMPLES = 300 * 400  # SineGen resamples by its upsample scale (300): a whole number of steps


@pytest.fixture(scope="module")
def km():
    return as_float64(build_kmodel(load_model_config("kokoro-82m"), "random", 0))


@pytest.fixture(scope="module")
def f0() -> torch.Tensor:
    """Voiced (a 180-220 Hz glide) then unvoiced, [1, SAMPLES, 1] Hz at the sample rate."""
    half = SAMPLES // 2
    voiced = torch.linspace(180.0, 220.0, half, dtype=torch.float64)
    return torch.cat([voiced, torch.zeros(SAMPLES - half, dtype=torch.float64)]).view(1, -1, 1)


class RandOnly(TorchFunctionMode):
    """kokoro's ``torch.rand`` (initial phases) from ``rand``; its ``randn_like`` left random."""

    def __init__(self, rand: torch.Tensor):
        super().__init__()
        self.rand = rand

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.rand:
            return self.rand.clone()
        return func(*args, **(kwargs or {}))


def ours(km, f0, rand, noise) -> torch.Tensor:
    src = km.decoder.generator.m_source
    return sine_source(src, f0, rand, noise, Bounded().resample_linear)


def kokoro(km, f0, mode) -> torch.Tensor:
    with torch.no_grad(), mode:
        return km.decoder.generator.m_source(f0)[0]


def test_replayed_draws_give_kokoro_its_source(km, f0):
    g = torch.Generator().manual_seed(1)
    rand = torch.rand((1, HARMONICS), generator=g).double()  # float32 draws, as the runtime's
    u = torch.randn((1, SAMPLES, 1), generator=g, dtype=torch.float64)
    mine = ours(km, f0, rand, u)
    theirs = kokoro(km, f0, InjectDraws(km, rand, u))
    # kokoro computes its noise amplitude from a float32 ``uv`` even in float64: 0.1 / 3 to 3e-8
    assert torch.allclose(mine, theirs, rtol=0, atol=2e-8), (mine - theirs).abs().max()
    # control: the one draw handed to all nine harmonics as it is mixes to sum(w) u, not |w| u
    naive = InjectDraws(km, rand, u)
    naive.randn = u.expand(-1, -1, HARMONICS)
    assert (kokoro(km, f0, naive) - mine).abs().max() > 1e-3


def _noise_part(out: torch.Tensor, clean: torch.Tensor) -> np.ndarray:
    """What the noise adds before the source's tanh."""
    return (torch.atanh(out) - torch.atanh(clean)).reshape(-1).numpy()


def test_one_draw_is_kokoros_nine_in_distribution(km, f0):
    g = torch.Generator().manual_seed(2)
    rand = torch.rand((1, HARMONICS), generator=g).double()  # float32 draws, as the runtime's
    zero = torch.zeros((1, SAMPLES, 1), dtype=torch.float64)
    clean = ours(km, f0, rand, zero)
    assert torch.allclose(clean, kokoro(km, f0, InjectDraws(km, rand, zero)), atol=1e-11)
    torch.manual_seed(3)  # kokoro's own nine draws per sample
    theirs = _noise_part(kokoro(km, f0, RandOnly(rand)), clean)
    u = torch.randn((1, SAMPLES, 1), generator=g, dtype=torch.float64)
    mine = _noise_part(ours(km, f0, rand, u), clean)
    w = km.decoder.generator.m_source.l_linear.weight.reshape(-1)
    naive = mine * float(w.sum() / w.norm())  # control: the one draw given to every harmonic
    half = SAMPLES // 2
    for region in (slice(0, half), slice(half, SAMPLES)):  # voiced, unvoiced
        ratio = np.std(mine[region]) / np.std(theirs[region])
        assert abs(ratio - 1) < 0.02, ratio  # the std of a std over 60k samples: 0.3 %
        assert abs(np.mean(mine[region]) - np.mean(theirs[region])) < 0.02 * np.std(theirs)
        assert abs(np.std(naive[region]) / np.std(theirs[region]) - 1) > 0.1
