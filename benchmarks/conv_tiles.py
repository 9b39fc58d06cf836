"""Bounded conv shapes: the conv rule's schedule against forced register tiles and length blocks.

usage: python benchmarks/conv_tiles.py [--mcpu x86-64-v4] [--threads 2] [--repeat 9]
                                       [--tiles 5x2 6x2 6x2b ...] [--shapes CIN,COUT,K,D,WIDTH,BOUND ...]

Each shape is a ``Conv1d`` exported with a symbolic width (as the bounded decoder has it, bound
``BOUND``) and built once per variant: ``rule`` (what ``schedule/conv.py`` picks on ``--mcpu``),
then each ``--tiles`` entry ``RxV``: ``R`` width samples x ``V`` vectors of output channels
(``Tile.along_rows``, unblocked; a trailing ``b`` blocks the length with ``conv.LENGTH_BLOCK``
whatever the rule's size bound says). Every variant is timed hot at ``WIDTH``
(``time_evaluator``, 2 calls per sample), interleaved (the order reversed every other round);
the script prints medians, GFLOP/s, the speed over ``rule``, and the largest difference of an
output from ``rule``'s (the reduction order is the same: 0 expected).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from unittest import mock

#: (in channels, out channels, kernel, dilation, width, bound): the decoder body at frame rate
#: (1536 frames, at a short and a long input), its upsampled 512-channel convs, the generator's
#: resblocks (256 channels at 20 n, 128 at 120 n)
SHAPES = [(1090, 1024, 3, 1, 192, 1536), (1024, 1024, 3, 1, 1200, 1536), (512, 512, 3, 1, 2400, 3072),
          (256, 256, 11, 5, 12000, 30720), (256, 256, 3, 1, 1920, 30720), (128, 128, 7, 3, 72000, 184320),
          (128, 128, 3, 1, 4000, 184320)]


def _variants(specs: list[str]):
    """``(name, forced tile or None, forced length_block or None)``, the rule's own first."""
    from kokoro_tvm.compile.schedule import conv as conv_rule
    from kokoro_tvm.compile.schedule.tile import Tile

    rule = conv_rule.length_block

    def blocked(cpu, op, tile):  # the rule's AVX2 branch, with the size bound patched to 0 below
        return rule(dataclasses.replace(cpu, registers=16), op, tile)

    out = [("rule", None, None)]
    for spec in specs:
        rows, vectors = spec.rstrip("b").split("x")
        out.append((spec, Tile(int(rows), int(vectors), along_rows=True), blocked if spec.endswith("b") else None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mcpu", default="x86-64-v4")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--tiles", nargs="*", default=["5x2", "6x2", "6x2b"])
    ap.add_argument("--shapes", nargs="*", default=None, help="CIN,COUT,K,D,WIDTH,BOUND ...")
    args = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)

    import numpy as np
    import torch
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    from kokoro_tvm.compile.build import build
    from kokoro_tvm.compile.legalize import legalize
    from kokoro_tvm.compile.schedule import conv as conv_rule
    from kokoro_tvm.runtime.library import bind_params

    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    target = {"kind": "llvm", "mcpu": args.mcpu}
    variants = _variants(args.tiles)
    print(f"{target} threads={args.threads} load {os.getloadavg()[0]:.2f}: median ms (GFLOP/s, x rule)")
    for cin, cout, k, d, width, bound in shapes:
        module = torch.nn.Conv1d(cin, cout, k, padding=d * (k - 1) // 2, dilation=d).eval()
        x = torch.randn(1, cin, width)
        n = torch.export.Dim("n", min=2, max=bound)
        ep = torch.export.export(module, (x,), dynamic_shapes=({2: n},))
        mod, params = relax.frontend.detach_params(from_exported_program(ep, keep_params_as_input=True))
        legal = legalize(mod)
        params = [p.numpy() for p in params.get("main", [])]
        timers, outs = [], []
        for _, tile, block in variants:
            patches = {}
            if tile is not None:
                patches["conv_tile"] = lambda *a, _t=tile, **kw: _t
            if block is not None:
                patches.update(length_block=block, LENGTH_BLOCK_INPUT_OVER_WEIGHTS=0.0)
            elif tile is not None:
                patches["LENGTH_BLOCK"] = 1
            with mock.patch.multiple(conv_rule, **patches) if patches else contextlib.nullcontext():
                ex, _, _ = build(legal, target)
            vm = relax.VirtualMachine(ex, tvm.cpu())
            vm.set_input("main", tvm.runtime.tensor(x.numpy()), *bind_params(vm, params))
            vm.invoke_stateful("main")
            out = vm.get_outputs("main")
            outs.append((out[0] if isinstance(out, tuple) else out).numpy())
            timers.append(vm.time_evaluator("invoke_stateful", tvm.cpu(), number=2, repeat=1))
        samples: list[list[float]] = [[] for _ in timers]
        for r in range(args.repeat):
            for i in (range(len(timers)) if r % 2 == 0 else reversed(range(len(timers)))):
                samples[i].append(timers[i]("main").mean)
        flops = 2.0 * cin * cout * k * width
        med = [float(np.median(s)) for s in samples]
        cells = "  ".join(f"{name} {m * 1e3:.2f} ({flops / m / 1e9:.0f}, x{med[0] / m:.2f})"
                          for (name, _, _), m in zip(variants, med))
        diff = max(float(np.abs(o - outs[0]).max()) for o in outs)
        print(f"  conv {cin:4}->{cout:4} k{k:<2} d{d} x{width:6} (bound {bound:6}): {cells}  max diff {diff:.1e}",
              flush=True)


if __name__ == "__main__":
    main()
