"""Would the decoder's convolutions in bfloat16 keep kokoro within the float64 criterion?

usage: python benchmarks/bf16_fidelity.py [--voice af_heart] [--phonemes 30,100,250]

A CPU with AVX512_BF16 (Zen 4, Sapphire Rapids) multiplies bf16 pairs at twice the rate of float32
FMAs (``vdpbf16ps``: inputs rounded to bf16, products summed in float32). That is the only faster
number format a stream-per-core server could move to without int8, so this measures what it would
cost before any kernel is written: kokoro (eager, the build's trained weights) with every
``Conv1d``/``ConvTranspose1d`` of the decoder computing on inputs (and weights) rounded to bf16,
accumulated in float32, against kokoro in float64, with the verdict the pipeline applies to its own
float32 libraries (``eval.verdicts.audio_verdict``: no worse than float32 kokoro, by log-mel SNR
and mel-cepstral distortion), and beside it the bounds of the listener's criterion, which bf16
libraries are validated by (``listener_verdict``, without its word check). Variants: the whole
decoder, the generator only, activations only (weights kept float32), and the generator with the
output of each resblock pair's first conv (``convs1``) also rounded to bf16, as bf16 libraries
store it (``compile/conv_epilogue.py``: at the generator's last stage it is one of the five
tensors live at the decoder's memory peak). The float64 durations and one set of the decoder's
draws are replayed in every run, as ``eval.e2e.compare`` does, so only the convolutions' numerics
differ; a control with
the same wrappers but no rounding must equal float32 exactly.
"""

from __future__ import annotations

import argparse
import copy

import numpy as np


def _round(t):
    """To bfloat16 (round to nearest even) and back: what ``vdpbf16ps`` is fed."""
    return t.bfloat16().float()


def _convs_in_bf16(module, weights: bool, rounding: bool = True) -> int:
    """Make every convolution under ``module`` compute on bf16-rounded inputs (and weights,
    when ``weights``); bias and sums stay float32. Returns how many it wrapped."""
    import torch.nn.functional as F
    from torch import nn

    r = _round if rounding else (lambda t: t)
    n = 0
    for m in module.modules():
        if isinstance(m, nn.Conv1d):

            def forward(x, m=m):
                return m._conv_forward(r(x), r(m.weight) if weights else m.weight, m.bias)

        elif isinstance(m, nn.ConvTranspose1d):

            def forward(x, output_size=None, m=m):
                w = r(m.weight) if weights else m.weight
                return F.conv_transpose1d(
                    r(x), w, m.bias, m.stride, m.padding, m.output_padding, m.groups, m.dilation
                )

        else:
            continue
        m.forward = forward  # weight norm's pre-hook still sets m.weight before this runs
        n += 1
    return n


