"""The bf16 conv kernels against float32 Winograd's, and what bf16 costs kokoro's audio.

    python benchmarks/bf16_convs.py [--rounds 7] [--threads 1] [--amx]   # kernels, interleaved
    python benchmarks/bf16_convs.py --fidelity [--phonemes 30,100] [--voice af_heart] [--plans P,Q]
    python benchmarks/bf16_convs.py --fidelity --slow [--plans P,Q]   # validation's slow speech
    python benchmarks/bf16_convs.py --tiles 8:256,12:768 --threads 2  # FFT kernel variants
    python benchmarks/bf16_convs.py --tiles 12:768:0,12:768:8 --frames 84,180 --threads 2

Kernels: each decoder generator conv shape (widths of 400 and 96 frames) built once as the float32
kernel an x86-64-v4 library runs (``compile/winograd.py``, its AVX-512 tile) and once as its bf16
kernel (``compile/bf16_fft.py``; ``bf16_winograd``, measured and left out, is in
``tests/test_bf16.py``), for
``x86-64-v4 + avx512bf16``, timed interleaved (the order reversed every other round); with
``--amx`` (a CPU with AMX-BF16), also as the FFT kernel on AMX tiles (``compile/bf16_amx.py``),
for the ``x86_64_amx`` target, the three interleaved; at output channels in 32s a fourth, the AMX
kernel with the other count of product tiles side by side than ``bf16_amx.side_by_side`` picks
(``AMX other``: what that choice was measured against). With one
thread the time is the process's CPU time per call, which other processes on a shared machine
inflate far less than the wall clock; with more, the wall clock. Medians, the load average, and
each kernel's relative RMS error against float64.

``--fidelity``: kokoro eager (the build's trained weights, artifacts from ``dvc repro``) with the
decoder's convs computed as each bf16 plan computes them (transformed operands rounded to bf16,
products summed in float32; the FFT convs' inputs rounded too, as the library rounds them),
against float64 kokoro with its durations and draws replayed; log-mel SNR and mel-cepstral
distortion (``eval.verdicts.audio_verdict``), float32 kokoro's beside them.

``--tiles ROWS:KB[:SPLIT],...``: the FFT kernel with each register tile (``bf16_fft.ROWS``), block
size (``bf16_fft.BLOCK_BYTES`` in KiB) and odd-block split (``bf16_fft.SPLIT_BELOW``; 0: none)
against the others, interleaved, at the generator's widths for ``--frames`` (default 1536: 128
channels over 184320 samples, 256 over 30720); the outputs of every variant must be the same bits
where only the split differs.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from unittest import mock

import numpy as np

#: (channels, kernel, dilation, width): the generator's resblock convs at 400 frames, and the
#: kernel-7/11 ones at 96.
SHAPES = [
    (128, 11, 1, 48000),
    (128, 11, 5, 48000),
    (128, 7, 1, 48000),
    (128, 7, 3, 48000),
    (128, 3, 1, 48000),
    (128, 3, 5, 48000),
    (256, 11, 1, 8000),
    (256, 7, 1, 8000),
    (256, 3, 1, 8000),
    (256, 3, 3, 8000),
    (128, 11, 1, 11520),
    (256, 7, 1, 1920),
]
BF16_TARGET = {"kind": "llvm", "mcpu": "x86-64-v4", "mattr": ["+avx512bf16"]}
AMX_TARGET = {
    "kind": "llvm",
    "mcpu": "x86-64-v4",
    "mattr": ["+avx512bf16", "+amx-tile", "+amx-bf16"],
}


def kernels(args) -> None:
    import tvm

    from kokoro_tvm.compile import bf16_amx, bf16_fft, winograd
    from kokoro_tvm.runtime.amx import permit

    if args.amx:
        permit()  # OSError names why where this CPU or Linux gives no AMX

    def built(func, target=BF16_TARGET):
        mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
        return tvm.compile(mod, tvm.target.Target(target))

    def timer(ex, tensors):
        if args.threads > 1:
            ev = ex.mod.time_evaluator("main", tvm.cpu(), number=2)
            return lambda: ev(*tensors).mean

        def once() -> float:
            t0 = time.process_time()
            ex["main"](*tensors)
            return time.process_time() - t0

        return once

    print(
        f"{BF16_TARGET} threads={args.threads}: median ms per call "
        f"({'CPU' if args.threads == 1 else 'wall'} time, direct-equivalent GFLOP/s), relative RMS "
        "error vs float64"
    )
    for c, k, d, width in SHAPES:
        rng = np.random.default_rng(k * 10 + d)
        w = (rng.standard_normal((c, c, k)) / np.sqrt(c * k)).astype(np.float32)
        x = rng.standard_normal((1, c, width)).astype(np.float32)
        pad = d * (k - 1) // 2
        m = winograd.OUTPUTS[k]
        _, g, _ = winograd.matrices(m, k)
        u32 = np.einsum("pk,ock->pco", g, w.astype(np.float64)).astype(np.float32)
        fp32 = built(
            winograd.kernel_for(
                16, 32, channels_in=c, channels_out=c, taps=k, dilation=d, pad_left=pad, m=m
            )
        )
        packed, name = bf16_fft.pack_weights(w), f"bf16 FFT{bf16_fft.POINTS}"
        kinds = [(built(bf16_fft.kernel(c, c, k, d, pad)), packed)]
        if args.amx:
            kinds.append((built(bf16_fft.kernel(c, c, k, d, pad, amx=1), AMX_TARGET), packed))
            other = 3 - bf16_amx.side_by_side(c, c)
            with mock.patch.object(bf16_amx, "side_by_side", lambda *_: other):
                kinds.append((built(bf16_fft.kernel(c, c, k, d, pad, amx=1), AMX_TARGET), packed))
        ys = [tvm.runtime.tensor(np.zeros((1, c, width), np.float32)) for _ in range(4)]
        runs = [(fp32, [tvm.runtime.tensor(x), tvm.runtime.tensor(u32), ys[0]])]
        runs += [
            (ex, [tvm.runtime.tensor(x), tvm.runtime.tensor(weights), y])
            for (ex, weights), y in zip(kinds, ys[1:], strict=False)
        ]
        timers = []
        for ex, tensors in runs:
            ex["main"](*tensors)  # warm-up, and the outputs for the errors
            timers.append(timer(ex, tensors))
        samples: list[list[float]] = [[] for _ in runs]
        order = list(range(len(runs)))
        for r in range(args.rounds):
            for i in order if r % 2 == 0 else order[::-1]:
                samples[i].append(timers[i]())
        xp = np.pad(x[0].astype(np.float64), ((0, 0), (pad, pad)))
        want = sum(w[:, :, j].astype(np.float64) @ xp[:, j * d : j * d + width] for j in range(k))
        errs = [
            float(np.sqrt(((y.numpy()[0] - want) ** 2).mean() / (want**2).mean()))
            for y in ys[: len(runs)]
        ]
        times = [float(np.median(s)) for s in samples]
        flops = 2.0 * c * c * k * width
        old, new = times[0], times[1]
        line = (
            f"  conv {c:3} k{k:<2} d{d} x{width:6}: float32 F({m},{k}) {old * 1e3:7.2f} ms "
            f"({flops / old / 1e9:4.0f}, err {errs[0]:.1e})  {name} {new * 1e3:7.2f} ms "
            f"({flops / new / 1e9:4.0f}, err {errs[1]:.1e})  x{old / new:.2f}"
        )
        if args.amx:
            amx = times[2]
            line += (
                f"  AMX {amx * 1e3:7.2f} ms ({flops / amx / 1e9:4.0f}, err {errs[2]:.1e}) "
                f"x{old / amx:.2f} (x{new / amx:.2f} the vdpbf16ps kernel, "
                f"x{times[3] / amx:.2f} AMX with {other} side by side)"
            )
        print(f"{line}  load {os.getloadavg()[0]:.2f}", flush=True)


#: (channels, samples per frame) of the generator's two stages
GENERATOR_STAGES = ((128, 120), (256, 20))


def tiles(args) -> None:
    import tvm

    from kokoro_tvm.compile import bf16_fft

    variants = [
        (*(int(v) for v in spec.split(":")), bf16_fft.SPLIT_BELOW)[:3]
        for spec in args.tiles.split(",")
    ]
    target = tvm.target.Target(BF16_TARGET)
    print(f"{BF16_TARGET} threads={args.threads}: median wall ms per call, ROWS:KiB:SPLIT")
    shapes = [
        (c, frames * per_frame)
        for frames in (int(f) for f in args.frames.split(","))
        for c, per_frame in GENERATOR_STAGES
    ]
    totals = [0.0] * len(variants)
    for (c, width), k, d in itertools.product(shapes, (3, 7, 11), (1, 3, 5)):
        rng = np.random.default_rng(k * 10 + d)
        w = (rng.standard_normal((c, c, k)) / np.sqrt(c * k)).astype(np.float32)
        x = rng.standard_normal((1, c, width)).astype(np.float32)
        tensors = [tvm.runtime.tensor(a) for a in (x, bf16_fft.pack_weights(w))]
        tensors.append(tvm.runtime.tensor(np.zeros((1, c, width), np.float32)))
        runs, outputs = [], {}
        for rows, kib, split in variants:
            with mock.patch.object(bf16_fft, "BLOCK_BYTES", kib * 1024):
                func = bf16_fft.kernel(c, c, k, d, d * (k - 1) // 2, rows=rows, split_below=split)
            mod = tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
            lib = tvm.compile(mod, target)
            lib["main"](*tensors)
            same = outputs.setdefault((rows, kib), tensors[2].numpy())
            assert np.array_equal(same, tensors[2].numpy()), "the split changed the outputs"
            runs.append(lib.mod.time_evaluator("main", tvm.cpu(), number=1))
        samples: list[list[float]] = [[] for _ in runs]
        for r in range(args.rounds):
            for i in range(len(runs)) if r % 2 == 0 else reversed(range(len(runs))):
                samples[i].append(runs[i](*tensors).mean)
        medians = [float(np.median(t)) * 1e3 for t in samples]
        totals = [a + b for a, b in zip(totals, medians)]
        cells = "  ".join(f"{':'.join(map(str, v))} {m:6.2f}" for v, m in zip(variants, medians))
        print(f"  conv {c:3} k{k:<2} d{d} x{width:6}: {cells}  load {os.getloadavg()[0]:.2f}")
    print(
        "  sum: " + "  ".join(f"{':'.join(map(str, v))} {t:7.2f}" for v, t in zip(variants, totals))
    )


def _bf16(t):
    return t.bfloat16().float()


def _winograd(x, w, b, d, pad, m):
    """conv1d through F(m, r), its transformed input and weights rounded to bf16."""
    import torch
    import torch.nn.functional as F

    from kokoro_tvm.compile import winograd

    o, r = w.shape[0], w.shape[2]
    at, g, bt = (torch.from_numpy(t).float() for t in winograd.matrices(m, r))
    a = m + r - 1
    width = x.shape[-1] + 2 * pad - d * (r - 1)
    q = -(-width // (d * m))
    xp = F.pad(x[0], (pad, pad + d * m * q + d * a))
    idx = (
        torch.arange(d)[:, None, None]
        + d * m * torch.arange(q)[None, :, None]
        + d * torch.arange(a)[None, None, :]
    )
    v = _bf16(torch.einsum("pk,cdqk->pcdq", bt, xp[:, idx]))
    u = _bf16(torch.einsum("pk,ock->pco", g, w))
    y = torch.einsum("ip,podq->oqid", at, torch.einsum("pco,pcdq->podq", u, v))
    y = y.reshape(o, -1)[:, :width][None]
    return y if b is None else y + b[None, :, None]


def _fft(x, w, b, d, pad, n):
    """conv1d by overlap-save n-point FFTs, both spectra rounded to bf16."""
    import torch
    import torch.nn.functional as F

    o, r = w.shape[0], w.shape[2]
    m = n - r + 1
    width = x.shape[-1] + 2 * pad - d * (r - 1)
    xp = F.pad(x[0], (pad, pad + d * (n + m)))
    spec = torch.fft.rfft(w, n=n)
    spec = torch.complex(_bf16(spec.real), _bf16(spec.imag)).conj()
    y = torch.zeros(o, width)
    for p in range(d):
        seq, count = xp[:, p::d], len(range(p, width, d))
        idx = m * torch.arange(-(-count // m))[:, None] + torch.arange(n)[None, :]
        seq = F.pad(seq, (0, max(0, int(idx.max()) + 1 - seq.shape[1])))
        tiles = torch.fft.rfft(seq[:, idx], n=n)
        tiles = torch.complex(_bf16(tiles.real), _bf16(tiles.imag))
        prod = torch.einsum("cqf,ocf->oqf", tiles, spec)
        y[:, p::d] = torch.fft.irfft(prod, n=n)[:, :, :m].reshape(o, -1)[:, :count]
    y = y[None]
    return y if b is None else y + b[None, :, None]


def _forward(conv, plan: str, weight: str):
    """The forward ``plan`` gives ``conv`` (whose weight parameter torch.export names
    ``weight``), or None for float32's."""
    import torch.nn.functional as F
    from torch import nn

    from kokoro_tvm.compile import bf16, bf16_fft, bf16_winograd, winograd

    k, d, pad = conv.kernel_size[0], conv.dilation[0], conv.padding[0]
    if isinstance(conv, nn.ConvTranspose1d):
        if plan != "direct bf16":
            return None
        return lambda x, output_size=None: F.conv_transpose1d(
            _bf16(x), _bf16(conv.weight), conv.bias, conv.stride, conv.padding,
            conv.output_padding, conv.groups, conv.dilation,
        )  # fmt: skip
    if plan == "direct bf16":
        return lambda x: conv._conv_forward(_bf16(x), _bf16(conv.weight), conv.bias)
    shape = (k, conv.in_channels, conv.out_channels, conv.groups)
    winograd_tile = conv.stride[0] == 1 and winograd.tile_outputs(*shape) is not None
    if plan == "float32 tiles in bf16" and winograd_tile:
        return lambda x: _winograd(x, conv.weight, conv.bias, d, pad, winograd.OUTPUTS[k])
    if plan == "plan + kernel 3 F(6,3)" and winograd_tile and k == 3:
        m = bf16_winograd.TILE[0]
        return lambda x: _winograd(x, conv.weight, conv.bias, d, pad, m)
    body = tuple(f"p_decoder_{part}_" for part in BODY_PARTS.get(plan, ()))
    if body and weight.startswith(body) and k in (1, 3) and conv.groups == 1:
        return lambda x: conv._conv_forward(_bf16(x), _bf16(conv.weight), conv.bias)
    if plan == "plan + F0/N kernel 3":  # as if the predictor's convs were the generator's
        weight = weight.replace("p_predictor_", bf16.OWNER)
    if plan == "kernels 7 and 11 only" and k == 3:
        return None
    fft = bf16.method(*shape, stride=conv.stride[0], weight=weight) == "fft"
    if plan == "plan with float32 FFT inputs" and fft:  # the library before its inputs in bf16
        return lambda x: _fft(x, conv.weight, conv.bias, d, pad, bf16_fft.POINTS)
    if plan != "float32 tiles in bf16" and fft:  # the library rounds each input (the Snake's)
        return lambda x: _fft(_bf16(x), conv.weight, conv.bias, d, pad, bf16_fft.POINTS)
    return None


