"""Versions of everything that shapes a compiled artifact.

The ``toolchain`` stage writes these to a file every build stage depends on, so upgrading torch,
TVM, LLVM or kokoro invalidates exactly the stages whose output they can change.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any


class ToolchainError(RuntimeError):
    pass


def _dist(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not-installed"


def versions() -> dict[str, Any]:
    import tvm

    return {
        "torch": _dist("torch"),
        "apache-tvm": _dist("apache-tvm"),
        "apache-tvm-ffi": _dist("apache-tvm-ffi"),
        "llvm_major": int(tvm.target.codegen.llvm_version_major()),
        "kokoro": _dist("kokoro"),
        "transformers": _dist("transformers"),  # defines ALBERT, so it shapes the duration export
    }


def check_installed(declared: dict[str, Any], found: dict[str, Any]) -> None:
    """Versions pinned in params.yaml ``toolchain`` must be the installed ones.

    Stages are cached on those params, so a silent mismatch would mix artifacts of two
    toolchains. Local version tags (``2.13.0+cpu``) match their base version.
    """
    for key, want in declared.items():
        have = found[key]
        if isinstance(have, str):
            have = have.split("+", 1)[0]
        if str(want) != str(have):
            what = "LLVM major version of the installed apache-tvm" if key == "llvm_major" else f"installed {key}"
            raise ToolchainError(
                f"params.yaml: 'toolchain.{key}' is {want} but the {what} is {have}; install the "
                f"pinned version (pip install -e .) or update 'toolchain.{key}' and rebuild"
            )
