"""Which instruction sets a library needs, and which this CPU has.

The build records a library's needs (``requirements``: the triple's architecture and the ISA
extensions LLVM enables for the target) while LLVM is at hand. The runtime compares them with
this CPU without LLVM (``host_arch``, ``host_features``): the torch-free runtime on aarch64 loads
TVM's runtime library alone, which has no ``llvm_get_system_cpu``. A library whose needs the CPU
misses is refused with the missing extensions named, instead of dying of SIGILL inside a kernel.

Only ISA extensions are compared: LLVM also lists tuning flags (``fast-*``, ``slow-*``), trace
and system-register features (``ete``, ``el3``) that no kernel executes, and which no
``/proc/cpuinfo`` shows. ``LINUX_FLAGS`` maps each LLVM extension name to the flag Linux reports;
``cpuinfo.host_flags`` says which of those flags this CPU has.
"""

from __future__ import annotations

import os
from typing import Any

from .. import cpuinfo
from ..runtime import amx

#: LLVM feature name -> the flag Linux reports for it (``/proc/cpuinfo`` flags / Features)
LINUX_FLAGS = {
    "x86_64": {
        "sse3": "pni",
        "ssse3": "ssse3",
        "sse4.1": "sse4_1",
        "sse4.2": "sse4_2",
        "popcnt": "popcnt",
        "cx16": "cx16",
        "sahf": "lahf_lm",
        "avx": "avx",
        "avx2": "avx2",
        "bmi": "bmi1",
        "bmi2": "bmi2",
        "f16c": "f16c",
        "fma": "fma",
        "lzcnt": "abm",
        "movbe": "movbe",
        "xsave": "xsave",
        "avx512f": "avx512f",
        "avx512bw": "avx512bw",
        "avx512cd": "avx512cd",
        "avx512dq": "avx512dq",
        "avx512vl": "avx512vl",
        "avx512vnni": "avx512_vnni",
        "avx512bf16": "avx512_bf16",
        "avx512fp16": "avx512_fp16",
        "avxvnni": "avx_vnni",
        "amx-tile": "amx_tile",
        "amx-bf16": "amx_bf16",
        "amx-int8": "amx_int8",
    },
    "aarch64": {
        "fp-armv8": "fp",
        "neon": "asimd",
        "crc": "crc32",
        "lse": "atomics",
        "rdm": "asimdrdm",
        "rcpc": "lrcpc",
        "dotprod": "asimddp",
        "fullfp16": "asimdhp",
        "aes": "aes",
        "sha2": "sha2",
        "i8mm": "i8mm",
        "bf16": "bf16",
        "sve": "sve",
        "sve2": "sve2",
    },
}


def arch_of(triple: str) -> str:
    """``aarch64-linux-gnu`` -> ``aarch64``; ``x86_64-pc-linux-gnu`` -> ``x86_64``."""
    return cpuinfo.arch_name(triple.split("-", 1)[0])


def host_arch() -> str:
    return cpuinfo.host_arch()


#: LLVM features whose register state Linux gives a process only on request (``runtime.amx``)
TILE_FEATURES = frozenset({"amx-tile", "amx-bf16", "amx-int8"})
#: how ``missing`` names a tile feature this CPU has but this process was refused
REFUSED = (
    " (the CPU has it, but Linux refused this process the AMX tile state: Linux 5.16 or later)"
)


def host_features(arch: str | None = None, flags: frozenset[str] | None = None) -> frozenset[str]:
    """The LLVM names of the ISA extensions this CPU has (of those ``LINUX_FLAGS`` knows) and
    this process may run. AMX counts only where Linux granted the tile state: a kernel before
    5.16 refuses it, and an AMX kernel would then die of SIGILL, so the runtime takes the
    richest target without AMX instead. ``flags`` given, or a CPU posed with
    ``KOKORO_TVM_CPUINFO``, stand for another machine and are taken as they are."""
    arch = arch or host_arch()
    refused = flags is None and tiles_refused()
    flags = cpuinfo.host_flags() if flags is None else flags
    have = frozenset(f for f, linux in LINUX_FLAGS.get(arch, {}).items() if linux in flags)
    return have - TILE_FEATURES if refused else have


def tiles_refused() -> bool:
    """Whether this machine's CPU has AMX and Linux refused this process its tile state (asking
    for it, once, where it has not been asked: ``runtime.amx``). False for a posed CPU."""
    if os.environ.get(cpuinfo.CPUINFO_ENV) is not None:
        return False
    return LINUX_FLAGS["x86_64"]["amx-tile"] in cpuinfo.host_flags() and not (
        amx.permit_where_present()
    )


def requirements(spec: dict[str, Any]) -> dict[str, Any]:
    """What a library built for the TVM target ``spec`` needs of a CPU (LLVM at build time):
    ``{"arch": ..., "isa": [sorted LLVM extension names]}``."""
    import tvm
    from tvm.target import codegen

    triple = spec.get("mtriple") or codegen.llvm_get_system_triple()
    arch = arch_of(triple)
    enabled = set(codegen.llvm_get_cpu_features(tvm.target.Target(dict(spec))))
    return {"arch": arch, "isa": sorted(enabled & set(LINUX_FLAGS.get(arch, {})))}


def missing(
    needs: dict[str, Any], arch: str | None = None, features: frozenset[str] | None = None
) -> list[str]:
    """What this CPU lacks of ``needs`` (``requirements``): ``["arch aarch64"]`` for another
    architecture, else the missing extensions; empty when the library runs here."""
    arch = arch or host_arch()
    if needs["arch"] != arch:
        return [f"arch {needs['arch']}"]
    have = host_features(arch) if features is None else features
    lacks = [f for f in needs["isa"] if f not in have]
    tiles = [f for f in lacks if f in TILE_FEATURES]
    if tiles and features is None and tiles_refused():
        lacks = [f for f in lacks if f not in TILE_FEATURES] + [", ".join(tiles) + REFUSED]
    return lacks
