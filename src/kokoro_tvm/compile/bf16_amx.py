"""An FFT conv's complex GEMMs on AMX tiles (``tdpbf16ps``), for CPUs with AMX-BF16.

``vdpbf16ps`` (``compile.bf16``) multiplies 32 bf16 pairs per instruction; AMX's ``tdpbf16ps``
multiplies a 16 x 32 tile of bf16 by a 32 x 16 one into a 16 x 16 float32 tile, 8192 products,
with the same numerics: pairs of bf16 products summed in float32. ``bf16_fft``'s GEMM per slot,
``C[tile, o] = sum_c X[tile, c] . W[c, o]`` over bf16 pairs, takes the weights as the float
kernel has them (``[slot, C, O]`` pairs, ``(p, q)``: AMX's row layout for its second operand), so
a library's weights, and the legalized module, are the same with or without AMX; the build makes
the kernel for the target (``compile/retarget.py``). The first operand is the block's spectra with
rows of tiles: each 16 input channels' spectra are transposed as they are made (``transpose``),
once as the pairs ``(a, b)`` for the real part and once times ``-i``, ``(b, -a)``, for the
imaginary one (``(a, b).(-q, p) = (b, -a).(p, q)``), so that both parts take the same weight
tile. Slot 0 holds ``(X_0, X_n/2)``, real: its imaginary part is the pair against
``(0, W_n/2)``, the weights' last slot. Product tiles are stored straight into the kernel's
``products [tiles, slot, 2, 16]``, whose inverse FFTs run as before.

TVM 0.27 has no AMX intrinsic: the kernel calls LLVM's (``llvm.x86.tdpbf16ps`` and the others that
name tiles by number; the ``.internal`` forms return LLVM's ``x86_amx``, which TIR cannot type).
The tile configuration is per thread: each parallel task loads it (``configure``) and releases
the tiles at its end. Linux gives a process AMX state only on request (``runtime.amx``).
"""

from __future__ import annotations

from .bf16 import u32

#: LLVM target features a library with these kernels needs (``/proc/cpuinfo``: ``amx_tile``,
#: ``amx_bf16``).
FEATURES = ("amx-tile", "amx-bf16")
#: Tile numbers: the product tiles (real and imaginary of each 16 output channels), the
#: spectra's two (as they are, times ``-i``) and the weights' (one per 16 output channels).
_PRODUCTS = (0, 1, 2, 3)
_X, _X_TIMES_MINUS_I = 4, 5
_W = (6, 7)
#: Rows of a tile, and bytes per row: 16 pairs of bf16 (or 16 float32).
_ROWS, _ROW_BYTES = 16, 64


def side_by_side(channels_in: int, channels_out: int) -> int:
    """Product tiles of 16 output channels a GEMM step computes together: two from 256 input
    channels, which share each load of the spectra's tiles among four products; one below, where
    the twice larger products of a channel tile cost more than the loads they save (kernel calls
    timed at 128 and 256 channels, 1292 frames' widths)."""
    return 2 if channels_in >= 256 and channels_out % (2 * _ROWS) == 0 else 1


def _tile(k: int):
    from tvm import tirx

    return tirx.const(k, "int8")


def _intrin(T, name: str, *args):
    return T.evaluate(T.call_llvm_intrin("void", f"llvm.x86.{name}", *args))


def configure(T) -> None:
    """Load a configuration of eight 16 x 64-byte tiles (palette 1) for this thread."""
    from tvm import tirx

    cfg = T.alloc_buffer((64,), "uint8", scope="local")
    with T.serial(0, 64) as i:
        T.buffer_store(cfg, tirx.const(0, "uint8"), [i])
    T.buffer_store(cfg, tirx.const(1, "uint8"), [0])
    for t in range(8):
        T.buffer_store(cfg, tirx.const(_ROW_BYTES, "uint8"), [16 + 2 * t])
        T.buffer_store(cfg, tirx.const(_ROWS, "uint8"), [48 + t])
    _intrin(T, "ldtilecfg", T.address_of(cfg[0]))


