"""Weights in the layout a library takes them, in one file the runtime maps instead of reading.

A library's ``main_transform_params`` (weight-norm, transposes, register-tile packing, Winograd's
``G g``) runs once, at build time on the target's device (``pipeline/packing``); this file holds
its outputs, the arguments ``main`` takes after its inputs, in order. The runtime maps it
copy-on-write and hands TVM views of the mapping (DLPack), so no weight is read into the heap,
transformed or held twice, and every process on the machine shares the page cache's one copy.
(A read-only mapping would be the natural choice, but numpy refuses to export a read-only array
through DLPack 0.x, which is what tvm-ffi asks for; a private writable mapping shares its pages
until one is written, and kernels never write their weights.)

Layout: ``MAGIC``, the header's length (little-endian uint64), a JSON header (each array's
dtype, shape and byte offset), then the arrays, each at an offset aligned to ``ALIGN`` bytes (what
TVM's kernels assume of a tensor's data, and ``FromDLPack`` checks); the header is padded so the
data starts on a page.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .atomic import atomic_path
from .errors import KokoroTVMError

MAGIC = b"KTVMPRM1"
#: TVM's ``kAllocAlignment``: a host array's data on it is handed to TVM as it is
#: (``runtime/transfer.py``), one off it is refused by ``FromDLPack``
ALIGN = 64
PAGE = 4096


class PackedError(KokoroTVMError, ValueError):
    """A packed-weights file that is not one, or not the one its manifest names."""


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def write(path: str | os.PathLike, arrays: Sequence[np.ndarray]) -> str:
    """Write ``arrays`` (C-contiguous, any dtype) to ``path`` atomically; returns its sha256."""
    arrays = [np.asarray(a, order="C") for a in arrays]  # (ascontiguousarray makes 0-d 1-d)
    entries, offset = [], 0
    for a in arrays:
        entries.append({"dtype": a.dtype.str, "shape": list(a.shape), "offset": offset})
        offset = _round_up(offset + a.nbytes, ALIGN)
    header = json.dumps({"arrays": entries}, separators=(",", ":")).encode()
    start = _round_up(len(MAGIC) + 8 + len(header), PAGE)
    digest = hashlib.sha256()
    with atomic_path(path, suffix=".bin") as tmp, open(tmp, "wb") as f:
        head = MAGIC + struct.pack("<Q", len(header)) + header
        head += b"\0" * (start - len(head))
        f.write(head)
        digest.update(head)
        pos = 0
        for a, e in zip(arrays, entries):
            pad = b"\0" * (e["offset"] - pos)
            data = a.tobytes()
            f.write(pad + data)
            digest.update(pad + data)
            pos = e["offset"] + len(data)
    return digest.hexdigest()


def map_arrays(path: str | os.PathLike, sha256: str | None = None) -> list[np.ndarray]:
    """The arrays of ``path``, as writable copy-on-write views of one mapping of the file.

    With ``sha256``, the mapped bytes are hashed first (this also faults every page in, which
    the first call would do anyway) and a file with other bytes is refused."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            mm = mmap.mmap(
                f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE
            )
    except (OSError, ValueError) as e:
        raise PackedError(f"cannot map packed weights {path}: {e}") from e
    if sha256 is not None and hashlib.sha256(mm).hexdigest() != sha256:
        mm.close()
        raise PackedError(
            f"{path} does not match the sha256 its manifest records (tampered or stale); run "
            "`dvc checkout` or `dvc repro`"
        )
    buf = np.frombuffer(mm, np.uint8)
    try:
        if bytes(buf[: len(MAGIC)]) != MAGIC:
            raise ValueError("no packed-weights header")
        (size,) = struct.unpack("<Q", bytes(buf[len(MAGIC) : len(MAGIC) + 8]))
        header = json.loads(bytes(buf[len(MAGIC) + 8 : len(MAGIC) + 8 + size]))
        start = _round_up(len(MAGIC) + 8 + size, PAGE)
        out = []
        for e in header["arrays"]:
            dtype, shape = np.dtype(e["dtype"]), tuple(int(n) for n in e["shape"])
            lo = start + int(e["offset"])
            hi = lo + dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            if hi > buf.size or lo % ALIGN:
                raise ValueError(f"array at {lo}..{hi} outside the file or misaligned")
            out.append(buf[lo:hi].view(dtype).reshape(shape))
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
        raise PackedError(
            f"{path} is not a packed-weights file ({e}); run `dvc checkout` or `dvc repro`"
        ) from e
    return out
