"""Host arrays in and out of TVM tensors without ``ctypes``.

``tvm.runtime.tensor`` and ``Tensor.numpy`` pass the data pointer through numpy's
``ctypes.data_as``, whose result is a reference cycle (``ctypes.cast`` keeps its source) that
also holds the array: every call leaves garbage only the cyclic collector frees, and it reaches
the oldest generation first, so a long stream accumulates it until a full collection runs.
DLPack hands the same memory over with plain reference counts. Tensors on other devices (RPC)
keep TVM's own copy functions, which DLPack cannot reach from the host.

An input already on TVM's alignment is handed over without a copy: the decoder's noise alone is
tens of MB at kokoro's longest utterance, and a copy would double it at the call's peak.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..packed import ALIGN
from . import tvm_runtime

_CPU = 1  # kDLCPU


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialized array whose data TVM can take without a copy (``to_device``)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(n + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + n].view(dtype).reshape(shape)


def to_device(x: np.ndarray, dev: Any) -> Any:
    """``x`` as a tensor on ``dev``. On this CPU, ``x``'s own memory where it is contiguous and
    aligned (a library never writes its inputs, and the tensor keeps ``x`` alive); else a new
    tensor allocated by TVM (its alignment, its pool), filled through a writable DLPack view."""
    if dev.dlpack_device_type() != _CPU:
        import tvm

        return tvm.runtime.tensor(x, dev)
    if x.flags.c_contiguous and x.flags.writeable and x.ctypes.data % ALIGN == 0:
        return tvm_runtime.from_dlpack(x)
    t = tvm_runtime.empty(x.shape, str(x.dtype), dev)
    np.from_dlpack(t)[...] = x
    return t


def to_host(t: Any) -> np.ndarray:
    """``t`` copied into a numpy array of its own: a VM's output can be a view into a storage
    block its memory plan shares with other tensors, which a zero-copy view would keep alive."""
    if t.device.dlpack_device_type() != _CPU:
        return t.numpy()
    return np.from_dlpack(t).copy()
