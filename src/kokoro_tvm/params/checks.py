"""What a params.yaml value must satisfy beyond its type: buckets, target names, the devices'
targets, shapes against the LSTM, and targets against the installed LLVM (which would otherwise
only warn about a CPU or feature it does not know, and build the library for a generic CPU
under the name of the one asked for).

Each check raises ``ValueError`` with the message a user reads; inside the schema's validators
pydantic reports it under the key at fault (``messages.py``).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from ..errors import KokoroTVMError

_TARGET_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class ParamsError(KokoroTVMError, ValueError):
    """A params.yaml problem; the message names the key."""


def buckets(value: list[int], key: str, limit: int | None, what: str = "bucket") -> list[int]:
    """``value`` sorted: positive, within ``limit``, without duplicates."""
    if not value:
        raise ValueError(f"'{key}' must list at least one {what}")
    bad = [v for v in value if v <= 0 or (limit is not None and v > limit)]
    if bad:
        bound = f"1..{limit}" if limit else "positive"
        why = f" (the model's limit is {limit} tokens)" if limit and what == "bucket" else ""
        raise ValueError(f"'{key}' has {what}(s) {bad} outside {bound}{why}")
    dupes = sorted({v for v in value if value.count(v) > 1})
    if dupes:
        raise ValueError(f"'{key}' lists {what}(s) {dupes} more than once; remove the duplicates")
    return sorted(value)


def target_names(names: Any) -> None:
    """A target's name becomes part of DVC stage names."""
    for name in names if isinstance(names, dict) else ():
        if not isinstance(name, str) or not _TARGET_NAME.match(name):
            raise ValueError(
                f"target name {name!r} must use letters, digits and '_' only "
                "(it becomes part of DVC stage names)"
            )


def devices_name_targets(devices: dict[str, Any], targets: dict[str, Any]) -> None:
    unknown = sorted(set(devices) - set(targets))
    if unknown:
        raise ValueError(
            f"'devices.{unknown[0]}' names no target; 'targets' has {sorted(targets)}"
            + suggest(unknown[0], list(targets))
        )


def bounded_needs_loop(bounded: list[str], strategy: str) -> None:
    """Only the loop LSTM runs a symbolic length (``bounded``: the axes built bounded)."""
    if bounded and strategy != "loop":
        raise ValueError(
            f"'shapes.{bounded[0]}' is 'bounded' but 'lstm.strategy' is {strategy!r}: "
            "only the loop LSTM runs a symbolic length; set 'lstm.strategy: loop' or "
            "'shapes' to 'padded'"
        )


def check_llvm_target(spec: dict[str, Any]) -> None:
    """Refuse a triple, CPU or feature the installed LLVM does not know (it would only warn,
    and build for a generic CPU)."""
    from tvm.target import codegen

    triple = spec.get("mtriple") or codegen.llvm_get_system_triple()
    arch = triple.split("-", 1)[0]
    known_archs = list(codegen.llvm_get_targets())
    if spec.get("mtriple") and arch not in known_archs:
        raise ValueError(
            f"mtriple {triple!r}: LLVM {codegen.llvm_version_major()} has no target {arch!r}"
            + suggest(arch, known_archs)
        )
    cpu = spec.get("mcpu")
    if cpu is not None and not codegen.llvm_is_valid_cpu(cpu, triple):
        cpus = _cpus(triple)
        raise ValueError(
            f"mcpu {cpu!r} is not a CPU LLVM {codegen.llvm_version_major()} knows for {triple}"
            + suggest(cpu, cpus)
        )
    for feature in spec.get("mattr") or []:
        if not isinstance(feature, str) or feature[:1] not in "+-" or len(feature) < 2:
            raise ValueError(
                f"mattr entry {feature!r} must be '+feature' or '-feature' (e.g. '+avx2')"
            )
        if not _feature_known(feature[1:], triple):
            raise ValueError(
                f"mattr {feature!r}: LLVM does not know the feature {feature[1:]!r} for {triple}"
            )


def _cpus(triple: str) -> list[str]:
    import tvm
    from tvm.target import codegen

    try:
        return list(
            codegen.llvm_get_cpu_archlist(tvm.target.Target({"kind": "llvm", "mtriple": triple}))
        )
    except Exception:
        return []


def _feature_known(feature: str, triple: str) -> bool:
    """LLVM lists a feature among a target's features once it is enabled, and ignores (with a
    warning on stderr) one it does not know."""
    import tvm
    from tvm.target import codegen

    target = tvm.target.Target({"kind": "llvm", "mtriple": triple, "mattr": [f"+{feature}"]})
    return feature in set(codegen.llvm_get_cpu_features(target))


def suggest(word: Any, choices: list[Any]) -> str:
    """``; did you mean 'x'?`` for the closest of ``choices``, or nothing."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
