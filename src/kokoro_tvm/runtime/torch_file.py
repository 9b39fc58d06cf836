"""Read a tensor saved with ``torch.save`` (a Kokoro voice pack) without torch.

The runtime installs with numpy and the TVM runtime only. A ``.pt`` file is a zip archive with a
pickle (``data.pkl``) that rebuilds tensors from raw storages (``data/<key>``). The unpickler here
allows only the few globals a plain tensor needs, as ``torch.load(weights_only=True)`` does, so a
crafted file cannot run code; anything else is refused.
"""

from __future__ import annotations

import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

_STORAGES = {
    "FloatStorage": "<f4",
    "DoubleStorage": "<f8",
    "HalfStorage": "<f2",
    "BFloat16Storage": None,
    "LongStorage": "<i8",
    "IntStorage": "<i4",
    "ShortStorage": "<i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
}


class TorchFileError(ValueError):
    pass


def _rebuild_tensor(
    storage: np.ndarray, offset: int, size: tuple, stride: tuple, *_: Any
) -> np.ndarray:
    if not size:
        return storage[offset].copy()
    itemsize = storage.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=size, strides=[s * itemsize for s in stride], writeable=False
    )
    return np.array(view)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive: zipfile.ZipFile, prefix: str):
        super().__init__(file)
        self.archive, self.prefix = archive, prefix

    def find_class(self, module: str, name: str):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if module == "torch" and name in _STORAGES:
            if _STORAGES[name] is None:
                raise TorchFileError(f"{name} tensors are not supported; save the voice as float32")
            return np.dtype(_STORAGES[name])
        raise TorchFileError(f"refusing to load {module}.{name}: not a plain tensor file")

    def persistent_load(self, pid):
        kind, dtype, key, _location, numel = pid
        if kind != "storage" or not isinstance(dtype, np.dtype):
            raise TorchFileError(f"unsupported storage {pid!r}")
        raw = self.archive.read(f"{self.prefix}/data/{key}")
        return np.frombuffer(raw, dtype=dtype, count=numel)


def load_tensor(path: str | Path) -> Any:
    """What ``torch.load(path, weights_only=True)`` returns, with numpy arrays for tensors."""
    try:
        with zipfile.ZipFile(path) as archive:
            pkl = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
            with archive.open(pkl) as f:
                return _Unpickler(f, archive, pkl.rsplit("/", 1)[0]).load()
    except (zipfile.BadZipFile, StopIteration) as e:
        raise TorchFileError(
            f"{path} is not a torch.save archive (legacy or corrupted file)"
        ) from e
    except (pickle.UnpicklingError, KeyError, ValueError, EOFError) as e:
        if isinstance(e, TorchFileError):
            raise
        raise TorchFileError(f"{path} is not a readable torch.save archive ({e})") from e
