"""Host arrays in and out of TVM tensors without ``ctypes``.

``tvm.runtime.tensor`` and ``Tensor.numpy`` pass the data pointer through numpy's
``ctypes.data_as``, whose result is a reference cycle (``ctypes.cast`` keeps its source) that
also holds the array: every call leaves garbage only the cyclic collector frees, and it reaches
the oldest generation first, so a long stream accumulates it until a full collection runs.
DLPack hands the same memory over with plain reference counts. Tensors on other devices (RPC)
keep TVM's own copy functions, which DLPack cannot reach from the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import tvm_runtime

_CPU = 1  # kDLCPU


def to_device(x: np.ndarray, dev: Any) -> Any:
    """A new tensor on ``dev`` holding ``x``: allocated by TVM (its alignment, its pool), then
    filled through a writable DLPack view on the host."""
    if dev.dlpack_device_type() != _CPU:
        import tvm

        return tvm.runtime.tensor(x, dev)
    t = tvm_runtime.empty(x.shape, str(x.dtype), dev)
    np.from_dlpack(t)[...] = x
    return t


def to_host(t: Any) -> np.ndarray:
    """``t`` copied into a numpy array of its own: a VM's output can be a view into a storage
    block its memory plan shares with other tensors, which a zero-copy view would keep alive."""
    if t.device.dlpack_device_type() != _CPU:
        return t.numpy()
    return np.from_dlpack(t).copy()
