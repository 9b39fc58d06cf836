"""Load TVM's runtime library alone where this process cannot build anything.

``import tvm`` loads the compiler library too (``libtvm_compiler.so``, 260 MB with LLVM): its
static initializers alone cost ~110 MB of resident memory and ~0.8 s per process start, and the
runtime needs none of it (the VM, module loading and tensors live in ``libtvm_runtime.so``;
``runtime.component`` already keeps to them). apache-tvm loads the runtime alone when
``TVM_USE_RUNTIME_LIB=1`` is set at import. A runtime install has no torch (the build side needs
it), so there the runtime imports TVM that way, first, without leaving the variable set for other
processes. ``TVM_USE_RUNTIME_LIB=0`` (or importing ``tvm`` before ``kokoro_tvm.runtime``) keeps
the compiler, for a torch-free process that also compiles with TVM.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

VARIABLE = "TVM_USE_RUNTIME_LIB"


def runtime_only_wanted() -> bool:
    """No ``tvm`` imported yet, no choice made in the environment, and no build side installed."""
    return (
        "tvm" not in sys.modules
        and VARIABLE not in os.environ
        and importlib.util.find_spec("torch") is None
    )


def import_tvm() -> ModuleType:
    """``tvm``, runtime-only when ``runtime_only_wanted()``."""
    if not runtime_only_wanted():
        import tvm

        return tvm
    os.environ[VARIABLE] = "1"
    try:
        import tvm
    finally:
        del os.environ[VARIABLE]
    return tvm


def runtime_only(tvm: ModuleType) -> bool:
    """Whether this process's ``tvm`` loaded without its compiler library."""
    return bool(getattr(tvm.base, "_RUNTIME_ONLY", False))
