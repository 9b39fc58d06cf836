"""Returning freed memory to the operating system."""

from __future__ import annotations

import ctypes


def return_freed_memory() -> None:
    """Give the pages of the weights a library just released back to the OS.

    glibc keeps freed blocks in its heap (its mmap threshold rises with every large block freed,
    so most weights come from the heap), and the raw weights a library transformed stayed
    resident after loading (docs/measurements.md, "malloc_trim after binding"). Only libraries
    without packed weights transform at load. Where the C library has no ``malloc_trim``
    (musl, macOS), nothing to do."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
