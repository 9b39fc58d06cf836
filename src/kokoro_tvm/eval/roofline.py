"""Where a library stands against the machine: FLOPs, GFLOP/s, and the FMA peak they are held to.

A speedup over eager says nothing about how much is left. The roofline view does:

- ``fma_peak``: the target's float32 FMA peak, *measured* on this CPU by a TVM kernel built for
  the target (independent FMA chains held in registers, one per thread), not derived from a
  datasheet. The clock and FMA pipes it implies are reported beside it: a CPU may run AVX-512 as
  two 256-bit halves, where a v4 kernel peaks where v3 does, not 2x higher, and a formula with 16
  lanes x 2 pipes overstates its peak by 2x (docs/measurements.md, "Measured FMA peak").
- ``model_flops``: the component's FLOPs on the benchmarked inputs, counted by torch's
  ``FlopCounterMode`` on kokoro's own modules (matmuls and convolutions, 2 per multiply-add).
- ``kernel_profile``: per compiled kernel, its time in one run (the Relax VM's instrument hook),
  its multiply-add FLOPs from the legalized module's reduction blocks with the symbolic lengths
  of a bounded library bound to this call's shapes, and the bytes its arguments span.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import cpuinfo

#: Independent accumulator vectors per thread: enough chains to cover FMA latency (4-5 cycles)
#: on two pipes, and few enough to stay in 16 registers (AVX2) with the two operands.
CHAINS = 12
#: FMA pipes per core assumed when the measured peak is turned into a clock (every x86 core this
#: project has met and recent Arm server cores have two; where they are 256 bits wide, the clock
#: shows it).
FMA_PIPES = 2


def _fma_kernel(lanes: int, threads: int):
    from tvm.script import tirx as T

    width = CHAINS * lanes

    @T.prim_func
    def fma_loop(
        x: T.Buffer((2, lanes), "float32"), out: T.Buffer((threads, width), "float32"), n: T.int32
    ):
        T.func_attr({"global_symbol": "fma_loop", "tirx.noalias": True})
        for t in T.parallel(threads):
            acc = T.alloc_buffer((width,), "float32", scope="local")
            for c, l in T.grid(CHAINS, lanes):
                acc[c * lanes + l] = T.Cast("float32", c + t)
            for _ in range(n):
                for c in T.unroll(CHAINS):
                    for l in T.vectorized(lanes):
                        acc[c * lanes + l] = acc[c * lanes + l] * x[0, l] + x[1, l]
            for c, l in T.grid(CHAINS, lanes):
                out[t, c * lanes + l] = acc[c * lanes + l]

    return fma_loop


def build_fma_kernel(target: dict[str, Any], threads: int):
    """The FMA loop compiled for ``target`` (a TVM target dict), ``threads`` chains of vectors."""
    import tvm

    from ..compile.schedule.analysis import CPU

    tgt = tvm.target.Target(target)
    lanes = CPU.of(tgt).lanes
    return tvm.tirx.build(_fma_kernel(lanes, threads), target=tgt), lanes


def fma_peak(
    target: dict[str, Any], threads: int, seconds: float = 0.25, rounds: int = 5
) -> dict[str, Any]:
    """The float32 FMA peak of ``target`` on this CPU with ``threads`` threads (best of
    ``rounds`` runs of ~``seconds``), and what it implies: FLOPs per cycle per thread at the
    clock /proc/cpuinfo reports, and the clock ``FMA_PIPES`` full-width pipes would need."""
    import tvm

    lib, lanes = build_fma_kernel(target, threads)
    dev = tvm.cpu()
    x = tvm.runtime.tensor(
        np.stack([np.full(lanes, 0.9999999, np.float32), np.full(lanes, 1e-7, np.float32)]), dev
    )
    out = tvm.runtime.tensor(np.zeros((threads, CHAINS * lanes), np.float32), dev)
    flops_per_iter = 2 * CHAINS * lanes * threads
    n = 1 << 16
    while True:  # size one run to ~seconds
        t0 = time.perf_counter()
        lib(x, out, n)
        dt = time.perf_counter() - t0
        if dt >= seconds / 4 or n >= 1 << 30:
            break
        n *= 4
    n = max(1, int(n * seconds / max(dt, 1e-6)))
    best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        lib(x, out, n)
        best = max(best, n * flops_per_iter / (time.perf_counter() - t0))
    if not np.isfinite(out.numpy()).all():
        raise RuntimeError("FMA loop produced non-finite values: the peak kernel is broken")
    gflops = best / 1e9
    mhz = cpuinfo.this_cpu().mhz
    row = {
        "gflops": round(gflops, 1),
        "threads": threads,
        "lanes": lanes,
        "fma_pipes_assumed": FMA_PIPES,
        "implied_ghz": round(gflops / (threads * FMA_PIPES * lanes * 2), 3),
        "load_avg_1m": cpuinfo.load_average()["1m"],
    }
    if mhz:
        row |= {
            "cpuinfo_ghz": round(mhz / 1e3, 3),
            "flops_per_cycle_per_thread": round(best / threads / (mhz * 1e6), 1),
        }
    return row


def model_flops(fn, *args) -> int:
    """FLOPs of ``fn(*args)`` by torch's ``FlopCounterMode`` (matmuls, convolutions; 2 per MAC)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        fn(*args)
    return int(counter.get_total_flops())


