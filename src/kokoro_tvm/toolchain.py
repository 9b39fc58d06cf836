"""Versions of everything that shapes a compiled artifact.

The ``toolchain`` stage writes these to a file every build stage depends on, so upgrading torch,
TVM, LLVM or kokoro invalidates exactly the stages whose output they can change.
"""

from __future__ import annotations

import platform
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
        "python": platform.python_version(),
        "torch": _dist("torch"),
        "apache-tvm": _dist("apache-tvm"),
        "apache-tvm-ffi": _dist("apache-tvm-ffi"),
        "llvm_major": int(tvm.target.codegen.llvm_version_major()),
        "kokoro": _dist("kokoro"),
        "transformers": _dist("transformers"),
        "numpy": _dist("numpy"),
    }


def check_llvm(declared: int | None, installed: int) -> None:
    """A pinned LLVM major in params that the installed TVM does not have is a hard error."""
    if declared is not None and declared != installed:
        raise ToolchainError(
            f"params.yaml: 'toolchain.llvm_major' is {declared} but the installed apache-tvm was built "
            f"with LLVM {installed}; install the pinned apache-tvm or set toolchain.llvm_major: {installed}"
        )
