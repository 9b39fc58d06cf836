"""Build pass ``RetargetHandWritten``: hand-written kernels made again for the build's target.

The legalize stage runs once for every target, so a hand-written kernel it makes cannot know
the target's vector registers; it makes it for AVX2 (``hand_written.MADE_FOR``). Winograd's conv
kernel keeps ``ROWS x channels`` accumulators: 6 x 16 channels are 12 AVX2 registers but only 6
AVX-512 ones, too few chains to hide the FMA latency (4 cycles x 2 pipes); 6 x 32 channels run
faster there (docs/measurements.md, "Retargeted hand-written kernels"). A kernel marked with its
maker (``hand_written.MAKER``) is made again here from its recorded sizes for the target; a maker
keeps the signature and the results (each output's sum runs in the same order; only the tile of
independent outputs changes).

The bf16 FFT kernels are made again with their GEMMs on AMX tiles (``compile/bf16_amx.py``) for a
target with AMX-BF16: the same signature and weights and the same bf16 products, summed in float32
in another order, so within float32 rounding of the ``vdpbf16ps`` kernel's outputs.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
import tvm_ffi
from tvm import tirx
from tvm.target import codegen

from . import bf16, bf16_amx, bf16_fft, winograd
from .hand_written import MADE_FOR, maker_of
from .schedule.analysis import CPU

#: ``hand_written.MAKER`` name -> ``maker(lanes, registers, **sizes) -> PrimFunc``
MAKERS: dict[str, Callable[..., tirx.PrimFunc]] = {winograd.MAKER_NAME: winograd.kernel_for}


def retarget(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """``mod`` with every marked kernel made for ``target`` (``mod`` itself when nothing changes).
    Winograd's kernels take the target's registers. The bf16 kernels are made for the ISA they
    need (``bf16.FEATURES``), which the target must have (``bf16.check_target``), and again with
    their GEMMs on AMX tiles where the target has AMX-BF16 (``bf16_amx.FEATURES``)."""
    bf16.check_target(mod, target)
    cpu = CPU.of(target)
    with target:
        amx = all(codegen.target_has_features(f, target) for f in bf16_amx.FEATURES)
    out = mod
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc) or (marked := maker_of(func)) is None:
            continue
        maker, sizes = marked
        if maker in bf16.MAKERS:
            if not amx:
                continue
            made = bf16_fft.kernel_for(**sizes, amx=1)
        elif (cpu.lanes, cpu.registers) == MADE_FOR:
            continue
        else:
            made = MAKERS[maker](cpu.lanes, cpu.registers, **sizes)
        if not tvm_ffi.structural_equal(
            [getattr(p, "shape", None) for p in made.params],
            [getattr(p, "shape", None) for p in func.params],
            map_free_vars=True,
        ):
            raise ValueError(f"{gv.name_hint}: its maker {maker} changed the kernel's signature")
        for key, value in func.attrs.items():  # attributes later passes gave the kernel
            if key not in made.attrs:
                made = made.with_attr(key, value)
        if out is mod:
            out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
        out[gv] = made
    return out