def reduction_flops(func, values: dict[str, int]) -> int | None:
    """Multiply-add FLOPs of a PrimFunc's reduction blocks (2 per iteration whose update adds a
    product, else 1), with its symbolic extents bound by name from ``values``. A hand-scheduled
    kernel without blocks counts only if it declares its FLOPs (``_declared_flops``); None for
    any other, or for an extent nothing binds."""
    import tvm
    from tvm import s_tir, tirx

    from ..compile.schedule.analysis import root_blocks

    analyzer = tvm.sym.Analyzer()  # TVM 0.27's tvm.arith
    for var in _size_vars(func):
        if var.name in values:
            analyzer.bind(var, tirx.IntImm(str(var.ty), values[var.name]))
    blocks = root_blocks(s_tir.Schedule(tvm.IRModule({"main": func})))
    if blocks is None:
        return _declared_flops(func, analyzer)
    total = 0
    for block in blocks:
        if not block.is_reduction:
            continue
        n = 1
        for iv in block.stmt.iter_vars:
            ext = analyzer.simplify(iv.dom.extent)
            if not isinstance(ext, tirx.IntImm):
                return None
            n *= int(ext)
        update = block.stmt.body.value if isinstance(block.stmt.body, tirx.BufferStore) else None
        fma = isinstance(update, tirx.Add) and any(
            isinstance(op, tirx.Mul) for op in (update.a, update.b)
        )
        total += (2 if fma else 1) * n
    return total


def _declared_flops(func, analyzer) -> int | None:
    """A hand-written kernel's ``compile.hand_written.FLOPS``, evaluated at the bound sizes (the
    LSTM recurrence: its GEMVs, exact at full-length inputs, since a padded library's steps past the
    length skip the work; the fused attention: ``4 H D n^2``)."""
    from tvm import tirx

    from ..compile.hand_written import FLOPS

    declared = (func.attrs or {}).get(FLOPS)
    if declared is None:
        return None
    value = analyzer.simplify(declared) if not isinstance(declared, int) else declared
    return int(value) if isinstance(value, (int, tirx.IntImm)) else None


def _size_vars(func) -> list[Any]:
    """The symbolic sizes of ``func``'s signature: its buffers' shape variables and scalar
    params."""
    from tvm import tirx

    found = []
    for param in func.params:
        shape = getattr(param, "shape", None)  # TVM 0.27: a buffer parameter is a Var with a shape
        found += [d for d in shape if isinstance(d, tirx.Var)] if shape is not None else [param]
    return found


def _shape_values(func, args) -> dict[str, int]:
    """Symbolic variables of ``func``'s signature bound to one call's arguments: buffer shapes
    from the tensors' shapes, scalar parameters from the integers passed."""
    from tvm import tirx

    values: dict[str, int] = {}
    for param, arg in zip(func.params, args):
        shape = getattr(param, "shape", None)  # TVM 0.27: a buffer parameter is a Var with a shape
        if shape is not None and hasattr(arg, "shape"):
            for dim, size in zip(shape, arg.shape):
                if isinstance(dim, tirx.Var):
                    values[dim.name] = int(size)
        elif isinstance(arg, (int, np.integer)):
            values[param.name] = int(arg)
    return values


#: TVM's ``SplitLayoutRewritePreproc`` names the halves of a kernel K whose weight packing
#: ``compile.prepack`` moved to load time ``K_prepacked`` (the compute) and ``K_weight_prepack``.
SPLIT_SUFFIXES = ("_prepacked", "_weight_prepack")


