"""Kokoro-82M (full size) parity at one small bucket per component. Slow: `make test-slow`."""

from __future__ import annotations

import numpy as np
import pytest

from kokoro_tvm.compile.flow import compile_component
from kokoro_tvm.config import load_model_config
from kokoro_tvm.eval.eager import reference
from kokoro_tvm.eval.metrics import log_mel_snr, rel_err
from kokoro_tvm.model.checkpoint import build_kmodel
from kokoro_tvm.model.inputs import example_inputs
from kokoro_tvm.runtime.vm import bind_params

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "component,bucket", [("duration", 16), ("text_encoder", 16), ("decoder", 32)]
)
def test_kokoro_82m_full_length_parity(component, bucket):
    import tvm

    cfg = load_model_config("kokoro-82m")
    km = build_kmodel(cfg, "random", seed=0)
    built = compile_component(component, bucket, km, cfg, {"kind": "llvm", "mcpu": "x86-64-v3"})
    vm = built.vm()
    inputs = example_inputs(component, bucket, cfg, seed=1)
    args = [tvm.runtime.tensor(x.numpy()) for x in inputs] + bind_params(vm, built.weights)
    out = vm["main"](*args)
    got = [out[i].numpy() for i in range(len(out))]
    ref = [r.numpy() for r in reference(component, km, inputs, bucket, cfg)]
    if component == "decoder":
        snr = log_mel_snr(ref[0], got[0])
        print(
            f"{component}-{bucket}: log-mel SNR {snr:.1f} dB, waveform rel err "
            f"{rel_err(ref[0], got[0]):.2e}"
        )
        assert np.isfinite(got[0]).all() and snr >= 40
    else:
        errs = [rel_err(r, g) for r, g in zip(ref, got)]
        print(f"{component}-{bucket}: rel err {errs}")
        assert max(errs) <= 1e-4