def release(T) -> None:
    """Give the tiles back: a thread holding them has 8 KB of tile state saved at every context
    switch."""
    _intrin(T, "tilerelease")


def transpose(T, spectra, by_tile, group) -> None:
    """The spectra of input channels ``16 group ..`` (``spectra [slot, 16, tiles]`` pairs) into
    ``by_tile [2, slot, tiles, C]``: ``[0]`` as they are, ``[1]`` times ``-i``, ``(a, b) -> (b,
    -a)`` (slot 0, real, as it is)."""
    from tvm import tirx

    from . import bf16

    slots, padded = int(spectra.shape[0]), int(spectra.shape[2])
    c_in = int(by_tile.shape[3])
    c0 = group * _ROWS
    with T.grid(slots, padded // _ROWS) as (k, tg):
        t0 = tg * _ROWS
        bf16.transpose16(T, spectra[k, 0, t0], padded, by_tile[0, k, t0, c0], c_in)
        with T.serial(0, _ROWS) as t:
            with T.vectorized(0, _ROWS) as cl:
                pair = by_tile[0, k, t0 + t, c0 + cl]
                turned = (pair >> u32(16)) | ((pair << u32(16)) ^ u32(0x80000000))
                T.buffer_store(by_tile, tirx.Select(k == 0, pair, turned), [1, k, t0 + t, c0 + cl])


def products(T, w, by_tile, products_, ot, slot, jt) -> None:
    """One slot's products of the tiles ``16 jt ..`` and the output channels of channel tile
    ``ot`` (16 or 32: ``products_``' last axis), summed over the input channels 16 at a time:
    ``by_tile`` (``transpose``) against the weights ``w [n/2 + 1, C, O]`` pairs, stored into
    ``products_ [tiles, slot, 2, channels]``. With 32 channels, the spectra's two tiles are loaded
    once for four products (two weight tiles, real and imaginary)."""
    from tvm import tirx

    last, c_in, c_out = (int(v) for v in w.shape)
    slots, channels = int(products_.shape[1]), int(products_.shape[3])
    halves = channels // _ROWS
    t0, o0 = jt * _ROWS, ot * channels
    for tile in _PRODUCTS[: 2 * halves]:
        _intrin(T, "tilezero", _tile(tile))

    def load(tile: int, at, stride: int):
        _intrin(T, "tileloadd64", _tile(tile), T.address_of(at), tirx.const(stride, "int64"))

    def dot(into: int, a: int, b: int):
        _intrin(T, "tdpbf16ps", _tile(into), _tile(a), _tile(b))

    def gemm(zeroth: bool):
        with T.serial(0, c_in // _ROWS) as kc:
            c0 = kc * _ROWS
            load(_X, by_tile[0, slot, t0, c0], 4 * c_in)
            load(_X_TIMES_MINUS_I, by_tile[1, slot, t0, c0], 4 * c_in)
            for half in range(halves):
                real, imag = _PRODUCTS[2 * half], _PRODUCTS[2 * half + 1]
                weights = _W[half]
                load(weights, w[slot, c0, o0 + _ROWS * half], 4 * c_out)
                dot(real, _X, weights)
                if zeroth:  # the imaginary part against (0, W_n/2), the weights' last slot
                    load(weights, w[last - 1, c0, o0 + _ROWS * half], 4 * c_out)
                dot(imag, _X_TIMES_MINUS_I, weights)

    with T.If(slot == 0):
        with T.Then():
            gemm(zeroth=True)
        with T.Else():
            gemm(zeroth=False)
    row_bytes = 4 * slots * 2 * channels
    for half in range(halves):
        for part in range(2):
            at = T.address_of(products_[t0, slot, part, _ROWS * half])
            tile = _PRODUCTS[2 * half + part]
            _intrin(T, "tilestored64", _tile(tile), at, tirx.const(row_bytes, "int64"))
