"""Scheduled TVM components vs PyTorch eager at Kokoro-82M size, plus per-kernel hotspots.

    TVM_NUM_THREADS=2 python benchmarks/kernels.py                      # default buckets
    python benchmarks/kernels.py --threads 2 --only decoder:128 --top 12
    python benchmarks/kernels.py --ops --frames 128   # single ops: old vs new lowering, interleaved
    python benchmarks/kernels.py --tiles              # decoder convs: pick_tile vs conv.LONG_TILE
    python benchmarks/kernels.py --blocks             # bounded generator convs:
                                                      # conv.LENGTH_BLOCK vs 1
    python benchmarks/kernels.py --conv-tiles 5x2 6x2 6x2b --mcpu x86-64-v4  # bounded decoder
                                                      # convs: the rule vs forced tiles
                                                      # (b: length-blocked)
    python benchmarks/kernels.py --winograd --mcpu x86-64-v4  # bounded generator convs: direct
                                                      # (the conv rule) vs compile/winograd.py

Each component is built with ``compile.flow.compile_component`` (schedule pass included) and timed
against the same ``components.build_component`` wrapper on the same inputs, interleaved (eager, TVM,
eager, TVM, ...) at the same thread count; medians and ratios are printed. Hotspots come from the
Relax VM profiler (``eval.roofline.kernel_profile``); their GFLOP/s are compared with the target's
FMA peak measured on this CPU (``eval.roofline.fma_peak``: a formula's 2 pipes x 16 lanes is 2x too
high for AVX-512 on Zen 4).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import time
from unittest import mock

DEFAULT = [
    "duration:32",
    "duration:64",
    "text_encoder:32",
    "text_encoder:64",
    "decoder:128",
    "decoder:256",
]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--threads", type=int, default=int(os.environ.get("TVM_NUM_THREADS", "2")))
    ap.add_argument("--only", nargs="*", default=DEFAULT, help="component:bucket ...")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds to pause before each timed call (default timing.SETTLE_S); 0 shows the "
        "cost of one runtime's spinning threads on the next",
    )
    ap.add_argument("--top", type=int, default=8, help="hotspot kernels to print per component")
    ap.add_argument("--mcpu", default="x86-64-v3")
    ap.add_argument(
        "--ops",
        action="store_true",
        help="single-op before/after table (Kokoro-82M shapes) and exit",
    )
    ap.add_argument("--frames", type=int, default=128, help="decoder frames m for --ops shapes")
    ap.add_argument(
        "--tiles",
        action="store_true",
        help="decoder conv shapes, pick_tile's register tile vs conv.LONG_TILE, and exit",
    )
    ap.add_argument(
        "--blocks",
        action="store_true",
        help="bounded generator conv shapes, conv.LENGTH_BLOCK against 1 (channel tiles "
        "outermost), and exit",
    )
    ap.add_argument(
        "--winograd",
        action="store_true",
        help="bounded generator conv shapes, the direct conv against Winograd's kernel, and exit",
    )
    ap.add_argument(
        "--conv-tiles",
        nargs="+",
        metavar="RxV[b]",
        default=None,
        help="bounded decoder conv shapes, the conv rule against these forced register tiles "
        "(R width samples x V vectors of channels; b: length-blocked), and exit",
    )
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    if args.blocks:
        return blocks_table(args)
    if args.conv_tiles:
        return conv_tiles_table(args)
    if args.winograd:
        return winograd_table(args)
    if args.ops:
        return ops_table(args)
    if args.tiles:
        return tiles_table(args)

    import numpy as np
    import torch
    import tvm
    from tvm import relax

    from kokoro_tvm.compile.flow import compile_component
    from kokoro_tvm.compile.schedule.analysis import CPU
    from kokoro_tvm.config import load_model_config
    from kokoro_tvm.eval.roofline import fma_peak
    from kokoro_tvm.eval.timing import SETTLE_S, time_interleaved
    from kokoro_tvm.model import components
    from kokoro_tvm.model.checkpoint import build_kmodel
    from kokoro_tvm.model.inputs import example_inputs
    from kokoro_tvm.runtime.vm import bind_params

    torch.set_num_threads(args.threads)
    target_spec = {"kind": "llvm", "mcpu": args.mcpu}
    target = tvm.target.Target(target_spec)
    cpu = CPU.of(target)
    peak = fma_peak(target_spec, args.threads)
    print(
        f"threads={args.threads} target={target_spec} lanes={cpu.lanes} measured FMA "
        f"peak={peak['gflops']:.0f} GFLOP/s (implies {peak['implied_ghz']:.2f} GHz for "
        f"{peak['fma_pipes_assumed']} full-width pipes)"
    )
    peak = peak["gflops"]
    cfg = load_model_config("kokoro-82m")
    km = build_kmodel(cfg, "random", seed=0)
    rows = []
    for item in args.only:
        component, bucket = item.split(":")
        bucket = int(bucket)
        t0 = time.perf_counter()
        built = compile_component(component, bucket, km, cfg, target_spec)
        legal, ex, build_s, report = built.legalized, built.executable, built.build_s, built.report
        prep_s = time.perf_counter() - t0 - build_s
        inputs = example_inputs(component, bucket, cfg, seed=1)
        module = components.build_component(component, km)
        vm = relax.VirtualMachine(ex, tvm.cpu())
        targs = [tvm.runtime.tensor(x.numpy()) for x in inputs] + bind_params(vm, built.weights)
        with torch.no_grad():
            ref = module(*inputs)
        ref = ref if isinstance(ref, tuple) else (ref,)
        out = vm["main"](*targs)
        errs = [
            float(np.abs(out[i].numpy() - r.numpy()).max() / max(np.abs(r.numpy()).max(), 1e-30))
            for i, r in enumerate(ref)
        ]
        with torch.no_grad():
            samples = time_interleaved(
                {"eager": lambda: module(*inputs), "tvm": lambda: vm["main"](*targs)},
                args.repeat,
                1,
                SETTLE_S if args.settle is None else args.settle,
            )
        t_eager, t_tvm = samples["eager"], samples["tvm"]
        e, v = float(np.median(t_eager)), float(np.median(t_tvm))
        rows.append((component, bucket, e, v, build_s, report))
        print(
            f"\n== {component}-{bucket}: eager {e * 1e3:.1f} ms | TVM {v * 1e3:.1f} ms | eager/TVM "
            f"{e / v:.2f}x | build {build_s:.1f}s (+{prep_s:.1f}s export/import/legalize) | rel "
            f"err {max(errs):.1e}"
        )
        print(f"   rules {report.as_dict()['counts']} fallbacks {report.fallbacks}")
        _hotspots(legal, ex, targs, args.top, peak)
    print(
        f"\n{'component':14} {'bucket':>6} {'eager ms':>9} "
        f"{'TVM ms':>9} {'eager/TVM':>9} {'build s':>8}"
    )
    for component, bucket, e, v, b, _ in rows:
        print(f"{component:14} {bucket:6d} {e * 1e3:9.1f} {v * 1e3:9.1f} {e / v:9.2f} {b:8.1f}")


def _legalize_variant(mod, new: bool):
    """``phases.legalize`` (new) or the same pipeline with TVM's own legalizations (old)."""
    import tvm
    from tvm import relax

    from kokoro_tvm.compile.phases import legalize

    if new:
        return legalize(mod)
    return tvm.transform.Sequential(
        [
            relax.transform.DecomposeOpsForInference(),
            relax.transform.LegalizeOps(),
            relax.transform.LiftTransformParams(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
            relax.transform.DeadCodeElimination(),
        ]
    )(mod)


def ops_table(args) -> None:
    """Kokoro-82M decoder ops at ``--frames`` m, old vs new lowering/schedule, interleaved medians.

    old = TVM's legalization (conv_transpose over a zero-dilated input, libm ``sinf``, linear
    weights as ``[K, N]``), the scalar reduction loop for norm statistics, no tail tile; new = this
    repository's (the legalize phase: polyphase convT, packed linear weights, ...). The ALBERT
    linears run at 64 tokens whatever ``--frames``. Timed with ``timing.time_interleaved``; the
    pause before each call puts an OpenMP wake-up (~10 ms here) into eager's sub-ms ops.
    """
    import numpy as np
    import torch
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_tvm.compile.phases import build
    from kokoro_tvm.compile.schedule import reduction, tile
    from kokoro_tvm.eval.timing import SETTLE_S, time_interleaved
    from kokoro_tvm.model.lengths import Padded
    from kokoro_tvm.runtime.vm import bind_params

    torch.set_num_threads(args.threads)
    m = args.frames
    F = torch.nn.functional

    class ConvT(torch.nn.Module):
        def __init__(self, cin, cout, k, s, p, op=0, groups=1):
            super().__init__()
            self.up = torch.nn.ConvTranspose1d(cin, cout, k, s, p, output_padding=op, groups=groups)

        def forward(self, x):
            return self.up(F.leaky_relu(x, 0.1))

    class Norm(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.norm = torch.nn.InstanceNorm1d(c, affine=True)

        def forward(self, x, length):
            return Padded.of(length, x.shape[-1]).instance_norm(self.norm, x)

    class Snake(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.alpha = torch.nn.Parameter(torch.rand(1, c, 1) + 0.5)

        def forward(self, x):
            return x + (1 / self.alpha) * (torch.sin(self.alpha * x) ** 2)

    class Conv(torch.nn.Module):
        def __init__(self, cin, cout, k):
            super().__init__()
            self.conv = torch.nn.Conv1d(cin, cout, k, padding=k // 2)

        def forward(self, x):
            return self.conv(F.leaky_relu(x, 0.1))

    n_gen = 120 * m + 1
    cases = [
        (
            "ALBERT ffn linear 768->2048 x 64",
            torch.nn.Linear(768, 2048),
            (torch.randn(1, 64, 768),),
        ),
        (
            "ALBERT ffn_output 2048->768 x 64",
            torch.nn.Linear(2048, 768),
            (torch.randn(1, 64, 2048),),
        ),
        (
            "ups[0] convT 512->256 k20 s10",
            ConvT(512, 256, 20, 10, 5),
            (torch.randn(1, 512, 2 * m),),
        ),
        ("ups[1] convT 256->128 k12 s6", ConvT(256, 128, 12, 6, 3), (torch.randn(1, 256, 20 * m),)),
        (
            "decoder pool convT dw 1090 k3 s2",
            ConvT(1090, 1090, 3, 2, 1, 1, 1090),
            (torch.randn(1, 1090, m),),
        ),
        (
            "F0/N pool convT dw 512 k3 s2",
            ConvT(512, 512, 3, 2, 1, 1, 512),
            (torch.randn(1, 512, m),),
        ),
        ("masked norm 1024 x m", Norm(1024), (torch.randn(1, 1024, m), torch.tensor([m * 3 // 4]))),
        (
            "masked norm 128 x 120m (gen)",
            Norm(128),
            (torch.randn(1, 128, 120 * m), torch.tensor([100 * m])),
        ),
        (
            "masked norm 256 x 20m (gen)",
            Norm(256),
            (torch.randn(1, 256, 20 * m), torch.tensor([15 * m])),
        ),
        ("snake 128 x 120m+1", Snake(128), (torch.randn(1, 128, n_gen),)),
        ("conv_post 128->22 k7 x 120m+1", Conv(128, 22, 7), (torch.randn(1, 128, n_gen),)),
    ]
    target = {"kind": "llvm", "mcpu": args.mcpu}
    print(
        f"threads={args.threads} frames={m}: median ms, "
        "old | new | eager  (rel err of new vs torch)"
    )
    for name, module, inputs in cases:
        module.eval()
        ep = torch.export.export(module, inputs)
        mod, params = relax.frontend.detach_params(
            from_exported_program(ep, keep_params_as_input=True)
        )
        params = [p.numpy() for p in params.get("main", [])]
        runs = []
        for new in (False, True):
            saved = reduction._rfactor, tile.pick_tile
            if not new:  # the schedule before this change: scalar reduction, no tail tile
                reduction._rfactor = lambda *a: None
                orig = tile.pick_tile
                tile.pick_tile = lambda cpu, r, c, can_pack_rows, _o=orig: (
                    _o(cpu, r, c, can_pack_rows)
                    if c % cpu.lanes == 0 or (can_pack_rows and r % cpu.lanes == 0)
                    else None
                )
            try:
                from kokoro_tvm.compile.schedule import conv as conv_rule

                conv_rule.pick_tile = tile.pick_tile
                ex, _, _ = build(_legalize_variant(mod, new), target)
            finally:
                reduction._rfactor, tile.pick_tile = saved
                conv_rule.pick_tile = saved[1]
            vm = relax.VirtualMachine(ex, tvm.cpu())
            targs = [tvm.runtime.tensor(x.numpy()) for x in inputs] + bind_params(vm, params)
            vm["main"](*targs)
            runs.append((vm, targs))
        with torch.no_grad():
            ref = module(*inputs).numpy()
        out = runs[1][0]["main"](*runs[1][1])
        out = (out if hasattr(out, "numpy") else out[0]).numpy()
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        with torch.no_grad():
            samples = time_interleaved(
                {
                    "old": lambda: runs[0][0]["main"](*runs[0][1]),
                    "new": lambda: runs[1][0]["main"](*runs[1][1]),
                    "eager": lambda: module(*inputs),
                },
                args.repeat,
                1,
                SETTLE_S if args.settle is None else args.settle,
            )
        old, new_, eager = (float(np.median(samples[k])) * 1e3 for k in ("old", "new", "eager"))
        print(
            f"  {name:34} {old:9.2f} | {new_:9.2f} | {eager:9.2f}   "
            f"x{old / new_:5.1f}  (err {err:.1e})",
            flush=True,
        )


#: (in channels, out channels, kernel, dilation, output width): Kokoro-82M decoder convs at 64
#: frames (generator resblocks at 20m and 120m+1 samples, ups[1] as a polyphase k2 conv,
#: decoder blocks at m and 2m frames) plus the 256/512 widths of longer buckets.
TILE_SHAPES = [
    (256, 256, 7, 1, 1280),
    (256, 256, 11, 3, 1280),
    (256, 768, 2, 1, 1344),
    (128, 128, 11, 1, 7681),
    (128, 128, 7, 3, 7681),
    (128, 128, 3, 1, 7681),
    (1024, 1024, 3, 1, 512),
    (512, 512, 3, 1, 256),
    (1090, 512, 3, 1, 128),
    (512, 512, 3, 1, 64),
    (1090, 1024, 3, 1, 64),
]


def tiles_table(args) -> None:
    """Each ``TILE_SHAPES`` conv (+ bias) built twice, with ``tile.pick_tile``'s register tile and
    with ``conv.LONG_TILE`` (forced, also below ``LONG_WIDTH``, to show why the rule stops there),
    timed hot (``time_evaluator``, 3 calls per sample), the two alternating for ``--repeat``
    samples; medians, GFLOP/s, and which of the two ``conv.conv_tile`` picks on this CPU."""
    import numpy as np
    import torch
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_tvm.compile.phases import build, legalize
    from kokoro_tvm.compile.schedule import conv as conv_rule
    from kokoro_tvm.compile.schedule.analysis import CPU
    from kokoro_tvm.runtime.vm import bind_params

    target = {"kind": "llvm", "mcpu": args.mcpu}
    cpu = CPU.of(tvm.target.Target(target))
    print(
        f"threads={args.threads} {target}: median ms (GFLOP/s), pick_tile | {conv_rule.LONG_TILE}"
    )
    for cin, cout, k, d, width in TILE_SHAPES:
        picked = (
            "LONG_TILE"
            if conv_rule.conv_tile(cpu, cout, width, can_pack_rows=True)
            else "pick_tile"
        )
        module = torch.nn.Conv1d(cin, cout, k, padding=d * (k - 1) // 2, dilation=d).eval()
        x = torch.randn(1, cin, width + (k + 1) % 2)  # even k: one more input sample, same width
        ep = torch.export.export(module, (x,))
        mod, params = relax.frontend.detach_params(
            from_exported_program(ep, keep_params_as_input=True)
        )
        legal = legalize(mod)
        params = [p.numpy() for p in params.get("main", [])]
        timers = []
        for forced in (None, conv_rule.LONG_TILE):
            saved = conv_rule.conv_tile
            conv_rule.conv_tile = lambda *a, _t=forced, **kw: _t
            try:
                ex, _, _ = build(legal, target)
            finally:
                conv_rule.conv_tile = saved
            vm = relax.VirtualMachine(ex, tvm.cpu())
            vm.set_input("main", tvm.runtime.tensor(x.numpy()), *bind_params(vm, params))
            timers.append(vm.time_evaluator("invoke_stateful", tvm.cpu(), number=3, repeat=1))
        samples = _alternate(timers, args.repeat)
        flops = 2.0 * cin * cout * k * width
        old, new = (float(np.median(s)) for s in samples)
        print(
            f"  conv {cin:4}->{cout:4} k{k:<2} d{d} x{width:5}: {old * 1e3:7.2f} "
            f"({flops / old / 1e9:5.1f}) | {new * 1e3:7.2f} ({flops / new / 1e9:5.1f})  "
            f"x{old / new:4.2f}  rule: {picked}",
            flush=True,
        )


#: (channels, kernel, dilation, width, bound): the generator's resblock convs over a symbolic length
#: (at a long and a short input), then convs with large weights: the decoder body's at frame rate
#: and the text encoder's
BLOCK_SHAPES = [
    (128, 3, 1, 160000, 184320),
    (128, 11, 5, 160000, 184320),
    (128, 7, 3, 160000, 184320),
    (128, 3, 1, 19200, 184320),
    (256, 7, 3, 25600, 30720),
    (256, 11, 5, 25600, 30720),
    (256, 7, 3, 3840, 30720),
    (1024, 3, 1, 1280, 1536),
    (1024, 3, 1, 192, 1536),
    (512, 3, 1, 2560, 3072),
    (512, 3, 1, 384, 3072),
    (512, 5, 1, 512, 512),
]


def blocks_table(args) -> None:
    """Each ``BLOCK_SHAPES`` conv exported with a symbolic width (as the bounded decoder has it),
    built blocked (``conv.LENGTH_BLOCK``, whatever its size bound says) and unblocked (channel
    tiles outermost), timed hot at the given width (``time_evaluator``, 2 calls per sample),
    alternating for ``--repeat`` samples; medians, GFLOP/s, what ``conv.length_block`` picks, and
    whether the outputs are bit-identical."""
    import numpy as np

    from kokoro_tvm.compile import schedule
    from kokoro_tvm.compile.schedule import conv as conv_rule

    target = {"kind": "llvm", "mcpu": args.mcpu}
    variants = ({"LENGTH_BLOCK_INPUT_OVER_WEIGHTS": 0.0}, {"LENGTH_BLOCK": 1})  # blocked, unblocked
    print(
        f"threads={args.threads} {target}: median ms (GFLOP/s), blocked (LENGTH_BLOCK="
        f"{conv_rule.LENGTH_BLOCK}) | unblocked; load {os.getloadavg()[0]:.2f}"
    )
    for c, k, d, width, bound in BLOCK_SHAPES:
        x, legal, params = _bounded_conv(c, c, k, d, width, bound)
        picked: list[int] = []  # what the rule itself returns: schedule only, no compile
        rule = conv_rule.length_block
        with mock.patch.object(
            conv_rule, "length_block", lambda *a: picked.append(rule(*a)) or picked[-1]
        ):
            schedule.apply(legal, target)
        outs, timers = zip(
            *(
                _hot_run(legal, target, x, params, mock.patch.multiple(conv_rule, **overrides))
                for overrides in variants
            )
        )
        samples = _alternate(timers, args.repeat)
        flops = 2.0 * c * c * k * width
        new, old = (float(np.median(s)) for s in samples)
        rule = "blocked" if max(picked, default=1) > 1 else "unblocked"
        print(
            f"  conv {c:4} k{k:<2} d{d} x{width:6} (bound {bound}): {new * 1e3:8.2f} "
            f"({flops / new / 1e9:5.1f}) | {old * 1e3:8.2f} ({flops / old / 1e9:5.1f})  "
            f"x{old / new:4.2f}  rule: {rule:9}  identical={np.array_equal(*outs)}",
            flush=True,
        )


#: (in channels, out channels, kernel, dilation, width, bound): the decoder body at frame rate
#: (1536 frames, at a short and a long input), its upsampled 512-channel convs, the generator's
#: resblocks (256 channels at 20 n, 128 at 120 n)
CONV_TILE_SHAPES = [
    (1090, 1024, 3, 1, 192, 1536),
    (1024, 1024, 3, 1, 1200, 1536),
    (512, 512, 3, 1, 2400, 3072),
    (256, 256, 11, 5, 12000, 30720),
    (256, 256, 3, 1, 1920, 30720),
    (128, 128, 7, 3, 72000, 184320),
    (128, 128, 3, 1, 4000, 184320),
]


def conv_tiles_table(args) -> None:
    """Each ``CONV_TILE_SHAPES`` conv with a symbolic width, built with the conv rule's own
    choice (``rule``) and with each ``--conv-tiles`` tile forced (``Tile.along_rows``; unblocked,
    or with a trailing ``b`` length-blocked by ``conv.LENGTH_BLOCK`` whatever the rule's size
    bound says), timed hot at the given width, interleaved (the order reversed every other
    round); medians, GFLOP/s, the speed over ``rule``, and the largest difference from its
    output."""
    import numpy as np

    from kokoro_tvm.compile.schedule import conv as conv_rule
    from kokoro_tvm.compile.schedule.tile import Tile

    def forced(spec: str) -> dict:
        rows, vectors = spec.rstrip("b").split("x")
        tile = Tile(int(rows), int(vectors), along_rows=True)
        patches = {"conv_tile": lambda *a, **kw: tile}
        if spec.endswith("b"):  # the rule's AVX2 branch, its size bound at 0
            rule = conv_rule.length_block
            patches.update(
                LENGTH_BLOCK_INPUT_OVER_WEIGHTS=0.0,
                length_block=lambda cpu, op, t: rule(dataclasses.replace(cpu, registers=16), op, t),
            )
        else:
            patches["LENGTH_BLOCK"] = 1
        return patches

    target = {"kind": "llvm", "mcpu": args.mcpu}
    names = ["rule", *args.conv_tiles]
    variants = [{}] + [forced(spec) for spec in args.conv_tiles]
    print(
        f"{target} threads={args.threads} load "
        f"{os.getloadavg()[0]:.2f}: median ms (GFLOP/s, x rule)"
    )
    for cin, cout, k, d, width, bound in CONV_TILE_SHAPES:
        x, legal, params = _bounded_conv(cin, cout, k, d, width, bound)
        outs, timers = zip(
            *(
                _hot_run(
                    legal,
                    target,
                    x,
                    params,
                    mock.patch.multiple(conv_rule, **patches)
                    if patches
                    else contextlib.nullcontext(),
                )
                for patches in variants
            )
        )
        med = [float(np.median(s)) for s in _alternate(timers, args.repeat)]
        flops = 2.0 * cin * cout * k * width
        cells = "  ".join(
            f"{name} {m * 1e3:.2f} ({flops / m / 1e9:.0f}, x{med[0] / m:.2f})"
            for name, m in zip(names, med)
        )
        diff = max(float(np.abs(o - outs[0]).max()) for o in outs)
        print(
            f"  conv {cin:4}->{cout:4} k{k:<2} d{d} x{width:6} "
            f"(bound {bound:6}): {cells}  max diff {diff:.1e}",
            flush=True,
        )


WINOGRAD_SHAPES = [
    (256, 3, 1, 8000, 30720),
    (256, 7, 3, 8000, 30720),
    (256, 11, 5, 8000, 30720),
    (128, 3, 1, 48000, 184320),
    (128, 7, 3, 48000, 184320),
    (128, 11, 5, 48000, 184320),
    (256, 7, 1, 1920, 30720),
    (128, 11, 1, 11520, 184320),
]


def winograd_table(args) -> None:
    """Each ``WINOGRAD_SHAPES`` generator conv (widths of 400 and 96 frames) with a symbolic width,
    legalized direct (the conv rule's kernel) and through ``compile/winograd.py``, the same weights
    and input, timed hot and interleaved; medians, direct-equivalent GFLOP/s, the speedup, and each
    one's largest error against torch in float64 (of the largest output)."""
    import numpy as np
    import torch

    from kokoro_tvm.compile import winograd

    target = {"kind": "llvm", "mcpu": args.mcpu}
    print(
        f"{target} threads={args.threads} load {os.getloadavg()[0]:.2f}: median ms "
        f"(direct-equivalent GFLOP/s), error vs float64"
    )
    for c, k, d, width, bound in WINOGRAD_SHAPES:
        runs = []
        for direct in (True, False):
            torch.manual_seed(0)
            x, legal, params = _bounded_conv(c, c, k, d, width, bound, direct=direct)
            runs.append(_hot_run(legal, target, x, params, contextlib.nullcontext()))
        w, b = (torch.from_numpy(p).double() for p in params)
        want = torch.nn.functional.conv1d(
            x.double(), w, b, padding=d * (k - 1) // 2, dilation=d
        ).numpy()
        errs = [float(np.abs(out - want).max() / np.abs(want).max()) for out, _ in runs]
        old, new = (float(np.median(s)) for s in _alternate([t for _, t in runs], args.repeat))
        flops = 2.0 * c * c * k * width
        print(
            f"  conv {c:4} k{k:<2} d{d} x{width:6} (bound {bound:6}): "
            f"direct {old * 1e3:7.2f} ({flops / old / 1e9:4.0f}, "
            f"err {errs[0]:.1e})  winograd F({winograd.OUTPUTS[k]},{k}) {new * 1e3:7.2f} "
            f"({flops / new / 1e9:4.0f}, err {errs[1]:.1e})  x{old / new:.2f}",
            flush=True,
        )


def _bounded_conv(cin: int, cout: int, k: int, d: int, width: int, bound: int, direct: bool = True):
    """A ``Conv1d`` exported with a symbolic width up to ``bound``, as the bounded decoder has it,
    and legalized: ``(an input of `width` samples, the legalized module, its weights)``. ``direct``:
    as the conv rule computes it, not through ``compile/winograd.py`` (what ``--blocks`` and
    ``--conv-tiles`` compare)."""
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_tvm.compile import winograd
    from kokoro_tvm.compile.phases import legalize

    module = torch.nn.Conv1d(cin, cout, k, padding=d * (k - 1) // 2, dilation=d).eval()
    x = torch.randn(1, cin, width)
    n = torch.export.Dim("n", min=2, max=bound)
    ep = torch.export.export(module, (x,), dynamic_shapes=({2: n},))
    mod, params = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
    with (
        mock.patch.object(winograd, "tile_outputs", lambda *a, **kw: None)
        if direct
        else contextlib.nullcontext()
    ):
        legal = legalize(mod)
    return x, legal, [p.numpy() for p in params.get("main", [])]


def _hot_run(legal, target: dict, x, params, patched):
    """``legal`` built for ``target`` inside the ``patched`` context, run once on ``x``:
    ``(its output, a time_evaluator of 2 calls per sample)``."""
    import tvm
    from tvm import relax

    from kokoro_tvm.compile.phases import build
    from kokoro_tvm.runtime.vm import bind_params

    with patched:
        ex, _, _ = build(legal, target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm.set_input("main", tvm.runtime.tensor(x.numpy()), *bind_params(vm, params))
    vm.invoke_stateful("main")
    out = vm.get_outputs("main")
    return (out[0] if isinstance(out, tuple) else out).numpy(), vm.time_evaluator(
        "invoke_stateful", tvm.cpu(), number=2, repeat=1
    )


def _alternate(timers, repeat: int) -> list[list[float]]:
    """Seconds per call of ``time_evaluator`` timers, the order reversed every other round."""
    samples: list[list[float]] = [[] for _ in timers]
    for r in range(repeat):
        for i in range(len(timers)) if r % 2 == 0 else reversed(range(len(timers))):
            samples[i].append(timers[i]("main").mean)
    return samples


def _hotspots(legal, ex, targs, top: int, peak: float) -> None:
    """Per-kernel time of one instrumented run, with GFLOP/s and share of the measured peak."""
    import tvm
    from tvm import relax

    from kokoro_tvm.eval.roofline import kernel_profile

    vm = relax.VirtualMachine(ex, tvm.cpu())
    prof = kernel_profile(vm, lambda: vm["main"](*targs), legal, peak, top)
    print(f"   top kernels of one instrumented run ({prof['run_ms']:.1f} ms):")
    for r in prof["top"]:
        gf = (
            f" {r['gflops']:6.1f} GFLOP/s ({100 * r['of_peak']:.0f}% of peak)" if r["gflop"] else ""
        )
        print(
            f"     {r['kernel'][:64]:64} {r['ms']:8.2f} ms x{r['calls']} "
            f"{100 * r['share']:4.1f}%{gf}"
        )


if __name__ == "__main__":
    main()
