"""AMX tile state for this process, which Linux grants only on request.

A library whose bf16 kernels run on AMX tiles (``compile/bf16_amx.py``) raises SIGILL at its first
tile instruction unless the process asked for the tile state first
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``, Linux 5.16 on). The runtime asks before
it loads any library on a CPU with AMX: the request costs nothing until a tile is used.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ..cpuinfo import parse

#: ``arch_prctl``'s syscall number on x86-64, its ``ARCH_REQ_XCOMP_PERM`` and the tile data's
#: XSAVE feature number.
_ARCH_PRCTL, _REQ_XCOMP_PERM, _XTILEDATA = 158, 0x1023, 18


@functools.cache
def permit() -> None:
    """Ask Linux for this process's AMX tile state, once. ``OSError`` where it refuses (a CPU
    without AMX, or a kernel before 5.16)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    args = (ctypes.c_long(v) for v in (_ARCH_PRCTL, _REQ_XCOMP_PERM, _XTILEDATA))
    if libc.syscall(*args):
        err = ctypes.get_errno()
        raise OSError(
            err,
            f"Linux refused this process AMX tile state (arch_prctl, errno {err}): run a "
            "library built without AMX (a target without amx-tile) or a Linux of 5.16 or later",
        )


@functools.cache
def permit_where_present() -> bool:
    """``permit`` on a CPU that has AMX (this machine's, whatever CPU a test poses), and whether
    the process now holds the tile state. A refusal is not raised here, where every library is
    loaded, float32 ones included: ``devices.isa.host_features`` then counts no AMX, so the
    runtime picks a target without it."""
    try:
        has_amx = parse(Path("/proc/cpuinfo").read_text()).has("amx_tile")
    except OSError:  # no /proc: not Linux, where nothing grants AMX this way
        return False
    if not has_amx:
        return False
    try:
        permit()
    except OSError:
        return False
    return True
