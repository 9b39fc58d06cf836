"""This CPU as Linux describes it, read in one place: its name, family and model, its flags and
the x86-64 level or aarch64 features they make, its logical CPUs and clock, and the load average.

Every caller reads it here: the runtime's ISA check (``devices.isa``), the results files and
figures (``results.machine``) and the bench stages' metrics, so a CPU is named, and its level
judged, the same way in all of them. ``parse`` takes a ``/proc/cpuinfo`` text, so a test can
pose as a CPU that lacks a flag; ``KOKORO_TVM_CPUINFO`` names such a file for a whole process.

Pure Python: the torch-free runtime imports it.
"""

from __future__ import annotations

import os
import platform
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

#: Another CPU's ``/proc/cpuinfo`` to read instead of this one's: how the tests show what a cache
#: moved to an AVX2-only machine reruns, on whatever CPU runs them.
CPUINFO_ENV = "KOKORO_TVM_CPUINFO"
PROC_CPUINFO = Path("/proc/cpuinfo")

#: The x86-64 micro-architecture levels as the x86-64 psABI defines them, each as the
#: ``/proc/cpuinfo`` flags of what it adds to the one before (LAHF-SAHF is ``lahf_lm``, SSE3
#: ``pni``, LZCNT ``abm``; OSXSAVE has no flag of its own, ``xsave`` stands for it). Each level
#: needs the ones below it. The level is what a reader compares with the ``x86_64_v3`` and
#: ``x86_64_v4`` targets, which LLVM builds with these same features.
X86_LEVELS = (
    ("x86-64-v2", ("cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3")),
    ("x86-64-v3", ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")),
    ("x86-64-v4", ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")),
)
#: Vector extensions beyond the level that change what a kernel (the bf16 convs), a peer (oneDNN,
#: ONNX Runtime's int8 kernels) or a future target can use: ``/proc/cpuinfo`` flag -> shown name.
X86_EXTENSIONS = {
    "avx512_vnni": "VNNI",
    "avx512_bf16": "BF16",
    "avx512_fp16": "FP16",
    "avx_vnni": "AVX-VNNI",
    "amx_tile": "AMX",
}
#: aarch64 ``Features`` -> shown name; NEON (``asimd``) is the level the ``aarch64`` target needs.
ARM_EXTENSIONS = {
    "asimddp": "dotprod",
    "i8mm": "i8mm",
    "bf16": "BF16",
    "sve": "SVE",
    "sve2": "SVE2",
}

#: aarch64 ``AT_HWCAP`` / ``AT_HWCAP2`` bits (Linux ``asm/hwcap.h``) -> the ``/proc/cpuinfo`` flag
HWCAP = {
    "fp": 0,
    "asimd": 1,
    "aes": 3,
    "sha2": 6,
    "crc32": 7,
    "atomics": 8,
    "fphp": 9,
    "asimdhp": 10,
    "asimdrdm": 12,
    "lrcpc": 15,
    "asimddp": 20,
    "sve": 22,
}
HWCAP2 = {"sve2": 1, "i8mm": 13, "bf16": 14}
AT_HWCAP, AT_HWCAP2 = 16, 26
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


def arch_name(name: str) -> str:
    """An architecture as the project names it: ``amd64`` -> ``x86_64``, ``arm64`` ->
    ``aarch64``."""
    name = name.lower()
    return _ARCH_ALIASES.get(name, name)


def host_arch() -> str:
    return arch_name(platform.machine())


@dataclass(frozen=True)
class CPU:
    """One CPU as a ``/proc/cpuinfo`` text describes it (``parse``)."""

    arch: str  # x86_64 or aarch64 (else the host's, for a text that says neither)
    model_name: str
    vendor: str  # ``vendor_id`` (x86) or ``CPU implementer`` (aarch64)
    family: str  # ``cpu family`` (x86) or ``CPU implementer`` (aarch64); "" if absent
    model: str  # ``model`` (x86) or ``CPU part`` (aarch64); "" if absent
    flags: frozenset[str]  # the first CPU's ``flags`` (x86) or ``Features`` (aarch64)
    logical_cpus: int
    mhz: float | None  # the highest ``cpu MHz`` listed (on VMs the base or TSC clock)
    #: whether the text had a ``flags``/``Features`` line: without one, no ISA can be judged
    has_flags: bool = True

    @property
    def isa(self) -> str:
        """The ISA level: ``x86-64-v3``, ``ARMv8-A NEON``, ..."""
        if self.arch == "x86_64":
            level = "x86-64"
            for name, needs in X86_LEVELS:
                if not self.flags.issuperset(needs):
                    break
                level = name
            return level
        if self.arch == "aarch64":
            return "ARMv8-A NEON" if "asimd" in self.flags else "ARMv8-A"
        return self.arch

    @property
    def isa_extensions(self) -> list[str]:
        """The notable extensions beyond the level, as shown: ``["VNNI", "BF16"]``."""
        if self.arch == "aarch64" and "asimd" not in self.flags:
            return []
        table = {"x86_64": X86_EXTENSIONS, "aarch64": ARM_EXTENSIONS}.get(self.arch, {})
        return [shown for flag, shown in table.items() if flag in self.flags]

    @property
    def kind(self) -> str:
        """What tells CPUs of one microarchitecture apart where model names do not (a VM may
        give many the same generic name): vendor, family and model (x86) or implementer and part
        (aarch64). A measurement taken on one kind says nothing about another."""
        return " ".join(p for p in (self.arch, self.vendor, self.family, self.model) if p)

    def has(self, *flags: str) -> bool:
        """Whether the CPU has every ``/proc/cpuinfo`` flag named (``avx512_bf16``, ``i8mm``)."""
        return self.flags.issuperset(flags)

    def as_dict(self) -> dict[str, Any]:
        """The fields the bench stages' metrics name their CPU with."""
        return {
            "model_name": self.model_name,
            "vendor": self.vendor,
            "family": self.family,
            "model": self.model,
            "arch": self.arch,
            "isa": self.isa,
            "isa_extensions": self.isa_extensions,
            "logical_cpus": self.logical_cpus,
        }


def first_cpu(text: str) -> dict[str, str]:
    """The ``key: value`` lines of the first processor block (and any global lines, as aarch64's
    ``Features`` may follow the blocks)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields and not line.strip() and "processor" in fields:
                break  # end of the first processor's block
            continue
        fields.setdefault(key.strip(), value.strip())
    return fields


def parse(text: str) -> CPU:
    """The CPU a ``/proc/cpuinfo`` text describes. Never fails: what the text lacks is empty
    (``CPU.has_flags``, ``family``) for the caller that needs it to say so."""
    fields = first_cpu(text)
    flags_line = fields.get("flags") or fields.get("Features")
    if "CPU implementer" in fields:
        arch = "aarch64"
    elif "flags" in fields or "cpu family" in fields:
        arch = "x86_64"
    else:
        arch = host_arch()
    if arch == "aarch64":
        family, model = fields.get("CPU implementer", ""), fields.get("CPU part", "")
        vendor = family
        name = fields.get("model name") or (
            f"aarch64 implementer {family} part {model}" if family else "aarch64"
        )
    else:
        family, model = fields.get("cpu family", ""), fields.get("model", "")
        vendor = fields.get("vendor_id", "")
        name = fields.get("model name") or vendor or arch
    return CPU(
        arch=arch,
        model_name=name,
        vendor=vendor,
        family=family,
        model=model,
        flags=frozenset((flags_line or "").split()),
        logical_cpus=count_processors(text) or os.cpu_count() or 1,
        mhz=_mhz(text),
        has_flags=bool(flags_line),
    )


def count_processors(text: str) -> int:
    """The logical CPUs a ``/proc/cpuinfo`` text lists (its ``processor`` lines)."""
    return sum(1 for line in text.splitlines() if line.split(":")[0].strip() == "processor")


def _mhz(text: str) -> float | None:
    clocks = []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "cpu MHz":
            try:
                clocks.append(float(value))
            except ValueError:
                continue
    return max(clocks, default=None)


def path() -> Path:
    """``/proc/cpuinfo``, or the file ``KOKORO_TVM_CPUINFO`` names (how tests pose as a CPU)."""
    return Path(os.environ.get(CPUINFO_ENV) or PROC_CPUINFO)


def read_text(where: Path | None = None) -> str:
    """The text of ``where`` (default ``path()``); ``OSError`` if it cannot be read."""
    return (where or path()).read_text(encoding="utf-8", errors="replace")


def this_cpu() -> CPU:
    """This CPU (or the one ``KOKORO_TVM_CPUINFO`` poses as); an unreadable file reads as a CPU
    with no flags, named after the architecture."""
    try:
        return parse(read_text())
    except OSError:
        return parse("")


def model_name() -> str:
    """This CPU's name: what the bench stages' metrics record, and results compare."""
    return this_cpu().model_name


def host_flags() -> frozenset[str]:
    """The flags of the CPU this process runs on, as ``/proc/cpuinfo`` names them: the
    ``KOKORO_TVM_CPUINFO`` file's when set; on aarch64 the kernel's ``AT_HWCAP`` words
    (``hwcap_flags``); else ``/proc/cpuinfo``'s."""
    posed = os.environ.get(CPUINFO_ENV)
    if posed is None and host_arch() == "aarch64":
        return hwcap_flags()
    return _flags_of(posed or str(PROC_CPUINFO))


@lru_cache(maxsize=4)
def _flags_of(where: str) -> frozenset[str]:
    """The first CPU's flags of a cpuinfo file (cached: the runtime asks on every pick)."""
    try:
        return parse(read_text(Path(where))).flags
    except OSError:
        return frozenset()


@lru_cache(maxsize=1)
def hwcap_flags(auxv: str = "/proc/self/auxv") -> frozenset[str]:
    """aarch64: the kernel's ``AT_HWCAP`` words from the aux vector, as cpuinfo names. What LLVM
    reads too; ``/proc/cpuinfo`` would do on a board, but under qemu-user it is the x86 host's
    file, while qemu emulates the guest's aux vector."""
    try:
        raw = Path(auxv).read_bytes()
    except OSError:
        return frozenset()
    words = dict(struct.iter_unpack("<QQ", raw[: len(raw) // 16 * 16]))
    hw, hw2 = words.get(AT_HWCAP, 0), words.get(AT_HWCAP2, 0)
    return frozenset(
        [f for f, bit in HWCAP.items() if hw >> bit & 1]
        + [f for f, bit in HWCAP2.items() if hw2 >> bit & 1]
    )


def load_average() -> dict[str, float]:
    """The 1, 5 and 15 minute load averages: a timing beside other work is not the CPU's own."""
    one, five, fifteen = os.getloadavg()
    return {"1m": round(one, 2), "5m": round(five, 2), "15m": round(fifteen, 2)}
