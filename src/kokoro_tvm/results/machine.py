"""Which CPU this is, and which ISA it runs, read from ``/proc/cpuinfo``: a timing means nothing
without the machine that took it, so every results file and figure names both."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..devices.isa import CPUINFO_ENV
from ..errors import KokoroTVMError


class MachineError(KokoroTVMError, ValueError):
    """This CPU cannot be named well enough to file its results under it."""


#: The x86-64 micro-architecture levels (the psABI's), each as the ``/proc/cpuinfo`` flags it
#: adds to the one before. The level is what a reader compares with the ``x86_64_v3`` and
#: ``x86_64_v4`` targets.
X86_LEVELS = (
    ("x86-64-v2", ("cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3")),
    ("x86-64-v3", ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave")),
    ("x86-64-v4", ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")),
)
#: Extensions beyond the level that change what a peer (oneDNN, ONNX Runtime's int8 kernels) or
#: a future target can use: named beside the level. ``/proc/cpuinfo`` flag -> shown name.
X86_EXTRAS = {
    "avx512_vnni": "VNNI",
    "avx512_bf16": "BF16",
    "avx512_fp16": "FP16",
    "avx_vnni": "AVX-VNNI",
    "amx_tile": "AMX",
}
#: aarch64 ``Features`` -> shown name; NEON (``asimd``) is the level the ``aarch64`` target needs.
ARM_EXTRAS = {"asimddp": "dotprod", "i8mm": "i8mm", "bf16": "BF16", "sve": "SVE", "sve2": "SVE2"}


def cpuinfo_path() -> Path:
    """``/proc/cpuinfo``, or the file ``KOKORO_TVM_CPUINFO`` names (how tests pose as a CPU)."""
    return Path(os.environ.get(CPUINFO_ENV) or "/proc/cpuinfo")


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


def isa_of(arch: str, flags: set[str]) -> tuple[str, list[str]]:
    """The ISA level and the notable extensions beyond it: ``("x86-64-v4", ["VNNI", "BF16"])``."""
    if arch == "x86_64":
        level = "x86-64"
        for name, needs in X86_LEVELS:
            if not set(needs) <= flags:
                break
            level = name
        return level, [shown for flag, shown in X86_EXTRAS.items() if flag in flags]
    if arch == "aarch64":
        if "asimd" not in flags:
            return "ARMv8-A", []
        return "ARMv8-A NEON", [shown for flag, shown in ARM_EXTRAS.items() if flag in flags]
    raise MachineError(f"no ISA levels are known for architecture {arch!r} (x86_64 or aarch64)")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def describe(text: str, cores: int | None = None) -> dict[str, Any]:
    """The CPU of a ``/proc/cpuinfo`` text: model name, family/model (x86) or implementer/part
    (aarch64), architecture, ISA level and extensions, cores, and a file-name ``id``."""
    fields = first_cpu(text)
    flags_line = fields.get("flags") or fields.get("Features")
    if not flags_line:
        raise MachineError(
            "this CPU's ISA cannot be read: /proc/cpuinfo has no 'flags' (x86) or 'Features' "
            "(aarch64) line; results are filed under their CPU and ISA, so none are written "
            f"(set {CPUINFO_ENV} to a cpuinfo file of the CPU that ran `dvc repro`)"
        )
    flags = set(flags_line.split())
    if "CPU implementer" in fields:
        arch = "aarch64"
        family, model = fields["CPU implementer"], fields.get("CPU part", "?")
        name = fields.get("model name") or f"aarch64 implementer {family} part {model}"
    else:
        arch = "x86_64"
        if "cpu family" not in fields or "model" not in fields:
            raise MachineError(
                "/proc/cpuinfo has no 'cpu family' or 'model' line: the CPU cannot be told "
                "apart from others of its name, so its results are not filed"
            )
        family, model = fields["cpu family"], fields["model"]
        name = fields.get("model name") or fields.get("vendor_id") or "x86_64"
    level, extras = isa_of(arch, flags)
    cpu = {
        "model_name": name,
        "vendor": fields.get("vendor_id", fields.get("CPU implementer", "")),
        "family": family,
        "model": model,
        "arch": arch,
        "isa": level,
        "isa_extensions": extras,
        "cores": cores or count_processors(text) or os.cpu_count() or 1,
    }
    cpu["id"] = slug(f"{name} {'f' + family} {'m' + model} {level}")
    cpu["label"] = label(cpu)
    return cpu


def count_processors(text: str) -> int:
    """The logical CPUs a ``/proc/cpuinfo`` text lists (its ``processor`` lines)."""
    return sum(1 for line in text.splitlines() if line.split(":")[0].strip() == "processor")


def label(cpu: dict[str, Any]) -> str:
    """``<model name> (family F model M, N cores), <ISA level> + <extras>``: how figures name a CPU."""
    if cpu["arch"] == "aarch64":
        where = f"implementer {cpu['family']} part {cpu['model']}"
    else:
        where = f"family {cpu['family']} model {cpu['model']}"
    isa = cpu["isa"] + (" + " + ", ".join(cpu["isa_extensions"]) if cpu["isa_extensions"] else "")
    return f"{cpu['model_name']} ({where}, {cpu['cores']} cores), {isa}"


def this_cpu() -> dict[str, Any]:
    path = cpuinfo_path()
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise MachineError(f"cannot read {path} ({e}): the results would name no CPU") from e
    return describe(text)
