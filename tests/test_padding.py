"""Padded equals unpadded for every component wrapper, eagerly (tiny config; no TVM).

The compiled libraries are held to the same bar by the validation stage (test_parity.py); this
checks the graphs we export, at lengths that are not bucket sizes, and that the check is able to
fail: kokoro's own blocks on padded input do not pass it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kokoro_tvm.model import components
from kokoro_tvm.model.inputs import example_inputs
from kokoro_tvm.eval import validate as V
from kokoro_tvm.config import load_model_config
from kokoro_tvm.model.masked import Span, instance_norm
from kokoro_tvm.model.checkpoint import build_kmodel
from kokoro_tvm.eval.reference import reference


@pytest.fixture(scope="module")
def tiny():
    cfg = load_model_config("tiny")
    return cfg, build_kmodel(cfg, "random", 0)


def _eager(component, km):
    module = components.build_component(component, km)

    def run(*inputs):
        with torch.no_grad():
            out = module(*[torch.from_numpy(x) for x in inputs])
        return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]

    return run


@pytest.mark.parametrize("component,bucket", [("duration", 20), ("text_encoder", 20), ("decoder", 20)])
def test_padded_equals_unpadded(tiny, component, bucket):
    cfg, km = tiny
    lengths = sorted({*V.lengths_for(component, bucket), 7, 13})
    rows = V.check(_eager(component, km), component, bucket, km, cfg, lengths)
    assert all(r["ok"] for r in rows.values()), rows


def test_decoder_audio_is_silent_past_the_valid_frames(tiny):
    cfg, km = tiny
    inputs = example_inputs("decoder", 16, cfg, length=9)
    audio = _eager("decoder", km)(*[x.numpy() for x in inputs])[0]
    tail = audio[..., 9 * 600:]
    assert tail.size and np.all(tail == 0)


def test_unmasked_instance_norm_fails_the_check(tiny):
    """Negative control: kokoro's InstanceNorm over a padded axis is what this work fixes."""
    torch.manual_seed(0)
    norm = torch.nn.InstanceNorm1d(8, affine=False)
    x = torch.randn(1, 8, 20)
    x[..., 11:] = 0
    ref = norm(x[..., :11])
    span = Span.of(torch.tensor([11]), 20)
    assert torch.allclose(instance_norm(norm, x, span)[..., :11], ref, atol=1e-5)
    assert not torch.allclose(norm(x)[..., :11], ref, atol=1e-2)


def test_kokoro_decoder_on_padded_frames_misses_the_threshold(tiny):
    """The same metric that passes our wrapper rejects kokoro's decoder run on padded frames."""
    cfg, km = tiny
    bucket, length = 20, 11
    inputs = example_inputs("decoder", bucket, cfg, length=length, seed=2)
    ref = reference("decoder", km, inputs, length, cfg)[0].numpy()
    padded = reference("decoder", km, inputs, bucket, cfg)[0].numpy()  # kokoro over all frames
    assert not V.compare("decoder", [ref], [padded])["ok"]
