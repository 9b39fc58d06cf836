"""Versions of everything that shapes a compiled artifact.

The ``toolchain`` stage writes these to a file every other stage depends on, so upgrading torch,
TVM, LLVM, kokoro, transformers, numpy or Python invalidates the stages whose output they can
change. Versions are normalised to their public part (``2.13.0+cpu`` -> ``2.13.0``): the local
tag names a build of the same release, and a wheel from another index must not rebuild everything.
"""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

from .errors import KokoroTVMError


class ToolchainError(KokoroTVMError, RuntimeError):
    pass


def public_version(version: str) -> str:
    """``2.13.0+cpu`` -> ``2.13.0`` (PEP 440 local version labels dropped)."""
    return str(version).split("+", 1)[0]


def _dist(name: str) -> str:
    try:
        return public_version(metadata.version(name))
    except metadata.PackageNotFoundError:
        return "not-installed"


def runtime_versions(llvm: bool = True) -> dict[str, Any]:
    """What loading a library needs: the TVM runtime, its FFI and LLVM (the same apache-tvm
    wheel always ships the same LLVM). ``llvm`` False: not asked (None), where a process will
    load TVM's runtime library alone and so could not tell (``llvm_major``)."""
    return {
        "apache-tvm": _dist("apache-tvm"),
        "apache-tvm-ffi": _dist("apache-tvm-ffi"),
        "llvm_major": llvm_major() if llvm else None,
    }


def llvm_major() -> int | None:
    """LLVM's major version, or None where TVM loaded its runtime library alone
    (``TVM_USE_RUNTIME_LIB=1``, the aarch64 runtime install: LLVM lives in the compiler library).
    The apache-tvm version then stands for it: one wheel always ships one LLVM."""
    import tvm

    try:
        return int(tvm.target.codegen.llvm_version_major())
    except Exception:
        return None


def versions() -> dict[str, Any]:
    return {
        **runtime_versions(),
        "torch": _dist("torch"),
        "kokoro": _dist("kokoro"),
        "transformers": _dist("transformers"),  # defines ALBERT, so it shapes the duration export
        "numpy": _dist("numpy"),  # writes the weights files
        "python": ".".join(platform.python_version_tuple()[:2]),
    }


def check_installed(declared: dict[str, Any], found: dict[str, Any]) -> None:
    """Versions pinned in params.yaml ``toolchain`` must be the installed ones.

    Stages are cached on those params, so a silent mismatch would mix artifacts of two toolchains.
    """
    for key, want in declared.items():
        have = found[key]
        if str(want) != str(have):
            what = (
                "LLVM major version of the installed apache-tvm"
                if key == "llvm_major"
                else f"installed {key}"
            )
            raise ToolchainError(
                f"params.yaml: 'toolchain.{key}' is {want} but the {what} is {have}; install the "
                f"pinned versions (`make setup`) or update 'toolchain.{key}' and rebuild"
            )