def source_kernel(name: str) -> str:
    """The legalized kernel a built kernel came from (``K`` for both halves of a split ``K``): the
    compute half does ``K``'s FLOPs, with its weight already packed."""
    for suffix in SPLIT_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def kernel_profile(
    vm, run: Callable[[], Any], legalized, peak_gflops: float | None = None, top: int = 12
) -> dict[str, Any]:
    """One instrumented ``run()`` of ``vm``: per kernel its time, FLOPs (``reduction_flops``
    with this call's lengths), bytes its arguments span, GFLOP/s and share of ``peak_gflops``.
    ``legalized`` is the library's legalized Relax module (the PrimFuncs before scheduling: the
    schedule changes loops, not the work). Returns the run's total, the FLOPs all kernels account
    for, and the ``top`` kernels by time."""
    import tvm

    funcs = {
        gv.name_hint: f for gv, f in legalized.functions.items() if isinstance(f, tvm.tirx.PrimFunc)
    }
    calls: list[tuple[str, float, dict[str, int], int]] = []  # kernel, seconds, its lengths, bytes
    started: list[float] = []

    def instrument(func, name, before_run, ret_value, *call_args):
        if before_run:
            started.append(time.perf_counter())
            return 0
        seconds = time.perf_counter() - started.pop()
        name = str(name)
        source = source_kernel(name)
        values = _shape_values(funcs[source], call_args) if source in funcs else {}
        nbytes = sum(
            int(np.prod(a.shape)) * np.dtype(str(a.dtype)).itemsize
            for a in call_args
            if hasattr(a, "shape") and hasattr(a, "dtype")
        )
        calls.append((name, seconds, values, nbytes))
        return 0

    vm.set_instrument(instrument)
    try:
        t0 = time.perf_counter()
        run()
        total = time.perf_counter() - t0
    finally:
        vm.set_instrument(lambda *a: 0)
    spent: dict[str, dict[str, float]] = {}
    for name, seconds, values, nbytes in calls:  # FLOPs counted after the run: not in its time
        row = spent.setdefault(name, {"calls": 0, "seconds": 0.0, "flops": 0, "bytes": 0})
        row["calls"] += 1
        row["seconds"] += seconds
        row["bytes"] += nbytes
        source = source_kernel(
            name
        )  # a conv whose weight packing moved to load time (compile.prepack)
        flops = reduction_flops(funcs[source], values) if source in funcs else None
        row["flops"] += flops or 0
    rows = []
    for name, r in sorted(spent.items(), key=lambda kv: -kv[1]["seconds"]):
        gflops = r["flops"] / r["seconds"] / 1e9 if r["seconds"] > 0 else 0.0
        rows.append(
            {
                "kernel": name,
                "calls": int(r["calls"]),
                "ms": round(r["seconds"] * 1e3, 3),
                "share": round(r["seconds"] / total, 4),
                "gflop": round(r["flops"] / 1e9, 9),
                "gflops": round(gflops, 1),
                "gb_per_s": round(r["bytes"] / r["seconds"] / 1e9, 1) if r["seconds"] else 0.0,
                **({"of_peak": round(gflops / peak_gflops, 3)} if peak_gflops else {}),
            }
        )
    counted = sum(r["flops"] for r in spent.values())
    return {
        "run_ms": round(total * 1e3, 3),
        "kernel_gflop": round(counted / 1e9, 9),
        "kernel_ms": round(sum(r["seconds"] for r in spent.values()) * 1e3, 3),
        "matmul_conv_ms": round(sum(r["seconds"] for r in spent.values() if r["flops"]) * 1e3, 3),
        "kernels": len(rows),
        "top": rows[:top],
    }


def significant(x: float, digits: int = 4) -> float:
    """``x`` to ``digits`` significant figures: a fixed number of decimals would leave a tiny
    model's 0.02 GFLOP (or 1.2 GFLOP/s) with a rounding error of several percent."""
    return float(f"{x:.{digits}g}")


def summary(
    flops: int, ms: dict[str, float], peak: dict[str, Any], kernels: dict[str, Any]
) -> dict[str, Any]:
    """The bench metrics of the roofline view: the component's GFLOP, each runner's GFLOP/s on
    them (``ms``: median milliseconds by runner), the measured peak and the library's share of
    it, and the instrumented run's totals (``kernel_profile`` without its per-kernel rows)."""
    rates = {f"{name}_gflops": significant(flops / (t * 1e-3) / 1e9) for name, t in ms.items()}
    return {
        "gflop": significant(flops / 1e9),
        **rates,
        "peak_gflops": peak["gflops"],
        "tvm_of_peak": significant(rates["tvm_gflops"] / peak["gflops"]),
        "peak": peak,
        "kernel_profile": {k: v for k, v in kernels.items() if k != "top"},
    }