def _plan(module, plan: str, path: str) -> None:
    """Every conv under ``module`` (at the module path ``path``) computed as ``plan`` computes
    it."""
    from torch import nn

    for name, conv in module.named_modules():
        if isinstance(conv, (nn.Conv1d, nn.ConvTranspose1d)):
            weight = f"p_{path}.{name}.weight".replace(".", "_").lower()  # torch.export's name
            forward = _forward(conv, plan, weight)
            if forward is not None:
                conv.forward = forward  # weight norm's pre-hook still sets the weight first


#: Plans that add direct bf16 convs in the decoder body (kernel 1 and 3) to the plan: measured
#: and left out, they fail the listener's criterion on slow speech (``--slow``).
BODY_PARTS = {
    "plan + body direct bf16": ("encode", "decode"),
    "plan + encode direct bf16": ("encode",),
    "plan + decode direct bf16": ("decode",),
}
PLANS = (
    "plan",
    "plan with float32 FFT inputs",
    "kernels 7 and 11 only",
    "plan + F0/N kernel 3",
    "plan + kernel 3 F(6,3)",
    *BODY_PARTS,
    "direct bf16",
    "float32 tiles in bf16",
)


def fidelity(args) -> None:
    import copy
    import json

    import torch

    from kokoro_tvm import artifacts
    from kokoro_tvm.eval.e2e import ReplayDurations
    from kokoro_tvm.eval.eager import InjectDraws, as_float64, default_dtype, load_kokoro, reference
    from kokoro_tvm.eval.samples import phonemes as sample_phonemes
    from kokoro_tvm.eval.verdicts import audio_verdict
    from kokoro_tvm.runtime.voices import style_for
    from kokoro_tvm.spec import HARMONICS, samples_per_frame

    torch.set_num_threads(1)
    cfg, km = load_kokoro(artifacts.kokoro_checkpoint_file(), artifacts.model_config_file())
    km64 = as_float64(km)
    voices = json.loads(artifacts.voice_index_file().read_text())
    row = {v["name"]: v["row"] for v in voices["voices"]}[args.voice]
    pack = np.load(artifacts.voices_dir() / voices["file"], mmap_mode="r")[row]
    models = {"float32": km}
    plans = args.plans.split(",") if args.plans else PLANS
    unknown = sorted(set(plans) - set(PLANS))
    if unknown:
        raise SystemExit(f"unknown plans {unknown}; the plans: {', '.join(PLANS)}")
    for plan in plans:
        models[plan] = copy.deepcopy(km)
        _plan(models[plan].decoder, plan, "decoder")
        for part in ("F0", "N", "F0_proj", "N_proj"):  # F0Ntrain: compiled with the decoder
            _plan(getattr(models[plan].predictor, part), plan, f"predictor.{part}")

    def speak(model, ids, style, draws, durations) -> np.ndarray:
        dtype = next(model.parameters()).dtype
        with torch.no_grad(), default_dtype(dtype), InjectDraws(*draws), ReplayDurations(durations):
            audio, _ = model.forward_with_tokens(ids, style.to(dtype), 1.0)
        return audio.reshape(-1).double().numpy()

    print(f"{args.voice}; against float64 kokoro; 'plan' is compile/bf16.py's choice of kernels")
    if args.slow:
        slow(models, cfg, km64, pack)
        return
    for n in (int(v) for v in args.phonemes.split(",")):
        ps = sample_phonemes(n)
        ids = torch.tensor([[0, *(cfg["vocab"][c] for c in ps if c in cfg["vocab"]), 0]])
        style = torch.from_numpy(np.array(style_for(pack, len(ps)), np.float32)).reshape(1, -1)
        with torch.no_grad(), default_dtype(torch.float64):
            raw = reference(
                "duration", km64, (ids, None, style.double()[:, 128:]), ids.shape[1], {}
            )
        durations = torch.round(raw[0].reshape(-1)).clamp(min=1).long()
        g = torch.Generator().manual_seed(0)
        frames = int(durations.sum())
        draws = (
            torch.rand((1, HARMONICS), generator=g),
            torch.randn((1, frames * samples_per_frame(cfg), HARMONICS), generator=g),
        )
        r64 = speak(km64, ids, style, draws, durations)
        f32 = speak(km, ids, style, draws, durations)
        for name, model in models.items():
            v = audio_verdict(
                r64, f32, f32 if model is km else speak(model, ids, style, draws, durations)
            )
            print(
                f"  {len(ps):4} phonemes {frames:5} frames  {name:<24} log-mel SNR "
                f"{v['log_mel_snr_db']:6.2f} dB  MCD {v['mcd_db']:.3f} dB",
                flush=True,
            )


