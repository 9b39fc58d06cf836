"""Load TVM's runtime library alone where this process builds nothing.

``import tvm`` loads the compiler library too (``libtvm_compiler.so``, with LLVM): its static
initializers cost resident memory and start-up time in every process (docs/measurements.md,
"Runtime library alone"), and the runtime needs none of it: the VM, module loading and tensors
live in ``libtvm_runtime.so``, and ``runtime.component`` keeps to them. apache-tvm loads the
runtime alone when ``TVM_USE_RUNTIME_LIB=1`` is set at import. The runtime imports TVM that way,
first, without leaving the variable set for other processes, where no build side (torch) is
installed, and wherever an entry point that never compiles says so (``prefer_runtime_only``:
the ``kokoro-tvm`` command and its server). ``TVM_USE_RUNTIME_LIB=0`` (or importing ``tvm``
before ``kokoro_tvm.runtime.synthesizer``) keeps the compiler.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

VARIABLE = "TVM_USE_RUNTIME_LIB"


#: set by entry points that never compile (the ``kokoro-tvm`` command, the server)
_never_compiles = False


def prefer_runtime_only() -> None:
    """This process only loads and runs libraries: import TVM's runtime library alone even where
    the build side is installed (the project's own venv), if nothing imported ``tvm`` yet."""
    global _never_compiles
    _never_compiles = True


def runtime_only_wanted() -> bool:
    """No ``tvm`` imported yet, no choice made in the environment, and either no build side
    installed or an entry point that never compiles."""
    return (
        "tvm" not in sys.modules
        and VARIABLE not in os.environ
        and (_never_compiles or importlib.util.find_spec("torch") is None)
    )


class _WithoutTorch(importlib.abc.MetaPathFinder):
    """Refuses ``torch`` while TVM imports. tvm-ffi 0.1.14 imports torch whenever it is
    installed (a workaround for a symbol clash on one Windows build, and for a faster torch
    DLPack path): in the build venv that is torch's whole start-up in every runtime process,
    for nothing the runtime calls. tvm-ffi carries on without it, as where torch is absent."""

    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"{name} is not imported by kokoro_tvm's runtime-only TVM")
        return None


def import_tvm() -> ModuleType:
    """``tvm``, runtime-only when ``runtime_only_wanted()``."""
    if not runtime_only_wanted():
        import tvm

        return tvm
    os.environ[VARIABLE] = "1"
    blocker = None if "torch" in sys.modules else _WithoutTorch()
    if blocker is not None:
        sys.meta_path.insert(0, blocker)
    try:
        import tvm
    finally:
        del os.environ[VARIABLE]
        if blocker is not None:
            sys.meta_path.remove(blocker)
    return tvm


def load_runtime_library() -> ModuleType:
    """``tvm_ffi``, with TVM's runtime library loaded into this process as ``tvm`` loads it
    (``RTLD_GLOBAL``, from the installed apache-tvm's ``lib``), without importing ``tvm``
    (``tvm_runtime`` says why)."""
    spec = importlib.util.find_spec("tvm")  # the package's location; nothing of it runs
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("apache-tvm is not installed: pip install kokoro-tvm-pipeline")
    blocker = None if "torch" in sys.modules else _WithoutTorch()
    if blocker is not None:
        sys.meta_path.insert(0, blocker)
    try:
        import tvm_ffi
        from tvm_ffi.libinfo import load_lib_ctypes
    finally:
        if blocker is not None:
            sys.meta_path.remove(blocker)
    paths = [Path(p) / "lib" for p in spec.submodule_search_locations]
    if os.environ.get("TVM_LIBRARY_PATH"):  # where ``tvm`` itself would look first
        paths.insert(0, Path(os.environ["TVM_LIBRARY_PATH"]))
    load_lib_ctypes("tvm", "tvm_runtime", "RTLD_GLOBAL", extra_lib_paths=paths)
    return tvm_ffi


def runtime_only(tvm: ModuleType) -> bool:
    """Whether this process's ``tvm`` loaded without its compiler library."""
    return bool(getattr(tvm.base, "_RUNTIME_ONLY", False))