def _first_outputs_in_bf16(module) -> int:
    """Round the output of each resblock pair's first conv (``convs1``) under ``module`` to bf16
    (its AdaIN and Snake then read the rounded values). Returns how many it wrapped."""
    n = 0
    for m in module.modules():
        for conv in getattr(m, "convs1", ()):
            inner = conv.forward
            conv.forward = lambda x, inner=inner: _round(inner(x))
            n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--voice", default="af_heart")
    ap.add_argument("--phonemes", default="30,100,250", help="input lengths (eval samples)")
    args = ap.parse_args()

    import torch

    from kokoro_tvm import artifacts
    from kokoro_tvm.eval.e2e import ReplayDurations
    from kokoro_tvm.eval.eager import (
        InjectDraws,
        as_float64,
        default_dtype,
        load_kokoro,
        reference,
    )
    from kokoro_tvm.eval.samples import phonemes as sample_phonemes
    from kokoro_tvm.eval.verdicts import (
        LISTENER_MCD_DB,
        LISTENER_SNR_DB,
        audio_verdict,
        listener_verdict,
    )
    from kokoro_tvm.runtime.manifest import read_manifest
    from kokoro_tvm.runtime.voices import VoiceSet, style_for
    from kokoro_tvm.spec import HARMONICS, samples_per_frame

    torch.set_num_threads(1)
    cfg, km = load_kokoro(artifacts.kokoro_checkpoint_file(), artifacts.model_config_file())
    km64 = as_float64(km)
    manifest = read_manifest(artifacts.ROOT)
    pack = VoiceSet.from_manifest(artifacts.ROOT, manifest).pack(args.voice)

    variants = {  # name: (submodule, round weights too, round at all, convs1 outputs too)
        "float32": None,
        "decoder bf16": ("decoder", True, True, False),
        "generator bf16": ("decoder.generator", True, True, False),
        "generator, convs1 out": ("decoder.generator", True, True, True),
        "activations bf16": ("decoder", False, True, False),
        "control (no rounding)": ("decoder", True, False, False),
    }
    models = {}
    for name, spec in variants.items():
        m = copy.deepcopy(km)
        if spec is not None:
            sub = m
            for part in spec[0].split("."):
                sub = getattr(sub, part)
            _convs_in_bf16(sub, *spec[1:3])
            if spec[3]:
                _first_outputs_in_bf16(sub)
        models[name] = m

    def speak(model, ids, style, draws, durations) -> np.ndarray:
        dtype = next(model.parameters()).dtype
        with (
            torch.no_grad(),
            default_dtype(dtype),
            InjectDraws(*draws),
            ReplayDurations(durations),
        ):
            audio, _ = model.forward_with_tokens(ids, style.to(dtype), 1.0)
        return audio.reshape(-1).double().numpy()

    print(
        f"{args.voice}; float64 kokoro is the reference; ok: no worse than float32 kokoro; "
        f"listener: log-mel SNR >= {LISTENER_SNR_DB} dB and MCD <= {LISTENER_MCD_DB} dB against "
        "float64, the bounds bf16 libraries are validated by (their word check is not run here)"
    )
    print(
        f"{'phonemes':>8}  {'variant':<22} {'log-mel SNR':>11} {'bar':>6} {'MCD':>6} {'bar':>6}"
        "  ok  listener"
    )
    failed = False
    for n in (int(x) for x in args.phonemes.split(",")):
        ps = sample_phonemes(n)
        ids = torch.tensor([[0, *(cfg["vocab"][c] for c in ps if c in cfg["vocab"]), 0]])
        style = torch.from_numpy(np.array(style_for(pack, len(ps)), np.float32)).reshape(1, -1)
        with torch.no_grad(), default_dtype(torch.float64):
            raw = reference(
                "duration", km64, (ids, None, style.double()[:, 128:]), ids.shape[1], {}
            )
        durations = torch.round(raw[0].reshape(-1)).clamp(min=1).long()
        g = torch.Generator().manual_seed(0)
        draws = (
            torch.rand((1, HARMONICS), generator=g),
            torch.randn((1, int(durations.sum()) * samples_per_frame(cfg), HARMONICS), generator=g),
        )
        r64 = speak(km64, ids, style, draws, durations)
        outs = {name: speak(m, ids, style, draws, durations) for name, m in models.items()}
        if not np.array_equal(outs["control (no rounding)"], outs["float32"]):
            print("the control differs from float32: the wrappers change more than rounding")
            failed = True
        for name, audio in outs.items():
            v = audio_verdict(r64, outs["float32"], audio)
            heard = listener_verdict(r64, outs["float32"], audio)["ok"]
            print(
                f"{len(ps):>8}  {name:<22} {v['log_mel_snr_db']:>8.2f} dB {v['min_snr_db']:>6.2f}"
                f" {v['mcd_db']:>6.3f} {v['max_mcd_db']:>6.3f}  {'yes' if v['ok'] else 'NO':<3}"
                f" {'yes' if heard else 'NO'}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
