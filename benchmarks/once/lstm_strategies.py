"""IR size, import, build and run time of the LSTM lowerings against T, at Kokoro widths.

usage: python benchmarks/once/lstm_strategies.py [--steps 16 32 64 128 256 512] [--reps 5]
One bidirectional LSTM at the widths of Kokoro-82M's text-encoder/duration LSTMs (I=640, H=256),
compiled with the pipeline's own flow (``compile.phases``: ``legalize`` + ``build``). Strategies
are timed interleaved (A B A B) per T; medians are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch import nn

from kokoro_tvm.compile.convert_map import convert_map
from kokoro_tvm.compile.phases import build, legalize
from kokoro_tvm.model.lstm_op import lstm_with_lengths
from kokoro_tvm.spec import LSTM_STRATEGIES


class OneLSTM(nn.Module):
    def __init__(self, inp: int = 640, hidden: int = 256):
        super().__init__()
        self.lstm = nn.LSTM(inp, hidden, 1, batch_first=True, bidirectional=True)

    def forward(self, x, lengths):
        return lstm_with_lengths(self.lstm, x, lengths)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count()))
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    torch.manual_seed(0)
    model = OneLSTM().eval()
    print(
        f"{'T':>5} {'strategy':8} {'IR lines':>8} {'import s':>8} {'build s':>8} {'run ms':>8}",
        flush=True,
    )
    for steps in args.steps:
        x = torch.randn(1, steps, 640)
        lengths = torch.tensor([steps])
        ep = torch.export.export(model, (x, lengths)).run_decompositions()
        vms, rows = {}, {}
        for s in LSTM_STRATEGIES:
            t0 = time.perf_counter()
            mod = from_exported_program(
                ep,
                keep_params_as_input=True,
                custom_convert_map=convert_map(s),
                run_ep_decomposition=False,
            )
            t_import = time.perf_counter() - t0
            mod, params = relax.frontend.detach_params(mod)
            t0 = time.perf_counter()
            ex = build(legalize(mod), {"kind": "llvm", "mcpu": "x86-64-v3"})[0]
            t_build = time.perf_counter() - t0  # legalize + schedule + compile
            vm = relax.VirtualMachine(ex, tvm.cpu())
            inputs = [tvm.runtime.tensor(x.numpy()), tvm.runtime.tensor(lengths.numpy())] + list(
                params["main"]
            )
            vm["main"](*inputs)
            vms[s] = (vm, inputs)
            rows[s] = [len(mod.script().splitlines()), t_import, t_build, []]
        for _ in range(args.reps):  # interleaved
            for s, (vm, inputs) in vms.items():
                t0 = time.perf_counter()
                vm["main"](*inputs)
                rows[s][3].append(time.perf_counter() - t0)
        for s, (lines, t_imp, t_b, runs) in rows.items():
            print(
                f"{steps:5d} {s:8} {lines:8d} {t_imp:8.2f} {t_b:8.2f} "
                f"{1e3 * statistics.median(runs):8.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