def slow(models: dict, cfg: dict, km64, pack: np.ndarray) -> None:
    """Each model's decoder on validation's 1536-frame case (``eval.cases``: 510 tokens of English
    held over 1536 frames, a slow speaker), against float64 kokoro's."""
    import torch

    from kokoro_tvm.eval.cases import inputs_for
    from kokoro_tvm.eval.eager import reference
    from kokoro_tvm.eval.verdicts import audio_verdict

    frames = 1536
    inputs = inputs_for("decoder", frames, frames, cfg, pack, km64)

    def audio(model) -> np.ndarray:
        with torch.no_grad():
            return reference("decoder", model, inputs, frames, cfg)[0].reshape(-1).double().numpy()

    r64, f32 = audio(km64), audio(models["float32"])
    for name, model in models.items():
        v = audio_verdict(r64, f32, f32 if name == "float32" else audio(model))
        print(
            f"  validation's slow case, {frames} frames  {name:<26} log-mel SNR "
            f"{v['log_mel_snr_db']:6.2f} dB  MCD {v['mcd_db']:.3f} dB",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--amx", action="store_true", help="kernels: also on AMX tiles")
    ap.add_argument("--fidelity", action="store_true")
    ap.add_argument("--phonemes", default="30,100")
    ap.add_argument("--voice", default="af_heart")
    ap.add_argument("--plans", default="", help="comma-separated plans (default: all)")
    ap.add_argument(
        "--slow", action="store_true", help="validation's 1536-frame case instead of --phonemes"
    )
    ap.add_argument("--tiles", default="", help="ROWS:KiB[:SPLIT],... FFT kernel variants")
    ap.add_argument("--frames", default="1536", help="--tiles: the decoder lengths, in frames")
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    if args.tiles:
        tiles(args)
    else:
        fidelity(args) if args.fidelity else kernels(args)


if __name__ == "__main__":
    main()
