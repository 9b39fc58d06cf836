"""Which CPU this is, and which ISA it runs (``cpuinfo``): a timing means nothing without the
machine that took it, so every results file and figure names both, and files it under them."""

from __future__ import annotations

import re
from typing import Any

from .. import cpuinfo
from ..errors import KokoroTVMError


class MachineError(KokoroTVMError, ValueError):
    """This CPU cannot be named well enough to file its results under it."""


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def describe(text: str, cores: int | None = None) -> dict[str, Any]:
    """The CPU of a ``/proc/cpuinfo`` text as a results file names it: model name, family/model
    (x86) or implementer/part (aarch64), architecture, ISA level and extensions, cores, and a
    file-name ``id``."""
    cpu = cpuinfo.parse(text)
    if not cpu.has_flags:
        raise MachineError(
            "this CPU's ISA cannot be read: /proc/cpuinfo has no 'flags' (x86) or 'Features' "
            "(aarch64) line; results are filed under their CPU and ISA, so none are written "
            f"(set {cpuinfo.CPUINFO_ENV} to a cpuinfo file of the CPU that ran `dvc repro`)"
        )
    if cpu.arch not in ("x86_64", "aarch64"):
        raise MachineError(
            f"no ISA levels are known for architecture {cpu.arch!r} (x86_64 or aarch64)"
        )
    if cpu.arch == "x86_64" and not (cpu.family and cpu.model):
        raise MachineError(
            "/proc/cpuinfo has no 'cpu family' or 'model' line: the CPU cannot be told "
            "apart from others of its name, so its results are not filed"
        )
    record = {
        "model_name": cpu.model_name,
        "vendor": cpu.vendor,
        "family": cpu.family,
        "model": cpu.model,
        "arch": cpu.arch,
        "isa": cpu.isa,
        "isa_extensions": cpu.isa_extensions,
        "cores": cores or cpu.logical_cpus,
    }
    record["id"] = slug(f"{cpu.model_name} f{cpu.family} m{cpu.model} {cpu.isa}")
    record["label"] = label(record)
    return record


def label(cpu: dict[str, Any]) -> str:
    """``<model name> (family F model M, N cores), <ISA level> + <extras>``: how figures name a
    CPU."""
    if cpu["arch"] == "aarch64":
        where = f"implementer {cpu['family']} part {cpu['model']}"
    else:
        where = f"family {cpu['family']} model {cpu['model']}"
    isa = cpu["isa"] + (" + " + ", ".join(cpu["isa_extensions"]) if cpu["isa_extensions"] else "")
    return f"{cpu['model_name']} ({where}, {cpu['cores']} cores), {isa}"


def this_cpu() -> dict[str, Any]:
    where = cpuinfo.path()
    try:
        text = cpuinfo.read_text(where)
    except OSError as e:
        raise MachineError(f"cannot read {where} ({e}): the results would name no CPU") from e
    return describe(text)
