"""The slice of TVM the runtime calls: load a library, make its VM, move tensors, size a pool.

Where a process only runs libraries on this CPU (``tvm_import.runtime_only_wanted``: the
``kokoro-tvm`` command, its server, a runtime-only install), these come straight from tvm-ffi
and TVM's runtime library (``libtvm_runtime.so``: module loading, the Relax VM, tensors, the
thread pool), without importing the ``tvm`` Python package. apache-tvm 0.27's package registers
about 150 compiler object types at import, which a runtime-only process lacks, and tvm-ffi
0.1.14 answers the first unknown type key by building a C++ backtrace: about 0.2 s of one core,
holding the GIL, in every process that starts, for nothing the runtime calls. Elsewhere (the
build side, which has imported ``tvm`` whole, and RPC devices, whose sessions live in ``tvm``),
each function is ``tvm``'s own.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from . import amx, tvm_import

_CPU = 1  # kDLCPU; an RPC device's type is offset past it, and its VM is ``tvm``'s
#: the Relax VM's pooled allocator (``tvm.runtime.vm.VirtualMachine.POOLED_ALLOCATOR``)
POOLED_ALLOCATOR = 2

_lock = threading.Lock()
_ffi: Any = None  # tvm_ffi, once TVM's runtime library is loaded into this process for it


def _direct() -> Any | None:
    """tvm_ffi with TVM's runtime library loaded, where this process should not import ``tvm``;
    else None (use ``tvm``)."""
    global _ffi
    with _lock:
        if _ffi is None and tvm_import.runtime_only_wanted():
            _ffi = tvm_import.load_runtime_library()
        return _ffi


def cpu() -> Any:
    ffi = _direct()
    return ffi.device("cpu", 0) if ffi is not None else tvm_import.import_tvm().cpu()


def load_module(path: Path) -> Any:
    amx.permit_where_present()  # before any kernel of it can run
    ffi = _direct()
    if ffi is not None:
        return ffi.load_module(str(path))
    return tvm_import.import_tvm().runtime.load_module(str(path))


def empty(shape: tuple[int, ...], dtype: str, dev: Any) -> Any:
    """An uninitialised tensor allocated by TVM (its alignment, its pool) on ``dev``."""
    ffi = _direct()
    if ffi is None:
        return tvm_import.import_tvm().runtime.empty(shape, dtype, dev)
    alloc = ffi.get_global_func("runtime.TVMTensorAllocWithScope")
    return alloc(ffi.Shape([int(n) for n in shape]), ffi.dtype(dtype), dev, None)


def from_dlpack(array: Any) -> Any:
    """A tensor viewing ``array``'s memory (no copy)."""
    ffi = _direct()
    if ffi is not None:
        return ffi.from_dlpack(array)
    return tvm_import.import_tvm().runtime.from_dlpack(array)


def virtual_machine(module: Any, dev: Any) -> Any:
    """A Relax VM over a loaded library, on ``dev`` (this CPU, or an RPC device)."""
    ffi = _direct()
    if ffi is None or dev.dlpack_device_type() != _CPU:
        # the VM from the runtime package: ``tvm.relax`` registers compiler ops, which a
        # runtime-only TVM (``TVM_USE_RUNTIME_LIB=1``, the aarch64 install) lacks
        from tvm.runtime.vm import VirtualMachine

        return VirtualMachine(module, dev)
    return _VM(module, dev)


def config_threadpool(n: int) -> None:
    """Size the calling thread's TVM pool to ``n`` threads; mode 1 ("big cores") is every core
    on a symmetric CPU."""
    ffi = _direct()
    get = ffi.get_global_func if ffi is not None else tvm_import.import_tvm().get_global_func
    get("runtime.config_threadpool")(1, n)


class _VM:
    """What the runtime calls of ``tvm.runtime.vm.VirtualMachine`` on this CPU: the executable's
    VM, initialised as that class does for one CPU device, and its functions by name."""

    def __init__(self, module: Any, dev: Any):
        self.module = module["vm_load_executable"]()
        self.module["vm_initialization"](dev.dlpack_device_type(), dev.index, POOLED_ALLOCATOR)

    def __getitem__(self, name: str) -> Any:
        return self.module[name]


def loaded_directly() -> bool:
    """Whether this process runs libraries through tvm-ffi alone (no ``tvm`` package)."""
    return _ffi is not None
